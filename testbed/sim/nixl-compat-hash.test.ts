import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parseDescriptor } from '../../src/compat/descriptor.js';
import { simCompatHash, simHashFactors, simRuntimeFlags } from './nixl-compat-hash.js';

/**
 * The simulator's own factor table against the vectors Python computed the way vLLM does
 * (src/compat/nixl-hash.vectors.py): both are independent of kvgate's prediction, so a disagreement here is a bug in
 * the simulator, and one in src/compat/nixl-hash.test.ts a bug in the prediction.
 */
const file = JSON.parse(readFileSync(new URL('../../src/compat/nixl-hash.vectors.json', import.meta.url), 'utf8')) as {
  vectors: { name: string; descriptor: Record<string, unknown>; factors: Record<string, unknown>; hash: string }[];
};

describe("the simulator's NIXL factor table", () => {
  it.each(file.vectors)('$name', (v) => {
    const flags = simRuntimeFlags(v.descriptor);
    const d = parseDescriptor(v.descriptor);
    expect(simHashFactors(d, flags, true)).toEqual(v.factors);
    expect(simCompatHash(d, flags, true)).toBe(v.hash);
  });

  it('resolves flags a descriptor leaves out from its own per-version defaults', () => {
    expect(simRuntimeFlags({ engine: { version: '0.20.1' } })).toEqual({ hma: false, crossLayersBlocks: false });
    expect(simRuntimeFlags({ engine: { version: '0.21.0' } })).toEqual({ hma: true, crossLayersBlocks: false });
    expect(simRuntimeFlags({ engine: { version: '0.20.1' }, hybridKvCacheManager: true, crossLayersBlocks: true })).toEqual({
      hma: true,
      crossLayersBlocks: true,
    });
  });

  it('has no hash before vLLM 0.13', () => {
    const v = file.vectors.find((x) => (x.descriptor['engine'] as { version: string }).version === '0.11.0')!;
    expect(simCompatHash(parseDescriptor(v.descriptor), simRuntimeFlags(v.descriptor))).toBeNull();
  });
});
