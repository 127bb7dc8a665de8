/**
 * What the Envoy renderer needs from a route table: the Envoy clusters (one per pool cluster name, with the role
 * that decides which endpoint header Envoy's ORIGINAL_DST reads), the capacity the gate will admit to each, the
 * body limit and the queue. Everything else a config says comes from the deployment settings (settings.ts), so the
 * route table stays the one source of cluster names and sizes.
 */
import type { CompiledRouteTable } from '../../policy/compile.js';

type Pool = CompiledRouteTable['table']['pools'][number];

/** One Envoy cluster: every pool that names it, summed. */
export interface RenderCluster {
  readonly name: string;
  /** The route table pools behind it (their names, for comments and Istio/Envoy Gateway Service names). */
  readonly pools: readonly string[];
  /** `prefill` when every pool behind it is a prefill pool: Envoy routes it from the internal listener. */
  readonly role: 'prefill' | 'decode';
  /** Requests the gate admits at once: endpoints x maxInFlightPerEndpoint over its pools. */
  readonly capacity: number;
  /**
   * The pods the cluster's Kubernetes Service selects (Istio and Envoy Gateway route a cluster to a Service), or why
   * none can be derived from the route table: the Service is then the operator's to write (pool-services.ts).
   */
  readonly service: PoolServiceSpec | { readonly missing: string };
}

/** A cluster's pods, as a Service selects them: one pool found by `discovery.kubernetes`. */
export interface PoolServiceSpec {
  readonly namespace: string;
  /** The pool's `matchLabels` plus its revision label: exactly the pods the gate's discovery routes to. */
  readonly selector: Readonly<Record<string, string>>;
  readonly targetPort: number;
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
  const byName = new Map<string, { pools: Pool[]; prefillOnly: boolean; capacity: number }>();
  for (const pool of table.table.pools) {
    const c = byName.get(pool.cluster) ?? {
      pools: [],
      prefillOnly: true,
      capacity: 0,
    };
    c.pools.push(pool);
    c.prefillOnly &&= pool.role === 'prefill';
    // A pool found by selector has no list to count: it declares the pod count it is sized for.
    const endpoints = pool.discovery === undefined ? pool.endpoints.length : pool.discovery.kubernetes.expectedEndpoints;
    c.capacity += endpoints * pool.maxInFlightPerEndpoint;
    byName.set(pool.cluster, c);
  }
  const clusters = [...byName].map(
    ([name, c]): RenderCluster => ({
      name,
      pools: c.pools.map((p) => p.name),
      role: c.prefillOnly ? 'prefill' : 'decode',
      capacity: c.capacity,
      service: serviceSpecOf(c.pools),
    }),
  );
  // The queue holds up to maxDepth requests per compatibility group (src/gate/wait-queue.ts); every revision is one.
  const queueStep = table.fallback.find((s) => s.kind === 'queue');
  const queueDepth = queueStep?.kind === 'queue' ? queueStep.maxDepth * table.revisions.size : 0;
  return { clusters, maxBodyBytes: table.limits.maxBodyBytes, queueDepth };
}

/**
 * The Service selector of a cluster: that of its one pool found by selector, with the revision label the gate's
 * discovery adds (src/discovery/). A Service selects by equality on one label set in its own namespace
 * (k8s.io/api core/v1 `ServiceSpec.selector`), which is what `matchLabels` is; several pools behind one cluster, or
 * a pool with listed endpoints, leave nothing to derive it from.
 */
function serviceSpecOf(pools: readonly Pool[]): PoolServiceSpec | { missing: string } {
  const names = pools.map((p) => p.name).join(', ');
  if (pools.length !== 1) {
    return { missing: `the cluster has ${String(pools.length)} pools (${names}); one Service selector cannot tell their pods apart` };
  }
  const k = pools[0]!.discovery?.kubernetes;
  if (k === undefined) return { missing: `pool ${names} lists its endpoints instead of finding them by discovery.kubernetes` };
  return { namespace: k.namespace, selector: { ...k.matchLabels, [k.revisionLabel]: pools[0]!.revision }, targetPort: k.targetPort };
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
