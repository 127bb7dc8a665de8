/**
 * The signed token envelope shared by contracts, attestations and bindings:
 *
 *     kvgate.v1.<kid>.<base64url(JSON payload)>.<base64url(HMAC-SHA256(secret, "kvgate.v1.<kid>.<payload>"))>
 *
 * The MAC covers the version, the key id and the encoded payload bytes exactly as transmitted, so no byte of a
 * token can change without the check failing. Base64url parts must be canonical (re-encoding the decoded bytes
 * gives the same text), otherwise unused low bits of the last character would let two spellings carry one MAC.
 * Every payload has a `kind`, checked by the caller, so one kind of token is never accepted as another.
 */
import { createHmac, type KeyObject, timingSafeEqual } from 'node:crypto';
import type { z } from 'zod';
import type { KeyRing } from './keys.js';
import { KEY_ID_PATTERN } from './keys.js';
import { err, KvgateError, ok, type Result } from '../errors.js';

export const TOKEN_PREFIX = 'kvgate.v1';

/** Clock skew tolerated between the minting and the verifying host before a token counts as "not yet valid". */
export const CLOCK_SKEW_MS = 5_000;

/** Tokens larger than this are refused before any work (they travel in headers). */
export const MAX_TOKEN_CHARS = 8_192;

export type TokenKind = 'contract' | 'attestation' | 'binding';

/** Failures every token kind shares (a list, so metrics can start each at 0). */
export const ENVELOPE_FAILURE_REASONS = [
  'malformed',
  'unknown_key',
  'bad_signature',
  'wrong_kind',
  'expired',
  'not_yet_valid',
  'lifetime_exceeded',
] as const;
export type EnvelopeFailureReason = (typeof ENVELOPE_FAILURE_REASONS)[number];

/**
 * The longest validity window a verifier accepts per kind, whatever the signer wrote: a token valid for a century is
 * a replay window for a century, even if a misconfigured or compromised issuer signed it. Contracts and attestations
 * cover one request (the route table allows `contract.ttlMs` up to 10 minutes, the sidecar `attestationTtlMs` up to
 * 10 minutes); bindings a session (`session.bindingTtlMs` up to 24 hours).
 */
export const MAX_LIFETIME_MS: Readonly<Record<TokenKind, number>> = Object.freeze({
  contract: 600_000,
  attestation: 600_000,
  binding: 86_400_000,
});

export interface TokenFailure<R extends string> {
  readonly reason: R;
  /** What was wrong and what to do. Never contains a secret. */
  readonly message: string;
}

const B64URL = /^[A-Za-z0-9_-]+$/;

function mac(key: KeyObject, signed: string): Buffer {
  return createHmac('sha256', key).update(signed, 'utf8').digest();
}

function decodeCanonical(part: string): Buffer | undefined {
  if (!B64URL.test(part)) return undefined;
  const bytes = Buffer.from(part, 'base64url');
  return bytes.toString('base64url') === part ? bytes : undefined;
}

/** Sign a payload with the ring's current key. The payload must already be valid for its kind. */
export function signToken(payload: { readonly kind: TokenKind }, keys: KeyRing): string {
  const kid = keys.currentId;
  const key = keys.macKey(kid);
  if (key === undefined) throw new Error(`key ring has no secret for its current key id ${kid}`);
  const body = Buffer.from(JSON.stringify(payload), 'utf8').toString('base64url');
  const signed = [TOKEN_PREFIX, kid, body].join('.');
  // join, not a template: one flat string rather than a tree of concatenations (a gate keeps each routed request's
  // binding for the whole response, so the tree's nodes would live that long too).
  const token = [signed, mac(key, signed).toString('base64url')].join('.');
  // Never mint what no verifier accepts: the caller bounds what goes in (decide.ts MAX_IDENTITY_BYTES), this is the
  // backstop, so a request is refused at the gate rather than routed with a token every sidecar refuses.
  if (token.length > MAX_TOKEN_CHARS) {
    throw new KvgateError(
      'bad_request',
      `the ${payload.kind} token for this request would be ${token.length} characters, over the ${MAX_TOKEN_CHARS} a verifier accepts; shorten the ids it carries (tenant, user, session)`,
    );
  }
  return token;
}

const fail = <R extends string>(reason: R, message: string): { ok: false; error: TokenFailure<R> } => err({ reason, message });

/** Check the envelope and signature; return the decoded, still unvalidated JSON payload. */
function openEnvelope(token: unknown, keys: KeyRing, what: string): Result<unknown, TokenFailure<EnvelopeFailureReason>> {
  if (typeof token !== 'string' || token.length === 0 || token.length > MAX_TOKEN_CHARS) {
    return fail('malformed', `${what} is missing or too large; present the token exactly as kvgate issued it`);
  }
  const parts = token.split('.');
  if (parts.length !== 5 || `${parts[0]}.${parts[1]}` !== TOKEN_PREFIX) {
    return fail('malformed', `${what} is not a ${TOKEN_PREFIX} token; present the token exactly as kvgate issued it`);
  }
  const [, , kid = '', body = '', sig = ''] = parts;
  const payloadBytes = decodeCanonical(body);
  const sigBytes = decodeCanonical(sig);
  if (!KEY_ID_PATTERN.test(kid) || payloadBytes === undefined || sigBytes === undefined) {
    return fail('malformed', `${what} is not well-formed base64url; present the token exactly as kvgate issued it`);
  }
  const key = keys.macKey(kid);
  if (key === undefined) {
    return fail(
      'unknown_key',
      `${what} was signed with key id ${kid}, which this host does not have; distribute the current key ring to every gate and sidecar`,
    );
  }
  const expected = mac(key, `${TOKEN_PREFIX}.${kid}.${body}`);
  if (sigBytes.length !== expected.length || !timingSafeEqual(sigBytes, expected)) {
    return fail('bad_signature', `${what} signature does not verify; it was altered or signed with another secret for key id ${kid}`);
  }
  try {
    return ok(JSON.parse(payloadBytes.toString('utf8')) as unknown);
  } catch {
    return fail('malformed', `${what} payload is not JSON although its signature verifies; the issuer is broken, check its version`);
  }
}

/** The time window every payload carries. */
export interface Validity {
  readonly issuedAtMs: number;
  readonly expiresAtMs: number;
}

/**
 * Open a token of one kind: envelope, signature, `kind`, payload shape, then the validity window. The schema is the
 * caller's strict zod object for that kind. `build`, when given, is the same schema's rules by hand (mint-payload.ts,
 * held to accept exactly what the schema accepts and to write the same value by a property test); it runs first
 * because zod's generic parse costs more than the HMAC on a sidecar's time to first token. A payload it refuses
 * goes through the schema, whose issues name the fields in the error.
 */
export function openToken<T extends Validity>(
  token: unknown,
  keys: KeyRing,
  nowMs: number,
  kind: TokenKind,
  schema: z.ZodType<T>,
  build?: (fields: Record<string, unknown>) => T,
): Result<T, TokenFailure<EnvelopeFailureReason>> {
  const opened = openEnvelope(token, keys, `the ${kind} token`);
  if (!opened.ok) return opened;
  const raw = opened.value;
  const rawKind = raw !== null && typeof raw === 'object' ? (raw as Record<string, unknown>)['kind'] : undefined;
  if (rawKind !== kind) {
    const got = typeof rawKind === 'string' ? `a token of kind ${JSON.stringify(rawKind.slice(0, 32))}` : 'a token without a kind';
    return fail('wrong_kind', `expected a ${kind} token but got ${got}; send each token in its own header`);
  }
  let value = build === undefined ? undefined : builtOrUndefined(build, raw as Record<string, unknown>);
  if (value === undefined) {
    const parsed = schema.safeParse(raw);
    if (!parsed.success) {
      const where = parsed.error.issues.map((i) => i.path.join('.') || '(root)').join(', ');
      return fail(
        'malformed',
        `the ${kind} token payload is invalid at ${where}; the issuer and verifier disagree on the token format, check their versions`,
      );
    }
    value = parsed.data;
  }
  if (nowMs >= value.expiresAtMs) {
    return fail(
      'expired',
      `the ${kind} token expired ${nowMs - value.expiresAtMs} ms ago; send the request through the gate again for a fresh one`,
    );
  }
  const lifetime = value.expiresAtMs - value.issuedAtMs;
  if (lifetime > MAX_LIFETIME_MS[kind]) {
    return fail(
      'lifetime_exceeded',
      `the ${kind} token is valid for ${lifetime} ms, longer than the ${MAX_LIFETIME_MS[kind]} ms any ${kind} may live; its issuer is misconfigured or not kvgate`,
    );
  }
  if (value.issuedAtMs > nowMs + CLOCK_SKEW_MS) {
    return fail(
      'not_yet_valid',
      `the ${kind} token was issued ${value.issuedAtMs - nowMs} ms in the future; synchronise the clocks of the gate and the sidecars (NTP)`,
    );
  }
  return ok(value);
}

/** The payload without its (already checked) `kind`, built by hand; undefined when the hand rules refuse it. */
function builtOrUndefined<T>(build: (fields: Record<string, unknown>) => T, raw: Record<string, unknown>): T | undefined {
  const { kind: _kind, ...fields } = raw;
  try {
    return build(fields);
  } catch {
    return undefined;
  }
}
