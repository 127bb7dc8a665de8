import { describe, expect, it } from 'vitest';
import { CompatDescriptorSchema } from '../../src/compat/descriptor.js';
import { blockBytes, computeBlocks, createKvSemantics, prefixCacheKeys, readBlock, tokenChain } from './kv-model.js';
import { deepMerge } from './config.js';
import { testDescriptor } from './testing.js';

const desc = (o: Record<string, unknown> = {}) => CompatDescriptorSchema.parse(deepMerge(testDescriptor(), o));
const sem = (o: Record<string, unknown> = {}, salt = 'i1', withAdapter = false) =>
  createKvSemantics(desc(o), { withAdapter, scaleSalt: salt });
const tokens = Array.from({ length: 40 }, (_, i) => 100 + i);

describe('kv-model', () => {
  it('same worker config computes identical blocks on any instance (static scales)', () => {
    const chain = tokenChain(tokens, 16);
    expect(chain).toHaveLength(3);
    expect(computeBlocks(sem({}, 'i1'), chain, [])).toEqual(computeBlocks(sem({}, 'i2'), chain, []));
  });

  it('the semantic seed covers weights, adapter, dtypes and KV scale scheme', () => {
    const base = sem().seed;
    for (const o of [
      { model: { revision: 'rev-b' } },
      { modelDtype: 'float16' },
      { kvCache: { dtype: 'fp8' } },
      { kvCache: { scaleScheme: 'static-checkpoint' } },
      { architecture: { position: { type: 'rope', ropeTheta: 10000 } } },
    ]) {
      expect(sem(o).seed).not.toBe(base);
    }
    expect(sem({ adapter: { id: 'lora', revision: 'l1' } }, 'i1', true).seed).not.toBe(base);
    expect(sem({ adapter: { id: 'lora', revision: 'l1' } }, 'i1', false).seed).toBe(base);
    expect(sem({ tokenizer: { revision: 'tok-b' } }).seed).toBe(base); // tokens, not the tokenizer, enter the KV
  });

  it('dynamic per-block scales are misread by any other instance', () => {
    const dyn = { kvCache: { dtype: 'fp8', scaleScheme: 'dynamic-per-block' } };
    const p = sem(dyn, 'p-instance');
    const d = sem(dyn, 'd-instance');
    const [b] = computeBlocks(p, tokenChain(tokens, 16), []);
    expect(readBlock(p, b!)).toBe(b!.content);
    expect(readBlock(d, b!)).not.toBe(b!.content);
    const stat = { kvCache: { dtype: 'fp8', scaleScheme: 'static-checkpoint' } };
    const [s] = computeBlocks(sem(stat, 'p'), tokenChain(tokens, 16), []);
    expect(readBlock(sem(stat, 'd'), s!)).toBe(s!.content);
  });

  it('a block computed after foreign KV inherits the difference (attention over the past)', () => {
    const chain = tokenChain(tokens, 16);
    const own = computeBlocks(sem(), chain, []);
    const foreign = computeBlocks(sem({ model: { revision: 'rev-b' } }), chain, []);
    const mixed = computeBlocks(sem(), chain, foreign.slice(0, 2));
    expect(mixed[0]).not.toEqual(own[2]);
    expect(computeBlocks(sem(), chain, own.slice(0, 2))[0]).toEqual(own[2]);
  });

  it('prefix-cache keys cover full blocks only and depend on cache_salt and LoRA', () => {
    const k = prefixCacheKeys(tokens, 16, { cacheSalt: null, loraName: null });
    expect(k).toHaveLength(2);
    expect(prefixCacheKeys(tokens, 16, { cacheSalt: 'tenant-a', loraName: null })[1]).not.toBe(k[1]);
    expect(prefixCacheKeys(tokens, 16, { cacheSalt: null, loraName: 'lora' })[0]).not.toBe(k[0]);
    expect(prefixCacheKeys(tokens.slice(0, 32), 16, { cacheSalt: null, loraName: null })).toEqual(k);
  });

  it('block bytes follow geometry and KV dtype', () => {
    expect(blockBytes(desc())).toBe(2 * 16 * 8 * 128 * 2 * 32);
    expect(blockBytes(desc({ kvCache: { dtype: 'fp8' } }))).toBe(2 * 16 * 8 * 128 * 1 * 32);
  });
});
