/**
 * Decision -> stamps: the one place that says what a decision writes onto the request, the response and a refusal,
 * as plain names and values. The gate turns stamps into ext_proc messages (`responses.ts`); `kvgate explain` shows
 * them as they are, so a dry run and the live gate can never disagree about a header.
 */
import type { AnswerDecision, HopDecision, Refusal, RouteDecision, Target } from '../decide/types.js';
import { KvgateError, statusOf, toErrorBody, type ErrorBody, type ErrorCode } from '../errors.js';
import { H } from '../headers.js';
import { withCacheSalt } from './body-rewrite.js';

/** One header to write, overwriting whatever the client sent. */
export type HeaderStamp = readonly [name: string, value: string];

/** What a bound request carries toward upstream. */
export interface UpstreamStamps {
  /** In the order written. */
  readonly set: readonly HeaderStamp[];
  /** Client-sent gate-owned headers that are removed because nothing overwrites them. */
  readonly remove: readonly string[];
  /** The rewritten body (derived `cache_salt`), when the decision rewrites it; `content-length` is then in `set`. */
  readonly body?: Uint8Array;
  /** Envoy dynamic metadata (namespace -> fields), e.g. `envoy.lb` for GIE data planes. */
  readonly dynamicMetadata?: Readonly<Record<string, Readonly<Record<string, string>>>>;
}

/** A refusal as the client receives it: Envoy's local reply. */
export interface RefusalStamps {
  readonly status: number;
  readonly code: ErrorCode;
  readonly headers: readonly HeaderStamp[];
  readonly body: ErrorBody;
  /** `body` as JSON bytes, exactly what the client reads. */
  readonly bodyBytes: Uint8Array;
  /** Envoy's `details` for the local reply (shows up in its access log as the response code details). */
  readonly details: string;
}

export interface StampOptions {
  /** Also write the decode endpoint as `x-gateway-destination-endpoint` (+ `envoy.lb` metadata) and the prefill
   * endpoint as `x-prefiller-host-port`, for llm-d / GIE data planes (gate config `envoy.gieHeaders`). */
  readonly gieHeaders: boolean;
  /**
   * With `gieHeaders`: how many of the decision's alternates follow the pick in the ordered endpoint list
   * (`ip:port,ip:port,...`, GIE endpoint-picker protocol, "Destination Endpoint"); 0 = the pick alone.
   */
  readonly gieFallbackEndpoints?: number;
}

const encoder = new TextEncoder();

function targetStamps(leg: 'decode' | 'prefill', t: Target | null): HeaderStamp[] {
  if (t === null) return [];
  const out: HeaderStamp[] = [[leg === 'decode' ? H.decodeCluster : H.prefillCluster, t.cluster]];
  if (t.endpoint !== null) out.push([leg === 'decode' ? H.decodeEndpoint : H.prefillEndpoint, t.endpoint]);
  return out;
}

/**
 * A bound request: the group, the targets and the contract, the GIE aliases when asked, the derived `cache_salt`
 * in the client's body bytes (only that member changes) with a matching `content-length`, and removal of every client-sent gate-owned header not overwritten.
 */
export function routeStamps(d: RouteDecision, body: Uint8Array | undefined, forged: readonly string[], opts: StampOptions): UpstreamStamps {
  const set: HeaderStamp[] = [
    [H.requestId, d.requestId],
    [H.group, d.group.id],
    [H.revision, d.group.revision],
    ...targetStamps('decode', d.decode),
    ...targetStamps('prefill', d.prefill),
    [H.contract, d.contract],
  ];
  let dynamicMetadata: UpstreamStamps['dynamicMetadata'];
  if (opts.gieHeaders && d.decode.endpoint !== null) {
    // The header and the envoy.lb metadata carry the same value, as the protocol requires: the pick, then the
    // alternates (same cluster, same group) in order.
    const list = [d.decode.endpoint, ...(d.decode.alternates ?? []).slice(0, opts.gieFallbackEndpoints ?? 0)].join(',');
    set.push([H.gieDestination, list]);
    if (d.prefill?.endpoint) set.push([H.llmdPrefiller, d.prefill.endpoint]);
    dynamicMetadata = { 'envoy.lb': { [H.gieDestination]: list } };
  }
  let rewritten: Uint8Array | undefined;
  if (body !== undefined) {
    rewritten = withCacheSalt(body, d.cacheSalt, true); // the decision core parsed these bytes as a JSON object
    // Unreachable for a body the decision core parsed as a JSON object; if it ever happens, fail closed.
    if (rewritten === undefined) throw new KvgateError('internal', 'the request body could not be rewritten with its cache_salt');
    set.push(['content-length', String(rewritten.byteLength)]);
  }
  return {
    set,
    remove: notOverwritten(forged, set),
    ...(rewritten === undefined ? {} : { body: rewritten }),
    ...(dynamicMetadata === undefined ? {} : { dynamicMetadata }),
  };
}

/** A verified internal hop (a sidecar's prefill leg): the group, the prefill target and the contract. */
export function hopStamps(d: HopDecision, forged: readonly string[]): UpstreamStamps {
  const set: HeaderStamp[] = [
    [H.requestId, d.requestId],
    [H.group, d.group.id],
    [H.revision, d.group.revision],
    ...targetStamps('prefill', d.prefill),
    [H.contract, d.contract],
  ];
  return { set, remove: notOverwritten(forged, set) };
}

/** What the response stamps read of a route decision (a session keeps only this once the request is bound). */
export interface ResponseStampFacts {
  readonly group: { readonly id: string; readonly revision: string };
  readonly binding: string;
}

/** Response headers to the client of a routed request: the group, the revision and the sticky binding. */
export function responseStamps(d: ResponseStampFacts): readonly HeaderStamp[] {
  return [
    [H.group, d.group.id],
    [H.revision, d.group.revision],
    [H.binding, d.binding],
  ];
}

/** A refusal: status, JSON error body, reason header, and `retry-after` where a retry can help. */
export function refusalStamps(r: Refusal): RefusalStamps {
  const headers: HeaderStamp[] = [
    ['content-type', 'application/json'],
    [H.rejectReason, r.code],
    [H.requestId, r.requestId],
  ];
  if (r.retryAfterSeconds !== undefined) headers.push(['retry-after', retryAfterValue(r.retryAfterSeconds)]);
  const body = toErrorBody(r.code, r.message, r.requestId);
  return {
    status: statusOf(r.code),
    code: r.code,
    headers,
    body,
    bodyBytes: encoder.encode(JSON.stringify(body)),
    details: `kvgate_${r.code}`,
  };
}

/** The gateway's own answer (`GET /v1/models`, `GET /health`), as Envoy's local reply. */
export interface AnswerStamps {
  readonly status: number;
  readonly headers: readonly HeaderStamp[];
  readonly bodyBytes: Uint8Array;
  readonly details: string;
}

export function answerStamps(d: AnswerDecision): AnswerStamps {
  const headers: HeaderStamp[] = [[H.requestId, d.requestId]];
  if (d.json !== undefined) headers.unshift(['content-type', 'application/json']);
  const bodyBytes = d.json === undefined ? new Uint8Array() : encoder.encode(JSON.stringify(d.json));
  return { status: d.status, headers, bodyBytes, details: 'kvgate_answered' };
}

/** `retry-after` is whole seconds (RFC 9110 §10.2.3); a refusal never asks for less than one. */
export function retryAfterValue(seconds: number): string {
  return String(Math.max(1, Math.ceil(seconds)));
}

/** Remove only the forged headers that are not overwritten: Envoy's order of remove vs. set is not part of its API. */
function notOverwritten(forged: readonly string[], set: readonly HeaderStamp[]): string[] {
  if (forged.length === 0) return []; // the usual case: no set of stamped names to build
  const overwritten = new Set(set.map(([name]) => name));
  return forged.filter((name) => !overwritten.has(name));
}
