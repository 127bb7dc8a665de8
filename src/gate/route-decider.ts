/**
 * The gate's real Decider: RawRequest -> request facts -> the pure decision core, under the route table and worker
 * view current at that moment, plus the in-flight accounting the least-loaded pick relies on, and the fallback
 * queue: a `wait` from the core parks the request in its group's queue (`wait-queue.ts`) until capacity frees, its
 * deadline passes or the client goes away.
 *
 * A request keeps what it was bound with: a routed request keeps its decision (the gate never decides it again, so
 * a reload, a weight change or a drain never moves it), and a queued request is decided again only inside its bound
 * group, under whatever table and view are current then.
 */
import { Registry } from 'prom-client';
import type { KeyRing } from '../contract/keys.js';
import { decideRequest, type RawRequestFacts } from '../decide/decide-request.js';
import { waitCapMs } from '../decide/queue-step.js';
import type { Decision } from '../decide/types.js';
import type { InFlightTracker, WorkerView } from '../decide/worker-view.js';
import { H } from '../headers.js';
import type { CompiledRouteTable } from '../policy/compile.js';
import type { Decided, DecideHooks, Decider, RawRequest } from './decider.js';
import { parkRequest, type QueueContext } from './queued-request.js';
import { createRolloutMetrics, type RolloutMetrics } from './rollout-metrics.js';
import { createWaitQueue, type GroupQueueState } from './wait-queue.js';

/** What the decider reads for each request; swapped atomically by reloads and worker-view updates. */
export interface RoutingState {
  readonly table: CompiledRouteTable;
  readonly view: WorkerView;
}

/** Envoy's default in envoy/envoy.yaml (`max_message_timeout: 30s`), the gate setting `envoy.maxMessageTimeoutMs`. */
export const DEFAULT_MAX_MESSAGE_TIMEOUT_MS = 30_000;

export interface RouteDeciderDeps {
  readonly state: () => RoutingState;
  readonly keys: KeyRing;
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
}

export interface QueueStatus {
  readonly waiting: number;
  readonly groups: readonly GroupQueueState[];
}

export interface RouteDecider extends Decider {
  /** The table or the worker view changed: queued requests decide again now (call from the policy store's onSwap). */
  notifyChanged(): void;
  /** The queues, for `/status`. */
  queueStatus(): QueueStatus;
  /** Answer every queued request (503) and stop the queue's timers: the gate is shutting down. */
  close(): void;
}

export function createRouteDecider(deps: RouteDeciderDeps): RouteDecider {
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
  /** Count the request on the endpoint it occupies for its whole life; its end frees capacity for the queue. */
  const settle = (d: Decision, body?: Readonly<Record<string, unknown>>): Decided => {
    const busy = d.kind === 'route' ? d.decode.endpoint : d.kind === 'hop' ? d.prefill.endpoint : null;
    const fingerprint = d.kind === 'refuse' ? null : d.group.fingerprint;
    const leg = d.kind === 'hop' ? 'prefill' : 'decode';
    const held = busy === null ? undefined : deps.inFlight.acquire(busy);
    const release =
      held === undefined && fingerprint === null
        ? undefined
        : () => {
            held?.();
            if (fingerprint !== null) queue.recordRelease(fingerprint, leg);
            if (queue.size() > 0) scheduleWake();
          };
    return { decision: d, ...(body === undefined ? {} : { body }), ...(release === undefined ? {} : { release }) };
  };
  const qctx: QueueContext = { deps, queue, metrics, maxMessageTimeoutMs, settle };

  return {
    decide(req: RawRequest, signal: AbortSignal, hooks?: DecideHooks): Decided | Promise<Decided> {
      if (req.listener === 'internal' && req.gateOwned[H.contract] === undefined) {
        // The internal listener exists for prefill legs; anything else there is a misconfigured or hostile caller.
        return {
          decision: {
            kind: 'refuse',
            requestId: req.requestId,
            code: 'contract_invalid',
            message:
              "the internal listener carries only prefill legs, and this request has no x-kvgate-contract; send client requests to Envoy's public listener",
            trace: ['internal listener without a transfer contract: refused'],
          },
        };
      }
      const { table, view } = deps.state();
      const maxWaitMs = waitCapMs(maxMessageTimeoutMs);
      const canWait = hooks?.canExtendTimeout === true && maxWaitMs >= 1;
      const ctx = { nowMs: deps.now(), keys: deps.keys, ...(canWait ? { queue, maxWaitMs } : {}) };
      const outcome = decideRequest(toFacts(req), table, view, ctx);
      const d = outcome.decision;
      for (const r of d.kind === 'hop' ? [] : (d.fallback ?? [])) metrics.fallback.inc({ step: r.step, outcome: r.outcome });
      if (d.kind !== 'wait') return settle(d, outcome.request?.json);
      return parkRequest(qctx, d, outcome.facts!, signal, hooks!, outcome.request?.json);
    },
    notifyChanged: () => queue.wake(),
    queueStatus: () => ({ waiting: queue.size(), groups: queue.groups() }),
    close: () => queue.close(),
  };
}

/** Gate-owned headers become facts only where they are trusted: hops on the internal listener, bindings anywhere
 * (a binding is signed and only ever narrows the choice to a revision the table still serves). */
export function toFacts(req: RawRequest): RawRequestFacts {
  const g = req.gateOwned;
  const contract = req.listener === 'internal' ? g[H.contract] : undefined;
  const binding = req.bindingToken;
  return {
    requestId: req.requestId,
    method: req.method,
    path: req.path,
    headers: req.headers,
    metadata: req.metadata,
    bodyTruncated: req.bodyTruncated,
    ...(req.body === undefined ? {} : { body: req.body }),
    ...(binding === undefined ? {} : { binding }),
    ...(contract === undefined
      ? {}
      : {
          hop: {
            contract,
            ...(g[H.prefillCluster] === undefined ? {} : { prefillCluster: g[H.prefillCluster] }),
            ...(g[H.prefillEndpoint] === undefined ? {} : { prefillEndpoint: g[H.prefillEndpoint] }),
            ...(g[H.retryExclude] === undefined
              ? {}
              : { retryExclude: (g[H.retryExclude] ?? '').split(',').map((s) => s.trim()).filter((s) => s.length > 0) }),
          },
        }),
  };
}
