/**
 * Header maps in and out of Envoy's wire form. Envoy's runtime guard `envoy.reloadable_features.send_header_raw_value`
 * picks one field for both directions (envoyproxy/envoy `source/extensions/filters/http/ext_proc/mutation_utils.cc`
 * at 4519ef40, the 1.36/1.37-era copy): on (the default since 1.27, `changelogs/1.27.0.yaml` at 8b9304c6),
 * `headersToProto` sends each value's bytes in `raw_value` and `applyHeaderMutations` reads a set header from
 * `raw_value` only (`value` alone sets an empty header); off, Envoy sends `value`, run through
 * `MessageUtil::sanitizeUtf8String` (every byte that is not well-formed UTF-8 becomes `!`), and reads `value` only
 * (`raw_value` alone sets an empty header). Setting both is a 500 either way.
 *
 * So the gate answers in the field Envoy sent (`headerFieldOf`, `inValueField`), and a `!` in a header that came in
 * `value` is not taken as an identity (`sanitized`): it may stand for a byte that was not UTF-8, which would make
 * `t-\xFF` and `t-!` one tenant.
 */
import { isGateOwnedLowerCase } from '../headers.js';
import type {
  AppendAction,
  WireHeaderMap,
  WireHeaderMutation,
  WireHeaderValue,
  WireHeaderValueOption,
  WireProcessingResponse,
} from './wire.js';

/** Which `HeaderValue` field Envoy fills and reads: `send_header_raw_value` on (`raw_value`) or off (`value`). */
type HeaderField = 'raw_value' | 'value';

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
  /**
   * Names of headers Envoy sent in `value` (guard off) whose value holds a `!`, which Envoy also writes for each
   * byte that is not UTF-8: like `invalid`, never an identity. Empty when the headers came in `raw_value`.
   */
  readonly sanitized: readonly string[];
}

const strict = new TextDecoder('utf-8', { fatal: true });
const lossy = new TextDecoder('utf-8', { fatal: false });

/** Envoy's request headers message as names and values; gate-owned headers set apart. */
export function readHeaderMap(map: WireHeaderMap | undefined): ReceivedHeaders {
  const into = new HeaderCollector();
  // Envoy sends raw_value; value when the guard is off (or before 1.27). No pair array in between: this runs for
  // every request and every response.
  let raw = false;
  let text = false;
  for (const h of map?.headers ?? []) {
    if (h.raw_value === undefined || h.raw_value.length === 0) {
      const value = h.value ?? '';
      if (value !== '') text = true;
      into.add(h.key, value);
      continue;
    }
    raw = true;
    let value = strictText(h.raw_value);
    if (value === undefined) {
      into.invalid(h.key.toLowerCase());
      value = lossy.decode(h.raw_value);
    }
    into.add(h.key, value);
  }
  // Values only in `value`: Envoy's guard is off (a map of empty values says nothing, so it is read as raw_value).
  if (text && !raw) {
    for (const h of map?.headers ?? []) if (h.value?.includes('!') === true) into.sanitized(h.key.toLowerCase());
  }
  return into.done();
}

/** The field Envoy used in a header map (`readHeaderMap`'s reading), or undefined when the map has no values. */
export function headerFieldOf(map: WireHeaderMap | undefined): HeaderField | undefined {
  let text = false;
  for (const h of map?.headers ?? []) {
    if (h.raw_value !== undefined && h.raw_value.length > 0) return 'raw_value';
    if (h.value !== undefined && h.value !== '') text = true;
  }
  return text ? 'value' : undefined;
}

/**
 * The answer with every header it sets moved from `raw_value` to `value`, for an Envoy whose
 * `send_header_raw_value` is off (it would set each of them to the empty string otherwise). The gate's values are
 * UTF-8 text it wrote itself, so nothing is lost. The answer is returned as it is when it sets no header.
 */
export function inValueField(r: WireProcessingResponse): WireProcessingResponse {
  const out: WireProcessingResponse = { ...r };
  let changed = false;
  const mutation = (m: WireHeaderMutation | undefined): WireHeaderMutation | undefined => {
    if (m?.set_headers === undefined || m.set_headers.length === 0) return m;
    changed = true;
    return { ...m, set_headers: m.set_headers.map(toValueOption) };
  };
  for (const phase of ['request_headers', 'response_headers', 'request_body', 'response_body'] as const) {
    const common = r[phase]?.response;
    if (common?.header_mutation !== undefined) out[phase] = { response: { ...common, header_mutation: mutation(common.header_mutation)! } };
  }
  for (const phase of ['request_trailers', 'response_trailers'] as const) {
    const m = r[phase]?.header_mutation;
    if (m !== undefined) out[phase] = { header_mutation: mutation(m)! };
  }
  if (r.immediate_response?.headers !== undefined) {
    out.immediate_response = { ...r.immediate_response, headers: mutation(r.immediate_response.headers)! };
  }
  return changed ? out : r;
}

const utf8 = new TextDecoder('utf-8');

function toValueOption(o: WireHeaderValueOption): WireHeaderValueOption {
  const { raw_value, ...header } = o.header;
  if (raw_value === undefined || raw_value === null) return o;
  return { ...o, header: { ...header, value: utf8.decode(raw_value) } };
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
  #sanitized: Set<string> | undefined;

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

  sanitized(name: string): void {
    this.#sanitized ??= new Set();
    this.#sanitized.add(name);
  }

  done(): ReceivedHeaders {
    return {
      headers: this.headers,
      forged: this.#forged ?? NONE,
      gateOwned: this.gateOwned,
      invalid: this.#invalid === undefined ? NONE : [...this.#invalid],
      sanitized: this.#sanitized === undefined ? NONE : [...this.#sanitized],
    };
  }
}

/**
 * One header to set, as `raw_value` (`inValueField` moves it for an Envoy with the guard off), overwriting whatever the client sent. Buffer.from gives the bytes
 * TextEncoder gives, at a fraction of the cost per call (a routed request sets a handful of headers).
 */
export function setHeader(key: string, value: string, action: AppendAction = 'OVERWRITE_IF_EXISTS_OR_ADD'): WireHeaderValueOption {
  return { header: { key, raw_value: Buffer.from(value, 'utf8') }, append_action: action };
}
