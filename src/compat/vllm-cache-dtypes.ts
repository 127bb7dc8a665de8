/**
 * The `--kv-cache-dtype` values each vLLM release accepts. vLLM types `CacheConfig.cache_dtype` as the `CacheDType`
 * literal (`vllm/config/cache.py`) and refuses to start with any other value, and the literal changes between
 * releases (0.11 added `bfloat16` and `fp8_ds_mla`; main has `float16`, NVFP4, TurboQuant and per-token-head types).
 * A descriptor that declares a value its own vLLM refuses describes a worker that cannot exist: kvgate warns (never
 * refuses: the list is read, not derived, and a build may carry more), naming what that version accepts.
 *
 * Read in vLLM's source (vllm-project/vllm, `vllm/config/cache.py`, the `CacheDType = Literal[...]` block):
 * - v0.11.1 and v0.16.0: `auto, bfloat16, fp8, fp8_e4m3, fp8_e5m2, fp8_inc, fp8_ds_mla`, as vLLM's API reference
 *   renders that file for each tag (docs.vllm.ai/en/v0.11.1/api/vllm/config/cache/ and .../en/v0.16.0/...). The
 *   releases between (0.11.2 to 0.15.x) are taken to accept the same list as both ends; v0.11.0 and 0.17 to 0.2x
 *   were not read, so they get no list (and no warning).
 * - main @002f10e0 (`vllm/config/cache.py`): the 18 values below. A version string without numbers (`main`, a dev
 *   build) is taken as main, as `vllm-defaults.ts` does.
 * For comparison, v0.10.2 (docs.vllm.ai/en/v0.10.2/api/vllm/config/cache.html) had `auto, fp8, fp8_e4m3, fp8_e5m2,
 * fp8_inc`; it is older than any release kvgate models, so it is not listed.
 *
 * Pure: no I/O. The value is compared as written (vLLM's command line compares it as written too).
 */

/** Which releases a list holds for, and where it was read. */
export interface CacheDtypeList {
  readonly accepted: readonly string[];
  readonly source: string;
}

const V0_11_TO_V0_16: CacheDtypeList = Object.freeze({
  accepted: Object.freeze(['auto', 'bfloat16', 'fp8', 'fp8_e4m3', 'fp8_e5m2', 'fp8_inc', 'fp8_ds_mla']),
  source: 'vllm/config/cache.py CacheDType at v0.11.1 and v0.16.0 (0.11.2-0.15.x taken as the same)',
});

const MAIN: CacheDtypeList = Object.freeze({
  accepted: Object.freeze([
    'auto',
    'float16',
    'bfloat16',
    'fp8',
    'fp8_e4m3',
    'fp8_e5m2',
    'fp8_inc',
    'fp8_ds_mla',
    'nvfp4_ds_mla',
    'turboquant_k8v4',
    'turboquant_4bit_nc',
    'turboquant_k3v4_nc',
    'turboquant_3bit_nc',
    'int4_per_token_head',
    'int8_per_token_head',
    'fp8_per_token_head',
    'nvfp4',
    'nvfp4_4over6',
  ]),
  source: 'vllm/config/cache.py CacheDType on main @002f10e0',
});

/** The list for a declared vLLM version, or undefined where kvgate has none (no warning then). */
export function acceptedCacheDtypes(version: string): CacheDtypeList | undefined {
  if (!/^\d/.test(version)) return MAIN;
  const m = /^(\d+)\.(\d+)\.(\d+)/.exec(version);
  if (m === null) return undefined;
  const [major, minor, patch] = [Number(m[1]), Number(m[2]), Number(m[3])];
  if (major !== 0) return undefined;
  if ((minor === 11 && patch >= 1) || (minor >= 12 && minor <= 16)) return V0_11_TO_V0_16;
  return undefined;
}

/**
 * A warning when a vLLM descriptor's `kvCache.dtype` is not among the values its declared `engine.version` accepts
 * (undefined otherwise, and for engines or versions kvgate has no list for).
 */
export function cacheDtypeWarning(d: {
  readonly engine: { readonly name: string; readonly version: string };
  readonly kvCache: { readonly dtype: string };
}): string | undefined {
  if (d.engine.name.toLowerCase() !== 'vllm') return undefined;
  const list = acceptedCacheDtypes(d.engine.version);
  if (list === undefined || list.accepted.includes(d.kvCache.dtype)) return undefined;
  return (
    `kvCache.dtype "${d.kvCache.dtype}" is not a --kv-cache-dtype vLLM ${d.engine.version} accepts, so a worker started with it would not ` +
    `start; vLLM ${d.engine.version} accepts: ${list.accepted.join(', ')} (${list.source})`
  );
}
