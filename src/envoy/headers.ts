/**
 * Header maps in and out of Envoy's wire form. Values travel in `raw_value` only (Envoy's
 * `send_header_raw_value` guard, on by default since ~1.27; setting `value` alone yields an empty header and
 * setting both is a 500: envoyproxy/envoy source/extensions/filters/http/ext_proc/mutation_utils.cc).
 */
import { isGateOwnedLowerCase } from '../headers.js';
import type { AppendAction, WireHeaderMap, WireHeaderValue, WireHeaderValueOption } from './wire.js';

export interface ReceivedHeaders {
  /** Lower-cased name -> value; repeated headers joined with `,` as HTTP allows. Gate-owned headers excluded. */
  readonly headers: Record<string, string>;
  /** Gate-owned header names the client sent (to be removed and, if routing-relevant, logged as forged). */
  readonly forged: readonly string[];
  /** The gate-owned headers' values, for internal hops where a sidecar legitimately sets them. */
  readonly gateOwned: Record<string, string>;
  /** Names of headers with a value that is not valid UTF-8. Their entry in `headers` is a lossy decoding (two
   * different byte strings may read the same), so nothing may take an identity from them. */
  readonly invalid: readonly string[];
}

const strict = new TextDecoder('utf-8', { fatal: true });
const lossy = new TextDecoder('utf-8', { fatal: false });

/** Envoy's request headers message as names and values; gate-owned headers set apart. */
export function readHeaderMap(map: WireHeaderMap | undefined): ReceivedHeaders {
  const into = new HeaderCollector();
  // Envoy sends raw_value; fall back to value for older Envoys (pre-1.27) that still send it. No pair array in
  // between: this runs for every request and every response.
  for (const h of map?.headers ?? []) {
    if (h.raw_value === undefined || h.raw_value.length === 0) {
      into.add(h.key, h.value ?? '');
      continue;
    }
    let value = strictText(h.raw_value);
    if (value === undefined) {
      into.invalid(h.key.toLowerCase());
      value = lossy.decode(h.raw_value);
    }
    into.add(h.key, value);
  }
  return into.done();
}

/**
 * One header's value (lower-case `name`), read as `readHeaderMap` reads it (same decoding, repeats joined with `,`),
 * without building the whole map: the response phase needs two values of a response that may carry dozens.
 */
export function headerValueOf(map: WireHeaderMap | undefined, name: string): string | undefined {
  let out: string | undefined;
  for (const h of map?.headers ?? []) {
    if (h.key.toLowerCase() !== name) continue;
    const value = textOf(h);
    out = out === undefined ? value : `${out},${value}`;
  }
  return out;
}

/** A header's value as text: `raw_value` strictly decoded (lossily when not UTF-8), else the old `value` field. */
function textOf(h: WireHeaderValue): string {
  if (h.raw_value === undefined || h.raw_value.length === 0) return h.value ?? '';
  return strictText(h.raw_value) ?? lossy.decode(h.raw_value);
}

/** The bytes as UTF-8 text, or undefined when they are not valid UTF-8. */
function strictText(raw: Uint8Array): string | undefined {
  try {
    return strict.decode(raw);
  } catch {
    return undefined;
  }
}

/**
 * Headers as name/value pairs (a dry run's, or a decoded header map), read exactly as the gate reads Envoy's.
 * `invalid`: names whose bytes were not valid UTF-8.
 */
export function receiveHeaders(pairs: Iterable<readonly [string, string]>, invalid: readonly string[] = []): ReceivedHeaders {
  const into = new HeaderCollector();
  for (const [key, value] of pairs) into.add(key, value);
  for (const name of invalid) into.invalid(name);
  return into.done();
}

const NONE: readonly string[] = Object.freeze([]);

/** Collects one header map; the forged and invalid lists are allocated only when a header needs them. */
class HeaderCollector {
  // No prototype: a header named `constructor` or `__proto__` is just a header.
  readonly headers: Record<string, string> = Object.create(null) as Record<string, string>;
  readonly gateOwned: Record<string, string> = Object.create(null) as Record<string, string>;
  #forged: string[] | undefined;
  #invalid: Set<string> | undefined;

  add(key: string, value: string): void {
    const name = key.toLowerCase();
    let target = this.headers;
    if (isGateOwnedLowerCase(name)) {
      target = this.gateOwned;
      if (target[name] === undefined) {
        this.#forged ??= [];
        this.#forged.push(name);
      }
    }
    target[name] = target[name] === undefined ? value : `${target[name]},${value}`;
  }

  invalid(name: string): void {
    this.#invalid ??= new Set();
    this.#invalid.add(name);
  }

  done(): ReceivedHeaders {
    return {
      headers: this.headers,
      forged: this.#forged ?? NONE,
      gateOwned: this.gateOwned,
      invalid: this.#invalid === undefined ? NONE : [...this.#invalid],
    };
  }
}

/**
 * One header to set, always as `raw_value`, overwriting whatever the client sent. Buffer.from gives the bytes
 * TextEncoder gives, at a fraction of the cost per call (a routed request sets a handful of headers).
 */
export function setHeader(key: string, value: string, action: AppendAction = 'OVERWRITE_IF_EXISTS_OR_ADD'): WireHeaderValueOption {
  return { header: { key, raw_value: Buffer.from(value, 'utf8') }, append_action: action };
}
