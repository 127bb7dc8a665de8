import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import type { CompatDescriptorInput } from './descriptor.js';
import { fingerprintOf } from './fingerprint.js';
import {
  isQuantizedKvDtype,
  normalizeAttentionBackend,
  normalizeDescriptor,
  normalizeId,
  normalizeKvDtype,
  normalizeKvLayout,
  normalizeModelDtype,
} from './normalize.js';
import { exampleDescriptor } from './testing.js';

const fpWith = (edit: (d: CompatDescriptorInput) => void): string => fingerprintOf(exampleDescriptor(edit));

describe('model dtype', () => {
  it.each([
    ['bf16', 'bfloat16'],
    ['BF16', 'bfloat16'],
    ['bfloat16', 'bfloat16'],
    ['torch.bfloat16', 'bfloat16'],
    ['half', 'float16'],
    ['fp16', 'float16'],
    ['float16', 'float16'],
    ['torch.float16', 'float16'],
    ['float', 'float32'],
    ['fp32', 'float32'],
    [' Float32 ', 'float32'],
  ])('%s -> %s', (spelling, canonical) => {
    expect(normalizeModelDtype(spelling)).toBe(canonical);
  });

  it('keeps bfloat16 and float16 apart', () => {
    expect(fpWith((d) => void (d.modelDtype = 'bf16'))).not.toBe(fpWith((d) => void (d.modelDtype = 'half')));
  });

  it("refuses 'auto': the GPU can change what it resolves to", () => {
    const r = normalizeDescriptor(exampleDescriptor((d) => void (d.modelDtype = 'auto')));
    expect(r.ok).toBe(false);
    if (!r.ok) {
      expect(r.error[0]!.path).toBe('modelDtype');
      expect(r.error[0]!.message).toMatch(/declare the dtype/);
    }
  });
});

describe('KV cache dtype', () => {
  it("'auto' means the normalised model dtype", () => {
    expect(normalizeKvDtype('auto', 'bfloat16')).toBe('bfloat16');
    expect(normalizeKvDtype('AUTO', 'float16')).toBe('float16');
    expect(fpWith((d) => void (d.kvCache.dtype = 'auto'))).toBe(fpWith((d) => void (d.kvCache.dtype = 'bf16')));
    const autoHalf = fpWith((d) => {
      d.modelDtype = 'half';
      d.kvCache.dtype = 'auto';
    });
    expect(autoHalf).toBe(
      fpWith((d) => {
        d.modelDtype = 'float16';
        d.kvCache.dtype = 'float16';
      }),
    );
  });

  it("'fp8' is fp8_e4m3 (vLLM's CUDA default) and never fp8_e5m2", () => {
    expect(normalizeKvDtype('fp8', 'bfloat16')).toBe('fp8_e4m3');
    expect(normalizeKvDtype('FP8_E5M2', 'bfloat16')).toBe('fp8_e5m2');
    const fp8 = (dtype: string) =>
      fpWith((d) => {
        d.kvCache.dtype = dtype;
        d.kvCache.scaleScheme = 'static-checkpoint';
      });
    expect(fp8('fp8')).toBe(fp8('fp8_e4m3'));
    expect(fp8('fp8')).not.toBe(fp8('fp8_e5m2'));
  });

  it('knows which KV dtypes are quantised', () => {
    expect(['fp8_e4m3', 'fp8_e5m2', 'fp8_inc', 'nvfp4', 'int8'].every(isQuantizedKvDtype)).toBe(true);
    expect(['bfloat16', 'float16', 'float32'].some(isQuantizedKvDtype)).toBe(false);
  });
});

describe('scale scheme', () => {
  it('must be none for an unquantised KV dtype (an error, not normalised away)', () => {
    const r = normalizeDescriptor(exampleDescriptor((d) => void (d.kvCache.scaleScheme = 'packed')));
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.error).toEqual([{ path: 'kvCache.scaleScheme', message: expect.stringMatching(/not quantised.*'none'/) }]);
  });

  it('must not be none for a quantised KV dtype', () => {
    const r = normalizeDescriptor(exampleDescriptor((d) => void (d.kvCache.dtype = 'fp8')));
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.error[0]!.message).toMatch(/static-checkpoint/);
  });

  it('reports every issue at once', () => {
    const r = normalizeDescriptor(
      exampleDescriptor((d) => {
        d.modelDtype = 'auto';
        d.kvCache.dtype = 'bfloat16';
        d.kvCache.scaleScheme = 'dynamic-per-block';
      }),
    );
    expect(r.ok ? [] : r.error.map((i) => i.path)).toEqual(['modelDtype', 'kvCache.scaleScheme']);
  });
});

describe('attention backend', () => {
  it.each([
    ['flash_attn', 'FLASH_ATTN'],
    ['FLASH_ATTN_VLLM_V1', 'FLASH_ATTN'],
    ['FlashAttention', 'FLASH_ATTN'],
    ['flash-attention', 'FLASH_ATTN'],
    ['FlashInfer', 'FLASHINFER'],
    ['flash_infer', 'FLASHINFER'],
    ['triton_attn', 'TRITON_ATTN'],
    ['TRITON_ATTN_VLLM_V1', 'TRITON_ATTN'],
    ['FLASHMLA', 'FLASHMLA'],
  ])('%s -> %s', (spelling, canonical) => {
    expect(normalizeAttentionBackend(spelling)).toBe(canonical);
  });

  it('never merges different backends', () => {
    const names = ['FLASH_ATTN', 'FLASHINFER', 'TRITON_ATTN', 'FLASHMLA', 'FLASH_ATTN_MLA', 'FlashAttention2', 'XFORMERS'];
    expect(new Set(names.map(normalizeAttentionBackend)).size).toBe(names.length);
  });
});

describe('ids', () => {
  it('trims trailing slashes and keeps case', () => {
    expect(normalizeId('meta-llama/Llama-3.1-8B/')).toBe('meta-llama/Llama-3.1-8B');
    expect(normalizeId('meta-llama/Llama-3.1-8B//')).toBe('meta-llama/Llama-3.1-8B');
    expect(normalizeId('/')).toBe('/');
    expect(fpWith((d) => void (d.model.id = 'meta-llama/Llama-3.1-8B-Instruct/'))).toBe(fingerprintOf(exampleDescriptor()));
    expect(fpWith((d) => void (d.model.id = 'Meta-Llama/Llama-3.1-8B-Instruct'))).not.toBe(fingerprintOf(exampleDescriptor()));
    expect(fpWith((d) => void (d.tokenizer.id = 'meta-llama/Llama-3.1-8B-Instruct/'))).toBe(fingerprintOf(exampleDescriptor()));
  });

  it('never rewrites revisions', () => {
    expect(fpWith((d) => void (d.model.revision = 'ABC'))).not.toBe(fpWith((d) => void (d.model.revision = 'abc')));
    expect(fpWith((d) => void (d.model.revision = 'abc/'))).not.toBe(fpWith((d) => void (d.model.revision = 'abc')));
  });
});

describe('rope scaling', () => {
  it('absent and null mean the same; a value does not', () => {
    const absent = fpWith((d) => void delete d.architecture.position.ropeScaling);
    const nul = fpWith((d) => void (d.architecture.position.ropeScaling = null));
    expect(absent).toBe(nul);
    expect(absent).not.toBe(fingerprintOf(exampleDescriptor()));
    const thetaAbsent = fpWith((d) => void delete d.architecture.position.ropeTheta);
    expect(thetaAbsent).not.toBe(fingerprintOf(exampleDescriptor()));
  });
});

describe('normalizeDescriptor', () => {
  it('does not modify its input', () => {
    const d = exampleDescriptor((x) => void (x.modelDtype = 'bf16'));
    const r = normalizeDescriptor(d);
    expect(r.ok && r.value.modelDtype).toBe('bfloat16');
    expect(d.modelDtype).toBe('bf16');
  });
});

describe('property: equivalent spellings give one fingerprint', () => {
  const spellings = {
    bf16: ['bf16', 'BF16', 'bfloat16', 'torch.bfloat16', 'BFloat16'],
    fp16: ['half', 'fp16', 'float16', 'torch.float16', 'HALF'],
    fp8: ['fp8', 'FP8', 'fp8_e4m3', 'FP8_E4M3'],
    flash: ['FLASH_ATTN', 'flash_attn', 'FLASH_ATTN_VLLM_V1', 'FlashAttention', 'flash-attention'],
  };

  it('holds for random combinations of dtype, backend, slash and null/absent spellings', () => {
    const variant = fc.record({
      dtypeFamily: fc.constantFrom<'bf16' | 'fp16'>('bf16', 'fp16'),
      modelSpelling: fc.nat(4),
      kvSpelling: fc.nat(5),
      fp8: fc.boolean(),
      fp8Spelling: fc.nat(3),
      backend: fc.nat(4),
      slashes: fc.nat(3),
      scaling: fc.constantFrom<'absent' | 'null'>('absent', 'null'),
    });
    fc.assert(
      fc.property(variant, variant, (a, b) => {
        const build = (v: typeof a, family: 'bf16' | 'fp16', fp8: boolean) =>
          fpWith((d) => {
            const dtypes = spellings[family];
            d.modelDtype = dtypes[v.modelSpelling % dtypes.length]!;
            // kvSpelling 5 = 'auto'; otherwise an explicit spelling of the same dtype.
            d.kvCache.dtype = fp8 ? spellings.fp8[v.fp8Spelling]! : v.kvSpelling === 5 ? 'auto' : dtypes[v.kvSpelling % dtypes.length]!;
            d.kvCache.scaleScheme = fp8 ? 'static-checkpoint' : 'none';
            d.architecture.attentionBackend = spellings.flash[v.backend]!;
            d.model.id = `meta-llama/Llama-3.1-8B-Instruct${'/'.repeat(v.slashes)}`;
            if (v.scaling === 'absent') delete d.architecture.position.ropeScaling;
            else d.architecture.position.ropeScaling = null;
          });
        // Same family and fp8 choice: equal, whatever the spellings. Different family: never equal.
        expect(build(b, a.dtypeFamily, a.fp8)).toBe(build(a, a.dtypeFamily, a.fp8));
        const otherFamily = a.dtypeFamily === 'bf16' ? 'fp16' : 'bf16';
        expect(build(b, otherFamily, a.fp8)).not.toBe(build(a, a.dtypeFamily, a.fp8));
      }),
      { numRuns: 150 },
    );
  });
});

describe('KV cache layout', () => {
  it("folds current vLLM's LBHNC/LBNHC onto HND/NHD (one group) and keeps the cross-layer layouts apart", () => {
    expect(normalizeKvLayout('LBHNC')).toBe('HND');
    expect(normalizeKvLayout('lbnhc')).toBe('NHD');
    expect(normalizeKvLayout('BLHNC')).toBe('BLHNC');
    expect(fpWith((d) => (d.kvCache.layout = 'LBHNC'))).toBe(fpWith((d) => (d.kvCache.layout = 'HND')));
    expect(fpWith((d) => (d.kvCache.layout = 'LBNHC'))).toBe(fpWith((d) => (d.kvCache.layout = 'NHD')));
    expect(fpWith((d) => (d.kvCache.layout = 'LBNHC'))).not.toBe(fpWith((d) => (d.kvCache.layout = 'HND')));
  });
});
