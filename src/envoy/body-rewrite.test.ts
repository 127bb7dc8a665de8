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
});
