import { describe, expect, it } from 'vitest';
import { BlockPool } from './block-pool.js';

const blk = (c: string) => ({ content: c, scaleTag: 'none' });

describe('BlockPool', () => {
  it('allocates, frees and counts usage of referenced blocks only', () => {
    const pool = new BlockPool(4);
    const [a, b] = pool.allocateMany(2)!;
    expect(pool.usage).toBe(0.5);
    pool.cache(a!, 'k-a');
    pool.unref(a!);
    pool.unref(b!);
    expect(pool.usage).toBe(0);
    expect(pool.lookup('k-a')).toBe(a);
    expect(() => pool.unref(b!)).toThrow(/released twice/);
  });

  it('evicts the least recently used cached block when full', () => {
    const pool = new BlockPool(2);
    const a = pool.allocate(blk('a'))!;
    const b = pool.allocate(blk('b'))!;
    pool.cache(a, 'ka');
    pool.cache(b, 'kb');
    pool.unref(a);
    pool.unref(b);
    pool.ref(a); // touch a: b is now the oldest
    pool.unref(a);
    const c = pool.allocate(blk('c'));
    expect(c).toBe(b);
    expect(pool.lookup('kb')).toBeUndefined();
    expect(pool.lookup('ka')).toBe(a);
    expect(pool.allocateMany(2)).toBeNull();
  });

  it('resetCache frees unreferenced cached blocks', () => {
    const pool = new BlockPool(2);
    const a = pool.allocate(blk('a'))!;
    pool.cache(a, 'ka');
    pool.unref(a);
    pool.resetCache();
    expect(pool.lookup('ka')).toBeUndefined();
    expect(pool.available).toBe(2);
  });
});
