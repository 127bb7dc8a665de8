/**
 * Decision -> ProcessingResponse. The one place that turns kvgate's decisions into Envoy's protocol:
 * header mutations with `raw_value`, `clear_route_cache` alongside them, the rewritten body with a matching
 * `content-length`, and refusals as ImmediateResponse with the JSON error body of DESIGN.md.
 */
import { statusOf, toErrorBody } from '../errors.js';
import { H } from '../headers.js';
import type { HopDecision, Refusal, RouteDecision, Target } from '../decide/types.js';
import { setHeader } from './headers.js';
import type { WireCommonResponse, WireHeaderValueOption, WireImmediateResponse, WireStruct } from './wire.js';

const encoder = new TextEncoder();

export interface RouteOptions {
  /** Also write the decode endpoint as `x-gateway-destination-endpoint` (+ `envoy.lb` metadata) and the prefill
   * endpoint as `x-prefiller-host-port`, for llm-d / GIE data planes. */
  readonly gieHeaders: boolean;
}

export interface RequestMutation {
  readonly common: WireCommonResponse;
  readonly dynamicMetadata?: WireStruct;
}

function targetHeaders(prefix: 'decode' | 'prefill', t: Target | null): WireHeaderValueOption[] {
  if (t === null) return [];
  const cluster = prefix === 'decode' ? H.decodeCluster : H.prefillCluster;
  const endpoint = prefix === 'decode' ? H.decodeEndpoint : H.prefillEndpoint;
  const out = [setHeader(cluster, t.cluster)];
  if (t.endpoint !== null) out.push(setHeader(endpoint, t.endpoint));
  return out;
}

/**
 * The request-path mutation for a bound request: stamp the group, the targets and the contract, remove every
 * gate-owned header the client sent that is not overwritten, write the derived `cache_salt`, and clear the route
 * cache so `cluster_header` routing sees the new cluster.
 */
export function routeMutation(
  d: RouteDecision,
  body: Readonly<Record<string, unknown>> | undefined,
  forged: readonly string[],
  opts: RouteOptions,
): RequestMutation {
  const set: WireHeaderValueOption[] = [
    setHeader(H.requestId, d.requestId),
    setHeader(H.group, d.group.id),
    setHeader(H.revision, d.group.revision),
    ...targetHeaders('decode', d.decode),
    ...targetHeaders('prefill', d.prefill),
    setHeader(H.contract, d.contract),
  ];
  let dynamicMetadata: WireStruct | undefined;
  if (opts.gieHeaders && d.decode.endpoint !== null) {
    set.push(setHeader(H.gieDestination, d.decode.endpoint));
    if (d.prefill?.endpoint) set.push(setHeader(H.llmdPrefiller, d.prefill.endpoint));
    dynamicMetadata = lbMetadata(d.decode.endpoint);
  }
  const common: WireCommonResponse = { clear_route_cache: true };
  if (body !== undefined) {
    const rewritten = encoder.encode(JSON.stringify({ ...body, cache_salt: d.cacheSalt }));
    common.body_mutation = { body: rewritten };
    set.push(setHeader('content-length', String(rewritten.byteLength)));
  }
  common.header_mutation = { set_headers: set, remove_headers: unsetForged(forged, set) };
  return dynamicMetadata === undefined ? { common } : { common, dynamicMetadata };
}

/** The request-path mutation for a verified internal hop (a sidecar's prefill leg). */
export function hopMutation(d: HopDecision, forged: readonly string[]): RequestMutation {
  const set: WireHeaderValueOption[] = [
    setHeader(H.requestId, d.requestId),
    setHeader(H.group, d.group.id),
    setHeader(H.revision, d.group.revision),
    ...targetHeaders('prefill', d.prefill),
    setHeader(H.contract, d.contract),
  ];
  return {
    common: { clear_route_cache: true, header_mutation: { set_headers: set, remove_headers: unsetForged(forged, set) } },
  };
}

/** Remove only the forged headers we do not overwrite: Envoy's order of remove vs. set is not part of its API. */
function unsetForged(forged: readonly string[], set: readonly WireHeaderValueOption[]): string[] {
  const overwritten = new Set(set.map((s) => s.header.key));
  return forged.filter((name) => !overwritten.has(name));
}

/** Only the gate-owned headers a client sent, removed (used before a decision exists). */
export function stripForged(forged: readonly string[]): WireCommonResponse {
  return forged.length === 0 ? {} : { header_mutation: { remove_headers: [...forged] } };
}

/** Response headers to the client: the group, the revision and the sticky binding. */
export function responseHeadersMutation(d: RouteDecision): WireCommonResponse {
  return {
    header_mutation: {
      set_headers: [setHeader(H.group, d.group.id), setHeader(H.revision, d.group.revision), setHeader(H.binding, d.binding)],
    },
  };
}

/** A refusal as Envoy's local reply: status, JSON body, reason header, `retry-after` where it helps. */
export function refusalResponse(r: Refusal): WireImmediateResponse {
  const body = encoder.encode(JSON.stringify(toErrorBody(r.code, r.message, r.requestId)));
  const set = [
    setHeader('content-type', 'application/json'),
    setHeader(H.rejectReason, r.code),
    setHeader(H.requestId, r.requestId),
  ];
  if (r.retryAfterSeconds !== undefined) set.push(setHeader('retry-after', String(Math.max(1, Math.ceil(r.retryAfterSeconds)))));
  return { status: { code: statusOf(r.code) }, headers: { set_headers: set }, body, details: `kvgate_${r.code}` };
}

function lbMetadata(endpoint: string): WireStruct {
  return {
    fields: {
      'envoy.lb': { structValue: { fields: { [H.gieDestination]: { stringValue: endpoint } } } },
    },
  };
}
