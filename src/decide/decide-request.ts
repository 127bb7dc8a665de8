/**
 * The whole pure path for one HTTP request as the gate receives it: raw body bytes -> parsed OpenAI request ->
 * decision. The gate's admission layer (queue and in-flight) wraps this; tests and `kvgate explain` call it directly.
 */
import { KvgateError } from '../errors.js';
import type { CompiledRouteTable } from '../policy/compile.js';
import { decide } from './decide.js';
import { answerLocally } from './local-answer.js';
import type { DecideContext, Trace } from './types.js';
import { refusalFromError } from './refusal.js';
import { parseOpenAiBody, tenantOf } from './request-facts.js';
import { auditCut, quoteClientValue } from '../json-limits.js';
import type { CoreDecision, OpenAiRequest, RequestFacts } from './types.js';
import type { WorkerView } from './worker-view.js';

/** Request facts before the body is parsed. */
export interface RawRequestFacts extends Omit<RequestFacts, 'body'> {
  /** The buffered body; absent for requests without one. */
  readonly body?: Uint8Array;
  /** True when Envoy sent only part of the body (over its buffer limit). */
  readonly bodyTruncated?: boolean;
  /**
   * The entry point the request came through: `internal` is the listener that carries only sidecars' prefill legs
   * (a hop with a contract); absent means public.
   */
  readonly listener?: 'public' | 'internal';
}

export interface RequestOutcome {
  readonly decision: CoreDecision;
  /** The parsed body, when the decision routes it (the adapter rewrites its `cache_salt`). */
  readonly request?: OpenAiRequest;
  /** The facts as decided (body parsed), to decide a queued request again without re-parsing. */
  readonly facts?: RequestFacts;
}

/**
 * Parse the body under the table's limits, then decide. An internal hop is decided on its contract alone: its
 * body is the sidecar's prefill request, which legitimately carries `kv_transfer_params`.
 */
export function decideRequest(raw: RawRequestFacts, table: CompiledRouteTable, view: WorkerView, ctx: DecideContext): RequestOutcome {
  const { body, bodyTruncated, listener, ...rest } = raw;
  if (listener === 'internal' && rest.hop === undefined) {
    // The internal listener exists for prefill legs; anything else there is a misconfigured or hostile caller.
    const message =
      "the internal listener carries only prefill legs, and this request has no x-kvgate-contract; send client requests to Envoy's public listener";
    return {
      decision: {
        kind: 'refuse',
        requestId: raw.requestId,
        code: 'contract_invalid',
        message,
        trace: ['internal listener without a transfer contract: refused'],
      },
    };
  }
  if (rest.hop !== undefined) return { decision: decide(rest, table, view, ctx) };
  const trace: Trace = ctx.trace === false ? undefined : [`request ${raw.requestId}: ${raw.method} ${raw.path}`];
  // The trusted tenant, for the audit line of a refusal that happens before the decision proper (only then).
  const tenant = (): string | null => {
    const who = tenantOf(rest, table.tenancy);
    return who.kind === 'found' ? who.tenant : null;
  };
  if (bodyTruncated === true) {
    const error = new KvgateError(
      'body_too_large',
      `the request body is larger than the gateway buffers (limit ${table.limits.maxBodyBytes} bytes); shorten the prompt or ask the operator to raise limits.maxBodyBytes and Envoy's buffer limit`,
    );
    return { decision: refusalFromError(raw.requestId, error, trace, tenant()) };
  }
  if (body === undefined) return { decision: answerLocally(rest, table, ctx.nowMs) ?? decide(rest, table, view, ctx) };
  if (raw.method !== 'POST') {
    // The sidecars (and vLLM) serve the completion paths for POST only: a GET or PUT with a body would be routed,
    // minted a contract, and answered 404 by the sidecar with no kvgate code and no audit line.
    const error = new KvgateError(
      'bad_request',
      `kvgate routes only POST /v1/completions and /v1/chat/completions, not ${auditCut(raw.method, 16)} ${quoteClientValue(raw.path.split('?')[0]!)}; send the request as a POST`,
    );
    return { decision: refusalFromError(raw.requestId, error, trace, tenant()) };
  }
  const parsed = parseOpenAiBody(raw.path, body, table.limits, table.media);
  if (!parsed.ok) return { decision: refusalFromError(raw.requestId, parsed.error, trace, tenant()) };
  const facts: RequestFacts = { ...rest, body: parsed.value };
  return { decision: decide(facts, table, view, ctx), request: parsed.value, facts };
}
