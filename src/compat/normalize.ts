/**
 * Normalisation of a compatibility descriptor: where two spellings provably mean the same thing, pick one.
 *
 * The fingerprint hashes the normalised form, so `bf16` on one worker and `torch.bfloat16` on another land in the
 * same group. The one rule that governs every entry below: normalisation must never merge two things that could
 * produce different KV. When in doubt a spelling is kept as written (a needless split costs capacity; a wrong
 * merge costs correctness), and contradictions are reported as errors rather than repaired.
 *
 * | Field                               | Rule                                                                                          |
 * |-------------------------------------|-----------------------------------------------------------------------------------------------|
 * | `modelDtype`                        | case-insensitive; `torch.` prefix dropped; `bf16`→`bfloat16`; `half`/`fp16`→`float16`; `float`/`fp32`→`float32` |
 * | `modelDtype: auto`                  | **error**: vLLM resolves `auto` from the checkpoint *and the GPU*; declare the resolved dtype    |
 * | `kvCache.dtype`                     | case-insensitive; same aliases as `modelDtype`; `auto`→ the normalised model dtype              |
 * | `kvCache.dtype: fp8`                | →`fp8_e4m3` (vLLM's fp8 format on CUDA; kvgate assumes CUDA workers). `fp8_e5m2` etc. kept      |
 * | `kvCache.scaleScheme`               | **error** unless `none` for an unquantised KV dtype; **error** if `none` for a quantised one     |
 * | `architecture.attentionBackend`     | trimmed, upper-cased, `-`/space→`_`, legacy `_VLLM_V1` suffix dropped, aliases below            |
 * | `model/adapter/tokenizer/chatTemplate .id`, `model.path` | trailing `/` trimmed; case kept (hub ids are case-sensitive)     |
 * | `architecture.position.ropeTheta`, `ropeScaling` | absent → `null` (absent and null both mean "the checkpoint's default")  |
 * | `kvCache.layout`                    | `LBHNC`→`HND`, `LBNHC`→`NHD` (vLLM's own aliases; other `KVCacheLayout` names are kept)      |
 *
 * Attention backend aliases: `FLASHATTENTION`, `FLASH_ATTENTION` → `FLASH_ATTN`; `FLASH_INFER` → `FLASHINFER`;
 * `TRITON_ATTENTION` → `TRITON_ATTN`. `FLASH_ATTN` is deliberately *not* merged with `FLASHATTENTION2`/`3` style
 * names or with any other backend: kernels differ in numerics and cache layout.
 *
 * Revisions, the engine version, the connector name and the speculative config are never rewritten.
 */
import type { CompatDescriptor, KvScaleScheme } from './descriptor.js';
import { err, ok, type Result } from '../errors.js';

/** A descriptor after normalisation: same shape, optional position fields made explicit. */
export interface NormalizedDescriptor extends Omit<CompatDescriptor, 'architecture'> {
  readonly architecture: Omit<CompatDescriptor['architecture'], 'position'> & {
    readonly position: {
      readonly type: CompatDescriptor['architecture']['position']['type'];
      readonly ropeTheta: number | null;
      readonly ropeScaling: { readonly type: string; readonly factor: number } | null;
    };
  };
}

/** One reason a descriptor cannot be normalised: the field path and what to change. */
export interface NormalizeIssue {
  readonly path: string;
  readonly message: string;
}

const FLOAT_DTYPE_ALIASES: Readonly<Record<string, string>> = {
  bf16: 'bfloat16',
  bfloat16: 'bfloat16',
  half: 'float16',
  fp16: 'float16',
  float16: 'float16',
  float: 'float32',
  fp32: 'float32',
  float32: 'float32',
};

const BACKEND_ALIASES: Readonly<Record<string, string>> = {
  FLASHATTENTION: 'FLASH_ATTN',
  FLASH_ATTENTION: 'FLASH_ATTN',
  FLASH_INFER: 'FLASHINFER',
  TRITON_ATTENTION: 'TRITON_ATTN',
};

/** vLLM's `--kv-cache-dtype fp8` on CUDA is e4m3 (ROCm would be e4m3fnuz; kvgate assumes CUDA workers). */
export const FP8_DEFAULT_FORMAT = 'fp8_e4m3';

/**
 * Current vLLM names the per-layer KV layouts by their stride order: `CacheConfig.kv_cache_layout` holds a
 * `KVCacheLayout` member name, and `HND`/`NHD` are accepted as compatibility aliases of `LBHNC`/`LBNHC`
 * (`_LAYOUT_COMPAT_ALIASES` in vllm-project/vllm `vllm/config/cache.py` @002f10e0; the enum in
 * `vllm/v1/kv_cache_layout.py` @14f7a27c: LBHNC = [L, B, H, N, C], LBNHC = [L, B, N, H, C]). The cross-layer layouts
 * (`BLHNC`, `LHBNC`, ...) place the same per-layer bytes elsewhere and are never merged with these.
 */
export const KV_LAYOUT_ALIASES: Readonly<Record<string, string>> = { LBHNC: 'HND', LBNHC: 'NHD' };

/** A KV layout name as kvgate compares it: vLLM's current alias folded onto HND/NHD, anything else as written. */
export function normalizeKvLayout(layout: string): string {
  const upper = layout.trim().toUpperCase();
  return KV_LAYOUT_ALIASES[upper] ?? upper;
}

/** Normalise a model (weights) dtype spelling. Unknown spellings are lower-cased and otherwise kept. */
export function normalizeModelDtype(dtype: string): string {
  const lower = dtype
    .trim()
    .toLowerCase()
    .replace(/^torch\./, '');
  return FLOAT_DTYPE_ALIASES[lower] ?? lower;
}

/** Normalise a KV cache dtype given the already-normalised model dtype (`auto` means "same as the model"). */
export function normalizeKvDtype(kvDtype: string, normalizedModelDtype: string): string {
  const lower = kvDtype
    .trim()
    .toLowerCase()
    .replace(/^torch\./, '');
  if (lower === 'auto') return normalizedModelDtype;
  if (lower === 'fp8') return FP8_DEFAULT_FORMAT;
  return FLOAT_DTYPE_ALIASES[lower] ?? lower;
}

/** True for KV dtypes that store quantised values and therefore carry scales. */
export function isQuantizedKvDtype(normalizedKvDtype: string): boolean {
  return /^(fp8|fp4|nvfp4|mxfp|int8|int4)/.test(normalizedKvDtype);
}

/** Normalise an attention backend name to vLLM's enum spelling. */
export function normalizeAttentionBackend(name: string): string {
  const upper = name
    .trim()
    .toUpperCase()
    .replace(/[-\s]+/g, '_')
    .replace(/_VLLM_V1$/, '');
  return BACKEND_ALIASES[upper] ?? upper;
}

/** Trim trailing slashes from a hub id or path (`org/model/` is `org/model`); case is significant and kept. */
export function normalizeId(id: string): string {
  const trimmed = id.replace(/\/+$/, '');
  return trimmed === '' ? id : trimmed;
}

/**
 * Normalise a parsed descriptor. Returns every issue at once so a policy author can fix them in one pass.
 * The input is not modified.
 */
export function normalizeDescriptor(d: CompatDescriptor): Result<NormalizedDescriptor, NormalizeIssue[]> {
  const issues: NormalizeIssue[] = [];
  const modelDtype = normalizeModelDtype(d.modelDtype);
  if (modelDtype === 'auto') {
    issues.push({
      path: 'modelDtype',
      message:
        "'auto' is resolved by vLLM from the checkpoint and the GPU, so two workers may resolve it differently; " +
        'declare the dtype the worker actually runs (e.g. bfloat16)',
    });
  }
  const kvDtype = normalizeKvDtype(d.kvCache.dtype, modelDtype);
  issues.push(...scaleSchemeIssues(kvDtype, d.kvCache.scaleScheme));
  if (issues.length > 0) return err(issues);

  const { position } = d.architecture;
  return ok({
    ...d,
    model: { ...d.model, id: normalizeId(d.model.id), ...(d.model.path === undefined ? {} : { path: normalizeId(d.model.path) }) },
    adapter: d.adapter === null ? null : { ...d.adapter, id: normalizeId(d.adapter.id) },
    tokenizer: { ...d.tokenizer, id: normalizeId(d.tokenizer.id) },
    chatTemplate: { ...d.chatTemplate, id: normalizeId(d.chatTemplate.id) },
    architecture: {
      ...d.architecture,
      attentionBackend: normalizeAttentionBackend(d.architecture.attentionBackend),
      position: {
        type: position.type,
        ropeTheta: position.ropeTheta ?? null,
        ropeScaling: position.ropeScaling ?? null,
      },
    },
    modelDtype,
    kvCache: { ...d.kvCache, dtype: kvDtype, layout: normalizeKvLayout(d.kvCache.layout) as CompatDescriptor['kvCache']['layout'] },
  });
}

function scaleSchemeIssues(kvDtype: string, scheme: KvScaleScheme): NormalizeIssue[] {
  const quantized = isQuantizedKvDtype(kvDtype);
  if (!quantized && scheme !== 'none') {
    return [
      {
        path: 'kvCache.scaleScheme',
        message:
          `KV dtype '${kvDtype}' is not quantised, so it has no scales, but scaleScheme is '${scheme}'; ` +
          "set scaleScheme to 'none', or set kvCache.dtype to the fp8 format the worker really uses",
      },
    ];
  }
  if (quantized && scheme === 'none') {
    return [
      {
        path: 'kvCache.scaleScheme',
        message:
          `KV dtype '${kvDtype}' is quantised and always has scales, but scaleScheme is 'none'; declare ` +
          "'static-checkpoint' (scales loaded from the checkpoint, or vLLM's default 1.0), 'dynamic-per-block' " +
          "(computed at run time) or 'packed' (stored inline with the blocks)",
      },
    ];
  }
  return [];
}

/** Format issues as one line each: `path: message`. */
export function formatNormalizeIssues(issues: readonly NormalizeIssue[]): string[] {
  return issues.map((i) => `${i.path}: ${i.message}`);
}
