/**
 * What the decision core knows about workers right now: per pool, each endpoint's current fingerprint, whether it
 * was verified, whether it is draining, and how many requests the gate has in flight on it.
 *
 * The decision core trusts only this view for "is this endpoint in the group": a pool whose live endpoint reports
 * another fingerprint simply loses that endpoint. The static view here believes the route table; the sidecar
 * issue adds a live poller behind the same interface.
 */
import type { CompiledRouteTable } from '../policy/compile.js';
import { fnv1a } from './hash32.js';

export interface EndpointState {
  /** `ip:port`, as Envoy's ORIGINAL_DST routes to it. */
  readonly address: string;
  /** The fingerprint the worker runs now; null when it has not been observed yet. */
  readonly fingerprint: string | null;
  /** True when the fingerprint was verified (declared and matching, or probed by its sidecar). */
  readonly verified: boolean;
  readonly draining: boolean;
  /** Requests the gate has routed to it that have not finished. */
  readonly inFlight: number;
  /** When this state was observed (ms since epoch); 0 for the static, declared view. */
  readonly observedAtMs: number;
  /** The worker's own load as its sidecar last reported it (vLLM's gauges); absent when unknown. */
  readonly load?: EndpointLoad;
}

/** vLLM's load gauges (`vllm:num_requests_running`, `vllm:num_requests_waiting`, `vllm:kv_cache_usage_perc`). */
export interface EndpointLoad {
  readonly running: number;
  readonly waiting: number;
  /** 0..1 */
  readonly kvCacheUsage: number;
  /**
   * This gate's own in-flight count on the endpoint when the report was read: what this gate sent since then (or saw
   * finish) is the difference to its count now, which bridges the report's age.
   */
  readonly ownInFlightAtReport?: number;
}

export interface WorkerView {
  endpoints(pool: string): readonly EndpointState[];
  /** Age of the oldest observation behind this view, when it is a live view. */
  readonly ageMs?: number;
  /**
   * An index for large pools (optional): which of `pool`'s endpoints were routable for `fingerprint` (observed,
   * verified, not draining) when the view last changed. A hint of where to look, nothing more: the picker reads each
   * address it considers again with `endpoint` and checks it exactly as it checks `endpoints` (src/decide/pick.ts).
   */
  routable?(pool: string, fingerprint: string): RoutableIndex;
  /** One endpoint's state now, as `endpoints(pool)` would give it; undefined when the pool does not list it. */
  endpoint?(pool: string, address: string): EndpointState | undefined;
  /**
   * The pool's endpoints whose pods are terminating but still serve (a pool found by selector: Ready, inside their
   * grace period). Never picked for anything new; only a prefill leg the contract planned there may still go there
   * (src/decide/hop.ts), as the request was decided before the deletion.
   */
  terminating?(pool: string): readonly EndpointState[];
}

/** Addresses in a stable order, with their 32-bit tie-break/affinity hashes (`fnv1a(address)`). */
export interface RoutableIndex {
  readonly addresses: readonly string[];
  readonly hashes: Uint32Array;
}

const EMPTY_INDEX: RoutableIndex = Object.freeze({ addresses: Object.freeze([]), hashes: new Uint32Array(0) });

/** The routable addresses of `states` per fingerprint (in-flight counts are left out: they change per request). */
export function indexRoutable(states: readonly EndpointState[]): ReadonlyMap<string, RoutableIndex> {
  const by = new Map<string, string[]>();
  for (const e of states) {
    if (e.fingerprint === null || !e.verified || e.draining) continue;
    const list = by.get(e.fingerprint);
    if (list === undefined) by.set(e.fingerprint, [e.address]);
    else list.push(e.address);
  }
  const out = new Map<string, RoutableIndex>();
  for (const [fp, addresses] of by)
    out.set(fp, Object.freeze({ addresses: Object.freeze(addresses), hashes: Uint32Array.from(addresses, fnv1a) }));
  return out;
}

/** `index.get(fingerprint)`, or an empty index. */
export function routableOf(index: ReadonlyMap<string, RoutableIndex>, fingerprint: string): RoutableIndex {
  return index.get(fingerprint) ?? EMPTY_INDEX;
}

/**
 * What a sidecar's status says about the requests it serves (`requests` in src/sidecar/status.ts): the ids in
 * flight now and the ids it received recently (admitted or refused), newest last.
 */
export interface RequestReport {
  readonly inFlight: readonly string[];
  readonly received: readonly string[];
}

/**
 * Counts requests in flight per endpoint. The gate acquires when it routes; the release marks the end of the
 * request's ext_proc stream, which is the request's end only on some Envoy versions: the gate's live tracker
 * (src/gate/endpoint-load.ts) keeps counting until the endpoint's sidecar says the request is over.
 */
export interface InFlightTracker {
  /**
   * Count one request on `address`; `release(ticket)` ends it (a second release does nothing). A ticket rather than
   * a release closure: a routed stream holds it for its whole response, and a closure with its context costs more.
   */
  acquire(address: string, requestId?: string): InFlightTicket;
  release(ticket: InFlightTicket): void;
  inFlight(address: string): number;
  /** Every endpoint with requests in flight, for status pages. */
  snapshot(): ReadonlyMap<string, number>;
}

/** One counted request, as its tracker handed it out; only that tracker reads it. */
export interface InFlightTicket {
  readonly address: string;
}

interface CountedTicket extends InFlightTicket {
  released: boolean;
}

/** In-memory per-replica counts: least-in-flight only needs this replica's view of its own routing. */
export function createInFlightTracker(): InFlightTracker {
  const counts = new Map<string, number>();
  return {
    acquire(address): CountedTicket {
      counts.set(address, (counts.get(address) ?? 0) + 1);
      return { address, released: false };
    },
    release(ticket) {
      const t = ticket as CountedTicket;
      if (t.released) return;
      t.released = true;
      const n = (counts.get(ticket.address) ?? 1) - 1;
      if (n <= 0) counts.delete(ticket.address);
      else counts.set(ticket.address, n);
    },
    inFlight: (address) => counts.get(address) ?? 0,
    snapshot: () => new Map(counts),
  };
}

/**
 * The declared view: every endpoint runs its pool's declared fingerprint (or its own declared descriptor's) and is
 * verified by declaration. Pool draining is read from the table by the decision core, not repeated here.
 */
export function createStaticWorkerView(compiled: CompiledRouteTable, inFlight: InFlightTracker): WorkerView {
  const declared = new Map(
    [...compiled.pools.values()].map((p) => [p.name, new Map(p.endpoints.map((e) => [e.address, e.fingerprint] as const))]),
  );
  const stateOf = (address: string, fingerprint: string): EndpointState => ({
    address,
    fingerprint,
    verified: true,
    draining: false,
    inFlight: inFlight.inFlight(address),
    observedAtMs: 0,
  });
  const indexes = new Map<string, ReadonlyMap<string, RoutableIndex>>();
  const view: WorkerView = {
    endpoints(pool) {
      return [...(declared.get(pool) ?? [])].map(([address, fingerprint]) => stateOf(address, fingerprint));
    },
    routable(pool, fingerprint) {
      let index = indexes.get(pool);
      if (index === undefined) {
        index = indexRoutable(view.endpoints(pool));
        indexes.set(pool, index);
      }
      return routableOf(index, fingerprint);
    },
    endpoint(pool, address) {
      const fingerprint = declared.get(pool)?.get(address);
      return fingerprint === undefined ? undefined : stateOf(address, fingerprint);
    },
  };
  return view;
}
