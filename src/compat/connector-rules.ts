/**
 * Connector capability rules: can this prefill worker's KV be moved to this decode worker by their connector, and
 * keep its meaning? Rules are keyed by connector name and the connector protocol versions they were checked
 * against. A version outside that range (or a connector with no rules) is a *recheck*: the limits are
 * implementation-specific and may change with the engine, so strict mode refuses and lenient mode warns.
 *
 * NixlConnector (vLLM `NIXL_CONNECTOR_VERSION` 1-13, see `nixl-hash.ts` and docs/vllm-disaggregation.md §2-§5):
 * - equal fingerprints (the generic rule, every connector), equal KV dtype, equal scale scheme;
 * - FP8 with `static-checkpoint` scales (each side loads them) or `packed` scales (they travel inline) is
 *   transferable; `dynamic-per-block` is not, because per-block scales are not transferred with the KV blocks;
 * - push and pull never pair;
 * - block sizes: equal, or prefill smaller than decode and only without the hybrid KV cache manager;
 * - vLLM's own handshake hash (predicted) must match, or the handshake would fail inside the decode worker.
 */
import type { CompatDescriptor } from './descriptor.js';
import { describeFingerprintDiff, fingerprintOfNormalized } from './fingerprint.js';
import { KNOWN_NIXL_VERSIONS, NEWEST_KNOWN_NIXL_VERSION, predictNixlHash, pythonJsonDumps } from './nixl-hash.js';
import { formatNormalizeIssues, normalizeDescriptor, type NormalizedDescriptor } from './normalize.js';

/** `strict`: an unverified connector version is refused. `lenient`: it is allowed with a warning. */
export type CompatMode = 'strict' | 'lenient';

export interface CompatVerdict {
  /** `recheck` only in lenient mode: allowed, but the rules were not written for this connector version. */
  verdict: 'ok' | 'refuse' | 'recheck';
  /** Why it is refused; empty unless `verdict` is `refuse`. */
  reasons: string[];
  warnings: string[];
}

/** A connector's rules for the versions in `[minVersion, maxVersion]`. */
export interface ConnectorRule {
  readonly name: string;
  readonly minVersion: number;
  readonly maxVersion: number;
  /** Reasons one side can never be disaggregated with this connector; `side` names it in messages. */
  checkOne(d: NormalizedDescriptor, raw: CompatDescriptor, side: string): Findings;
  /** Reasons this prefill/decode pair cannot transfer KV with this connector. */
  checkPair(prefill: NormalizedDescriptor, decode: NormalizedDescriptor, raw: RawPair): Findings;
}

export interface Findings {
  reasons: string[];
  warnings: string[];
}

export interface RawPair {
  readonly prefill: CompatDescriptor;
  readonly decode: CompatDescriptor;
}

const NIXL_DYNAMIC_SCALES =
  'KV uses dynamic per-block fp8 scales, which NixlConnector cannot disaggregate: per-block scales are not ' +
  'transferred with the KV blocks, so the decode side would dequantise with scales it never saw. Use static ' +
  'checkpoint scales, packed scales or an unquantised KV cache for this revision, or serve it without disaggregation';

function nixlCheckOne(d: NormalizedDescriptor, raw: CompatDescriptor, side: string): Findings {
  const reasons: string[] = [];
  const warnings: string[] = [];
  if (d.kvCache.scaleScheme === 'dynamic-per-block') reasons.push(`${side}: ${NIXL_DYNAMIC_SCALES}`);
  const prediction = predictNixlHash(raw);
  if (prediction.status === 'interpolated' && prediction.reason !== undefined) {
    warnings.push(`${side}: ${prediction.reason}; the predicted handshake hash is a best effort`);
  }
  return { reasons, warnings };
}

function nixlCheckPair(p: NormalizedDescriptor, d: NormalizedDescriptor, raw: RawPair): Findings {
  const reasons: string[] = [];
  if (p.kvCache.dtype !== d.kvCache.dtype) {
    reasons.push(
      `KV cache dtype: prefill ${p.kvCache.dtype}, decode ${d.kvCache.dtype}; NixlConnector requires the same cache_dtype on both sides`,
    );
  }
  if (p.kvCache.scaleScheme !== d.kvCache.scaleScheme) {
    reasons.push(
      `KV scale scheme: prefill ${p.kvCache.scaleScheme}, decode ${d.kvCache.scaleScheme}; both sides must quantise KV the same way`,
    );
  }
  if (p.connector.transferMode !== d.connector.transferMode) {
    reasons.push(
      `transfer mode: prefill ${p.connector.transferMode}, decode ${d.connector.transferMode}; a push connector and a pull connector never pair`,
    );
  }
  reasons.push(...blockSizeReasons(p, d));
  reasons.push(...nixlHashReasons(raw));
  return { reasons, warnings: [] };
}

function blockSizeReasons(p: NormalizedDescriptor, d: NormalizedDescriptor): string[] {
  const pb = p.kvCache.blockSize;
  const db = d.kvCache.blockSize;
  if (pb > db) {
    return [`block size: prefill ${pb} > decode ${db}; NixlConnector supports only a prefill block size smaller than or equal to decode's`];
  }
  if (pb < db && (p.hybridKvCacheManager || d.hybridKvCacheManager)) {
    return [
      `block size: prefill ${pb}, decode ${db}; different block sizes need the hybrid KV cache manager off on both sides (vLLM: "HMA does not support different remote block size yet")`,
    ];
  }
  return [];
}

function nixlHashReasons(raw: RawPair): string[] {
  const hp = predictNixlHash(raw.prefill);
  const hd = predictNixlHash(raw.decode);
  if (hp.hash === hd.hash) return [];
  const keys = [...new Set([...Object.keys(hp.factors), ...Object.keys(hd.factors)])].sort();
  const differing = keys
    .filter((k) => pythonJsonDumps(hp.factors[k]) !== pythonJsonDumps(hd.factors[k]))
    .map((k) => `${k} ${pythonJsonDumps(hp.factors[k])} vs ${pythonJsonDumps(hd.factors[k])}`);
  return [
    `vLLM's NIXL handshake would reject this pair (compatibility hash ${hp.hash.slice(0, 12)}… vs ${hd.hash.slice(0, 12)}…); ` +
      `differing factors: ${differing.join(', ')}. Declare identical raw values (model path, --kv-cache-dtype, backend) on both pools`,
  ];
}

/** NixlConnector, checked against vLLM's NIXL_CONNECTOR_VERSION 1-13. */
export const NIXL_RULE: ConnectorRule = Object.freeze({
  name: 'NixlConnector',
  minVersion: Math.min(...KNOWN_NIXL_VERSIONS),
  maxVersion: NEWEST_KNOWN_NIXL_VERSION,
  checkOne: nixlCheckOne,
  checkPair: nixlCheckPair,
});

/** Every connector kvgate has rules for. */
export const CONNECTOR_RULES: readonly ConnectorRule[] = Object.freeze([NIXL_RULE]);

export function findConnectorRule(name: string): ConnectorRule | undefined {
  return CONNECTOR_RULES.find((r) => r.name === name);
}

/** A recheck message when no rule covers this connector version, else undefined. */
function recheckMessage(d: CompatDescriptor): string | undefined {
  const { name, version } = d.connector;
  const rule = findConnectorRule(name);
  const why =
    'This is an implementation-specific limit to recheck when the engine version changes: ' +
    `recheck the connector's limits (FP8 scale transfer, handshake factors, block sizes) for vLLM ${d.engine.version} / ${name} v${version} ` +
    "and extend kvgate's connector rules, or run in lenient mode to accept the risk";
  if (rule === undefined) return `kvgate has no capability rules for connector ${name}. ${why}`;
  if (version < rule.minVersion || version > rule.maxVersion) {
    return `${name} v${version} is outside the versions kvgate's rules were checked against (v${rule.minVersion}-v${rule.maxVersion}). ${why}`;
  }
  return undefined;
}

function conclude(reasons: string[], warnings: string[], recheck: string[], mode: CompatMode): CompatVerdict {
  if (mode === 'strict' && recheck.length > 0) reasons.push(...recheck);
  if (reasons.length > 0) return { verdict: 'refuse', reasons, warnings: mode === 'strict' ? warnings : [...recheck, ...warnings] };
  if (recheck.length > 0) return { verdict: 'recheck', reasons: [], warnings: [...recheck, ...warnings] };
  return { verdict: 'ok', reasons: [], warnings };
}

/**
 * Can this revision be disaggregated at all with its connector? (E.g. a revision whose KV uses dynamic per-block
 * fp8 scales can never be disaggregated over NIXL.) Checked at policy load for every revision and pool.
 */
export function checkDescriptor(d: CompatDescriptor, mode: CompatMode): CompatVerdict {
  const n = normalizeDescriptor(d);
  if (!n.ok) return { verdict: 'refuse', reasons: formatNormalizeIssues(n.error), warnings: [] };
  const recheck = recheckMessage(d);
  const rule = findConnectorRule(d.connector.name);
  const found = rule === undefined ? { reasons: [], warnings: [] } : rule.checkOne(n.value, d, 'descriptor');
  return conclude(found.reasons, found.warnings, recheck === undefined ? [] : [recheck], mode);
}

/**
 * Can KV computed by `prefill` be consumed by `decode`? Fingerprints must be equal (the differing fields are named),
 * then the connector's own rules apply. Rules still run for unverified versions, so lenient mode never waives a
 * known limit; it only accepts that unknown limits may exist.
 */
export function checkTransfer(prefill: CompatDescriptor, decode: CompatDescriptor, mode: CompatMode): CompatVerdict {
  const np = normalizeDescriptor(prefill);
  const nd = normalizeDescriptor(decode);
  if (!np.ok || !nd.ok) {
    return { verdict: 'refuse', reasons: describeFingerprintDiff(prefill, decode, { a: 'prefill', b: 'decode' }), warnings: [] };
  }
  const reasons: string[] = [];
  const warnings: string[] = [];
  const fp = fingerprintOfNormalized(np.value);
  const fd = fingerprintOfNormalized(nd.value);
  if (fp !== fd) {
    reasons.push(
      `prefill and decode fingerprints differ (${fp.slice(0, 12)}… vs ${fd.slice(0, 12)}…): KV from this prefill would mean something else to this decode`,
    );
    reasons.push(...describeFingerprintDiff(prefill, decode, { a: 'prefill', b: 'decode' }));
  }
  const recheck = [...new Set([recheckMessage(prefill), recheckMessage(decode)].filter((m) => m !== undefined))];
  const rule = prefill.connector.name === decode.connector.name ? findConnectorRule(prefill.connector.name) : undefined;
  if (rule !== undefined) {
    for (const found of [
      rule.checkOne(np.value, prefill, 'prefill'),
      rule.checkOne(nd.value, decode, 'decode'),
      rule.checkPair(np.value, nd.value, { prefill, decode }),
    ]) {
      reasons.push(...found.reasons);
      warnings.push(...found.warnings);
    }
  }
  return conclude(reasons, [...new Set(warnings)], recheck, mode);
}
