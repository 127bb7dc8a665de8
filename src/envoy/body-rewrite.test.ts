import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { withCacheSalt } from './body-rewrite.js';

const rewrite = (text: string, salt = 'S'): string | undefined => {
  const out = withCacheSalt(new TextEncoder().encode(text), salt);
  return out === undefined ? undefined : new TextDecoder().decode(out);
};

describe('withCacheSalt: only the cache_salt member changes', () => {
  it('appends the member and keeps every other byte: big integers, key order, spacing, escapes', () => {
    const body =
      '{ "seed": 9007199254740993,\n  "model":"m", "messages":[{"role":"user","content":"caf\\u00e9 \\"q\\" }]{,"}],\t"n" : 1e400 }';
    const out = rewrite(body)!;
    expect(out).toBe(
      '{ "seed": 9007199254740993,\n  "model":"m", "messages":[{"role":"user","content":"caf\\u00e9 \\"q\\" }]{,"}],\t"n" : 1e400 ,"cache_salt":"S"}',
    );
    // What a JSON.parse round trip would have lost.
    expect(out).toContain('9007199254740993');
    expect(JSON.parse(out).cache_salt).toBe('S');
  });

  it('replaces a client-sent cache_salt in place, every duplicate, however the key is escaped', () => {
    expect(rewrite('{"cache_salt":"mine","model":"m"}', 'x"y')).toBe('{"cache_salt":"x\\"y","model":"m"}');
    expect(rewrite('{"cache\\u005fsalt" : "a" , "model":"m","cache_salt":{"n":[1,2]}}')).toBe(
      '{"cache\\u005fsalt" : "S" , "model":"m","cache_salt":"S"}',
    );
    // A nested cache_salt is the client's own data, not the top-level member.
    expect(rewrite('{"meta":{"cache_salt":"keep"},"model":"m"}')).toBe('{"meta":{"cache_salt":"keep"},"model":"m","cache_salt":"S"}');
  });

  it('an empty object gets the member alone; anything but a JSON object is refused', () => {
    expect(rewrite(' {} ')).toBe(' {"cache_salt":"S"} ');
    for (const bad of ['[]', '{"a":1', '{"a":1}x', '"s"', '{"a" 1}']) expect(rewrite(bad), bad).toBeUndefined();
    expect(withCacheSalt(new Uint8Array([0x7b, 0xff, 0x7d]), 'S')).toBeUndefined();
  });

  it('on generated objects: the bytes before the closing brace are kept, and the salt parses back', () => {
    const value = fc.jsonValue({ maxDepth: 3 });
    const object = fc.dictionary(
      fc.string({ maxLength: 8 }).filter((k) => k !== 'cache_salt' && k !== '__proto__'),
      value,
      { maxKeys: 5 },
    );
    fc.assert(
      fc.property(object, fc.constantFrom(0, 1, '\t'), fc.string({ maxLength: 50 }), (obj, space, salt) => {
        const text = JSON.stringify(obj, null, space);
        const out = rewrite(text, salt)!;
        const close = text.lastIndexOf('}');
        const member = `"cache_salt":${JSON.stringify(salt)}`;
        expect(out).toBe(`${text.slice(0, close)}${Object.keys(obj).length === 0 ? member : `,${member}`}${text.slice(close)}`);
        expect(JSON.parse(out)).toEqual({ ...(JSON.parse(text) as object), cache_salt: salt });
      }),
      { numRuns: 500 },
    );
  });

  it('for bytes already parsed as an object, the byte-level append gives exactly the text rewrite', () => {
    const enc = (t: string): Uint8Array => new TextEncoder().encode(t);
    const both = (bytes: Uint8Array, salt: string): [string, string] => {
      const fast = withCacheSalt(bytes, salt, true);
      const slow = withCacheSalt(bytes, salt);
      return [Buffer.from(fast ?? []).toString('hex'), Buffer.from(slow ?? []).toString('hex')];
    };
    const cases = [
      '{}',
      ' \r\n{ \t}\n',
      '{"a":{}}',
      '{"a":[]} ',
      '{"a":"{"}',
      '{"cache_salt":"mine"}',
      '{"cache\\u005fsalt":"mine"}',
      '{"prompt":"say \\u0063ache_salt"}',
      '{"meta":{"cache_salt":"keep"}}',
      '\ufeff{"model":"m"}',
      '{"n":1e400 }',
    ];
    for (const c of cases) {
      const [fast, slow] = both(enc(c), 'S');
      expect(fast, c).toBe(slow);
    }
    const key = fc.oneof(fc.string({ maxLength: 8 }), fc.constantFrom('cache_salt', 'cache', 'salt', 'a\\u0041'));
    const object = fc.dictionary(
      key.filter((k) => k !== '__proto__'),
      fc.jsonValue({ maxDepth: 3 }),
      { maxKeys: 5 },
    );
    fc.assert(
      fc.property(object, fc.constantFrom(0, 1, '\t'), fc.string({ maxLength: 20 }), fc.boolean(), (obj, space, salt, pad) => {
        const text = `${pad ? ' \n' : ''}${JSON.stringify(obj, null, space)}${pad ? '\r\n' : ''}`;
        const [fast, slow] = both(enc(text), salt);
        expect(fast).toBe(slow);
      }),
      { numRuns: 500 },
    );
  });
});
