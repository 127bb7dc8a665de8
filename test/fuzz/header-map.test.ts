/**
 * Property-based fuzzing of the gate's header-map reader (`readHeaderMap`, src/envoy/headers.ts), which decides
 * what the decision core may trust: no gate-owned header (`x-kvgate-*`, the llm-d/GIE routing aliases), in any
 * case, ever reaches `headers`; each one is reported as forged and kept apart in `gateOwned`; everything else is kept
 * exactly as Envoy sent it.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { readHeaderMap } from '../../src/envoy/headers.js';
import type { WireHeaderValue } from '../../src/envoy/wire.js';
import { H, isGateOwnedHeader } from '../../src/headers.js';

const RUNS = { numRuns: 400 };
const encoder = new TextEncoder();

/** A name in random case: Envoy lower-cases, but the reader must not depend on it. */
const anyCase = (name: string) =>
  fc
    .array(fc.boolean(), { minLength: name.length, maxLength: name.length })
    .map((up) => [...name].map((c, i) => (up[i] ? c.toUpperCase() : c)).join(''));

const gateOwnedName = fc.oneof(
  fc.constantFrom(...Object.values(H).filter((h) => isGateOwnedHeader(h))).chain(anyCase),
  fc
    .string({ minLength: 0, maxLength: 12 })
    .map((s) => `x-kvgate-${s}`)
    .chain(anyCase),
);
const tokenChar = fc.constantFrom(..."abcdefghijklmnopqrstuvwxyz0123456789-_!#$%&'*+.^`|~");
const ordinaryName = fc
  .oneof(
    fc.constantFrom(
      ':method',
      ':path',
      ':authority',
      'content-type',
      'x-tenant-id',
      'x-session-id',
      'x-request-id',
      'x-kvgate',
      'x-kvgat-group',
      'kvgate-group',
      'x-gateway-destination',
      'authorization',
    ),
    fc.array(tokenChar, { minLength: 1, maxLength: 16 }).map((cs) => cs.join('')),
  )
  .filter((n) => !isGateOwnedHeader(n))
  .chain(anyCase);

/** One header as Envoy may send it: `raw_value` bytes (current Envoy) or `value` (before 1.27). */
const header = (name: fc.Arbitrary<string>): fc.Arbitrary<WireHeaderValue> =>
  fc
    .tuple(name, fc.string({ maxLength: 20 }), fc.boolean())
    .map(([key, value, raw]) => (raw ? { key, raw_value: encoder.encode(value) } : { key, value }));

const headerList = fc.array(fc.oneof(header(gateOwnedName), header(ordinaryName)), { maxLength: 20 });

/** What a header carries once read: raw bytes when non-empty, else the legacy string. */
const valueOf = (h: WireHeaderValue) =>
  h.raw_value !== undefined && h.raw_value.length > 0 ? new TextDecoder().decode(h.raw_value) : (h.value ?? '');

describe('readHeaderMap', () => {
  it('never lets a gate-owned header into headers, whatever its case or position', () => {
    fc.assert(
      fc.property(headerList, (list) => {
        const r = readHeaderMap({ headers: list });
        for (const name of Object.keys(r.headers)) expect(isGateOwnedHeader(name), name).toBe(false);
        const owned = new Set(list.map((h) => h.key.toLowerCase()).filter(isGateOwnedHeader));
        expect(new Set(r.forged)).toEqual(owned);
        expect(r.forged.length).toBe(owned.size);
        expect(new Set(Object.keys(r.gateOwned))).toEqual(owned);
      }),
      RUNS,
    );
  });

  it('keeps every other header, lower-cased, repeated values joined with "," in order', () => {
    fc.assert(
      fc.property(fc.array(header(ordinaryName), { maxLength: 20 }), (list) => {
        const r = readHeaderMap({ headers: list });
        const want: Record<string, string> = {};
        for (const h of list) {
          const k = h.key.toLowerCase();
          want[k] = Object.hasOwn(want, k) ? `${want[k]},${valueOf(h)}` : valueOf(h);
        }
        expect(Object.keys(r.headers).sort()).toEqual(Object.keys(want).sort());
        for (const k of Object.keys(want)) expect(r.headers[k], k).toBe(want[k]);
        expect(r.forged).toEqual([]);
      }),
      RUNS,
    );
  });

  // Found by this fuzzing: the maps are plain objects, so a header named like an Object.prototype member reads the
  // inherited member (`constructor: x` becomes "function Object() { [native code] },x") and `__proto__` is dropped.
  it('keeps headers named like Object.prototype members exactly as sent', () => {
    fc.assert(
      fc.property(
        fc.constantFrom('constructor', 'toString', 'valueOf', 'hasOwnProperty', '__proto__', '__defineGetter__'),
        fc.string({ maxLength: 10 }),
        (key, value) => {
          const r = readHeaderMap({ headers: [{ key, raw_value: encoder.encode(value) }] });
          // Envoy hands header names to ext_proc lower-cased; the reader keys them that way.
          const name = key.toLowerCase();
          expect(Object.hasOwn(r.headers, name), name).toBe(true);
          expect(r.headers[name], name).toBe(value);
        },
      ),
      { numRuns: 30 },
    );
  });

  it('marks every value that is not valid UTF-8 as invalid, and only those', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 16 }), (bytes) => {
        const r = readHeaderMap({ headers: [{ key: 'x-tenant-id', raw_value: bytes }] });
        let valid = true;
        try {
          new TextDecoder('utf-8', { fatal: true }).decode(bytes);
        } catch {
          valid = false;
        }
        expect(r.invalid).toEqual(valid || bytes.length === 0 ? [] : ['x-tenant-id']);
      }),
      { numRuns: 300 },
    );
    const [e9, ff] = [0xe9, 0xff].map((b) =>
      readHeaderMap({ headers: [{ key: 'x-tenant-id', raw_value: new Uint8Array([0x74, 0x2d, b]) }] }),
    );
    expect([e9!.invalid, ff!.invalid]).toEqual([['x-tenant-id'], ['x-tenant-id']]);
  });

  it('an absent or empty map reads as no headers', () => {
    for (const map of [undefined, {}, { headers: [] }])
      expect(readHeaderMap(map)).toEqual({ headers: {}, forged: [], gateOwned: {}, invalid: [], sanitized: [] });
  });
});
