import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { checkScalar, checkSpecialJson, isBase64, parseDuration } from './json-forms.js';
import { formatPath, lineOf, parseYamlDocuments } from './yaml-source.js';

describe('durations ("1.5s")', () => {
  it('parse to nanoseconds for every seconds/nanos pair in range', () => {
    fc.assert(
      fc.property(fc.bigInt({ min: 0n, max: 315_576_000_000n }), fc.integer({ min: 0, max: 999_999_999 }), fc.boolean(), (s, ns, neg) => {
        const text = `${neg ? '-' : ''}${String(s)}.${String(ns).padStart(9, '0')}s`;
        const parsed = parseDuration(text);
        const expected = (s * 1_000_000_000n + BigInt(ns)) * (neg ? -1n : 1n);
        return parsed.ok && parsed.nanos === expected;
      }),
    );
  });

  it('refuse what protobuf JSON refuses', () => {
    for (const bad of [5, '5', '5ms', '1m', '1.0000000001s', ' 1s', '315576000001s', '', null])
      expect(parseDuration(bad).ok, String(bad)).toBe(false);
    expect(parseDuration('0.25s')).toEqual({ ok: true, nanos: 250_000_000n });
  });
});

describe('scalars', () => {
  it('integers: numbers or decimal strings, within the type range', () => {
    expect(checkScalar('uint32', 9002)).toBeUndefined();
    expect(checkScalar('uint32', '9002')).toBeUndefined();
    expect(checkScalar('int64', '-9223372036854775808')).toBeUndefined();
    expect(checkScalar('uint32', -1)).toContain('out of range');
    expect(checkScalar('uint32', 4294967296)).toContain('out of range');
    expect(checkScalar('int32', 1.5)).toContain('expected an integer');
    expect(checkScalar('uint64', '0x10')).toContain('expected an integer');
  });

  it('floats, bools, strings and bytes', () => {
    expect(checkScalar('double', 'Infinity')).toBeUndefined();
    expect(checkScalar('double', '2.5')).toBeUndefined();
    expect(checkScalar('double', 'fast')).toContain('expected a number');
    expect(checkScalar('bool', 'true')).toContain('expected true or false');
    expect(checkScalar('string', true)).toContain('expected a string');
    expect(checkScalar('bytes', 'cHVibGlj')).toBeUndefined();
    expect(checkScalar('bytes', 'not base64!')).toContain('expected base64');
    expect(isBase64('abc')).toBe(true);
    expect(isBase64('abcde')).toBe(false);
  });

  it('well-known types with their own JSON form', () => {
    expect(checkSpecialJson('google.protobuf.UInt32Value', 3)).toBeUndefined();
    expect(checkSpecialJson('google.protobuf.UInt32Value', { value: 3 })).toContain('expected an integer');
    expect(checkSpecialJson('google.protobuf.Struct', [1])).toContain('expected a mapping');
    expect(checkSpecialJson('google.protobuf.Value', null)).toBeUndefined();
    expect(checkSpecialJson('google.protobuf.Timestamp', '2024-01-02T03:04:05Z')).toBeUndefined();
    expect(checkSpecialJson('google.protobuf.Timestamp', '2024-01-02')).toContain('RFC 3339');
  });
});

describe('YAML paths and lines', () => {
  it('formats identifiers with dots, indices in brackets, other keys quoted', () => {
    expect(formatPath(['static_resources', 'clusters', 0, 'typed_extension_protocol_options', 'envoy.x.v3.Opts', '@type'])).toBe(
      'static_resources.clusters[0].typed_extension_protocol_options["envoy.x.v3.Opts"]["@type"]',
    );
    expect(formatPath([])).toBe('');
  });

  it('finds the line of a key, and of the nearest existing parent for a missing one', () => {
    const { docs } = parseYamlDocuments('a:\n  b:\n  - x: 1\n  - y: 2\n    z: 3\n');
    const doc = docs[0]!;
    expect(lineOf(doc, ['a', 'b', 1, 'z'])).toBe(5);
    expect(lineOf(doc, ['a', 'b', 0, 'missing'])).toBe(3);
    expect(lineOf(doc, ['a'])).toBe(1);
  });

  it('reads every document of a stream and resolves merge keys', () => {
    const { docs, syntaxErrors } = parseYamlDocuments('base: &b { x: 1 }\nc: { <<: *b, y: 2 }\n---\nk: v\n');
    expect(syntaxErrors).toEqual([]);
    expect(docs.map((d) => d.value)).toEqual([{ base: { x: 1 }, c: { x: 1, y: 2 } }, { k: 'v' }]);
  });
});
