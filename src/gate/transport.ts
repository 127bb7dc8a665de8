/**
 * How the gate's gRPC port is secured, and how a stream's listener role is derived.
 *
 * - `mtls` (the default, and the only mode a production config can use): TLS with client-certificate verification
 *   (`grpc.ServerCredentials.createSsl(ca, [cert/key], true)`: the handshake fails without a certificate chaining to
 *   `clientCa`). Per stream the verified peer certificate (grpc-js 1.14 `call.getAuthContext().sslPeerCertificate`,
 *   set only when the TLS socket is `authorized`: @grpc/grpc-js build/src/server-interceptors.js
 *   `Http2ServerCallStream.getAuthContext`) must be named by exactly one role's allowlist (peer-identity.ts); the
 *   `x-kvgate-listener` metadata is ignored. A peer in no allowlist cannot open a stream (PERMISSION_DENIED).
 * - `insecure` (`insecure: true` in the config, for a local test only): plaintext, and the role is what the caller's
 *   `x-kvgate-listener` metadata says: any client that reaches the port can claim the internal role. The gate logs
 *   a warning at start, `/status` shows it and `kvgate_gate_insecure_transport` is 1.
 */
import * as grpc from '@grpc/grpc-js';
import type { Listener } from '../envoy/inbound.js';
import { type PeerCertificateLike, type RoleAllowlist, type RoleResult, roleOf } from './peer-identity.js';

/** gRPC initial metadata key an Envoy listener's ext_proc filter sets (`grpc_service.initial_metadata`); read only in
 * insecure mode. */
export const LISTENER_METADATA_KEY = 'x-kvgate-listener';

export type GateTransport =
  | { readonly kind: 'insecure' }
  | { readonly kind: 'mtls'; readonly cert: Buffer; readonly key: Buffer; readonly clientCa: Buffer; readonly roles: RoleAllowlist };

export function serverCredentials(t: GateTransport): grpc.ServerCredentials {
  if (t.kind === 'insecure') return grpc.ServerCredentials.createInsecure();
  return grpc.ServerCredentials.createSsl(t.clientCa, [{ cert_chain: t.cert, private_key: t.key }], true);
}

/** The role of a new stream, or why it may not be opened. */
export function streamRole(
  t: GateTransport,
  call: Pick<grpc.ServerDuplexStream<unknown, unknown>, 'metadata' | 'getAuthContext'>,
): RoleResult {
  if (t.kind === 'insecure') {
    const claimed = call.metadata.get(LISTENER_METADATA_KEY)[0]?.toString();
    return { ok: true, role: claimed === 'internal' ? 'internal' : 'public', matched: 'insecure: caller-sent x-kvgate-listener' };
  }
  const cert = call.getAuthContext().sslPeerCertificate as PeerCertificateLike | undefined;
  return roleOf(cert, t.roles);
}

/** For `/status`: the mode, and how many identities each role allows (not the identities themselves). */
export function transportStatus(t: GateTransport): { mode: 'mtls' | 'insecure'; roles?: Record<Listener, number> } {
  return t.kind === 'insecure'
    ? { mode: 'insecure' }
    : { mode: 'mtls', roles: { public: t.roles.public.length, internal: t.roles.internal.length } };
}
