/**
 * The signature on a sidecar's status answer, so the gate trusts a "verified" only from a key holder, for this poll.
 *
 * The status polls are the one hop without mesh mTLS (docs/security.md section 6): whatever answers for a pod IP
 * could answer the gate's poll. So the gate sends a fresh random nonce with every poll (`x-kvgate-status-nonce`, 128
 * bits, base64url) and the sidecar answers with `x-kvgate-status-signature: <key id>.<base64url(HMAC-SHA256)>` over
 *
 *     kvgate-status-v1 \n <key id> \n <nonce> \n <hex SHA-256 of the exact body bytes>
 *
 * signed with its ring's `current` key. The gate checks it over the bytes it received, with any id its ring holds,
 * before it parses a byte of the JSON. A replayed answer names another nonce, an altered one another digest.
 *
 * Domain separation: every kvgate token (contract, attestation, binding) MACs a string that starts `kvgate.v1.`
 * (token.ts), a status message starts `kvgate-status-v1\n`; no string is both, so a status signature is never a
 * token's MAC and a token's MAC never a status signature, although the same keys make both. Cache salts use a
 * separate secret (cache-salt.ts).
 */
import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { err, ok, type Result } from '../errors.js';
import { H } from '../headers.js';
import { KEY_ID_PATTERN, type KeyRing } from './keys.js';

const DOMAIN = 'kvgate-status-v1';
const NONCE_BYTES = 16;
const MAC_BYTES = 32;
/** `<key id: up to 64>.<43 base64url characters>`; anything longer is refused unread. */
const MAX_SIGNATURE_CHARS = 64 + 1 + 43;
const B64URL = /^[A-Za-z0-9_-]+$/;

export type StatusSignatureFailureReason = 'missing' | 'malformed' | 'unknown_key' | 'bad_signature';

export interface StatusSignatureFailure {
  readonly reason: StatusSignatureFailureReason;
  /** What was wrong and what to do; names key ids, never a secret. */
  readonly message: string;
}

/** A fresh nonce for one poll: 128 random bits, base64url (22 characters). */
export function newStatusNonce(): string {
  return randomBytes(NONCE_BYTES).toString('base64url');
}

function canonical(part: string, bytes: number): Buffer | undefined {
  if (!B64URL.test(part)) return undefined;
  const b = Buffer.from(part, 'base64url');
  return b.length === bytes && b.toString('base64url') === part ? b : undefined;
}

/** The nonce a poll sent, when it is one (22 canonical base64url characters); a sidecar signs nothing else. */
export function parseStatusNonce(v: unknown): Result<string, StatusSignatureFailure> {
  if (typeof v === 'string' && v.length <= 64 && canonical(v, NONCE_BYTES) !== undefined) return ok(v);
  return err({
    reason: 'malformed',
    message: `${H.statusNonce} must be ${NONCE_BYTES} random bytes as base64url (22 characters); send a fresh one with every poll, or none for an unsigned answer`,
  });
}

function mac(keys: KeyRing, kid: string, nonce: string, body: Uint8Array): Buffer | undefined {
  const key = keys.macKey(kid);
  if (key === undefined) return undefined;
  const digest = createHash('sha256').update(body).digest('hex');
  return createHmac('sha256', key).update([DOMAIN, kid, nonce, digest].join('\n'), 'utf8').digest();
}

/** The `x-kvgate-status-signature` value for `body` (the exact bytes sent) answering `nonce`, with the current key. */
export function signStatus(keys: KeyRing, nonce: string, body: Uint8Array): string {
  const kid = keys.currentId;
  const sig = mac(keys, kid, nonce, body);
  if (sig === undefined) throw new Error(`key ring has no secret for its current key id ${kid}`);
  return `${kid}.${sig.toString('base64url')}`;
}

/**
 * Whether `header` signs `body` (the bytes received) for `nonce` (the one this poll sent) under a key `keys` holds.
 * Constant-time compare; the key id it verified under on success.
 */
export function verifyStatus(
  keys: KeyRing,
  nonce: string,
  body: Uint8Array,
  header: string | null | undefined,
): Result<{ readonly keyId: string }, StatusSignatureFailure> {
  if (header === null || header === undefined || header === '') {
    return err({
      reason: 'missing',
      message: `the answer is not signed (no ${H.statusSignature}): not a kvgate sidecar holding the key ring, or one older than status signing (upgrade sidecars before gates)`,
    });
  }
  const dot = header.lastIndexOf('.');
  const kid = header.slice(0, Math.max(0, dot));
  const sig = header.length > MAX_SIGNATURE_CHARS || dot < 0 ? undefined : canonical(header.slice(dot + 1), MAC_BYTES);
  if (sig === undefined || !KEY_ID_PATTERN.test(kid)) {
    return err({
      reason: 'malformed',
      message: `the ${H.statusSignature} header (${header.length} characters) is not <key id>.<43 base64url characters>; not a kvgate sidecar's signature`,
    });
  }
  const expected = mac(keys, kid, nonce, body);
  if (expected === undefined) {
    return err({
      reason: 'unknown_key',
      message: `the answer is signed with key id ${kid}, which this gate does not hold; give every gate the new key before any sidecar switches current to it (docs/operator-guide.md section 8)`,
    });
  }
  if (!timingSafeEqual(sig, expected)) {
    return err({
      reason: 'bad_signature',
      message: `the answer's signature does not verify under key id ${kid} for this poll's nonce and body: replayed, altered or forged, or another secret under that id`,
    });
  }
  return ok({ keyId: kid });
}
