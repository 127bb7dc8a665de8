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
  readonly stats: CounterScope<ExtProcCounter>;
  readonly routeCacheAction: RouteCacheAction;
  clearRouteCache(): void;
}

export type HandleResult = { kind: 'ok' } | { kind: 'spurious' } | { kind: 'error'; message: string };

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

export function handleTrailersResponse(st: ProcessorState, resp: WireTrailersResponse, ctx: HandlerContext): HandleResult {
  if (st.callbackState !== 'TrailersCallback') return SPURIOUS;
  if (has(resp.header_mutation) && st.trailers !== null) {
    const r = mutateHeaders(resp.header_mutation, st.trailers, ctx, false, false);
    if (r.kind !== 'ok') return r;
  }
  st.finishCall();
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
