/**
 * The compatibility fingerprint: one SHA-256 over everything that decides what a KV block *means*, and the group
 * id derived from it.
 *
 * Two workers with equal fingerprints compute the same KV for the same token prefix, so a block from one is valid
 * input to the other. Everything that changes the meaning of the cache is in (`FINGERPRINT_FIELDS`, each with the
 * reason); everything that may safely differ between prefill and decode is out, so heterogeneous deployments
 * (different tensor-parallel sizes, block counts) still share a group.
 *
 * Decided exclusions, and where they are checked instead:
 * - `kvCache.blockSize`: a block size only pages the same per-token K/V differently. NixlConnector supports a
 *   prefill block size smaller than decode's (without HMA); `connector-rules.ts` checks that per pair.
 * - `model.path`: where the weights were loaded from does not change them (`model.id` + `model.revision` identify
 *   them). vLLM's NIXL handshake does hash the raw path, so `connector-rules.ts` compares the predicted NIXL hash.
 * - `parallel.tensorParallelSize`: vLLM validates heterogeneous TP at the handshake; KV meaning is unchanged.
 */
import { createHash } from 'node:crypto';
import type { CompatDescriptor } from './descriptor.js';
import { canonicalJson } from './canonical-json.js';
import { formatNormalizeIssues, normalizeDescriptor, type NormalizedDescriptor } from './normalize.js';
import { err, KvgateError, ok, type Result } from '../errors.js';
import { BoundedCache } from '../bounded-cache.js';

/** One fingerprinted field: where it lives in the normalised descriptor, its name for people, and why it is in. */
export interface FingerprintField {
  /** Dotted path in the normalised descriptor; a `null` on the way (no adapter) reads as `null`. */
  readonly path: string;
  /** Human-readable name used in error messages ("weights revision"). */
  readonly label: string;
  /** Why a difference in this field changes what the KV cache means. */
  readonly why: string;
}

/** Bumped if the fingerprinted subset or its encoding ever changes, so old and new fingerprints never collide. */
export const FINGERPRINT_SCHEME = 'kvgate.fingerprint.v1';

const f = (path: string, label: string, why: string): FingerprintField => Object.freeze({ path, label, why });

/** Everything the fingerprint covers. Adding a field changes every fingerprint (a deliberate, visible migration). */
export const FINGERPRINT_FIELDS: readonly FingerprintField[] = Object.freeze([
  f('model.id', 'model id', 'names the weights repository; the same revision string in two repositories is two sets of weights'),
  f(
    'model.revision',
    'weights revision',
    'K/V are projections of hidden states by these weights; another revision computes another cache for the same prefix',
  ),
  f(
    'adapter.id',
    'adapter id',
    'a LoRA adapter changes hidden states (and K/V projections when it targets them) from the first adapted layer on',
  ),
  f('adapter.revision', 'adapter revision', 'a retrained adapter is a different adapter with the same name'),
  f('tokenizer.id', 'tokenizer', 'the cache is keyed by token ids; another tokenizer turns the same text into another sequence'),
  f('tokenizer.revision', 'tokenizer revision', 'a tokenizer update can split the same text into different ids'),
  f('chatTemplate.id', 'chat template', 'the template renders messages into the prompt text that is tokenised and cached'),
  f('chatTemplate.revision', 'chat template revision', 'an edited template renders the same messages into different text'),
  f('architecture.name', 'architecture', 'the model class decides which layers produce K/V and how'),
  f('architecture.numLayers', 'number of layers', 'one KV entry per layer; a different count cannot line up'),
  f('architecture.numKvHeads', 'number of KV heads', 'the K/V tensor geometry per token'),
  f('architecture.headSize', 'head size', 'the K/V tensor geometry per head'),
  f('architecture.attentionBackend', 'attention backend', 'the backend owns the in-memory cache layout and the attention numerics'),
  f(
    'architecture.position.type',
    'position encoding',
    'RoPE is applied to K before it is cached; ALiBi/learned positions change hidden states',
  ),
  f('architecture.position.ropeTheta', 'RoPE theta', 'the rotary base frequency is baked into every cached K'),
  f('architecture.position.ropeScaling', 'RoPE scaling', 'scaled rotary positions are baked into every cached K'),
  f('architecture.slidingWindow', 'sliding window', 'decides which cached tokens are kept and attended'),
  f('modelDtype', 'model dtype', 'K/V are computed in this precision; bfloat16 and float16 give different values'),
  f('kvCache.dtype', 'KV cache dtype', 'the stored representation of K/V (e.g. bfloat16 vs fp8_e4m3)'),
  f('kvCache.scaleScheme', 'KV scale scheme', 'quantised K/V mean nothing without the scales used to write them'),
  f('kvCache.layout', 'KV cache layout', 'HND and NHD order the same bytes differently; a block read in the wrong layout is garbage'),
  f('engine.name', 'engine', 'the serving engine defines the cache format'),
  f('engine.version', 'engine version', 'kernels, cache format and the connector protocol change between releases'),
  f('connector.name', 'KV connector', 'the connector decides how blocks are moved and what is moved with them'),
  f('connector.version', 'KV connector version', 'the connector protocol (and which scales travel) changes between versions'),
  f('connector.transferMode', 'KV transfer mode', 'a push connector and a pull connector must never pair'),
  f('speculative', 'speculative decoding config', 'EAGLE/MTP draft models keep their own KV that is transferred too'),
  f('hybridKvCacheManager', 'hybrid KV cache manager (HMA)', 'HMA groups layers into different block tables; both sides must agree'),
]);

/** Read a dotted path; a missing or null step reads as null. */
export function readField(n: NormalizedDescriptor, path: string): unknown {
  let cur: unknown = n;
  for (const step of path.split('.')) {
    if (cur === null || typeof cur !== 'object') return null;
    cur = (cur as Record<string, unknown>)[step];
  }
  return cur === undefined ? null : cur;
}

/** The exact object that is hashed: the scheme tag and each fingerprinted field by path. */
export function fingerprintSubset(n: NormalizedDescriptor): Record<string, unknown> {
  const fields: Record<string, unknown> = {};
  for (const field of FINGERPRINT_FIELDS) fields[field.path] = readField(n, field.path);
  return { scheme: FINGERPRINT_SCHEME, fields };
}

/** SHA-256 hex of the canonical JSON of an already-normalised descriptor's fingerprinted subset. */
export function fingerprintOfNormalized(n: NormalizedDescriptor): string {
  return createHash('sha256')
    .update(canonicalJson(fingerprintSubset(n)), 'utf8')
    .digest('hex');
}

/**
 * The fingerprint as a Result, for callers validating untrusted descriptors (policy load, sidecar probes).
 * Errors name each offending field and the fix.
 */
export function tryFingerprintOf(d: CompatDescriptor): Result<string, KvgateError> {
  const n = normalizeDescriptor(d);
  if (!n.ok) {
    return err(new KvgateError('bad_request', `descriptor cannot be fingerprinted: ${formatNormalizeIssues(n.error).join('; ')}`));
  }
  return ok(fingerprintOfNormalized(n.value));
}

/**
 * SHA-256 hex over the canonical JSON of the normalised fingerprinted subset. Key order in the input never
 * matters. Throws a KvgateError for a descriptor that fails normalisation (validate with `normalizeDescriptor`
 * or `tryFingerprintOf` first; fingerprinting an unvalidated descriptor is a bug).
 */
export function fingerprintOf(d: CompatDescriptor): string {
  const r = tryFingerprintOf(d);
  if (!r.ok) throw r.error;
  return r.value;
}

/** Names for the two sides in `describeFingerprintDiff` messages, e.g. `{ a: 'prefill pool', b: 'decode pool' }`. */
export interface DiffSides {
  readonly a: string;
  readonly b: string;
}

/**
 * The fingerprinted fields that differ, one human-readable line each, for refusals a person can act on:
 * `weights revision: prefill pool runs "abc", decode pool runs "def"`. Empty when the fingerprints are equal.
 * A descriptor that cannot be normalised yields its normalisation issues instead.
 */
export function describeFingerprintDiff(a: CompatDescriptor, b: CompatDescriptor, sides?: DiffSides): string[] {
  const na = normalizeDescriptor(a);
  const nb = normalizeDescriptor(b);
  const names = sides ?? { a: 'one side', b: 'the other' };
  if (!na.ok || !nb.ok) {
    return [
      ...(na.ok ? [] : formatNormalizeIssues(na.error).map((m) => `${names.a}: ${m}`)),
      ...(nb.ok ? [] : formatNormalizeIssues(nb.error).map((m) => `${names.b}: ${m}`)),
    ];
  }
  const lines: string[] = [];
  for (const field of FINGERPRINT_FIELDS) {
    const va = canonicalJson(readField(na.value, field.path));
    const vb = canonicalJson(readField(nb.value, field.path));
    if (va !== vb) lines.push(`${field.label}: ${names.a} runs ${va}, ${names.b} runs ${vb}`);
  }
  return lines;
}

/** Prefix of every group id, so a group id is never mistaken for a fingerprint or a revision. */
export const GROUP_ID_PREFIX = 'g_';

/**
 * The compatibility group id (`x-kvgate-group`): `g_` + the first 24 hex digits (96 bits) of
 * sha256(fingerprint + "\n" + tenantScope). The tenant prefix scope is part of the group, so two tenants never
 * share a group (and therefore never a prefix cache entry) even on identical workers. 96 bits keep the header
 * short while making an accidental collision between groups negligible; it is an identifier, not a secret.
 */
export function groupIdOf(fingerprint: string, tenantScope: string): string {
  // Every decision asks for its group id; the (fingerprint, scope) pairs repeat, so the hash is kept per pair.
  return groupIds.get(`${fingerprint}\n${tenantScope}`, computeGroupId);
}

const groupIds = new BoundedCache<string>(4096);

function computeGroupId(input: string): string {
  return `${GROUP_ID_PREFIX}${createHash('sha256').update(input, 'utf8').digest('hex').slice(0, 24)}`;
}
