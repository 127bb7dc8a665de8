/**
 * `circuit_breakers` on a cluster, and the one limit the harness enforces from it. Envoy's defaults apply when a
 * cluster sets none (envoy/config/cluster/v3/circuit_breaker.proto: max_connections, max_pending_requests and
 * max_requests 1,024, max_retries 3). Only the DEFAULT priority exists here: kvgate routes nothing at HIGH.
 *
 * Enforcement models Envoy's connection pools (envoyproxy/envoy source/common/conn_pool/conn_pool_base.cc,
 * ConnPoolImplBase::newStreamImpl: a stream the cluster's `requests()` or `pendingRequests()` resource cannot take
 * fails with PoolFailureReason::Overflow, which the router answers 503 with response flag UO). For an HTTP/1.1
 * cluster every request in flight holds a connection, so at most max_connections + max_pending_requests fit; for
 * HTTP/2 the bound is max_requests. The ext_proc cluster's streams count the same way.
 */
import type { ConfigReader } from './config-reader.js';

export interface CircuitBreakers {
  readonly maxConnections: number;
  readonly maxPendingRequests: number;
  readonly maxRequests: number;
  readonly maxRetries: number;
}

export const ENVOY_DEFAULT_BREAKERS: CircuitBreakers = {
  maxConnections: 1024,
  maxPendingRequests: 1024,
  maxRequests: 1024,
  maxRetries: 3,
};

export function readCircuitBreakers(r: ConfigReader, value: unknown, path: string): CircuitBreakers {
  if (value === undefined) return ENVOY_DEFAULT_BREAKERS;
  const o = r.obj(value, path, ['thresholds']);
  const list = r.arr(o['thresholds'], `${path}.thresholds`);
  if (list.length > 1) r.issue(`${path}.thresholds`, 'one threshold (priority DEFAULT) is supported by the kvgate harness');
  if (list.length === 0) return ENVOY_DEFAULT_BREAKERS;
  const p = `${path}.thresholds[0]`;
  const t = r.obj(list[0], p, ['priority', 'max_connections', 'max_pending_requests', 'max_requests', 'max_retries']);
  if (t['priority'] !== undefined && t['priority'] !== 'DEFAULT')
    r.issue(`${p}.priority`, `${String(t['priority'])} unsupported by the kvgate harness (DEFAULT only)`);
  const d = ENVOY_DEFAULT_BREAKERS;
  return {
    maxConnections: r.uint(t['max_connections'], `${p}.max_connections`, d.maxConnections),
    maxPendingRequests: r.uint(t['max_pending_requests'], `${p}.max_pending_requests`, d.maxPendingRequests),
    maxRequests: r.uint(t['max_requests'], `${p}.max_requests`, d.maxRequests),
    maxRetries: r.uint(t['max_retries'], `${p}.max_retries`, d.maxRetries),
  };
}

/** How many requests (streams) the cluster carries at once before Envoy answers overflow. */
export function requestLimit(b: CircuitBreakers, http2: boolean): number {
  return http2 ? b.maxRequests : Math.min(b.maxRequests, b.maxConnections + b.maxPendingRequests);
}
