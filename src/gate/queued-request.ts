/**
 * One request held in the fallback queue, from the `wait` decision to its single answer. While it waits the stream
 * asks Envoy (once, as Envoy allows once per state) to extend its message timer to the remaining deadline plus a
 * margin, so Envoy never answers 504 itself; then the request is decided again, inside its bound group only,
 * whenever capacity may have freed, and answered exactly once: routed, refused (504 at the deadline, 503 when the
 * table no longer serves its group or the gate shuts down), or dropped silently when the client went away.
 */
import { decide } from '../decide/decide.js';
import { overrideTimeoutMs, waitCapMs } from '../decide/queue-step.js';
import { refuse, refusalFromError } from '../decide/refusal.js';
import { KvgateError } from '../errors.js';
import type { Decision, QueuedRequest, RequestFacts, WaitDecision } from '../decide/types.js';
import type { AdmissionDeps, Admitted, WaitHooks } from './admission-types.js';
import type { RolloutMetrics } from './rollout-metrics.js';
import type { Parked, QueueEntry, WaitQueue } from './wait-queue.js';

/** What every queued request shares with the admission layer that parked it. */
export interface QueueContext {
  readonly deps: AdmissionDeps;
  readonly queue: WaitQueue;
  readonly metrics: RolloutMetrics;
  readonly maxMessageTimeoutMs: number;
  /** Turn a final decision into the stream's answer (in-flight accounting included). */
  readonly settle: (d: Decision, body?: Uint8Array) => Admitted;
}

/** How a queued request left the queue, for `kvgate_fallback_total{step="queue"}` and the wait histogram. */
type Exit = 'served' | 'deadline_exceeded' | 'dropped' | 'cancelled';

const exitOf = (d: Decision): Exit =>
  d.kind !== 'refuse' ? 'served' : d.code === 'queue_deadline_exceeded' ? 'deadline_exceeded' : 'dropped';

/** Park `w` in its group's queue; resolves with the request's one answer. */
export function parkRequest(
  q: QueueContext,
  w: WaitDecision,
  facts: RequestFacts,
  signal: AbortSignal,
  hooks: WaitHooks,
  body: Uint8Array | undefined,
): Promise<Admitted> {
  return new Promise<Admitted>((resolve) => {
    const waiter = new Waiter(q, w, facts, body, signal, resolve);
    if (!waiter.park()) {
      // Unreachable while decide and park run in one synchronous turn; kept so a full queue can never overflow.
      q.metrics.fallback.inc({ step: 'queue', outcome: 'queue_full' });
      resolve(
        q.settle(
          refuse(w.requestId, 'queue_full', `the queue of group ${w.group.id} is full; retry later`, w.trace, { tenant: w.group.tenant }),
        ),
      );
      return;
    }
    hooks.extendTimeout(overrideTimeoutMs(w.deadlineAtMs, q.deps.now(), q.maxMessageTimeoutMs));
    if (signal.aborted) waiter.cancel();
    else signal.addEventListener('abort', waiter.cancel, { once: true });
  });
}

/** A queue entry bound to one stream's pending answer; answers exactly once. */
class Waiter implements QueueEntry {
  readonly requestId: string;
  readonly groupId: string;
  readonly fingerprint: string;
  readonly leg: WaitDecision['missing'];
  readonly order: WaitDecision['order'];
  readonly enqueuedAtMs: number;
  readonly deadlineAtMs: number;
  readonly #q: QueueContext;
  readonly #w: WaitDecision;
  readonly #facts: RequestFacts;
  readonly #body: Uint8Array | undefined;
  readonly #signal: AbortSignal;
  readonly #resolve: (d: Admitted) => void;
  readonly #bound: QueuedRequest;
  #parked: Parked | undefined;
  #open = true;

  constructor(
    q: QueueContext,
    w: WaitDecision,
    facts: RequestFacts,
    body: Uint8Array | undefined,
    signal: AbortSignal,
    resolve: (d: Admitted) => void,
  ) {
    this.requestId = w.requestId;
    this.groupId = w.group.id;
    this.fingerprint = w.group.fingerprint;
    this.leg = w.missing;
    this.order = w.order;
    this.enqueuedAtMs = w.enqueuedAtMs;
    this.deadlineAtMs = w.deadlineAtMs;
    this.#q = q;
    this.#w = w;
    this.#facts = facts;
    this.#body = body;
    this.#signal = signal;
    this.#resolve = resolve;
    this.#bound = { group: w.group, pinned: w.pinned, enqueuedAtMs: w.enqueuedAtMs, deadlineAtMs: w.deadlineAtMs };
  }

  park(): boolean {
    this.#parked = this.#q.queue.park(this, this.#w.maxDepth);
    return this.#parked !== undefined;
  }

  attempt(reason: 'wake' | 'deadline'): 'wait' | 'done' {
    if (!this.#open) return 'done';
    const { deps, metrics } = this.#q;
    let d: ReturnType<typeof decide>;
    try {
      const { table, view } = deps.state();
      // The deadline timer is the authority on "time is up", whatever the injected clock says.
      const nowMs = reason === 'deadline' ? Math.max(deps.now(), this.deadlineAtMs) : deps.now();
      const maxWaitMs = waitCapMs(this.#q.maxMessageTimeoutMs);
      d = decide(this.#facts, table, view, {
        nowMs,
        keys: deps.keys(),
        trace: deps.traceDecisions === true,
        ...(deps.listedAlternates === undefined ? {} : { alternates: deps.listedAlternates }),
        queue: this.#q.queue,
        maxWaitMs,
        bound: this.#bound,
      });
    } catch (e) {
      // As for a first decision (the session refuses what admission throws): this request is answered, fail closed.
      // Thrown on, it would escape a timer or a reload's swap, stop the queue from serving anyone behind it, and
      // take the gate down with every stream it holds.
      this.#answer(refusalFromError(this.requestId, KvgateError.from(e), this.#w.trace, this.#w.group.tenant));
      return 'done';
    }
    if (d.kind === 'wait') return 'wait';
    for (const r of d.kind === 'hop' || d.kind === 'answer' ? [] : (d.fallback ?? [])) {
      if (r.step !== 'queue' && r.outcome !== 'passed') metrics.fallback.inc({ step: r.step, outcome: r.outcome });
    }
    this.#answer(d);
    return 'done';
  }

  abandon(): void {
    const g = this.#w.group;
    const why = `the gateway is shutting down while the request waited for capacity of group ${g.id} (model ${g.model}, revision ${g.revision}); retry`;
    this.#answer(refuse(this.requestId, 'no_compatible_capacity', why, this.#w.trace, { tenant: g.tenant, retryAfterSeconds: 1 }));
  }

  /** The client went away: leave the queue; the answer completes the promise but nobody reads it. */
  readonly cancel = (): void => {
    this.#parked?.leave();
    if (this.#close('cancelled'))
      this.#resolve({
        decision: refuse(this.requestId, 'no_compatible_capacity', 'the client went away while the request was queued', this.#w.trace),
      });
  };

  #answer(d: Decision): void {
    if (this.#close(exitOf(d))) this.#resolve(this.#q.settle(d, d.kind === 'route' ? this.#body : undefined));
  }

  #close(exit: Exit): boolean {
    if (!this.#open) return false;
    this.#open = false;
    this.#signal.removeEventListener('abort', this.cancel);
    this.#q.metrics.queueWait.observe({ outcome: exit }, Math.max(0, this.#q.deps.now() - this.enqueuedAtMs) / 1000);
    this.#q.metrics.fallback.inc({ step: 'queue', outcome: exit });
    return true;
  }
}
