/**
 * `kvgate explain`: one request, decided by the same pure core the gate runs, with every step that led to the
 * decision and exactly what a client (or upstream) would see: the stamped headers of a route, or the status, code,
 * message, headers and JSON body of a refusal. A `wait` is shown with the queue step it takes and the 504 the
 * client gets if no capacity frees before its deadline. Pure: the command reads files and flags and prints.
 */
import type { KeyRing } from '../contract/keys.js';
import { statusOf, toErrorBody, type ErrorBody, type ErrorCode } from '../errors.js';
import { H, isGateOwnedHeader } from '../headers.js';
import type { CompiledRouteTable } from '../policy/compile.js';
import { formatRolloutStatus, rolloutStatus } from '../policy/rollout-status.js';
import { decide } from './decide.js';
import { decideRequest } from './decide-request.js';
import { overrideTimeoutMs, waitCapMs } from './queue-step.js';
import type { CoreDecision, HopFacts, QueuedRequest, QueueView, Refusal, Target } from './types.js';
import type { WorkerView } from './worker-view.js';

export interface ExplainInput {
  readonly table: CompiledRouteTable;
  readonly keys: KeyRing;
  readonly nowMs: number;
  readonly method: string;
  readonly path: string;
  /** Request headers as a client sends them (lower-cased); gate-owned ones are removed as the gate removes them. */
  readonly headers: Readonly<Record<string, string>>;
  readonly metadata?: Readonly<Record<string, Readonly<Record<string, unknown>>>>;
  readonly body: Uint8Array;
  /** A sidecar's prefill leg on the internal listener (the only place a contract is trusted). */
  readonly hop?: HopFacts;
  readonly view: WorkerView;
  readonly queue: QueueView;
  /** Envoy's max_message_timeout (the gate's `envoy.maxMessageTimeoutMs`). */
  readonly maxMessageTimeoutMs: number;
}

/** What a client gets for a refusal, byte for byte as the gate's ImmediateResponse. */
export interface ClientRefusal {
  readonly status: number;
  readonly code: ErrorCode;
  readonly message: string;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: ErrorBody;
}

export interface Explanation {
  readonly requestId: string;
  readonly kind: CoreDecision['kind'];
  readonly rollout: readonly string[];
  /** Client-sent gate-owned headers the gate removes before anything reads them (the echoed binding aside). */
  readonly removedHeaders: readonly string[];
  readonly trace: readonly string[];
  readonly decision: CoreDecision;
  /** For a route or hop: the headers stamped toward upstream. */
  readonly upstreamHeaders?: Readonly<Record<string, string>>;
  /** For a route: the headers added to the response to the client. */
  readonly responseHeaders?: Readonly<Record<string, string>>;
  readonly refusal?: ClientRefusal;
  /** For a wait: the queue step, Envoy's extended timer, and the answer if nothing frees in time. */
  readonly wait?: { readonly deadlineMs: number; readonly overrideMessageTimeoutMs: number; readonly ahead: number; readonly atDeadline: Explanation };
}

/** Decide one request as the gate would, and describe everything a person needs to see. */
export function explainRequest(input: ExplainInput): Explanation {
  const removed: string[] = [];
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(input.headers)) {
    const name = k.toLowerCase();
    // The binding is gate-owned too, but a client legitimately echoes it: read, then removed before upstream.
    if (isGateOwnedHeader(name)) {
      if (name !== H.binding) removed.push(name);
    } else headers[name] = v;
  }
  const requestId = headers[H.requestId] ?? 'explain-request';
  const binding = input.headers[H.binding];
  const raw = {
    requestId,
    method: input.method,
    path: input.path,
    headers,
    metadata: input.metadata ?? {},
    body: input.body,
    ...(binding === undefined ? {} : { binding }),
    ...(input.hop === undefined ? {} : { hop: input.hop }),
  };
  const maxWaitMs = waitCapMs(input.maxMessageTimeoutMs);
  const ctx = { nowMs: input.nowMs, keys: input.keys, queue: input.queue, ...(maxWaitMs >= 1 ? { maxWaitMs } : {}) };
  const outcome = decideRequest(raw, input.table, input.view, ctx);
  const base = { requestId, rollout: formatRolloutStatus(rolloutStatus(input.table)), removedHeaders: removed };
  const explained = describe(outcome.decision, base);
  const d = outcome.decision;
  if (d.kind !== 'wait' || outcome.facts === undefined) return explained;
  const bound: QueuedRequest = { group: d.group, pinned: d.pinned, enqueuedAtMs: d.enqueuedAtMs, deadlineAtMs: d.deadlineAtMs };
  const atDeadline = describe(decide(outcome.facts, input.table, input.view, { nowMs: d.deadlineAtMs, keys: input.keys, queue: input.queue, bound }), base);
  return {
    ...explained,
    wait: {
      deadlineMs: d.deadlineAtMs - d.enqueuedAtMs,
      overrideMessageTimeoutMs: overrideTimeoutMs(d.deadlineAtMs, d.enqueuedAtMs, input.maxMessageTimeoutMs),
      ahead: input.queue.depth(d.group.id),
      atDeadline,
    },
  };
}

function describe(d: CoreDecision, base: Pick<Explanation, 'requestId' | 'rollout' | 'removedHeaders'>): Explanation {
  const common = { ...base, kind: d.kind, trace: d.trace, decision: d };
  switch (d.kind) {
    case 'refuse':
      return { ...common, refusal: clientRefusal(d) };
    case 'route':
      return {
        ...common,
        upstreamHeaders: {
          [H.requestId]: d.requestId,
          [H.group]: d.group.id,
          [H.revision]: d.group.revision,
          ...targetHeaders(H.decodeCluster, H.decodeEndpoint, d.decode),
          ...targetHeaders(H.prefillCluster, H.prefillEndpoint, d.prefill),
          [H.contract]: d.contract,
        },
        responseHeaders: { [H.group]: d.group.id, [H.revision]: d.group.revision, [H.binding]: d.binding },
      };
    case 'hop':
      return {
        ...common,
        upstreamHeaders: { [H.requestId]: d.requestId, [H.group]: d.group.id, [H.revision]: d.group.revision, ...targetHeaders(H.prefillCluster, H.prefillEndpoint, d.prefill), [H.contract]: d.contract },
      };
    case 'wait':
      return common;
  }
}

function targetHeaders(cluster: string, endpoint: string, t: Target | null): Record<string, string> {
  if (t === null) return {};
  return t.endpoint === null ? { [cluster]: t.cluster } : { [cluster]: t.cluster, [endpoint]: t.endpoint };
}

/** The refusal as the gate's ImmediateResponse carries it (`src/envoy/responses.ts` `refusalResponse`). */
export function clientRefusal(r: Refusal): ClientRefusal {
  const headers: Record<string, string> = { 'content-type': 'application/json', [H.rejectReason]: r.code, [H.requestId]: r.requestId };
  if (r.retryAfterSeconds !== undefined) headers['retry-after'] = String(Math.max(1, Math.ceil(r.retryAfterSeconds)));
  return { status: statusOf(r.code), code: r.code, message: r.message, headers, body: toErrorBody(r.code, r.message, r.requestId) };
}
