/**
 * `kvgate explain`: one request, decided by the same pure core the gate runs, with every step that led to the
 * decision and exactly what a client (or upstream) would see: the stamped headers of a route, or the status, code,
 * message, headers and JSON body of a refusal. A `wait` is shown with the queue step it takes and the 504 the
 * client gets if no capacity frees before its deadline. Pure: the command reads files and flags and prints.
 */
import type { KeyRing } from '../contract/keys.js';
import { receiveHeaders } from '../envoy/headers.js';
import { toRequestFacts } from '../envoy/inbound.js';
import {
  answerStamps,
  hopStamps,
  type RefusalStamps,
  refusalStamps,
  responseStamps,
  routeStamps,
  type UpstreamStamps,
} from '../envoy/stamps.js';
import type { ErrorBody, ErrorCode } from '../errors.js';
import { H } from '../headers.js';
import type { CompiledRouteTable } from '../policy/compile.js';
import { formatRolloutStatus, rolloutStatus } from '../policy/rollout-status.js';
import { decide } from './decide.js';
import { decideRequest } from './decide-request.js';
import { overrideTimeoutMs, waitCapMs } from './queue-step.js';
import type { CoreDecision, HopFacts, QueuedRequest, QueueView, Refusal } from './types.js';
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
  /** The gate's `envoy.gieHeaders`: also stamp the llm-d / GIE endpoint headers and `envoy.lb` metadata. */
  readonly gieHeaders?: boolean;
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
  /** For a route with `gieHeaders`: the Envoy dynamic metadata written beside the headers. */
  readonly upstreamMetadata?: Readonly<Record<string, Readonly<Record<string, string>>>>;
  /** For a route: the headers added to the response to the client. */
  readonly responseHeaders?: Readonly<Record<string, string>>;
  readonly refusal?: ClientRefusal;
  /** For the gateway's own answer (`GET /v1/models`, `GET /health`): what the client receives. */
  readonly answer?: { readonly status: number; readonly headers: Readonly<Record<string, string>>; readonly body: unknown };
  /** For a wait: the queue step, Envoy's extended timer, and the answer if nothing frees in time. */
  readonly wait?: {
    readonly deadlineMs: number;
    readonly overrideMessageTimeoutMs: number;
    readonly ahead: number;
    readonly atDeadline: Explanation;
  };
}

/** Decide one request as the gate would, and describe everything a person needs to see. */
export function explainRequest(input: ExplainInput): Explanation {
  // The client's headers are read exactly as the gate reads Envoy's header map; a hop's gate-owned headers are what
  // a sidecar's prefill leg carries, trusted only because the dry run stands on the internal listener.
  const sent: [string, string][] = [[':method', input.method], [':path', input.path], ...Object.entries(input.headers)];
  const client = receiveHeaders(sent);
  // The binding is gate-owned too, but a client legitimately echoes it: read, then removed before upstream.
  const removed = client.forged.filter((n) => n !== H.binding);
  const requestId = client.headers[H.requestId] ?? 'explain-request';
  const received = input.hop === undefined ? client : receiveHeaders([...sent, ...hopHeaders(input.hop)]);
  const facts = toRequestFacts({
    requestId,
    listener: input.hop === undefined ? 'public' : 'internal',
    headers: received,
    metadata: input.metadata ?? {},
    body: input.body,
    bodyTruncated: false,
  });
  const maxWaitMs = waitCapMs(input.maxMessageTimeoutMs);
  const ctx = { nowMs: input.nowMs, keys: input.keys, queue: input.queue, ...(maxWaitMs >= 1 ? { maxWaitMs } : {}) };
  const outcome = decideRequest(facts, input.table, input.view, ctx);
  const base: Base = {
    requestId,
    rollout: formatRolloutStatus(rolloutStatus(input.table)),
    removedHeaders: removed,
    forged: received.forged,
    body: outcome.request === undefined ? undefined : input.body,
    gieHeaders: input.gieHeaders ?? false,
  };
  const explained = describe(outcome.decision, base);
  const d = outcome.decision;
  if (d.kind !== 'wait' || outcome.facts === undefined) return explained;
  const bound: QueuedRequest = { group: d.group, pinned: d.pinned, enqueuedAtMs: d.enqueuedAtMs, deadlineAtMs: d.deadlineAtMs };
  const atDeadline = describe(
    decide(outcome.facts, input.table, input.view, { nowMs: d.deadlineAtMs, keys: input.keys, queue: input.queue, bound }),
    base,
  );
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

/** A hop as the headers a sidecar's prefill leg carries through Envoy's internal listener. */
function hopHeaders(hop: HopFacts): [string, string][] {
  const out: [string, string][] = [[H.contract, hop.contract]];
  if (hop.prefillCluster !== undefined) out.push([H.prefillCluster, hop.prefillCluster]);
  if (hop.prefillEndpoint !== undefined) out.push([H.prefillEndpoint, hop.prefillEndpoint]);
  if (hop.retryExclude !== undefined && hop.retryExclude.length > 0) out.push([H.retryExclude, hop.retryExclude.join(',')]);
  return out;
}

interface Base extends Pick<Explanation, 'requestId' | 'rollout' | 'removedHeaders'> {
  /** Every gate-owned header the request carried (removed toward upstream unless a stamp overwrites it). */
  readonly forged: readonly string[];
  readonly body: Uint8Array | undefined;
  readonly gieHeaders: boolean;
}

function describe(d: CoreDecision, base: Base): Explanation {
  const common = {
    requestId: base.requestId,
    rollout: base.rollout,
    removedHeaders: base.removedHeaders,
    kind: d.kind,
    trace: d.trace,
    decision: d,
  };
  switch (d.kind) {
    case 'refuse':
      return { ...common, refusal: clientRefusal(d) };
    case 'route': {
      const s = routeStamps(d, base.body, base.forged, { gieHeaders: base.gieHeaders });
      return {
        ...common,
        upstreamHeaders: headerRecord(s),
        ...(s.dynamicMetadata === undefined ? {} : { upstreamMetadata: s.dynamicMetadata }),
        responseHeaders: Object.fromEntries(responseStamps(d)),
      };
    }
    case 'hop':
      return { ...common, upstreamHeaders: headerRecord(hopStamps(d, base.forged)) };
    case 'answer': {
      const s = answerStamps(d);
      return { ...common, answer: { status: s.status, headers: Object.fromEntries(s.headers), body: d.json ?? '' } };
    }
    case 'wait':
      return common;
  }
}

const headerRecord = (s: UpstreamStamps): Record<string, string> => Object.fromEntries(s.set);

/** The refusal exactly as the gate's ImmediateResponse carries it (both come from `src/envoy/stamps.ts`). */
export function clientRefusal(r: Refusal): ClientRefusal {
  const s: RefusalStamps = refusalStamps(r);
  return { status: s.status, code: s.code, message: r.message, headers: Object.fromEntries(s.headers), body: s.body };
}
