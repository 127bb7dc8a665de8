import { describe, expect, it } from 'vitest';
import { acceptedCacheDtypes, cacheDtypeWarning } from './vllm-cache-dtypes.js';

const d = (version: string, dtype: string, name = 'vllm') => ({ engine: { name, version }, kvCache: { dtype } });

describe('vLLM --kv-cache-dtype per release', () => {
  it('holds the lists read in vLLM: 0.11.1 to 0.16 (no float16), main (float16, NVFP4, ...); none for versions not read', () => {
    for (const v of ['0.11.1', '0.12.0', '0.13.0', '0.14.2', '0.16.0', '0.13.0rc1'])
      expect(acceptedCacheDtypes(v)?.accepted).toEqual(['auto', 'bfloat16', 'fp8', 'fp8_e4m3', 'fp8_e5m2', 'fp8_inc', 'fp8_ds_mla']);
    expect(acceptedCacheDtypes('main')?.accepted).toContain('float16');
    expect(acceptedCacheDtypes('main')?.accepted).toContain('nvfp4');
    for (const v of ['0.10.2', '0.9.0', '0.x']) expect(acceptedCacheDtypes(v)).toBeUndefined();
  });

  it('v0.11.0 and 0.17 on (not read) get the floor: every value a release read accepts, nothing else', () => {
    for (const v of ['0.11.0', '0.17.0', '0.17.1', '0.18.1', '0.22.0', '1.0.0']) {
      const accepted = acceptedCacheDtypes(v)?.accepted ?? [];
      for (const ok of ['auto', 'float16', 'bfloat16', 'fp8', 'fp8_e4m3', 'fp8_e5m2', 'fp8_inc', 'fp8_ds_mla', 'nvfp4', 'turboquant_k8v4'])
        expect(accepted).toContain(ok);
      expect(accepted).toHaveLength(18);
      expect(accepted).not.toContain('fp16');
    }
  });

  it('warns for a dtype the declared version refuses, listing what it accepts; nothing for accepted values, unknown versions or other engines', () => {
    expect(cacheDtypeWarning(d('0.13.0', 'fp9'))).toBe(
      'kvCache.dtype "fp9" is not a --kv-cache-dtype vLLM 0.13.0 accepts, so a worker started with it would not start; vLLM 0.13.0 accepts: ' +
        'auto, bfloat16, fp8, fp8_e4m3, fp8_e5m2, fp8_inc, fp8_ds_mla (vllm/config/cache.py CacheDType at v0.11.1 and v0.16.0 (0.11.2-0.15.x taken as the same))',
    );
    // float16 came to the literal after 0.16; main takes it.
    expect(cacheDtypeWarning(d('0.16.0', 'float16'))).toContain('accepts: auto, bfloat16,');
    expect(cacheDtypeWarning(d('main', 'float16'))).toBeUndefined();
    expect(cacheDtypeWarning(d('main', 'fp9'))).toContain('vllm/config/cache.py CacheDType on main @002f10e0');
    // As written: vLLM's command line does not fold case or aliases.
    expect(cacheDtypeWarning(d('0.13.0', 'BF16'))).toContain('"BF16"');
    for (const ok of ['auto', 'fp8', 'fp8_e4m3', 'bfloat16']) expect(cacheDtypeWarning(d('0.13.0', ok))).toBeUndefined();
    expect(cacheDtypeWarning(d('0.10.2', 'fp9'))).toBeUndefined();
    expect(cacheDtypeWarning(d('0.11.0', 'float16'))).toBeUndefined();
    expect(cacheDtypeWarning(d('0.22.0', 'nvfp4'))).toBeUndefined();
    expect(cacheDtypeWarning(d('0.13.0', 'fp9', 'sglang'))).toBeUndefined();
  });

  it('warns on a version not read only for a value no release read accepts, and says the list was not read', () => {
    for (const [v, bad] of [
      ['0.11.0', 'fp9'],
      ['0.17.1', 'fp16'],
      ['0.22.0', 'BF16'],
    ] as const) {
      const w = cacheDtypeWarning(d(v, bad));
      expect(w).toContain(`kvCache.dtype "${bad}" is not a --kv-cache-dtype any vLLM release kvgate read accepts`);
      expect(w).toContain(`(the list of ${v} itself was not read)`);
      expect(w).toContain('v0.10.2, v0.11.1, v0.16.0 and main @002f10e0');
    }
  });
});
