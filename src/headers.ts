/**
 * The external contract's header names (README.md, "The external contract"). Stable: change only with a migration note in the README.
 */
export const H = {
  group: 'x-kvgate-group',
  revision: 'x-kvgate-revision',
  decodeCluster: 'x-kvgate-decode-cluster',
  decodeEndpoint: 'x-kvgate-decode-endpoint',
  prefillCluster: 'x-kvgate-prefill-cluster',
  prefillEndpoint: 'x-kvgate-prefill-endpoint',
  contract: 'x-kvgate-contract',
  binding: 'x-kvgate-binding',
  rejectReason: 'x-kvgate-reject-reason',
  requestId: 'x-request-id',
  /** Internal listener only: prefill endpoints a decode sidecar's earlier attempts failed on (comma-separated). */
  retryExclude: 'x-kvgate-retry-exclude',
  /** From a prefill sidecar: the `ip:port` it is listed under, so a failed attempt can be excluded exactly. */
  servedBy: 'x-kvgate-served-by',
  /** llm-d / Gateway API Inference Extension compatibility aliases for the decode endpoint and prefill host. */
  gieDestination: 'x-gateway-destination-endpoint',
  llmdPrefiller: 'x-prefiller-host-port',
  /** Gate to sidecar on every status poll: a fresh 128-bit nonce (base64url) the answer must be signed for. */
  statusNonce: 'x-kvgate-status-nonce',
  /** Sidecar to gate on a status answer to a nonce: `<key id>.<base64url HMAC>` (src/contract/status-signature.ts). */
  statusSignature: 'x-kvgate-status-signature',
} as const;

/** Every header kvgate owns. A client-sent header with this prefix is removed before anything reads it. */
export const KVGATE_HEADER_PREFIX = 'x-kvgate-';

/** Headers a client must never be able to set, because Envoy or a sidecar routes by them. */
export function isGateOwnedHeader(name: string): boolean {
  return isGateOwnedLowerCase(name.toLowerCase());
}

/**
 * llm-d's P/D sidecar also routes by these request headers, which kvgate never writes: encoder hosts for encode/prefill/
 * decode disaggregation, a KV cache source for P2P pull, and (deprecated) a data-parallel rank's port. A client must
 * not set them any more than the routing aliases above, so they are removed with the gate's own. llm-d/llm-d-router
 * @ebab687927f5 `pkg/common/routing/common.go` (header names), `pkg/sidecar/proxy/connector_ec_common.go`.
 */
const LLMD_ROUTING_HEADERS: ReadonlySet<string> = new Set([
  'x-encoder-hosts-ports',
  'x-kv-cache-source-host-port',
  'x-data-parallel-host-port',
]);

/** `isGateOwnedHeader` for a name already in lower case (every name the gate reads is lower-cased first). */
export function isGateOwnedLowerCase(n: string): boolean {
  if (n.charCodeAt(0) !== 0x78) return false; // every gate-owned name starts with "x-": most headers stop here
  return n.startsWith(KVGATE_HEADER_PREFIX) || n === H.gieDestination || n === H.llmdPrefiller || LLMD_ROUTING_HEADERS.has(n);
}
