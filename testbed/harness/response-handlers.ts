/**
 * What a headers/body/trailers reply does to one direction's state, as Envoy's
 * `ProcessorState::handle{Headers,Body,Trailers}Response` do it (source/extensions/filters/http/ext_proc/
 * processor_state.cc), minus the "what next" that the awaiting side decides. A reply that does not match the
 * state's pending call is spurious; an invalid mutation is an error (a 500 regardless of failure_mode_allow).
 */
import type { RouteCacheAction } from './envoy-config-types.js';
import {
  has,
  type WireBodyMutation,
  type WireCommonResponse,
  type WireHeaderMutation,
  type WireHeadersResponse,
  type WireTrailersResponse,
} from './ext-proc-messages.js';
import type { HeaderMap } from './header-map.js';
import { applyHeaderMutation, type AppendSemantics } from './header-mutation.js';
import type { MutationChecker } from './mutation-rules.js';
import type { ProcessorState } from './processor-state.js';
import type { CounterScope, ExtProcCounter } from './stats.js';

export interface HandlerContext {
  readonly checker: MutationChecker;
  readonly semantics: AppendSemantics;
  /** `send_header_raw_value` (runtime-config.ts). */
  readonly rawValue: boolean;
  readonly stats: CounterScope<ExtProcCounter>;
  readonly routeCacheAction: RouteCacheAction;
  clearRouteCache(): void;
}

/** `spurious` carries Envoy's FailedPrecondition text where it is not the plain "spurious message". */
export type HandleResult = { kind: 'ok' } | { kind: 'spurious'; message?: string } | { kind: 'error'; message: string };

const OK: HandleResult = { kind: 'ok' };
const SPURIOUS: HandleResult = { kind: 'spurious' };

/** Applies a mutation with the filter's rules, counting rejections; the error text becomes the 500's details. */
export function mutateHeaders(
  mutation: WireHeaderMutation,
  target: HeaderMap,
  ctx: HandlerContext,
  replacing: boolean,
  removeContentLength: boolean,
): HandleResult {
  const out = applyHeaderMutation(mutation, target, {
    checker: ctx.checker,
    replacingMessage: replacing,
    removeContentLength,
    semantics: ctx.semantics,
    rawValue: ctx.rawValue,
  });
  ctx.stats.inc('rejected_header_mutations', out.rejected);
  ctx.stats.inc('harness.append_semantics_divergent', out.divergent);
  return out.error === undefined ? OK : { kind: 'error', message: out.error };
}

export function handleHeadersResponse(st: ProcessorState, resp: WireHeadersResponse, ctx: HandlerContext): HandleResult {
  if (st.callbackState !== 'HeadersCallback') return SPURIOUS;
  const common: WireCommonResponse = resp.response ?? {};
  const replacing = common.status === 'CONTINUE_AND_REPLACE' || common.status === 1;
  if (has(common.header_mutation) && st.headers !== null) {
    const r = mutateHeaders(common.header_mutation, st.headers, ctx, replacing, st.shouldRemoveContentLength());
    if (r.kind !== 'ok') return r;
  }
  clearRouteCache(st, common, ctx);
  if (st.duplex !== null) return duplexHeadersApplied(st, common, replacing);
  st.finishCall();
  if (replacing) {
    if (has(common.body_mutation)) {
      // The server is unlikely to get content-length right for a replaced body, so Envoy drops it.
      st.headers?.remove('content-length');
      st.bodyReplaced = true;
      st.body = applyBodyMutation(common.body_mutation, st.body ?? Buffer.alloc(0));
    }
    // Nothing more goes to the processor in this direction.
    st.bodyMode = 'NONE';
    st.sendTrailers = false;
  }
  return OK;
}

export function handleBodyResponse(st: ProcessorState, resp: WireHeadersResponse, ctx: HandlerContext): HandleResult {
  const common: WireCommonResponse = resp.response ?? {};
  if (st.duplex !== null && st.bodyMode === 'FULL_DUPLEX_STREAMED') return handleDuplexBodyResponse(st, common, ctx);
  if (st.callbackState === 'BufferedBodyCallback') {
    if (has(common.header_mutation) && st.headers !== null) {
      const r = mutateHeaders(common.header_mutation, st.headers, ctx, false, st.shouldRemoveContentLength());
      if (r.kind !== 'ok') return r;
    }
    if (has(common.body_mutation)) {
      const cl = st.headers?.get('content-length');
      // Envoy compares against body().size(): 0 for clear_body or an empty mutation.
      const newSize =
        common.body_mutation.mutation === 'body' || common.body_mutation.body !== undefined ? (common.body_mutation.body?.length ?? 0) : 0;
      if (cl !== undefined && /^\d+$/.test(cl) && Number(cl) !== newSize) {
        return { kind: 'error', message: 'mismatch between content length and the length of the mutated body' };
      }
      st.body = applyBodyMutation(common.body_mutation, st.body ?? Buffer.alloc(0));
    }
    st.finishCall();
  } else if (st.callbackState === 'BufferedPartialBodyCallback') {
    if (has(common.header_mutation) && st.headers !== null) {
      const r = mutateHeaders(common.header_mutation, st.headers, ctx, false, st.shouldRemoveContentLength());
      if (r.kind !== 'ok') return r;
    }
    if (has(common.body_mutation)) st.body = applyBodyMutation(common.body_mutation, st.body ?? Buffer.alloc(0));
    st.finishCall();
    st.partialBodyProcessed = true;
  } else {
    return SPURIOUS;
  }
  clearRouteCache(st, common, ctx);
  st.headers = null;
  return OK;
}

/**
 * Trailers reply. Under FULL_DUPLEX_STREAMED Envoy takes it in any state (a body reply may still be pending:
 * `ProcessorState::handleTrailersResponse`), once the trailers were sent; then the trailers go on, and the body with
 * them: chunks the processor streams after this reply are spurious (the state is Idle again).
 */
export function handleTrailersResponse(st: ProcessorState, resp: WireTrailersResponse, ctx: HandlerContext): HandleResult {
  const duplex = st.duplex !== null && st.bodyMode === 'FULL_DUPLEX_STREAMED' && st.duplex.trailersSent;
  if (st.callbackState !== 'TrailersCallback' && !duplex) return SPURIOUS;
  if (has(resp.header_mutation) && st.trailers !== null) {
    const r = mutateHeaders(resp.header_mutation, st.trailers, ctx, false, false);
    if (r.kind !== 'ok') return r;
  }
  st.finishCall();
  if (duplex) {
    st.duplex?.end(st.trailers);
    st.trailers = null;
  }
  return OK;
}

/**
 * The headers reply under FULL_DUPLEX_STREAMED (`ProcessorState::handleHeadersResponse` with
 * `getCallbackStateAfterHeaderResp`): the next state is StreamedBodyCallback once a chunk was sent (TrailersCallback
 * if only trailers were), and the headers go on now unless the whole body is in and owed by the processor, in
 * which case they go on with its first streamed chunk. CONTINUE_AND_REPLACE is honoured as in every mode: the
 * direction leaves the processor, the body is replaced (a `body` mutation) and the peer's chunks are drained.
 */
function duplexHeadersApplied(st: ProcessorState, common: WireCommonResponse, replacing: boolean): HandleResult {
  const d = st.duplex;
  if (d === null) return SPURIOUS;
  if (replacing) {
    st.finishCall();
    st.bodyMode = 'NONE';
    st.sendTrailers = false;
    if (has(common.body_mutation)) {
      d.replaced = true;
      d.inject(applyBodyMutation(common.body_mutation, Buffer.alloc(0)));
    }
    if (d.completeBody || st.noBody) d.end(d.trailers);
    else d.release();
    return OK;
  }
  st.finishCall(d.bodyReceived ? 'StreamedBodyCallback' : d.trailersSent ? 'TrailersCallback' : 'Idle');
  if (st.noBody || !d.completeBody || st.callbackState === 'Idle') d.release();
  return OK;
}

/**
 * A body reply under FULL_DUPLEX_STREAMED (`handleStreamedBodyCallback`, `handleDuplexStreamedBodyResponse`): only
 * a `streamed_response` is taken, and only while body chunks are owed (after the headers reply); a plain `body` or
 * `clear_body` mutation, or none, is a spurious message ("Normal body mutation response is received while
 * body_mode_ is FULL_DUPLEX_STREAMED"). Its bytes are injected as they are; `end_of_stream` ends the body. A header
 * mutation here is not applied (the headers have gone on); `clear_route_cache` follows the usual rule.
 */
function handleDuplexBodyResponse(st: ProcessorState, common: WireCommonResponse, ctx: HandlerContext): HandleResult {
  const d = st.duplex;
  if (d === null || st.callbackState !== 'StreamedBodyCallback') return SPURIOUS;
  const streamed = common.body_mutation?.streamed_response;
  if (!has(streamed)) {
    return {
      kind: 'spurious',
      message: 'spurious message: Normal body mutation response is received while body_mode_ is FULL_DUPLEX_STREAMED',
    };
  }
  const eos = streamed.end_of_stream === true;
  if (eos && d.trailers !== null) {
    return { kind: 'error', message: 'kvgate_harness:_streamed_response_end_of_stream_before_the_trailers' };
  }
  d.inject(Buffer.from(streamed.body ?? new Uint8Array()));
  st.finishCall(eos ? 'Idle' : 'StreamedBodyCallback');
  clearRouteCache(st, common, ctx);
  if (eos) d.end(null);
  return OK;
}

/** `body` replaces, `clear_body: true` empties, anything else leaves the buffer alone. */
export function applyBodyMutation(m: WireBodyMutation, current: Buffer): Buffer {
  if (m.mutation === 'clear_body' || (m.mutation === undefined && m.clear_body !== undefined)) {
    return m.clear_body === true ? Buffer.alloc(0) : current;
  }
  if (m.mutation === 'body' || m.body !== undefined) return Buffer.from(m.body ?? new Uint8Array());
  return current;
}

/**
 * Envoy's `DecodingProcessorState::clearRouteCache`: only with a header mutation in the same reply, and never under
 * RETAIN; CLEAR clears after every request-path reply that carries a mutation. The response path ignores it.
 */
function clearRouteCache(st: ProcessorState, common: WireCommonResponse, ctx: HandlerContext): void {
  if (st.direction !== 'request') return;
  const asked = common.clear_route_cache === true;
  if (!has(common.header_mutation)) {
    if (asked) ctx.stats.inc('clear_route_cache_ignored');
    return;
  }
  if (ctx.routeCacheAction === 'CLEAR' || (ctx.routeCacheAction === 'DEFAULT' && asked)) ctx.clearRouteCache();
  else if (ctx.routeCacheAction === 'RETAIN' && asked) ctx.stats.inc('clear_route_cache_disabled');
}
