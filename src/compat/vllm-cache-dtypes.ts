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
 *   releases between (0.11.2 to 0.15.x) are taken to accept the same list as both ends. The same seven values are in
 *   the stored copy @c1d86421 (a commit of the 0.11 line: `swap_space`, `kv_offloading_backend: ... | None`).
 * - main @002f10e0 (`vllm/config/cache.py`): the 18 values below. A version string without numbers (`main`, a dev
 *   build) is taken as main, as `vllm-defaults.ts` does.
 * For comparison, v0.10.2 (docs.vllm.ai/en/v0.10.2/api/vllm/config/cache.html) had `auto, fp8, fp8_e4m3, fp8_e5m2,
 * fp8_inc`; it is older than any release kvgate models, so it is not listed.
 *
 * Not read: v0.11.0 and every tag from v0.17.0 on. The stored copy of vLLM holds `vllm/config/cache.py` at main and
 * @c1d86421 only (the repository is too large to fetch whole, so no tag can be checked out), and vLLM's rendered API
 * reference is stored for v0.9.x, v0.10.x, v0.11.1, v0.11.2, v0.16.0, `stable` and `latest`, none of them those tags.
 * What is known of them is from pull requests, not tags: `float16` came with PR #37199 (opened 2026-03-16, after
 * v0.17.1 was out), so 0.17.0/0.17.1 most likely lack it. Those versions get the floor instead of a list: a value no
 * release kvgate read accepts (the union of the lists above and v0.10.2's; `fp9`, `fp16`, `BF16`) is warned about for
 * any vLLM version, since no vLLM between the releases read is known to have dropped a value and taken it back; a
 * value some release accepts is not (it may be one this version has).
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

const V0_10_2 = ['auto', 'fp8', 'fp8_e4m3', 'fp8_e5m2', 'fp8_inc'] as const;

/**
 * For a vLLM version whose literal was not read: every value some release read accepts, so only a value none of them
 * does (a typo, another engine's spelling) is warned about.
 */
const ANY_READ: CacheDtypeList = Object.freeze({
  accepted: Object.freeze([...new Set([...V0_10_2, ...V0_11_TO_V0_16.accepted, ...MAIN.accepted])]),
  source:
    'no CacheDType list was read for this version (v0.11.0, v0.17 on): the values are those any release read accepts, ' +
    'vllm/config/cache.py at v0.10.2, v0.11.1, v0.16.0 and main @002f10e0',
});

/**
 * The list for a declared vLLM version: the literal read for that release, the union of every list read where the
 * release was not read (v0.11.0, 0.17 on, a later major), or undefined for releases older than any kvgate models
 * (before 0.11) and versions it cannot parse (no warning then).
 */
export function acceptedCacheDtypes(version: string): CacheDtypeList | undefined {
  if (!/^\d/.test(version)) return MAIN;
  const m = /^(\d+)\.(\d+)\.(\d+)/.exec(version);
  if (m === null) return undefined;
  const [major, minor, patch] = [Number(m[1]), Number(m[2]), Number(m[3])];
  if (major === 0 && minor < 11) return undefined;
  if (major === 0 && ((minor === 11 && patch >= 1) || (minor >= 12 && minor <= 16))) return V0_11_TO_V0_16;
  return ANY_READ;
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
  if (list === ANY_READ)
    return (
      `kvCache.dtype "${d.kvCache.dtype}" is not a --kv-cache-dtype any vLLM release kvgate read accepts, so a vLLM ${d.engine.version} ` +
      `worker started with it would most likely not start (the list of ${d.engine.version} itself was not read); vLLM releases accept ` +
      `values among: ${list.accepted.join(', ')} (${list.source})`
    );
  return (
    `kvCache.dtype "${d.kvCache.dtype}" is not a --kv-cache-dtype vLLM ${d.engine.version} accepts, so a worker started with it would not ` +
    `start; vLLM ${d.engine.version} accepts: ${list.accepted.join(', ')} (${list.source})`
  );
}
