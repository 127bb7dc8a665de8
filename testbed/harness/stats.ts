/**
 * Envoy-style counters, flat and dotted (`http.ingress.ext_proc.streams_started`, `cluster.backend_a.upstream_rq_total`),
 * kept per harness instance so parallel tests never share them. Every counter a scope declares exists from the start
 * at 0, as Envoy materialises its stats, so a test can assert that something did *not* happen.
 */

export class StatStore {
  readonly #counters = new Map<string, number>();

  /** A view that prefixes names; `declare` lists the counters that start at 0. */
  scope<N extends string>(prefix: string, declare: readonly N[]): CounterScope<N> {
    for (const name of declare) {
      const full = prefix + name;
      if (!this.#counters.has(full)) this.#counters.set(full, 0);
    }
    return new CounterScope<N>(this.#counters, prefix);
  }

  snapshot(): Record<string, number> {
    return Object.fromEntries([...this.#counters.entries()].sort(([a], [b]) => a.localeCompare(b)));
  }
}

export class CounterScope<N extends string> {
  readonly #counters: Map<string, number>;
  readonly prefix: string;

  constructor(counters: Map<string, number>, prefix: string) {
    this.#counters = counters;
    this.prefix = prefix;
  }

  inc(name: N, by = 1): void {
    const full = this.prefix + name;
    this.#counters.set(full, (this.#counters.get(full) ?? 0) + by);
  }

  get(name: N): number {
    return this.#counters.get(this.prefix + name) ?? 0;
  }
}

/** The ext_proc filter's counters (`http.<stat_prefix>.ext_proc.*`), plus the harness's own divergence counter. */
export const EXT_PROC_COUNTERS = [
  'streams_started',
  'stream_msgs_sent',
  'stream_msgs_received',
  'streams_closed',
  'streams_failed',
  'failure_mode_allowed',
  'message_timeouts',
  'spurious_msgs_received',
  'rejected_header_mutations',
  'clear_route_cache_ignored',
  'clear_route_cache_disabled',
  'override_message_timeout_received',
  'override_message_timeout_ignored',
  'harness.append_semantics_divergent',
  'harness.unsupported_mode_override',
] as const;
export type ExtProcCounter = (typeof EXT_PROC_COUNTERS)[number];

/** HCM and router counters (`http.<stat_prefix>.*`). */
export const HCM_COUNTERS = [
  'downstream_rq_total',
  'downstream_rq_2xx',
  'downstream_rq_3xx',
  'downstream_rq_4xx',
  'downstream_rq_5xx',
  'downstream_rq_too_large',
  'downstream_rq_idle_timeout',
  'downstream_rq_timeout',
  'rs_too_large',
  'no_route',
  'no_cluster',
] as const;
export type HcmCounter = (typeof HCM_COUNTERS)[number];

/** Per-cluster counters (`cluster.<name>.*`). */
export const CLUSTER_COUNTERS = [
  'upstream_rq_total',
  'upstream_rq_completed',
  'upstream_rq_timeout',
  'upstream_cx_connect_fail',
  'upstream_cx_connect_timeout',
  'upstream_cx_none_healthy',
  'upstream_rq_per_try_timeout',
  'upstream_rq_pending_overflow',
] as const;
export type ClusterCounter = (typeof CLUSTER_COUNTERS)[number];
