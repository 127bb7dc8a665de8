/**
 * What vLLM does by default, per release, for the runtime flags that enter its NIXL compatibility hash: a descriptor
 * that leaves a flag out means "as vLLM of the declared version starts a P/D worker", and this module says what that
 * is. Followed from vLLM's sources and pull requests (vllm-project/vllm):
 *
 * - Hybrid KV cache manager (`is_hma_enabled = not scheduler_config.disable_hybrid_kv_cache_manager`): a worker
 *   started with `--kv-transfer-config` (every NIXL P/D worker) had HMA turned OFF unless
 *   `--no-disable-hybrid-kv-cache-manager` was passed (`vllm/config/vllm.py`, "turn HMA off for connector unless
 *   specifically enabled"). PR #41847 ("Enable HMA by default for connectors that support it", merged May 2026)
 *   keeps it ON for connectors that implement `SupportsHMA`, which NixlConnector does since PR #35758. kvgate takes
 *   0.21.0 as the first release carrying #41847 (read from the merge date, not from a release tag): a revision near
 *   that boundary should declare the flag.
 * - Cross-layer KV blocks (`cross_layers_blocks`): opt-in through `kv_connector_extra_config.enable_cross_layers_blocks`
 *   since PR #33339 (PR #30207 had it on by default and was reverted by PR #33241 before a release). Default off.
 * - Speculative decoding and the transfer mode have no version-dependent default (off; pull).
 */

/** `[major, minor]` of a vLLM version string; undefined for a build without one (a dev build of main). */
function vllmMinor(version: string): readonly [number, number] | undefined {
  const m = /^(\d+)\.(\d+)/.exec(version);
  return m === null ? undefined : [Number(m[1]), Number(m[2])];
}

/** True when `version` is `major.minor` or later; a version string without numbers counts as newest (main). */
export function vllmAtLeast(version: string, major: number, minor: number): boolean {
  const v = vllmMinor(version);
  if (v === undefined) return true;
  return v[0] > major || (v[0] === major && v[1] >= minor);
}

/** vLLM's default for the hybrid KV cache manager of a worker started with `--kv-transfer-config` (on from 0.21, PR #41847). */
export function defaultHybridKvCacheManager(vllmVersion: string): boolean {
  return vllmAtLeast(vllmVersion, 0, 21);
}

/** vLLM's default for cross-layer KV blocks (opt-in in every release that has them). */
export function defaultCrossLayersBlocks(_vllmVersion: string): boolean {
  return false;
}
