/**
 * The pure half of probing: what the live worker showed (an `Observation`) against what its operators declared (a
 * descriptor) -> verified or not, with one reason per disagreeing field.
 *
 * A worker is verified only when every field an endpoint exposes agrees with the declaration. Fields no endpoint
 * exposes are listed in `declaredOnly`: they are taken on trust, and the status says so, instead of being counted as
 * checked. A probe that could not measure something the declaration promises evidence for (a canary digest, the
 * version) is a disagreement: fail closed.
 */
import type { CompatDescriptor } from '../compat/descriptor.js';
import { FINGERPRINT_FIELDS } from '../compat/fingerprint.js';
import { isQuantizedKvDtype, normalizeId, normalizeKvDtype, normalizeKvLayout, normalizeModelDtype } from '../compat/normalize.js';
import { explainNixlHash, predictNixlHash } from '../compat/nixl-hash.js';
import type { CanaryKind } from './canaries.js';
import { engineLaunchId } from './engine-canary.js';

/** One probe step's outcome: its value, or why it could not be measured. */
export type Probed<T> = { readonly ok: true; readonly value: T } | { readonly ok: false; readonly error: string };

/** A `/v1/models` card, as far as identity goes. */
export interface ModelCard {
  readonly id: string;
  readonly root: string | null;
  readonly parent: string | null;
  readonly maxModelLen: number | null;
}

/** Everything one probe round saw. A step that was not attempted is undefined. */
export interface Observation {
  /** Set when the worker could not be reached at all; every other step is then meaningless. */
  readonly down?: string;
  readonly version?: Probed<string>;
  readonly models?: Probed<readonly ModelCard[]>;
  /** Labels of `vllm:cache_config_info`; `null` when the metric is absent. */
  readonly cacheConfig?: Probed<Readonly<Record<string, string>> | null>;
  readonly canaries?: Partial<Record<CanaryKind, Probed<string>>>;
  /** The NIXL engine id the engine canary read (prefill role; engine-canary.ts); undefined when not attempted. */
  readonly engineId?: Probed<string>;
  /** The compatibility hash the worker's NIXL side channel serves (nixl-side-channel.ts); undefined when not read. */
  readonly nixlHash?: { readonly sideChannel: string; readonly observed: Probed<string>; readonly engineId?: string };
}

/** One field the live worker showed with another value than declared: what a lying worker is named by. */
export interface FieldMismatch {
  /** The descriptor path (or `canaries.<kind>`, `nixlHash`). */
  readonly field: string;
  readonly declared: unknown;
  readonly observed: unknown;
}

export interface ProbeVerdict {
  readonly verified: boolean;
  /** The fields whose live value differs from the declaration, with both values (reasons say what it means). */
  readonly mismatches?: readonly FieldMismatch[];
  /** One line per disagreement, naming the field, both values, and what it means. Empty when verified. */
  readonly reasons: readonly string[];
  /** What was measured, by descriptor path (plus a few facts with no descriptor field, e.g. `maxModelLen`). */
  readonly measured: Readonly<Record<string, unknown>>;
  /** Descriptor paths that no probe could confirm: taken from the declaration, not verified. */
  readonly declaredOnly: readonly string[];
}

/** Options the comparison needs beyond the descriptor. */
export interface CompareOptions {
  /** The `--served-model-name` the worker must serve, when the sidecar config names one. */
  readonly servedModelName?: string;
  /**
   * Safe by default (sidecar `trust: recorded`): a descriptor without a recorded canary digest cannot be verified,
   * because the fields that digest stands for (weights, adapter, tokenizer, chat template) would be taken on trust.
   */
  readonly requireRecorded?: boolean;
}

/** Every descriptor path a probe could in principle confirm; the rest of the fingerprint is always declared-only. */
const CHECKABLE_PATHS: readonly string[] = [...FINGERPRINT_FIELDS.map((f) => f.path), 'model.path', 'kvCache.blockSize'];

interface Acc {
  reasons: string[];
  mismatches: FieldMismatch[];
  measured: Record<string, unknown>;
  verified: Set<string>;
}

/** How a verdict's reasons begin when the worker did not answer the probe at all. */
const WORKER_DOWN_REASON = 'the worker is down or unreachable';

/** Compare one probe round with the declaration. Pure and total: every observation yields a verdict. */
export function compareObservation(d: CompatDescriptor, o: Observation, opts: CompareOptions = {}): ProbeVerdict {
  const acc: Acc = { reasons: [], mismatches: [], measured: {}, verified: new Set() };
  if (o.down !== undefined) {
    acc.reasons.push(`${WORKER_DOWN_REASON}: ${o.down}`);
  } else {
    compareVersion(d, o.version, acc);
    compareModels(d, o.models, opts, acc);
    compareCacheConfig(d, o.cacheConfig, acc);
    compareCanaries(d, o.canaries ?? {}, acc, opts.requireRecorded === true);
    compareEngineId(o.engineId, acc);
    compareNixlHash(d, o.nixlHash, o.engineId, acc);
  }
  const declaredOnly = CHECKABLE_PATHS.filter((p) => !acc.verified.has(p) && isDeclared(d, p));
  const verified = acc.reasons.length === 0;
  return { verified, reasons: acc.reasons, mismatches: acc.mismatches, measured: acc.measured, declaredOnly };
}

function isDeclared(d: CompatDescriptor, path: string): boolean {
  if (path === 'model.path') return d.model.path !== undefined;
  if (path.startsWith('adapter.')) return d.adapter !== null;
  return true;
}

function compareVersion(d: CompatDescriptor, version: Probed<string> | undefined, acc: Acc): void {
  if (version === undefined) return;
  if (!version.ok) {
    acc.reasons.push(`engine version: GET /version failed (${version.error}); the declared vLLM ${d.engine.version} cannot be confirmed`);
    return;
  }
  acc.measured['engine.version'] = version.value;
  if (version.value !== d.engine.version) {
    acc.mismatches.push({ field: 'engine.version', declared: d.engine.version, observed: version.value });
    acc.reasons.push(
      `engine version: the worker reports vLLM ${JSON.stringify(version.value)} (GET /version), the descriptor declares ` +
        `${JSON.stringify(d.engine.version)}; kernels, cache format and the NIXL handshake differ between releases`,
    );
    return;
  }
  acc.verified.add('engine.version');
}

/** The base-model card this worker should serve: by served name when configured, else by root = model path. */
export function findBaseCard(d: CompatDescriptor, cards: readonly ModelCard[], servedModelName?: string): ModelCard | undefined {
  const bases = cards.filter((c) => c.parent === null);
  if (servedModelName !== undefined) return bases.find((c) => c.id === servedModelName);
  const expected = normalizeId(d.model.path ?? d.model.id);
  return bases.find((c) => c.root !== null && normalizeId(c.root) === expected) ?? bases.find((c) => c.id === expected) ?? bases[0];
}

/** The LoRA card of the declared adapter, matched by card id or root path. */
export function findAdapterCard(d: CompatDescriptor, cards: readonly ModelCard[]): ModelCard | undefined {
  if (d.adapter === null) return undefined;
  const want = normalizeId(d.adapter.id);
  return cards.find((c) => c.parent !== null && (c.id === want || (c.root !== null && normalizeId(c.root) === want)));
}

function compareModels(d: CompatDescriptor, models: Probed<readonly ModelCard[]> | undefined, opts: CompareOptions, acc: Acc): void {
  if (models === undefined) return;
  if (!models.ok) {
    acc.reasons.push(`model: GET /v1/models failed (${models.error}); the served model cannot be confirmed`);
    return;
  }
  const cards = models.value;
  acc.measured['models'] = cards.map((c) => ({ id: c.id, root: c.root, parent: c.parent }));
  const listed = cards.map((c) => `${c.id} (root ${c.root ?? 'none'})`).join(', ') || 'none';
  const base = findBaseCard(d, cards, opts.servedModelName);
  if (base === undefined) {
    const what = opts.servedModelName !== undefined ? `served model name ${JSON.stringify(opts.servedModelName)}` : 'a base model';
    acc.reasons.push(
      `model: the worker does not serve ${what} (GET /v1/models lists ${listed}); check --served-model-name and the sidecar's descriptor`,
    );
    return;
  }
  acc.measured['servedModelName'] = base.id;
  acc.measured['model.root'] = base.root;
  if (base.maxModelLen !== null) acc.measured['maxModelLen'] = base.maxModelLen;
  const expected = normalizeId(d.model.path ?? d.model.id);
  const path = d.model.path !== undefined ? 'model.path' : 'model.id';
  if (base.root === null || normalizeId(base.root) !== expected) {
    acc.mismatches.push({ field: path, declared: expected, observed: base.root });
    acc.reasons.push(
      `model: the worker serves ${JSON.stringify(base.root)} as ${JSON.stringify(base.id)} (GET /v1/models root), the descriptor ` +
        `declares ${path} ${JSON.stringify(expected)}; this worker runs other weights than its label says`,
    );
  } else {
    acc.verified.add(path);
  }
  compareAdapter(d, cards, listed, acc);
}

function compareAdapter(d: CompatDescriptor, cards: readonly ModelCard[], listed: string, acc: Acc): void {
  acc.measured['adapters'] = cards.filter((c) => c.parent !== null).map((c) => c.id);
  if (d.adapter === null) return;
  const card = findAdapterCard(d, cards);
  if (card === undefined) {
    acc.mismatches.push({ field: 'adapter.id', declared: d.adapter.id, observed: cards.filter((c) => c.parent !== null).map((c) => c.id) });
    acc.reasons.push(
      `adapter: the worker serves no LoRA card for ${JSON.stringify(d.adapter.id)} (GET /v1/models lists ${listed}); load the declared adapter or fix the descriptor`,
    );
    return;
  }
  acc.verified.add('adapter.id');
}

/** `str(value)` of a Python `None`/number, as vLLM writes cache-config labels. */
function pyOptionalInt(label: string | undefined): number | null | undefined {
  if (label === undefined) return undefined;
  if (label === 'None' || label === '') return null;
  const n = Number(label);
  return Number.isInteger(n) ? n : undefined;
}

function compareCacheConfig(d: CompatDescriptor, probed: Probed<Readonly<Record<string, string>> | null> | undefined, acc: Acc): void {
  if (probed === undefined) return;
  if (!probed.ok) {
    acc.reasons.push(`KV cache config: GET /metrics failed (${probed.error}); vllm:cache_config_info cannot be read`);
    return;
  }
  const labels = probed.value;
  if (labels === null) return; // an engine without the metric: every cache field stays declared-only
  acc.measured['cacheConfig'] = { ...labels };
  const mismatch = (label: string, key: string, seen: unknown, declared: unknown, why: string): void => {
    acc.mismatches.push({ field: CACHE_LABEL_FIELD[key] ?? key, declared, observed: seen });
    acc.reasons.push(
      `${label}: the worker's vllm:cache_config_info says ${key}=${JSON.stringify(seen)}, the descriptor declares ${JSON.stringify(declared)}; ${why}`,
    );
  };
  compareCacheDtype(d, labels['cache_dtype'], acc, mismatch);
  const block = pyOptionalInt(labels['block_size']);
  if (typeof block === 'number') {
    acc.measured['kvCache.blockSize'] = block;
    if (block !== d.kvCache.blockSize)
      mismatch(
        'KV block size',
        'block_size',
        block,
        d.kvCache.blockSize,
        'the attested block size would be wrong and NIXL block pairing fails',
      );
    else acc.verified.add('kvCache.blockSize');
  }
  const layout = labels['kv_cache_layout'];
  if (layout !== undefined && layout !== 'None') {
    acc.measured['kvCache.layout'] = layout;
    // Current vLLM reports LBHNC/LBNHC for what older versions (and descriptors) call HND/NHD.
    if (normalizeKvLayout(layout) !== normalizeKvLayout(d.kvCache.layout)) {
      mismatch('KV cache layout', 'kv_cache_layout', layout, d.kvCache.layout, 'the two layouts order the same bytes differently');
    } else acc.verified.add('kvCache.layout');
  }
  compareScales(d, labels['calculate_kv_scales'], acc, mismatch);
  compareSlidingWindow(d, pyOptionalInt(labels['sliding_window']), acc, mismatch);
  const prefix = labels['enable_prefix_caching'];
  if (prefix !== undefined) acc.measured['enablePrefixCaching'] = prefix === 'True';
}

/** `vllm:cache_config_info` label -> the descriptor path it shows. */
const CACHE_LABEL_FIELD: Readonly<Record<string, string>> = {
  cache_dtype: 'kvCache.dtype',
  block_size: 'kvCache.blockSize',
  kv_cache_layout: 'kvCache.layout',
  calculate_kv_scales: 'kvCache.scaleScheme',
  sliding_window: 'architecture.slidingWindow',
};

type Mismatch = (label: string, key: string, seen: unknown, declared: unknown, why: string) => void;

/**
 * vLLM copies a sliding window into `CacheConfig.sliding_window` only when EVERY attention layer slides; a model that
 * mixes sliding and full layers (Gemma 2/3 style) reports `None`, as does a model without any window
 * (`ModelConfig.get_sliding_window` in vllm-project/vllm `vllm/config/model.py`, v0.11.0 to main). So `None` is no
 * evidence either way (the window stays declared-only), and a number must equal the declared window.
 */
function compareSlidingWindow(d: CompatDescriptor, window: number | null | undefined, acc: Acc, mismatch: Mismatch): void {
  if (window === undefined) return;
  acc.measured['architecture.slidingWindow'] = window;
  if (window === null) return;
  if (window !== d.architecture.slidingWindow)
    mismatch(
      'sliding window',
      'sliding_window',
      window,
      d.architecture.slidingWindow,
      'it decides which cached tokens are kept and attended',
    );
  else acc.verified.add('architecture.slidingWindow');
}

function compareCacheDtype(d: CompatDescriptor, raw: string | undefined, acc: Acc, mismatch: Mismatch): void {
  if (raw === undefined) return;
  acc.measured['kvCache.dtype'] = raw;
  const model = normalizeModelDtype(d.modelDtype);
  if (normalizeKvDtype(raw, model) !== normalizeKvDtype(d.kvCache.dtype, model)) {
    mismatch('KV cache dtype', 'cache_dtype', raw, d.kvCache.dtype, 'the stored KV representation differs');
  } else if (raw !== d.kvCache.dtype) {
    mismatch(
      'KV cache dtype spelling',
      'cache_dtype',
      raw,
      d.kvCache.dtype,
      "the same dtype, but vLLM's NIXL handshake hashes the raw --kv-cache-dtype string, so the predicted handshake hash is wrong; declare it exactly as the worker is started",
    );
  } else {
    acc.verified.add('kvCache.dtype');
  }
}

function compareScales(d: CompatDescriptor, label: string | undefined, acc: Acc, mismatch: Mismatch): void {
  const quantized = isQuantizedKvDtype(normalizeKvDtype(d.kvCache.dtype, normalizeModelDtype(d.modelDtype)));
  if (!quantized && acc.verified.has('kvCache.dtype')) acc.verified.add('kvCache.scaleScheme'); // no scales at all
  if (label === undefined || (label !== 'True' && label !== 'False')) return;
  const dynamic = label === 'True';
  acc.measured['dynamicKvScales'] = dynamic;
  const declaredDynamic = d.kvCache.scaleScheme === 'dynamic-per-block';
  if (quantized && dynamic !== declaredDynamic) {
    mismatch(
      'KV scale scheme',
      'calculate_kv_scales',
      label,
      d.kvCache.scaleScheme,
      dynamic
        ? 'the worker computes per-block fp8 scales at run time, which are not transferred with the KV blocks'
        : 'the worker does not compute dynamic scales, so the declared scheme is not what it runs',
    );
  } else if (quantized && dynamic) {
    acc.verified.add('kvCache.scaleScheme'); // static vs packed cannot be told apart from outside
  }
}

const CANARY_FIELDS: Readonly<Record<CanaryKind, { paths: string[]; what: (d: CompatDescriptor) => string }>> = {
  tokenizer: {
    paths: ['tokenizer.id', 'tokenizer.revision'],
    what: (d) => `the worker's tokenizer is not ${d.tokenizer.id} rev ${d.tokenizer.revision}`,
  },
  chatTemplate: {
    paths: ['chatTemplate.id', 'chatTemplate.revision'],
    what: (d) => `the worker's chat template (or tokenizer) is not ${d.chatTemplate.id} rev ${d.chatTemplate.revision}`,
  },
  generation: {
    paths: ['model.revision', 'adapter.revision'],
    what: (d) =>
      `the worker's weights are not ${d.model.id} rev ${d.model.revision}${d.adapter === null ? '' : ` with adapter ${d.adapter.id} rev ${d.adapter.revision}`}`,
  },
};

const CANARY_LABEL: Readonly<Record<CanaryKind, string>> = {
  tokenizer: 'tokenizer',
  chatTemplate: 'chat template',
  generation: 'generation',
};

function compareCanaries(
  d: CompatDescriptor,
  canaries: Partial<Record<CanaryKind, Probed<string>>>,
  acc: Acc,
  requireRecorded: boolean,
): void {
  for (const kind of ['tokenizer', 'chatTemplate', 'generation'] as const) {
    const probed = canaries[kind];
    const declared = d.canaries?.[kind];
    if (requireRecorded && declared === undefined) {
      const seen = probed?.ok === true ? ` (this worker answers ${probed.value})` : '';
      acc.reasons.push(
        `${CANARY_LABEL[kind]} canary: no digest is recorded in the descriptor${seen}, so ${CANARY_FIELDS[kind].paths.join(' and ')} cannot be ` +
          'checked; record it from a known-good worker (kvgate verify --record, or kvgate fingerprint --worker URL --descriptor FILE) ' +
          "or set the sidecar's trust: declared-only",
      );
    }
    if (probed === undefined) continue;
    if (!probed.ok) {
      if (declared !== undefined)
        acc.reasons.push(`${CANARY_LABEL[kind]} canary: could not be measured (${probed.error}); the declared digest cannot be confirmed`);
      continue;
    }
    acc.measured[`canaries.${kind}`] = probed.value;
    if (declared === undefined) continue;
    if (probed.value !== declared) {
      acc.mismatches.push({ field: `canaries.${kind}`, declared, observed: probed.value });
      const tokenizerDiffers = kind !== 'tokenizer' && acc.reasons.some((r) => r.startsWith('tokenizer canary digest'));
      acc.reasons.push(
        `${CANARY_LABEL[kind]} canary digest ${probed.value.slice(0, 12)}… differs from the declared ${declared.slice(0, 12)}…: ${CANARY_FIELDS[kind].what(d)}` +
          (tokenizerDiffers ? ' (or only the tokenizer differs: its canary failed too, so this prompt was tokenised differently)' : ''),
      );
    } else {
      for (const p of CANARY_FIELDS[kind].paths) acc.verified.add(p);
    }
  }
}

/** The engine id has no declared value: it is a per-launch fact that ties later prefill answers to this probe. */
function compareEngineId(engineId: Probed<string> | undefined, acc: Acc): void {
  if (engineId === undefined) return;
  if (engineId.ok) acc.measured['engineId'] = engineId.value;
  else acc.reasons.push(`engine id: ${engineId.error}; without it no prefill answer can be tied to this verification, so none is attested`);
}

/**
 * Whether the side channel that answered is this worker's: when the engine canary read the worker's engine id over HTTP
 * (prefill role), the side channel's `NixlAgentMetadata.engine_id` must name the same launch (ranks of one launch
 * share a base, `engineLaunchId`), and must be there to compare. Otherwise the hash read belongs to whatever answers on
 * that address (another pod's vLLM, a process that bound the port first, a side channel host left at vLLM's default
 * `localhost`), not to the worker whose prefills are attested; and decode workers would fail their handshakes with
 * it anyway, since vLLM checks that the agent metadata's engine id is the `remote_engine_id` of the request
 * (vllm-project/vllm `vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py` @002a1057, `_nixl_handshake`,
 * "Remote NIXL agent engine ID mismatch"; the agent metadata carries `self.engine_id`, as `request_finished` does).
 * Null when it agrees, or when there is no HTTP engine id to compare with (decode role, engine canary off).
 */
function sideChannelEngineProblem(
  sideChannel: string,
  fromSideChannel: string | undefined,
  fromHttp: Observation['engineId'],
): string | null {
  if (fromHttp?.ok !== true) return null;
  if (fromSideChannel === undefined) {
    return `NIXL compatibility hash: the side channel ${sideChannel} answered without an engine id in its agent metadata, so it cannot be told to be this worker's (engine ${fromHttp.value}); the hash read there is not trusted`;
  }
  if (engineLaunchId(fromSideChannel) === engineLaunchId(fromHttp.value)) return null;
  return (
    `NIXL compatibility hash: the side channel ${sideChannel} answers for engine ${fromSideChannel}, but the worker's HTTP port ` +
    `answers for engine ${fromHttp.value}: the hash read there is another vLLM's, not this worker's (check VLLM_NIXL_SIDE_CHANNEL_HOST/PORT ` +
    "and the sidecar's nixlSideChannel or --nixl-side-channel), and decode workers' handshakes with it would fail"
  );
}

/**
 * The live handshake hash against the revision's prediction: a worker whose vLLM hashes other factors (a runtime flag
 * such as the hybrid KV cache manager) would fail every handshake with workers that match the prediction, or - with
 * enforce_handshake_compat off - pair with them anyway. Both hashes are named, and the flags that explain the
 * difference where one does.
 */
function compareNixlHash(d: CompatDescriptor, live: Observation['nixlHash'], engineId: Observation['engineId'], acc: Acc): void {
  if (live === undefined) return;
  if (!live.observed.ok) {
    acc.reasons.push(`NIXL compatibility hash: ${live.observed.error}; the worker's handshake hash cannot be confirmed`);
    return;
  }
  const observed = live.observed.value;
  if (live.engineId !== undefined) acc.measured['sideChannelEngineId'] = live.engineId;
  const notThisWorker = sideChannelEngineProblem(live.sideChannel, live.engineId, engineId);
  if (notThisWorker !== null) {
    acc.reasons.push(notThisWorker);
    return;
  }
  acc.measured['nixlHash'] = observed;
  const predicted = predictNixlHash(d).hash;
  if (observed === predicted) {
    acc.verified.add('nixlHash');
    return;
  }
  const why = explainNixlHash(d, observed);
  acc.mismatches.push({ field: 'nixlHash', declared: predicted, observed });
  acc.reasons.push(
    `NIXL compatibility hash: the worker's side channel ${live.sideChannel} serves ${observed}, the revision's prediction is ${predicted}` +
      (why.length > 0
        ? ` (${why.join('; ')})`
        : ' (no single declared runtime flag explains it: compare vLLM version, model string, dtypes and attention backend)') +
      '; its handshakes with workers that match the revision would fail',
  );
}
