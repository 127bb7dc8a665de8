import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { CompatDescriptorSchema } from '../../src/compat/descriptor.js';
import { createGenerator } from './generator.js';
import { computeBlocks, createKvSemantics, kvDigest, tokenChain } from './kv-model.js';
import { deepMerge } from './config.js';
import { testDescriptor } from './testing.js';

const desc = (o: Record<string, unknown> = {}) => CompatDescriptorSchema.parse(deepMerge(testDescriptor(), o));
const sem = (o: Record<string, unknown> = {}, salt = 'i1', withAdapter = false) =>
  createKvSemantics(desc(o), { withAdapter, scaleSalt: salt });
const tokens = Array.from({ length: 40 }, (_, i) => 100 + i);

describe('generator', () => {
  const words = [11, 12, 13, 14, 15, 16, 17, 18];
  const setup = { weightsSeed: 'w', digest: 'd', position: 10, wordIds: words, eosId: 99 };
  const run = (s: typeof setup, n: number, allowEos = false) => {
    const g = createGenerator(s);
    return Array.from({ length: n }, () => g.next({ allowEos, topN: 3 }));
  };

  it('is a deterministic function of weights, KV digest and position', () => {
    fc.assert(
      fc.property(fc.string(), fc.string(), fc.nat(10_000), (w, d, pos) => {
        const s = { ...setup, weightsSeed: w, digest: d, position: pos };
        expect(run(s, 5)).toEqual(run(s, 5));
      }),
      { numRuns: 50 },
    );
  });

  it('different KV gives different tokens', () => {
    const ids = (digest: string) =>
      run({ ...setup, digest }, 12)
        .map((t) => t.id)
        .join(',');
    const seen = new Set(['a', 'b', 'c', 'd', 'e'].map(ids));
    expect(seen.size).toBe(5);
  });

  it('reports ranked alternatives with the sampled token first', () => {
    for (const t of run(setup, 20)) {
      expect(t.top[0]!.id).toBe(t.id);
      expect(t.top).toHaveLength(3);
      expect(new Set(t.top.map((c) => c.id)).size).toBe(3);
      expect(t.top.map((c) => c.logprob)).toEqual([...t.top.map((c) => c.logprob)].sort((a, b) => b - a));
      expect(t.logprob).toBeLessThan(0);
    }
  });

  it('emits EOS only when allowed', () => {
    expect(run(setup, 500, false).some((t) => t.id === 99)).toBe(false);
    expect(run(setup, 500, true).some((t) => t.id === 99)).toBe(true);
  });

  it('a generator created from the same state continues identically', () => {
    const g = createGenerator({ ...setup, digest: kvDigest(sem(), computeBlocks(sem(), tokenChain(tokens, 16), [])) });
    expect(g.position).toBe(10);
    g.next({ allowEos: false, topN: 1 });
    expect(g.position).toBe(11);
  });
});
