/**
 * Stamps -> ProcessingResponse parts. What a decision writes is decided in `stamps.ts`; this file only says how
 * Envoy's protocol carries it: header mutations with `raw_value`, `clear_route_cache` alongside them (so
 * `cluster_header` routing sees the new cluster), the rewritten body as a body mutation, dynamic metadata as a
 * Struct, and refusals as an ImmediateResponse.
 */
import { BoundedCache } from '../bounded-cache.js';
import type { AnswerDecision, HopDecision, Refusal, RouteDecision } from '../decide/types.js';
import { H } from '../headers.js';
import { setHeader } from './headers.js';
import {
  answerStamps,
  hopStamps,
  refusalStamps,
  responseStamps,
  routeStamps,
  type ResponseStampFacts,
  type StampOptions,
  type UpstreamStamps,
} from './stamps.js';
import { toStruct } from './struct.js';
import type { WireCommonResponse, WireHeaderValueOption, WireImmediateResponse, WireProcessingResponse, WireStruct } from './wire.js';

export type RouteOptions = StampOptions;

export interface RequestMutation {
  readonly common: WireCommonResponse;
  readonly dynamicMetadata?: WireStruct;
}

/**
 * Header values that are constants of the compiled table (group, revision, clusters, endpoints): their bytes are
 * encoded once and shared by every response that carries them. The bytes are only ever read (protobuf encoding).
 */
const TABLE_CONSTANT_HEADERS: ReadonlySet<string> = new Set([
  H.group,
  H.revision,
  H.decodeCluster,
  H.decodeEndpoint,
  H.prefillCluster,
  H.prefillEndpoint,
  H.gieDestination,
  H.llmdPrefiller,
]);

const encoder = new TextEncoder();
const encodedConstants = new BoundedCache<Uint8Array>(4096);

function stampHeader(key: string, value: string): WireHeaderValueOption {
  if (!TABLE_CONSTANT_HEADERS.has(key)) return setHeader(key, value);
  return { header: { key, raw_value: encodedConstants.get(value, (v) => encoder.encode(v)) }, append_action: 'OVERWRITE_IF_EXISTS_OR_ADD' };
}

function upstreamMutation(s: UpstreamStamps): RequestMutation {
  const common: WireCommonResponse = { clear_route_cache: true };
  if (s.body !== undefined) common.body_mutation = { body: s.body };
  common.header_mutation = {
    set_headers: s.set.map(([k, v]) => stampHeader(k, v)),
    remove_headers: s.remove.length === 0 ? [] : [...s.remove],
  };
  return s.dynamicMetadata === undefined ? { common } : { common, dynamicMetadata: toStruct(s.dynamicMetadata) };
}

/** The request-path mutation for a bound request (see `routeStamps`). */
export function routeMutation(
  d: RouteDecision,
  body: Uint8Array | undefined,
  forged: readonly string[],
  opts: RouteOptions,
): RequestMutation {
  return upstreamMutation(routeStamps(d, body, forged, opts));
}

/** The request-path mutation for a verified internal hop (a sidecar's prefill leg). */
export function hopMutation(d: HopDecision, forged: readonly string[]): RequestMutation {
  return upstreamMutation(hopStamps(d, forged));
}

/**
 * The two answers a decision becomes under `FULL_DUPLEX_STREAMED` request bodies. Envoy then streams the body to
 * the processor while it still holds the headers, drains its own copy, and injects only what the processor sends
 * back as `streamed_response` chunks (the last with `end_of_stream`); a plain body mutation is a spurious message
 * there. So the headers answer carries the header mutation (and `clear_route_cache`), and the body answer carries
 * the whole body, rewritten or not, in one final chunk (`endOfStream` false when the body ended with trailers: the
 * trailers answer then ends it). Envoy removes `content-length` for streamed bodies, so none is stamped.
 * (envoyproxy/envoy source/extensions/filters/http/ext_proc/processor_state.cc `handleDuplexStreamedBodyResponse`,
 * reached from `handleBodyInStreamedState` in the older copy read and `handleStreamedBodyCallback` in 1.37.0-dev;
 * ext_proc.cc `handleDataFullDuplexStreamedMode`; docs/envoy-ext-proc.md §14.)
 */
export function fullDuplexAnswers(
  m: RequestMutation,
  body: Uint8Array,
  endOfStream = true,
): { headers: WireProcessingResponse; body: WireProcessingResponse } {
  const { body_mutation: _dropped, ...rest } = m.common;
  const set = rest.header_mutation?.set_headers?.filter((h) => h.header.key !== 'content-length');
  const common: WireCommonResponse = {
    ...rest,
    header_mutation: { ...rest.header_mutation, ...(set === undefined ? {} : { set_headers: set }) },
  };
  const headers: WireProcessingResponse = { request_headers: { response: common } };
  if (m.dynamicMetadata !== undefined) headers.dynamic_metadata = m.dynamicMetadata;
  return {
    headers,
    body: { request_body: { response: { body_mutation: { streamed_response: { body, end_of_stream: endOfStream } } } } },
  };
}

/** Only the gate-owned headers a client sent, removed (used before a decision exists). */
export function stripForged(forged: readonly string[]): WireCommonResponse {
  return forged.length === 0 ? {} : { header_mutation: { remove_headers: [...forged] } };
}

/** Response headers to the client: the group, the revision and the sticky binding. */
export function responseHeadersMutation(d: ResponseStampFacts): WireCommonResponse {
  return { header_mutation: { set_headers: responseStamps(d).map(([k, v]) => stampHeader(k, v)) } };
}

/** The gateway's own answer (model list, health) as Envoy's local reply. */
export function answerResponse(d: AnswerDecision): WireImmediateResponse {
  const s = answerStamps(d);
  return {
    status: { code: s.status },
    headers: { set_headers: s.headers.map(([k, v]) => setHeader(k, v)) },
    body: s.bodyBytes,
    details: s.details,
  };
}

/** A refusal as Envoy's local reply. */
export function refusalResponse(r: Refusal): WireImmediateResponse {
  const s = refusalStamps(r);
  return {
    status: { code: s.status },
    headers: { set_headers: s.headers.map(([k, v]) => setHeader(k, v)) },
    body: s.bodyBytes,
    details: s.details,
  };
}
