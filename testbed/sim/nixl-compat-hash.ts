/**
 * The simulator's OWN model of vLLM's NIXL compatibility hash: which factors each vLLM build hashes, computed from
 * what the simulated worker really runs (its behaviour descriptor: runtime flags included). Deliberately independent
 * of kvgate's prediction (src/compat/nixl-hash.ts): a wrong prediction must show up as a hash mismatch in tests,
 * which it never could if both sides ran the same code.
 *
 * Followed from vLLM's sources (vllm-project/vllm):
 * - No hash before 0.13: PR #29503 ("[NIXL] Add compatibility checking to NIXL KV connector handshake") added it.
 * - v1/v2: vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py @ 002a1057e9ae674d7bdc9c4be95bc29d65d2e808,
 *   `compute_nixl_compatibility_hash`: vllm_version, nixl_connector_version, model, dtype (str(torch.dtype)),
 *   num_kv_heads, head_size, num_hidden_layers, attn_backend_name, cache_dtype (the raw --kv-cache-dtype).
 * - v2 from vLLM 0.16: + cross_layers_blocks (PR #33339, "Enable Cross layers KV cache layout at NIXL Connector V2").
 * - v2 in the split nixl/ package (nixl/utils.py and nixl/metadata.py @ fe6adf39, still NIXL_CONNECTOR_VERSION 2),
 *   taken as vLLM 0.18 on (HMA support for NixlConnector, PR #35758): + is_hma_enabled.
 * - v3..v6 (interpolated: the split v2 dict): + cross_layers_blocks (PR #30207), + is_hma_enabled
 *   (not scheduler_config.disable_hybrid_kv_cache_manager); v6 + speculative_config (PR #49230).
 * - v7..v12: cross_layers_blocks gone, + transfer_mode (PR #50620); read at nixl/metadata.py @ 02cfb534 (v12).
 * `hash_factors` (vllm/config/utils.py) = sha256(json.dumps(factors, sort_keys=True)).
 */
import { createHash } from 'node:crypto';
import type { CompatDescriptor } from '../../src/compat/descriptor.js';

/** The runtime flags of a simulated launch that enter the hash, resolved by `simRuntimeFlags`. */
export interface SimHashFlags {
  /** `not scheduler_config.disable_hybrid_kv_cache_manager` as the launch ends up with it. */
  readonly hma: boolean;
  /** `kv_connector_extra_config.enable_cross_layers_blocks` in effect. */
  readonly crossLayersBlocks: boolean;
}

/**
 * The simulator's own reading of what a vLLM launch with `--kv-transfer-config` does with the flags the operator did
 * or did not give (`raw` is the descriptor as written, before kvgate's schema fills anything in):
 * - HMA: given -> as given; not given -> vLLM's config turns it off for a connector (vllm/config/vllm.py, "turn HMA
 *   off for connector unless specifically enabled") until PR #41847 keeps it on for SupportsHMA connectors (NIXL);
 *   the simulator dates that to 0.21.
 * - Cross-layer blocks: opt-in (`enable_cross_layers_blocks`, default "False", PR #33339).
 */
export function simRuntimeFlags(raw: unknown): SimHashFlags {
  const r = (raw ?? {}) as { hybridKvCacheManager?: unknown; crossLayersBlocks?: unknown; engine?: { version?: unknown } };
  const version = typeof r.engine?.version === 'string' ? r.engine.version : '';
  const m = /^(\d+)\.(\d+)/.exec(version);
  const hmaOnWithConnector = m === null || Number(m[1]) > 0 || Number(m[2]) >= 21;
  return {
    hma: typeof r.hybridKvCacheManager === 'boolean' ? r.hybridKvCacheManager : hmaOnWithConnector,
    crossLayersBlocks: r.crossLayersBlocks === true,
  };
}

/** Whether this vLLM build computes a compatibility hash at all (0.13 and later). */
export function simHasCompatHash(vllmVersion: string): boolean {
  const m = /^(\d+)\.(\d+)/.exec(vllmVersion);
  if (m === null) return true; // a dev build of main
  const major = Number(m[1]);
  const minor = Number(m[2]);
  return major > 0 || minor >= 13;
}

/** The factor dict the simulated worker's vLLM hashes; null when its vLLM has no hash. */
export function simHashFactors(d: CompatDescriptor, flags: SimHashFlags, evenWithoutHash = false): Record<string, unknown> | null {
  if (!evenWithoutHash && !simHasCompatHash(d.engine.version)) return null;
  const v = d.connector.version;
  const torch: Record<string, string> = {
    bfloat16: 'torch.bfloat16',
    bf16: 'torch.bfloat16',
    float16: 'torch.float16',
    fp16: 'torch.float16',
    half: 'torch.float16',
    float32: 'torch.float32',
    fp32: 'torch.float32',
    float: 'torch.float32',
  };
  const f: Record<string, unknown> = {
    vllm_version: d.engine.version,
    nixl_connector_version: v,
    model: d.model.path ?? d.model.id,
    dtype: torch[d.modelDtype.toLowerCase()] ?? d.modelDtype,
    num_kv_heads: d.architecture.numKvHeads,
    head_size: d.architecture.headSize,
    num_hidden_layers: d.architecture.numLayers,
    attn_backend_name: d.architecture.attentionBackend,
    cache_dtype: d.kvCache.dtype,
  };
  // v1/v2 single-file connector: cross_layers_blocks joined the factors with PR #33339 (0.16) without a version bump.
  const minor = /^0\.(\d+)/.exec(d.engine.version);
  const singleFileWithCrossLayers = v <= 2 && (minor === null || Number(minor[1]) >= 16);
  if ((v >= 3 && v <= 6) || singleFileWithCrossLayers) f['cross_layers_blocks'] = flags.crossLayersBlocks;
  // The split nixl/ package hashes is_hma_enabled while still v2 (nixl/utils.py and nixl/metadata.py @ fe6adf39);
  // its first release is taken as 0.18 (PR #35758's dates), as in src/compat/nixl-hash.ts.
  const splitV2WithHma = v === 2 && minor !== null && Number(minor[1]) >= 18;
  if (v >= 3 || splitV2WithHma) f['is_hma_enabled'] = flags.hma;
  if (v >= 6) f['speculative_config'] = d.speculative;
  if (v >= 7) f['transfer_mode'] = d.connector.transferMode;
  return f;
}

/** The hash the simulated worker serves on its side channel; null when its vLLM has none. */
export function simCompatHash(d: CompatDescriptor, flags: SimHashFlags, evenWithoutHash = false): string | null {
  const f = simHashFactors(d, flags, evenWithoutHash);
  return f === null ? null : createHash('sha256').update(pyDumps(f), 'utf8').digest('hex');
}

/** Python's json.dumps(sort_keys=True) for the values factors hold (str, int, bool, None, dicts, lists). */
function pyDumps(v: unknown): string {
  if (v === null || v === undefined) return 'null';
  if (typeof v === 'boolean') return v ? 'true' : 'false';
  if (typeof v === 'number') return Number.isInteger(v) ? String(v) : JSON.stringify(v);
  if (typeof v === 'string') {
    let out = '"';
    for (const ch of v) {
      const cp = ch.codePointAt(0)!;
      if (ch === '"' || ch === '\\') out += `\\${ch}`;
      else if (ch === '\n') out += '\\n';
      else if (ch === '\r') out += '\\r';
      else if (ch === '\t') out += '\\t';
      else if (ch === '\b') out += '\\b';
      else if (ch === '\f') out += '\\f';
      else if (cp < 0x20 || cp > 0x7e) {
        // ensure_ascii: astral characters as a UTF-16 surrogate pair, each \uXXXX
        for (const unit of cp > 0xffff ? [0xd800 + ((cp - 0x10000) >> 10), 0xdc00 + ((cp - 0x10000) & 0x3ff)] : [cp]) {
          out += `\\u${unit.toString(16).padStart(4, '0')}`;
        }
      } else out += ch;
    }
    return `${out}"`;
  }
  if (Array.isArray(v)) return `[${v.map(pyDumps).join(', ')}]`;
  const o = v as Record<string, unknown>;
  const keys = Object.keys(o).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${keys.map((k) => `${pyDumps(k)}: ${pyDumps(o[k])}`).join(', ')}}`;
}
