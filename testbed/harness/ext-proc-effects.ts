/**
 * The pure parts of reacting to a `ProcessingResponse`, split out of the filter: which processing mode an override
 * yields, how dynamic metadata lands in the stream's store, when a reply is the last one the stream can need, and
 * how an ImmediateResponse becomes a local reply.
 */
import { OVERRIDE_BODY_MODES, type ProcessingMode } from './envoy-config-types.js';
import {
  fromStruct,
  has,
  type WireHeaderMutation,
  type WireImmediateResponse,
  type WireProcessingResponse,
  type WireStruct,
} from './ext-proc-messages.js';
import type { DynamicMetadata } from './ext-proc-request.js';
import type { HeaderMap } from './header-map.js';
import { statusCodeFrom } from './http-status.js';
import type { ProcessorState } from './processor-state.js';

/** A local reply the filter asks the data plane to send (or, once the response started, to reset instead). */
export interface LocalReply {
  readonly status: number;
  readonly body: Buffer;
  /** Envoy's `%RESPONSE_CODE_DETAILS%`. */
  readonly details: string;
  /** An ImmediateResponse's header mutation, applied to the reply headers before content-type defaulting. */
  readonly mutateHeaders?: (headers: HeaderMap) => void;
}

/**
 * Envoy's `effectiveModeOverride`: DEFAULT (or absent) header/trailer modes mean "as configured"; body modes are
 * always taken from the override.
 */
export function effectiveModeOverride(o: Partial<ProcessingMode>, base: ProcessingMode): ProcessingMode {
  const pick = <K extends keyof ProcessingMode>(k: K): ProcessingMode[K] =>
    o[k] === undefined || o[k] === 'DEFAULT' ? base[k] : (o[k] as ProcessingMode[K]);
  return {
    request_header_mode: pick('request_header_mode'),
    response_header_mode: pick('response_header_mode'),
    request_trailer_mode: pick('request_trailer_mode'),
    response_trailer_mode: pick('response_trailer_mode'),
    request_body_mode: o.request_body_mode ?? 'NONE',
    response_body_mode: o.response_body_mode ?? 'NONE',
  };
}

/** Whether the harness implements both body modes of an override (it refuses to fake STREAMED and friends). */
export function isSupportedMode(mode: ProcessingMode): boolean {
  return OVERRIDE_BODY_MODES.includes(mode.request_body_mode) && OVERRIDE_BODY_MODES.includes(mode.response_body_mode);
}

/**
 * Writes the namespaces listed in `receiving` into the stream's metadata (merging, as
 * `StreamInfo::setDynamicMetadata` does); everything else is dropped, as Envoy drops it with a debug log.
 */
export function receiveDynamicMetadata(store: DynamicMetadata, receiving: readonly string[], md: WireStruct | null | undefined): void {
  if (!has(md) || receiving.length === 0) return;
  for (const [ns, value] of Object.entries(md.fields ?? {})) {
    if (!receiving.includes(ns)) continue;
    store.set(ns, { ...(store.get(ns) ?? {}), ...fromStruct(value.structValue ?? {}) });
  }
}

/**
 * Envoy 1.37's `closeGrpcStreamIfLastRespReceived`: after this reply nothing more can be sent. Body replies count
 * only under FULL_DUPLEX_STREAMED, when they end the body (`isLastBodyResponse`: a `streamed_response` with
 * `end_of_stream`); in the buffered modes they never do.
 *
 * `requestDone`: the request path will send the processor nothing more. A response-path reply closes the stream only
 * then — envoyproxy/envoy#45617 (backported to v1.37 as #46836): "closeGrpcStreamIfLastRespReceived() could close the
 * stream prematurely once the encoding direction finished while the decoding direction was still streaming request
 * body ... The fix requires both directions to be complete (noMoreExternalProcess())". 1.37.0 itself did not check.
 */
export function isLastResponse(msg: WireProcessingResponse, dec: ProcessorState, enc: ProcessorState, requestDone: boolean): boolean {
  const encIdle = !enc.sendHeaders && !enc.sendTrailers && enc.bodyMode === 'NONE';
  const endsDuplexBody = (st: ProcessorState, r: WireProcessingResponse['request_body']): boolean =>
    st.bodyMode === 'FULL_DUPLEX_STREAMED' && r?.response?.body_mutation?.streamed_response?.end_of_stream === true;
  switch (msg.response) {
    case 'request_headers':
      return (dec.noBody || (dec.bodyMode === 'NONE' && !dec.sendTrailers)) && encIdle;
    case 'request_body':
      return endsDuplexBody(dec, msg.request_body) && encIdle;
    case 'request_trailers':
      return encIdle;
    case 'response_headers':
      return requestDone && (enc.noBody || (enc.bodyMode === 'NONE' && !enc.sendTrailers));
    case 'response_body':
      return requestDone && endsDuplexBody(enc, msg.response_body);
    case 'response_trailers':
      return requestDone;
    default:
      return false;
  }
}

/**
 * An ImmediateResponse as Envoy's `sendImmediateResponse` sends it: a status below 200 becomes 200, whitespace in
 * `details` becomes `_`, the header mutation is applied with the filter's rules (`mutate`).
 */
export function toLocalReply(r: WireImmediateResponse, mutate: (m: WireHeaderMutation, h: HeaderMap) => void): LocalReply {
  let status = statusCodeFrom(r.status?.code) ?? 200;
  if (status < 200) status = 200;
  const headers = r.headers;
  return {
    status,
    body: Buffer.from(r.body ?? new Uint8Array()),
    details: (r.details ?? '').replace(/\s/g, '_'),
    ...(has(headers) ? { mutateHeaders: (h: HeaderMap) => mutate(headers, h) } : {}),
  };
}
