import { describe, expect, it } from 'vitest';
import { exampleDescriptor } from './testing.js';
import { defaultHybridKvCacheManager, vllmAtLeast } from './vllm-defaults.js';

describe("vLLM's defaults for the runtime flags it hashes", () => {
  it('HMA is off for a P/D worker before 0.21 and on from it (PR #41847); a dev build of main counts as newest', () => {
    expect(defaultHybridKvCacheManager('0.13.0')).toBe(false);
    expect(defaultHybridKvCacheManager('0.20.1')).toBe(false);
    expect(defaultHybridKvCacheManager('0.21.0')).toBe(true);
    expect(defaultHybridKvCacheManager('0.22.1rc0')).toBe(true);
    expect(defaultHybridKvCacheManager('1.0.0')).toBe(true);
    expect(vllmAtLeast('main', 0, 99)).toBe(true);
  });

  it('a descriptor that leaves the flags out gets the defaults of its declared version; a declared value wins', () => {
    const old = exampleDescriptor((d) => {
      d.engine.version = '0.15.1';
      delete d.hybridKvCacheManager;
    });
    expect(old.hybridKvCacheManager).toBe(false);
    expect(old.crossLayersBlocks).toBe(false);
    const current = exampleDescriptor((d) => {
      d.engine.version = '0.21.0';
      delete d.hybridKvCacheManager;
    });
    expect(current.hybridKvCacheManager).toBe(true);
    expect(exampleDescriptor((d) => void (d.engine.version = '0.15.1')).hybridKvCacheManager).toBe(true);
  });
});
