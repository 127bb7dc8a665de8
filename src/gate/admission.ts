/**
 * The gate's admission layer: between the ext_proc session (protocol) and the pure decision (src/decide). It decides
 * a request under the route table and worker view current at that moment, counts a routed request against the
 * endpoint it occupies (the in-flight accounting the least-loaded pick relies on), and runs the fallback queue: a
 * `wait` from the core parks the request in its group's queue (`wait-queue.ts`) until capacity frees, its deadline
 * passes or the client goes away.
 *
 * A request keeps what it was bound with: a routed request keeps its decision (the gate never decides it again, so
 * a reload, a weight change or a drain never moves it), and a queued request is decided again only inside its bound
 * group, under whatever table and view are current then.
 */
import { Registry } from 'prom-client';
import { readSubsetHint, restrictToSubset, SUBSET_KEY, SUBSET_NAMESPACE, type SubsetHint } from '../decide/subset-hint.js';
import { decideRequest, type RawRequestFacts } from '../decide/decide-request.js';
import { waitCapMs } from '../decide/queue-step.js';
import type { CoreDecision, Decision } from '../decide/types.js';
import type { InFlightTicket, InFlightTracker } from '../decide/worker-view.js';
import type { AdmissionDeps, Admitted, InFlightHold, WaitHooks } from './admission-types.js';
import { parkRequest, type QueueContext } from './queued-request.js';
import { createRolloutMetrics } from './rollout-metrics.js';
import { createWaitQueue, type GroupQueueState } from './wait-queue.js';

/** What admission reads for each request; swapped atomically by reloads and worker-view updates. */
/** Envoy's default in envoy/envoy.yaml (`max_message_timeout: 30s`), the gate setting `envoy.maxMessageTimeoutMs`. */
export const DEFAULT_MAX_MESSAGE_TIMEOUT_MS = 30_000;

/** What the session needs: one answer per request. Tests supply fakes; the gate supplies `createAdmission`. */
export interface Admission {
  /**
   * Admit one request. `signal` aborts when the stream ends (the client went away), or, when undefined,
   * `hooks.abortSignal()` is asked for one if the request is parked; `hooks` is absent where the
   * caller cannot extend Envoy's timer, and then the request must not be held.
   */
  admit(facts: RawRequestFacts, signal: AbortSignal | undefined, hooks?: WaitHooks): Admitted | Promise<Admitted>;
}

export interface QueueStatus {
  readonly waiting: number;
  readonly groups: readonly GroupQueueState[];
}

/** The gate's admission: the queue and in-flight accounting around the pure decision. */
export interface AdmissionControl extends Admission {
  /** The table or the worker view changed: queued requests decide again now (call from the policy store's onSwap). */
  notifyChanged(): void;
  /** The queues, for `/status`. */
  queueStatus(): QueueStatus;
  /** Answer every queued request (503) and stop the queue's timers: the gate is shutting down. */
  close(): void;
}

export function createAdmission(deps: AdmissionDeps): AdmissionControl {
  const metrics = deps.metrics ?? createRolloutMetrics(new Registry());
  const maxMessageTimeoutMs = deps.maxMessageTimeoutMs ?? DEFAULT_MAX_MESSAGE_TIMEOUT_MS;
  const queue = createWaitQueue({
    now: deps.now,
    ...(deps.recheckMs === undefined ? {} : { recheckMs: deps.recheckMs }),
    onDepth: (group, depth) => metrics.setQueueDepth(group, depth),
  });
  let wakeScheduled = false;
  const scheduleWake = (): void => {
    if (wakeScheduled) return;
    wakeScheduled = true;
    queueMicrotask(() => {
      wakeScheduled = false;
      queue.wake();
    });
  };
  const wakeIfWaiting = (): void => {
    if (queue.size() > 0) scheduleWake();
  };
  const holdContext: HoldContext = { inFlight: deps.inFlight, onRelease: wakeIfWaiting };
  /** Count the request on the endpoint it occupies for its whole life; its end frees capacity for the queue. */
  const settle = (d: Decision, body?: Uint8Array): Admitted => {
    const busy = d.kind === 'route' ? d.decode.endpoint : d.kind === 'hop' ? d.prefill.endpoint : null;
    // The data plane may have walked the EPP fallback list: count the request where it was actually served, and
    // only on an endpoint of the list (anything else is ignored: never trust the data plane past the group).
    const listed = d.kind === 'route' && d.decode.endpoint !== null ? listedOf(d.decode.endpoint, d.decode.alternates) : NONE;
    const hold = busy === null ? undefined : new Hold(holdContext, busy, d.requestId, listed);
    return { decision: d, ...(body === undefined ? {} : { body }), ...(hold === undefined ? {} : { hold }) };
  };
  const qctx: QueueContext = { deps, queue, metrics, maxMessageTimeoutMs, settle };

  return {
    admit(facts: RawRequestFacts, signal: AbortSignal | undefined, hooks?: WaitHooks): Admitted | Promise<Admitted> {
      const { table, view: fullView } = deps.state();
      // GIE endpoint-picker protocol: a subset hint restricts the serving pools to the listed endpoints, and the
      // answer must come now (503 when none is eligible), so such a request never waits in the queue.
      const hint = facts.listener === 'internal' ? null : readSubsetHint(facts.metadata);
      if (hint !== null && hint.size === 0) return { decision: emptySubsetRefusal(facts.requestId) };
      const view = hint === null ? fullView : restrictToSubset(fullView, table, hint);
      const maxWaitMs = waitCapMs(maxMessageTimeoutMs);
      const canWait = hint === null && hooks?.canExtendTimeout === true && maxWaitMs >= 1;
      const ctx = {
        nowMs: deps.now(),
        keys: deps.keys(),
        trace: deps.traceDecisions === true,
        ...(deps.listedAlternates === undefined ? {} : { alternates: deps.listedAlternates }),
        ...(canWait ? { queue, maxWaitMs } : {}),
      };
      const outcome = decideRequest(facts, table, view, ctx);
      const d = hint === null ? outcome.decision : withSubsetNote(outcome.decision, hint);
      for (const r of d.kind === 'hop' || d.kind === 'answer' ? [] : (d.fallback ?? [])) {
        metrics.fallback.inc({ step: r.step, outcome: r.outcome });
        if (r.skipped !== undefined) metrics.queueSkipped.inc({ reason: r.skipped.reason });
      }
      if (d.kind !== 'wait') return settle(d, outcome.request === undefined ? undefined : facts.body);
      const abort = signal ?? hooks!.abortSignal?.();
      if (abort === undefined) throw new Error('kvgate bug: a request was parked without a signal for its stream end');
      return parkRequest(qctx, d, outcome.facts!, abort, hooks!, outcome.request === undefined ? undefined : facts.body);
    },
    notifyChanged: () => queue.wake(),
    queueStatus: () => ({ waiting: queue.size(), groups: queue.groups() }),
    close: () => queue.close(),
  };
}

/** The GIE protocol's answer to an explicitly empty subset hint: 503, nothing to pick from. */
/**
 * The in-flight count of one admitted request, and how it moves when the data plane reports another listed endpoint.
 * Holds the endpoint addresses and the request id only, never the decision (its contract, binding and trace would
 * otherwise stay in memory for the whole response).
 */
class Hold implements InFlightHold {
  /** The admission's tracker and release hook, shared by every hold it makes. */
  readonly #ctx: HoldContext;
  readonly #requestId: string;
  /** The decision's decode endpoint and alternates (GIE fallback list); empty for a hop. */
  readonly #listed: readonly string[];
  /** The count this request holds now (its address is where it is counted); undefined once released. */
  #holding: InFlightTicket | undefined;

  constructor(ctx: HoldContext, first: string, requestId: string, listed: readonly string[]) {
    this.#ctx = ctx;
    this.#requestId = requestId;
    this.#listed = listed;
    this.#holding = ctx.inFlight.acquire(first, requestId);
  }

  release(): void {
    if (this.#holding !== undefined) this.#ctx.inFlight.release(this.#holding);
    this.#holding = undefined;
    this.#ctx.onRelease();
  }

  served(address: string): boolean | undefined {
    if (this.#listed.length === 0) return undefined;
    if (!this.#listed.includes(address) || this.#holding === undefined) return false;
    if (address === this.#holding.address) return true;
    this.#ctx.inFlight.release(this.#holding);
    this.#holding = this.#ctx.inFlight.acquire(address, this.#requestId);
    return true;
  }
}

interface HoldContext {
  readonly inFlight: InFlightTracker;
  readonly onRelease: () => void;
}

const NONE: readonly string[] = Object.freeze([]);

/** The pick and the alternates the data plane was given (the same trim as src/envoy/stamps.ts `routeStamps`). */
/** The pick and its alternates: the decision ranked no more alternates than the data plane is given (`listedAlternates`). */
function listedOf(endpoint: string, alternates: readonly string[] | undefined): readonly string[] {
  return alternates === undefined || alternates.length === 0 ? [endpoint] : [endpoint, ...alternates];
}

/**
 * A refusal decided under a subset hint says so, first (an audit line keeps the reason's first AUDIT_REASON_MAX
 * characters): the reasons after it ("pool ... has no endpoints in the worker view") are about the view narrowed to
 * the hint, and without this an operator whose gateway's endpoint list lags the pods (every rollout in GIE mode) is
 * told to add capacity the pool already has.
 */
function withSubsetNote(d: CoreDecision, hint: SubsetHint): CoreDecision {
  if (d.kind !== 'refuse' || d.code !== 'no_compatible_capacity') return d;
  // The count, not the addresses: the message is the client's error body too, and pod IPs are not the client's business.
  const listed = hint.size;
  return {
    ...d,
    message: `the data plane's subset hint (${SUBSET_NAMESPACE} ${SUBSET_KEY}) narrows the worker view to its ${listed} listed endpoints, the only ones kvgate may pick: ${d.message}`,
  };
}

function emptySubsetRefusal(requestId: string): Decision {
  return {
    kind: 'refuse',
    requestId,
    code: 'no_compatible_capacity',
    message: `request ${requestId}: the data plane's subset hint (${SUBSET_NAMESPACE} ${SUBSET_KEY}) lists no endpoints, so there is nothing kvgate may pick`,
    trace: ['subset hint: empty list: refused (503)'],
    retryAfterSeconds: 1,
  };
}
