import { describe, expect, it } from 'vitest';
import { BoundedCache } from './bounded-cache.js';

describe('BoundedCache', () => {
  it('computes a key once and returns the kept value afterwards', () => {
    const cache = new BoundedCache<string>(8);
    let calls = 0;
    const compute = (k: string): string => {
      calls++;
      return `v:${k}`;
    };
    expect(cache.get('a', compute)).toBe('v:a');
    expect(cache.get('a', compute)).toBe('v:a');
    expect(cache.get('b', compute)).toBe('v:b');
    expect(calls).toBe(2);
  });

  it('never holds more than its limit, and still answers correctly after starting over', () => {
    const cache = new BoundedCache<number>(3);
    for (let i = 0; i < 10; i++) expect(cache.get(String(i), (k) => Number(k) * 2)).toBe(i * 2);
    expect(cache.size).toBeLessThanOrEqual(3);
    expect(cache.get('1', (k) => Number(k) * 2)).toBe(2);
  });

  it('peek computes nothing; set replaces a value and keeps the bound', () => {
    const c = new BoundedCache<number>(2);
    expect(c.peek('a')).toBeUndefined();
    c.set('a', 1);
    c.set('a', 2);
    expect(c.peek('a')).toBe(2);
    expect(c.size).toBe(1);
    c.set('b', 3);
    c.set('c', 4); // full: starts over
    expect(c.size).toBe(1);
    expect(c.peek('a')).toBeUndefined();
    expect(c.peek('c')).toBe(4);
  });

  it('refuses a limit that is not a positive integer', () => {
    expect(() => new BoundedCache(0)).toThrow(/positive integer/);
  });
});
