/**
 * Who opened an ext_proc stream, from the client certificate the TLS handshake verified, and which listener role
 * (public or internal) that peer may speak for. The role decides what the gate trusts on a stream (an internal
 * stream's contract and prefill target; a public stream has every gate-owned header removed), so it comes from the
 * authenticated peer and an allowlist per role, never from anything the caller sends.
 *
 * Identities in the allowlist: `spiffe://...` (a URI SAN, exactly), `uri:<URI>` (any URI SAN), `dns:<name>` (a DNS SAN,
 * case-insensitive) or `sha256:<hex>` (the certificate's SHA-256 fingerprint, colons optional). Pure (node:crypto).
 */
import { createHash } from 'node:crypto';
import type { Listener } from '../envoy/inbound.js';

export const IDENTITY_PATTERN = /^(spiffe:\/\/\S+|uri:\S+|dns:[A-Za-z0-9*.-]+|sha256:(?:[0-9A-Fa-f]{2}:?){31}[0-9A-Fa-f]{2})$/;

export interface RoleAllowlist {
  readonly public: readonly string[];
  readonly internal: readonly string[];
}

/** The parts of a verified peer certificate the allowlist can name. */
export interface PeerIdentities {
  readonly uris: readonly string[];
  readonly dns: readonly string[];
  /** Lowercase hex, no colons. */
  readonly sha256: string;
}

/** What `tls.TLSSocket.getPeerCertificate()` gives (and grpc-js passes on as `sslPeerCertificate`). */
export interface PeerCertificateLike {
  readonly raw: Buffer;
  readonly subjectaltname?: string | undefined;
}

/**
 * Node's `subjectaltname`: entries joined by ", ", each `TYPE:value`; a value with a comma, quote or other special
 * character is written as a JSON string (nodejs/node src/crypto/crypto_common.cc `PrintGeneralName`, the
 * CVE-2021-44532 fix in v17.3.1 and v16.13.2; lib/tls.js `splitEscapedAltNames` reads it back), so a SAN cannot
 * smuggle a second entry.
 */
export function parseSubjectAltName(text: string): { type: string; value: string }[] {
  const out: { type: string; value: string }[] = [];
  let i = 0;
  while (i < text.length) {
    const colon = text.indexOf(':', i);
    if (colon < 0) break;
    const type = text.slice(i, colon);
    let value: string;
    let next: number;
    if (text[colon + 1] === '"') {
      const m = /^"(?:[^"\\]|\\.)*"/.exec(text.slice(colon + 1));
      if (m === null) break;
      try {
        value = JSON.parse(m[0]) as string;
      } catch {
        break;
      }
      next = colon + 1 + m[0].length;
    } else {
      const end = text.indexOf(', ', colon + 1);
      next = end < 0 ? text.length : end;
      value = text.slice(colon + 1, next);
    }
    out.push({ type, value });
    i = text.startsWith(', ', next) ? next + 2 : next;
  }
  return out;
}

export function identitiesOf(cert: PeerCertificateLike): PeerIdentities {
  const sans = parseSubjectAltName(cert.subjectaltname ?? '');
  return {
    uris: sans.filter((s) => s.type === 'URI').map((s) => s.value),
    dns: sans.filter((s) => s.type === 'DNS').map((s) => s.value.toLowerCase()),
    sha256: createHash('sha256').update(cert.raw).digest('hex'),
  };
}

/** Does one allowlist entry name this peer? */
export function matchesIdentity(entry: string, peer: PeerIdentities): boolean {
  if (entry.startsWith('spiffe://')) return peer.uris.includes(entry);
  if (entry.startsWith('uri:')) return peer.uris.includes(entry.slice(4));
  if (entry.startsWith('dns:')) return peer.dns.includes(entry.slice(4).toLowerCase());
  if (entry.startsWith('sha256:')) return entry.slice(7).replace(/:/g, '').toLowerCase() === peer.sha256;
  return false;
}

export type RoleResult =
  | { readonly ok: true; readonly role: Listener; readonly matched: string }
  | { readonly ok: false; readonly reason: 'no_certificate' | 'not_allowed' | 'ambiguous'; readonly message: string };

/** The listener role of a verified peer: exactly one role's allowlist must name it. */
export function roleOf(cert: PeerCertificateLike | undefined, allow: RoleAllowlist): RoleResult {
  if (cert === undefined) {
    return { ok: false, reason: 'no_certificate', message: 'the peer presented no verified client certificate' };
  }
  const peer = identitiesOf(cert);
  const pub = allow.public.find((e) => matchesIdentity(e, peer));
  const int = allow.internal.find((e) => matchesIdentity(e, peer));
  const who = `URI SANs [${peer.uris.join(', ').slice(0, 256)}], DNS SANs [${peer.dns.join(', ').slice(0, 256)}], sha256 ${peer.sha256}`;
  if (pub !== undefined && int !== undefined) {
    return {
      ok: false,
      reason: 'ambiguous',
      message: `the peer (${who}) is allowed as public (${pub}) and internal (${int}); give each Envoy listener its own identity`,
    };
  }
  if (pub !== undefined) return { ok: true, role: 'public', matched: pub };
  if (int !== undefined) return { ok: true, role: 'internal', matched: int };
  return { ok: false, reason: 'not_allowed', message: `the peer (${who}) is in neither tls.roles.public nor tls.roles.internal` };
}
