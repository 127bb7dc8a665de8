/**
 * A prediction of vLLM's own NIXL compatibility hash (`compute_nixl_compatibility_hash`), so that a pool whose
 * members would fail the handshake at run time is caught when the route table loads, and so the simulator can run
 * the same handshake vLLM runs.
 *
 * vLLM computes `hashlib.sha256(json.dumps(factors, sort_keys=True).encode()).hexdigest()` (`hash_factors()` in
 * `vllm/config/utils.py`). `pythonJsonDumps` reproduces Python's default `json.dumps` byte for byte for the
 * values that occur in factors (see docs/vllm-disaggregation.md §3 and the vectors in the tests).
 */
import { createHash } from 'node:crypto';
import type { CompatDescriptor } from './descriptor.js';
import { vllmAtLeast } from './vllm-defaults.js';

/**
 * Which factor set each NIXL_CONNECTOR_VERSION hashes.
 * - `read`: the factor dict was read in vLLM's source at that version.
 * - `interpolated`: between two read versions; the set follows the version history comments and must be rechecked.
 */
export interface FactorSet {
  readonly crossLayersBlocks: boolean;
  readonly hma: boolean;
  readonly speculative: boolean;
  readonly transferMode: boolean;
  readonly provenance: 'read' | 'interpolated';
}

const BASE = { crossLayersBlocks: false, hma: false, speculative: false, transferMode: false } as const;

/** Keyed by connector version. Versions outside this table yield `status: 'recheck'`. */
export const NIXL_FACTOR_SETS: Readonly<Record<number, FactorSet>> = Object.freeze({
  1: { ...BASE, provenance: 'interpolated' },
  // Single-file connector @ 002a1057; the same version number later gained cross_layers_blocks (vLLM 0.16) and
  // is_hma_enabled (the split nixl/ package, vLLM 0.18), see `v2FlagsByRelease`.
  2: { ...BASE, provenance: 'read' },
  3: { ...BASE, crossLayersBlocks: true, hma: true, provenance: 'interpolated' },
  // The dict of the split v2 package (nixl/metadata.py @ fe6adf39 is still v2); no v4 copy was read.
  4: { ...BASE, crossLayersBlocks: true, hma: true, provenance: 'interpolated' },
  5: { ...BASE, crossLayersBlocks: true, hma: true, provenance: 'interpolated' },
  6: { ...BASE, crossLayersBlocks: true, hma: true, speculative: true, provenance: 'interpolated' },
  7: { ...BASE, hma: true, speculative: true, transferMode: true, provenance: 'interpolated' },
  8: { ...BASE, hma: true, speculative: true, transferMode: true, provenance: 'interpolated' },
  9: { ...BASE, hma: true, speculative: true, transferMode: true, provenance: 'interpolated' },
  10: { ...BASE, hma: true, speculative: true, transferMode: true, provenance: 'interpolated' },
  11: { ...BASE, hma: true, speculative: true, transferMode: true, provenance: 'interpolated' },
  12: { ...BASE, hma: true, speculative: true, transferMode: true, provenance: 'read' }, // nixl/metadata.py @ 02cfb534
  // v13 ("packed-member layouts and order-independent packed-push backend hashes"): the same dict as v12, read at
  // vllm-project/vllm nixl/metadata.py @ 73ee90a0b209425fdd374f751d19686127985dd4.
  13: { ...BASE, hma: true, speculative: true, transferMode: true, provenance: 'read' },
});

export const KNOWN_NIXL_VERSIONS = Object.keys(NIXL_FACTOR_SETS).map(Number);
export const NEWEST_KNOWN_NIXL_VERSION = Math.max(...KNOWN_NIXL_VERSIONS);

export interface NixlHashPrediction {
  /** sha256 hex digest, as vLLM logs it. */
  readonly hash: string;
  /** The exact factor dict that was hashed. */
  readonly factors: Readonly<Record<string, unknown>>;
  /** `known`: factor set read in vLLM's source; `interpolated`/`recheck`: see `reason`. */
  readonly status: 'known' | 'interpolated' | 'recheck';
  readonly reason?: string;
}

/** `str(torch.dtype)` for the spellings vLLM accepts on `--dtype`. */
const TORCH_DTYPE: Readonly<Record<string, string>> = {
  bfloat16: 'torch.bfloat16',
  bf16: 'torch.bfloat16',
  float16: 'torch.float16',
  fp16: 'torch.float16',
  half: 'torch.float16',
  float32: 'torch.float32',
  float: 'torch.float32',
  fp32: 'torch.float32',
};

export function torchDtypeString(modelDtype: string): string | undefined {
  const lower = modelDtype.toLowerCase();
  return lower.startsWith('torch.') ? lower : TORCH_DTYPE[lower];
}

/**
 * The factor dict vLLM would hash for this descriptor. For versions newer than the table, the newest known set is
 * used and the result is marked `recheck`.
 */
export function nixlFactors(d: CompatDescriptor): { factors: Record<string, unknown>; set: FactorSet; known: boolean } {
  const v = d.connector.version;
  const known = Object.hasOwn(NIXL_FACTOR_SETS, v);
  const set = NIXL_FACTOR_SETS[known ? v : NEWEST_KNOWN_NIXL_VERSION]!;
  const factors: Record<string, unknown> = {
    vllm_version: d.engine.version,
    nixl_connector_version: v,
    model: d.model.path ?? d.model.id,
    dtype: torchDtypeString(d.modelDtype) ?? d.modelDtype,
    num_kv_heads: d.architecture.numKvHeads,
    head_size: d.architecture.headSize,
    num_hidden_layers: d.architecture.numLayers,
    attn_backend_name: d.architecture.attentionBackend,
    cache_dtype: d.kvCache.dtype,
  };
  const v2 = v2FlagsByRelease(d);
  if (set.crossLayersBlocks || v2.crossLayersBlocks) factors['cross_layers_blocks'] = d.crossLayersBlocks;
  if (set.hma || v2.hma) factors['is_hma_enabled'] = d.hybridKvCacheManager;
  if (set.speculative) factors['speculative_config'] = d.speculative;
  if (set.transferMode) factors['transfer_mode'] = d.connector.transferMode;
  return { factors, set, known };
}

/**
 * Connector v2 gained two factors without a connector version bump, so its factor set depends on the vLLM release:
 * - `cross_layers_blocks`: PR #33339 (merged February 2026, first release taken as 0.16) passes it to
 *   `compute_nixl_compatibility_hash` in the single-file `v1/nixl_connector.py`;
 * - `is_hma_enabled`: hashed by the split `nixl/` package, whose `nixl/utils.py` @fe6adf39 still declares
 *   `NIXL_CONNECTOR_VERSION = 2` while `nixl/metadata.py` @fe6adf39 hashes the flag (no single-file copy does:
 *   @002a1057, @0f120751, the 0.16 ones). It came with HMA support for NixlConnector (PR #35758, opened
 *   2026-03-02, merged before PR #39269 of 2026-04-08 calls NixlConnector `SupportsHMA`); 0.18 is taken as the first
 *   release from those dates, not from a release tag, so v2 predictions from 0.17 on are `interpolated`.
 */
function v2FlagsByRelease(d: CompatDescriptor): { crossLayersBlocks: boolean; hma: boolean; uncertain: boolean } {
  if (d.connector.version > 2) return { crossLayersBlocks: false, hma: false, uncertain: false };
  return {
    crossLayersBlocks: vllmAtLeast(d.engine.version, 0, 16),
    hma: d.connector.version === 2 && vllmAtLeast(d.engine.version, 0, 18),
    uncertain: d.connector.version === 2 && vllmAtLeast(d.engine.version, 0, 17),
  };
}

export function predictNixlHash(d: CompatDescriptor): NixlHashPrediction {
  const { factors, set, known } = nixlFactors(d);
  const hash = sha256Hex(pythonJsonDumps(factors));
  if (!known) {
    return {
      hash,
      factors,
      status: 'recheck',
      reason:
        `NIXL connector version ${d.connector.version} is outside the versions kvgate knows ` +
        `(${Math.min(...KNOWN_NIXL_VERSIONS)}-${NEWEST_KNOWN_NIXL_VERSION}); the prediction uses the v${NEWEST_KNOWN_NIXL_VERSION} ` +
        `factor set and must be rechecked against vLLM ${d.engine.version}`,
    };
  }
  if (set.provenance === 'interpolated') {
    return {
      hash,
      factors,
      status: 'interpolated',
      reason: `the factor set of NIXL connector v${d.connector.version} is interpolated from the versions read in vLLM's source`,
    };
  }
  if (v2FlagsByRelease(d).uncertain) {
    return {
      hash,
      factors,
      status: 'interpolated',
      reason:
        `NIXL connector v2 began hashing is_hma_enabled without a version bump, in a release taken as 0.18 from PR dates; ` +
        `for vLLM ${d.engine.version} the prediction ${'is_hma_enabled' in factors ? 'includes' : 'leaves out'} that factor`,
    };
  }
  return { hash, factors, status: 'known' };
}

/**
 * Which declared runtime flags would explain a hash the live worker serves: the prediction is recomputed with each
 * flag vLLM hashes flipped (hybrid KV cache manager, cross-layer blocks, transfer mode, speculative config off), and every variant that
 * reproduces `observed` is named. Empty when none does (then the difference is elsewhere: version, model string...).
 */
export function explainNixlHash(d: CompatDescriptor, observed: string): string[] {
  const { factors } = nixlFactors(d);
  const out: string[] = [];
  const variants: [string, CompatDescriptor][] = [
    ['is_hma_enabled', { ...d, hybridKvCacheManager: !d.hybridKvCacheManager }],
    ['cross_layers_blocks', { ...d, crossLayersBlocks: !d.crossLayersBlocks }],
    ['transfer_mode', { ...d, connector: { ...d.connector, transferMode: d.connector.transferMode === 'pull' ? 'push' : 'pull' } }],
  ];
  if (d.speculative !== null) variants.push(['speculative_config', { ...d, speculative: null }]);
  for (const [factor, variant] of variants) {
    if (!(factor in factors)) continue;
    const v = nixlFactors(variant).factors[factor];
    if (predictNixlHash(variant).hash === observed) {
      out.push(`${factor}: the worker hashes ${JSON.stringify(v)}, the descriptor declares ${JSON.stringify(factors[factor])}`);
    }
  }
  return out;
}

export function sha256Hex(text: string): string {
  return createHash('sha256').update(text, 'utf8').digest('hex');
}

/**
 * Python's `json.dumps(value, sort_keys=True)` with default arguments: separators `', '` and `': '`,
 * `ensure_ascii=True`, keys sorted by code point. Integral numbers print as Python ints (JS cannot tell `1` from
 * `1.0`; factors only ever hold ints there); other numbers as Python's `repr(float)`.
 * Throws on non-finite numbers (Python writes `NaN`, but it never appears in factors, so it is refused here).
 */
export function pythonJsonDumps(value: unknown): string {
  if (value === null || value === undefined) return 'null';
  if (value === true) return 'true';
  if (value === false) return 'false';
  if (typeof value === 'number') return pythonNumber(value);
  if (typeof value === 'string') return pythonString(value);
  if (Array.isArray(value)) return `[${value.map(pythonJsonDumps).join(', ')}]`;
  if (typeof value === 'object') {
    const keys = Object.keys(value).sort(compareCodePoints);
    const parts = keys.map((k) => `${pythonString(k)}: ${pythonJsonDumps((value as Record<string, unknown>)[k])}`);
    return `{${parts.join(', ')}}`;
  }
  throw new TypeError(`pythonJsonDumps: unsupported value of type ${typeof value}`);
}

function pythonNumber(n: number): string {
  if (!Number.isFinite(n)) throw new TypeError('pythonJsonDumps: non-finite numbers never appear in NIXL factors');
  // JS has one number type: an integral value is written as a Python int (factor counts and ids are ints).
  if (Object.is(n, -0)) return '-0.0';
  if (Number.isInteger(n)) return BigInt(n).toString();
  return pythonFloatRepr(n);
}

/**
 * Python's `repr(float)`: the shortest round-trip digits (which JS also produces), written in fixed notation when
 * the decimal exponent is in [-4, 16) and in scientific notation otherwise (`1e-05`, `1.5e+16`).
 */
export function pythonFloatRepr(n: number): string {
  const [mantissa = '', expText = '0'] = n.toExponential().split('e');
  const exp = Number(expText);
  const negative = mantissa.startsWith('-');
  const digits = mantissa.replace('-', '').replace('.', '');
  const sign = negative ? '-' : '';
  if (exp < -4 || exp >= 16) {
    const m = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
    return `${sign}${m}e${exp < 0 ? '-' : '+'}${String(Math.abs(exp)).padStart(2, '0')}`;
  }
  if (exp < 0) return `${sign}0.${'0'.repeat(-exp - 1)}${digits}`;
  const intPart = digits.slice(0, exp + 1).padEnd(exp + 1, '0');
  const frac = digits.slice(exp + 1);
  return `${sign}${intPart}.${frac === '' ? '0' : frac}`;
}

function pythonString(s: string): string {
  let out = '"';
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    const ch = s[i]!;
    if (ch === '"') out += '\\"';
    else if (ch === '\\') out += '\\\\';
    else if (ch === '\n') out += '\\n';
    else if (ch === '\r') out += '\\r';
    else if (ch === '\t') out += '\\t';
    else if (ch === '\b') out += '\\b';
    else if (ch === '\f') out += '\\f';
    else if (c < 0x20 || c > 0x7e) out += `\\u${c.toString(16).padStart(4, '0')}`;
    else out += ch;
  }
  return `${out}"`;
}

function compareCodePoints(a: string, b: string): number {
  const ai = [...a];
  const bi = [...b];
  for (let i = 0; i < Math.min(ai.length, bi.length); i++) {
    const d = ai[i]!.codePointAt(0)! - bi[i]!.codePointAt(0)!;
    if (d !== 0) return d;
  }
  return ai.length - bi.length;
}
