/**
 * Header maps in and out of Envoy's wire form. Values travel in `raw_value` only (Envoy's
 * `send_header_raw_value` guard, on by default since ~1.27; setting `value` alone yields an empty header and
 * setting both is a 500: envoyproxy/envoy source/extensions/filters/http/ext_proc/mutation_utils.cc).
 */
import { isGateOwnedHeader } from '../headers.js';
import type { AppendAction, WireHeaderMap, WireHeaderValueOption } from './wire.js';

export interface ReceivedHeaders {
  /** Lower-cased name -> value; repeated headers joined with `,` as HTTP allows. Gate-owned headers excluded. */
  readonly headers: Record<string, string>;
  /** Gate-owned header names the client sent (to be removed and, if routing-relevant, logged as forged). */
  readonly forged: readonly string[];
  /** The gate-owned headers' values, for internal hops where a sidecar legitimately sets them. */
  readonly gateOwned: Record<string, string>;
}

const decoder = new TextDecoder('utf-8', { fatal: false });

/** Envoy's request headers message as names and values; gate-owned headers set apart. */
export function readHeaderMap(map: WireHeaderMap | undefined): ReceivedHeaders {
  // Envoy sends raw_value; fall back to value for older Envoys (pre-1.27) that still send it.
  return receiveHeaders(
    (map?.headers ?? []).map((h) => [h.key, h.raw_value !== undefined && h.raw_value.length > 0 ? decoder.decode(h.raw_value) : (h.value ?? '')]),
  );
}

/** Headers as name/value pairs (a dry run's, or a decoded header map), read exactly as the gate reads Envoy's. */
export function receiveHeaders(pairs: Iterable<readonly [string, string]>): ReceivedHeaders {
  // No prototype: a header named `constructor` or `__proto__` is just a header.
  const headers: Record<string, string> = Object.create(null) as Record<string, string>;
  const gateOwned: Record<string, string> = Object.create(null) as Record<string, string>;
  const forged = new Set<string>();
  for (const [key, value] of pairs) {
    const name = key.toLowerCase();
    const target = isGateOwnedHeader(name) ? gateOwned : headers;
    if (target === gateOwned) forged.add(name);
    target[name] = target[name] === undefined ? value : `${target[name]},${value}`;
  }
  return { headers, forged: [...forged], gateOwned };
}

const encoder = new TextEncoder();

/** One header to set, always as `raw_value`, overwriting whatever the client sent. */
export function setHeader(
  key: string,
  value: string,
  action: AppendAction = 'OVERWRITE_IF_EXISTS_OR_ADD',
): WireHeaderValueOption {
  return { header: { key, raw_value: encoder.encode(value) }, append_action: action };
}
