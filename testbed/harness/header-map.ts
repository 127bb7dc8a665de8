/**
 * An ordered, multi-valued header map with lower-case keys, the shape Envoy's `HeaderMap` has: pseudo-headers
 * (`:method`, `:path`, ...) live in it next to ordinary headers, and they always iterate first. The ext_proc filter
 * serialises it to `HeaderMap { headers: [{ key, raw_value }] }` and mutates it in place.
 */

export type HeaderEntry = readonly [name: string, value: string];

export class HeaderMap {
  #entries: Array<[string, string]> = [];

  constructor(entries: Iterable<HeaderEntry> = []) {
    for (const [k, v] of entries) this.add(k, v);
  }

  /** Node's `rawHeaders` ([k, v, k, v, ...]) preserving order and repeats. */
  static fromRaw(raw: readonly string[]): HeaderMap {
    const map = new HeaderMap();
    for (let i = 0; i + 1 < raw.length; i += 2) map.add(raw[i] ?? '', raw[i + 1] ?? '');
    return map;
  }

  get size(): number {
    return this.#entries.length;
  }

  has(name: string): boolean {
    const key = name.toLowerCase();
    return this.#entries.some(([k]) => k === key);
  }

  /** First value, as Envoy's routing and `cluster_header` read it. */
  get(name: string): string | undefined {
    const key = name.toLowerCase();
    return this.#entries.find(([k]) => k === key)?.[1];
  }

  getAll(name: string): string[] {
    const key = name.toLowerCase();
    return this.#entries.filter(([k]) => k === key).map(([, v]) => v);
  }

  /** Adds another value (Envoy `addCopy`); pseudo-headers are kept ahead of ordinary ones. */
  add(name: string, value: string): void {
    const key = name.toLowerCase();
    if (key.startsWith(':')) {
      const firstRegular = this.#entries.findIndex(([k]) => !k.startsWith(':'));
      this.#entries.splice(firstRegular === -1 ? this.#entries.length : firstRegular, 0, [key, value]);
    } else {
      this.#entries.push([key, value]);
    }
  }

  /** Replaces every value with one (Envoy `setCopy`), keeping the position of the first occurrence. */
  set(name: string, value: string): void {
    const key = name.toLowerCase();
    const at = this.#entries.findIndex(([k]) => k === key);
    if (at === -1) {
      this.add(key, value);
      return;
    }
    this.#entries[at] = [key, value];
    this.#entries = this.#entries.filter(([k], i) => k !== key || i === at);
  }

  remove(name: string): void {
    const key = name.toLowerCase();
    this.#entries = this.#entries.filter(([k]) => k !== key);
  }

  entries(): HeaderEntry[] {
    return this.#entries.map(([k, v]) => [k, v] as const);
  }

  /** Envoy's `byteSize()`: keys plus values. */
  byteSize(): number {
    return this.#entries.reduce((n, [k, v]) => n + k.length + v.length, 0);
  }

  /** Ordinary headers for node:http (`setHeader` style: repeated names joined into arrays). */
  toNodeHeaders(): Record<string, string | string[]> {
    const out: Record<string, string | string[]> = {};
    for (const [k, v] of this.#entries) {
      if (k.startsWith(':')) continue;
      const prev = out[k];
      out[k] = prev === undefined ? v : Array.isArray(prev) ? [...prev, v] : [prev, v];
    }
    return out;
  }

  /**
   * The proto `HeaderMap` as `MutationUtils::headersToProto` writes it: values as bytes in `raw_value` (Envoy 1.27 on,
   * `send_header_raw_value` on), or with the guard off in `value`, each byte that is not well-formed UTF-8 replaced
   * by `!` (runtime-config.ts).
   */
  toProto(rawValue = true): { headers: Array<{ key: string; raw_value: Buffer } | { key: string; value: string }> } {
    if (rawValue) return { headers: this.#entries.map(([key, v]) => ({ key, raw_value: Buffer.from(v, 'latin1') })) };
    return { headers: this.#entries.map(([key, v]) => ({ key, value: sanitizeUtf8(Buffer.from(v, 'latin1')) })) };
  }
}

/**
 * Envoy's `MessageUtil::sanitizeUtf8String` (envoyproxy/envoy `source/common/protobuf/utility.cc`, a copy of
 * protobuf's `UTF8CoerceToStructurallyValid`): the longest well-formed prefix is kept, the next byte becomes `!`, and
 * the scan goes on from the byte after it.
 */
export function sanitizeUtf8(bytes: Uint8Array): string {
  const out = Buffer.from(bytes);
  let i = 0;
  while (i < out.length) {
    const n = wellFormedLength(out, i);
    if (n === 0) out[i++] = 0x21;
    else i += n;
  }
  return out.toString('utf8');
}

/** Bytes of the well-formed UTF-8 sequence starting at `i` (Unicode Table 3-7), or 0 when there is none. */
function wellFormedLength(b: Uint8Array, i: number): number {
  const c = b[i]!;
  if (c < 0x80) return 1;
  const cont = (k: number, lo = 0x80, hi = 0xbf): boolean => i + k < b.length && b[i + k]! >= lo && b[i + k]! <= hi;
  if (c >= 0xc2 && c <= 0xdf) return cont(1) ? 2 : 0;
  if (c >= 0xe0 && c <= 0xef) {
    const [lo, hi] = c === 0xe0 ? [0xa0, 0xbf] : c === 0xed ? [0x80, 0x9f] : [0x80, 0xbf];
    return cont(1, lo, hi) && cont(2) ? 3 : 0;
  }
  if (c >= 0xf0 && c <= 0xf4) {
    const [lo, hi] = c === 0xf0 ? [0x90, 0xbf] : c === 0xf4 ? [0x80, 0x8f] : [0x80, 0xbf];
    return cont(1, lo, hi) && cont(2) && cont(3) ? 4 : 0;
  }
  return 0;
}
