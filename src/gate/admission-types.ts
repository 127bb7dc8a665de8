/**
 * The vocabulary of admission (queue and in-flight), shared by `admission.ts` and the requests it parks
 * (`queued-request.ts`), kept apart so neither imports the other back.
 */
import type { KeyRing } from '../contract/keys.js';
import type { Decision } from '../decide/types.js';
import type { InFlightTracker, WorkerView } from '../decide/worker-view.js';
import type { CompiledRouteTable } from '../policy/compile.js';
import type { RolloutMetrics } from './rollout-metrics.js';

export interface RoutingState {
  readonly table: CompiledRouteTable;
  readonly view: WorkerView;
}

export interface AdmissionDeps {
  readonly state: () => RoutingState;
  /**
   * The key ring in use (src/key-store.ts): read once per decision, and that snapshot signs everything the decision
   * mints, so a key reload never splits a request across two rings.
   */
  readonly keys: () => KeyRing;
  readonly inFlight: InFlightTracker;
  readonly now: () => number;
  /**
   * The `max_message_timeout` of the ext_proc filter in front of the gate (gate config `envoy.maxMessageTimeoutMs`).
   * Waits are capped below it; 0 disables queueing (Envoy then ignores `override_message_timeout`).
   */
  readonly maxMessageTimeoutMs?: number;
  /** Rollout and fallback metrics; pass ones built on the gate's registry (default: a private registry). */
  readonly metrics?: RolloutMetrics;
  /** How often queued requests re-check capacity when nothing announced a change (ms; default 250). */
  readonly recheckMs?: number;
  /**
   * Keep each decision's step-by-step trace (`kvgate explain` reads it). Off by default: nothing on the gate's request
   * path reads a trace, and building it is about a tenth of what a routed decision allocates.
   */
  readonly traceDecisions?: boolean;
  /**
   * How many of a decision's alternates the data plane is given after the pick in `x-gateway-destination-endpoint`
   * (gate config `envoy.gieFallbackEndpoints` with `envoy.gieHeaders`, src/envoy/stamps.ts trims to the same count).
   * Decisions rank exactly that many (`DecideContext.alternates`), so the contract authorises them and nothing more,
   * and a served endpoint (`x-gateway-destination-endpoint-served`) moves the in-flight count only if it is one of
   * those: the data plane can only have served one it was given. Default: every alternate the core ranks (4).
   */
  readonly listedAlternates?: number;
}

export interface Admitted {
  readonly decision: Decision;
  /** The client's body bytes, when the decision rewrites them (its `cache_salt`; src/envoy/body-rewrite.ts). */
  readonly body?: Uint8Array;
  /** The request's in-flight count, when it occupies an endpoint; absent otherwise. */
  readonly hold?: InFlightHold;
}

/**
 * One admitted request's in-flight count. An object with methods rather than closures: a decided stream holds it
 * for the whole response, and closures over the decision would keep the decision alive with it.
 */
export interface InFlightHold {
  /** Called exactly once when the HTTP request ends (releases in-flight accounting; later calls do nothing). */
  release(): void;
  /**
   * The data plane reports the endpoint that served the request (`x-gateway-destination-endpoint-served`): moves
   * the in-flight count there when it is one of the decision's listed endpoints; false when it is not; undefined
   * when the decision listed none (a hop), so there is nothing to compare with.
   */
  served(address: string): boolean | undefined;
}

/**
 * What the session offers admission when a request must be held longer than Envoy's `message_timeout` (a request
 * waiting in the fallback queue): Envoy's `override_message_timeout`, which restarts its timer for the message
 * being answered.
 */
export interface WaitHooks {
  /** Whether `extendTimeout` can still be used for this message (Envoy honours it once per state). */
  readonly canExtendTimeout: boolean;
  /**
   * Send `override_message_timeout` of `ms` (clamped to at least 1 ms) before the answer. Returns false when it
   * could not be sent; the request must then be answered within Envoy's `message_timeout`.
   */
  extendTimeout(ms: number): boolean;
  /**
   * The signal that aborts when the stream ends, made only when a request is actually parked (most never are);
   * used when `admit` was given no signal.
   */
  abortSignal?(): AbortSignal;
}
