/**
 * What the Envoy renderer needs from a route table: the Envoy clusters (one per pool cluster name, with the role
 * that decides which endpoint header Envoy's ORIGINAL_DST reads), the capacity the gate will admit to each, the
 * body limit and the queue. Everything else a config says comes from the deployment settings (settings.ts), so the
 * route table stays the one source of cluster names and sizes.
 */
import type { CompiledRouteTable } from '../../policy/compile.js';

/** One Envoy cluster: every pool that names it, summed. */
export interface RenderCluster {
  readonly name: string;
  /** The route table pools behind it (their names, for comments and Istio/Envoy Gateway Service names). */
  readonly pools: readonly string[];
  /** `prefill` when every pool behind it is a prefill pool: Envoy routes it from the internal listener. */
  readonly role: 'prefill' | 'decode';
  /** Requests the gate admits at once: endpoints x maxInFlightPerEndpoint over its pools. */
  readonly capacity: number;
}

export interface RenderInput {
  readonly clusters: readonly RenderCluster[];
  /** `limits.maxBodyBytes`: Envoy's per-connection buffer must hold a BUFFERED body this large. */
  readonly maxBodyBytes: number;
  /** The largest number of requests the fallback queue can hold (0 without a queue step). */
  readonly queueDepth: number;
}

/** The renderer's view of a route table. Clusters in the order the table first names them. */
export function renderInputOf(table: CompiledRouteTable): RenderInput {
  const byName = new Map<string, { pools: string[]; prefillOnly: boolean; capacity: number }>();
  for (const pool of table.table.pools) {
    const c = byName.get(pool.cluster) ?? {
      pools: [],
      prefillOnly: true,
      capacity: 0,
    };
    c.pools.push(pool.name);
    c.prefillOnly &&= pool.role === 'prefill';
    // A pool found by selector has no list to count: it declares the pod count it is sized for.
    const endpoints = pool.discovery === undefined ? pool.endpoints.length : pool.discovery.kubernetes.expectedEndpoints;
    c.capacity += endpoints * pool.maxInFlightPerEndpoint;
    byName.set(pool.cluster, c);
  }
  const clusters = [...byName].map(
    ([name, c]): RenderCluster => ({
      name,
      pools: c.pools,
      role: c.prefillOnly ? 'prefill' : 'decode',
      capacity: c.capacity,
    }),
  );
  // The queue holds up to maxDepth requests per compatibility group (src/gate/wait-queue.ts); every revision is one.
  const queueStep = table.fallback.find((s) => s.kind === 'queue');
  const queueDepth = queueStep?.kind === 'queue' ? queueStep.maxDepth * table.revisions.size : 0;
  return { clusters, maxBodyBytes: table.limits.maxBodyBytes, queueDepth };
}

/** Circuit-breaker thresholds for one cluster (Envoy's default is 1,024 for each, whatever the pool). */
export interface Breakers {
  readonly maxConnections: number;
  readonly maxPendingRequests: number;
  readonly maxRequests: number;
}

/**
 * A pool cluster's breakers. The gate admits at most `capacity` requests to it; twice that leaves room for
 * connections Envoy has not closed yet and for an endpoint a hot reload added before the config was rendered
 * again, while still stopping a runaway far below Envoy's flat 1,024 (or, for a big pool, above it: a pool of
 * 20 endpoints x 64 would otherwise get 503 `upstream_rq_pending_overflow` from Envoy before the gate's limit).
 * Upstreams are HTTP/1.1 sidecars, so every request in flight holds one connection.
 */
export function poolBreakers(capacity: number): Breakers {
  const n = Math.max(2 * capacity, 64);
  return { maxConnections: n, maxPendingRequests: n, maxRequests: n };
}

/**
 * The gate cluster's breakers. On Envoy 1.36 every request holds its ext_proc stream until it ends, so the gate
 * sees one stream per request in flight on every listener (decode and prefill legs) plus every queued request;
 * on 1.37+ streams are shorter, the same bound is safe. Streams are HTTP/2 multiplexed, so connections stay at
 * Envoy's default.
 */
export function gateBreakers(input: RenderInput): Omit<Breakers, 'maxConnections'> {
  const streams = input.clusters.reduce((sum, c) => sum + c.capacity, 0) + input.queueDepth;
  const n = Math.max(2 * streams, 1024);
  return { maxPendingRequests: n, maxRequests: n };
}
