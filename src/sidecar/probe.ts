/**
 * The I/O half of probing: ask the live worker what it is (`/version`, `/v1/models`, `/metrics`
 * `vllm:cache_config_info`, `/tokenize` canaries, optionally a greedy canary completion) and collect the answers
 * into an `Observation` for `compareObservation` (compare.ts). Also `measureCanaries`, which `kvgate fingerprint`
 * uses to record a known-good worker's canary digests into its descriptor.
 */
import type { CompatDescriptor } from '../compat/descriptor.js';
import {
  chatTemplateCanaryRequest,
  digestTokenIds,
  generatedTokenIds,
  generationCanaryRequest,
  tokenizerCanaryRequest,
  type CanaryDigests,
  type CanaryKind,
} from './canaries.js';
import { findAdapterCard, findBaseCard, type ModelCard, type Observation, type Probed } from './compare.js';
import { engineCanaryRequest, engineIdOf } from './engine-canary.js';
import { liveHashSupport, readLiveNixlHash } from './nixl-side-channel.js';
import { callUpstream, upstreamMessage, type FetchFn } from './http-io.js';
import { parsePrometheusText, samplesNamed } from './prometheus-text.js';

export interface ProbeOptions {
  readonly fetch?: FetchFn;
  readonly timeoutMs?: number;
  readonly servedModelName?: string;
  /** Run the greedy generation canary (it costs a short completion on the worker). */
  readonly generation?: boolean;
  /**
   * Prefill role: first run the engine canary (engine-canary.ts) under this `x-request-id`, to learn the NIXL engine
   * id of the launch the rest of the probe then checks.
   */
  readonly engineCanary?: { readonly requestId: string };
  /** Sent on every probe call: the worker's `Authorization: Bearer` when it runs with `--api-key` (worker-auth.ts). */
  readonly headers?: Readonly<Record<string, string>>;
  /** `host:port` of the worker's NIXL side channel: read its live compatibility hash (nixl-side-channel.ts). */
  readonly nixlSideChannel?: string;
  /** Ends every call of the round at once (the sidecar closing): a worker that does not answer cannot hold a shutdown. */
  readonly signal?: AbortSignal;
}

const DEFAULT_TIMEOUT_MS = 5_000;

/** What a 401 from the worker means: vLLM's `--api-key` middleware refused the call. */
export const API_KEY_HINT = "the worker runs with --api-key: set workerApiKey (file or env) to the worker's key";

const fail = (error: string): Probed<never> => ({ ok: false, error });

async function getJson(
  url: string,
  opts: ProbeOptions,
  body?: unknown,
  headers?: Record<string, string>,
): Promise<Probed<unknown> & { network?: boolean }> {
  const call = {
    timeoutMs: opts.timeoutMs ?? DEFAULT_TIMEOUT_MS,
    headers: { ...headers, ...opts.headers },
    ...(body === undefined ? {} : { body }),
    ...(opts.signal === undefined ? {} : { signal: opts.signal }),
  };
  const reply = await callUpstream(opts.fetch ?? fetch, url, call);
  if (!reply.ok) return { ok: false, error: reply.error.message, network: true };
  if (reply.value.status === 401) return fail(`HTTP 401: ${upstreamMessage(reply.value.text)} (${API_KEY_HINT})`);
  if (reply.value.status !== 200) return fail(`HTTP ${reply.value.status}: ${upstreamMessage(reply.value.text)}`);
  try {
    return { ok: true, value: JSON.parse(reply.value.text) as unknown };
  } catch {
    return fail('the answer is not JSON');
  }
}

function field(v: unknown, key: string): unknown {
  return v !== null && typeof v === 'object' ? (v as Record<string, unknown>)[key] : undefined;
}

/** `{ data: [ModelCard...] }` -> cards; unknown shapes are an error, not an empty list. */
export function toModelCards(v: unknown): Probed<ModelCard[]> {
  const data = field(v, 'data');
  if (!Array.isArray(data)) return fail('GET /v1/models did not return { data: [...] }');
  const cards: ModelCard[] = [];
  for (const c of data) {
    const id = field(c, 'id');
    if (typeof id !== 'string') return fail('a /v1/models card has no id');
    const root = field(c, 'root');
    const parent = field(c, 'parent');
    const max = field(c, 'max_model_len');
    cards.push({
      id,
      root: typeof root === 'string' ? root : null,
      parent: typeof parent === 'string' ? parent : null,
      maxModelLen: typeof max === 'number' ? max : null,
    });
  }
  return { ok: true, value: cards };
}

async function probeCacheConfig(base: string, opts: ProbeOptions): Promise<Probed<Record<string, string> | null>> {
  const reply = await callUpstream(opts.fetch ?? fetch, `${base}/metrics`, {
    timeoutMs: opts.timeoutMs ?? DEFAULT_TIMEOUT_MS,
    headers: { ...opts.headers },
    ...(opts.signal === undefined ? {} : { signal: opts.signal }),
  });
  if (!reply.ok) return fail(reply.error.message);
  if (reply.value.status !== 200) return fail(`HTTP ${reply.value.status}${reply.value.status === 401 ? ` (${API_KEY_HINT})` : ''}`);
  const parsed = parsePrometheusText(reply.value.text);
  if (!parsed.ok) return fail(`the /metrics text is malformed at line ${parsed.error.line}: ${parsed.error.message}`);
  const info = samplesNamed(parsed.value, 'vllm:cache_config_info');
  return { ok: true, value: info[0] === undefined ? null : { ...info[0].labels } };
}

/** Token ids from a `/tokenize` answer (`{ tokens: [...] }`). */
function tokenIds(v: unknown): Probed<number[]> {
  const tokens = field(v, 'tokens');
  if (!Array.isArray(tokens) || !tokens.every((t) => Number.isInteger(t))) return fail('POST /tokenize did not return { tokens: [ids] }');
  return { ok: true, value: tokens as number[] };
}

async function tokenizeDigest(base: string, kind: CanaryKind, body: Record<string, unknown>, opts: ProbeOptions): Promise<Probed<string>> {
  const r = await getJson(`${base}/tokenize`, opts, body);
  if (!r.ok) return r;
  const ids = tokenIds(r.value);
  return ids.ok ? { ok: true, value: digestTokenIds(kind, ids.value) } : ids;
}

async function generationDigest(base: string, model: string, opts: ProbeOptions): Promise<Probed<string>> {
  const r = await getJson(`${base}/v1/completions`, opts, generationCanaryRequest(model));
  if (!r.ok) return r;
  const ids = generatedTokenIds(r.value);
  if (ids === undefined)
    return fail('the canary completion carried no token ids (needs return_token_ids or logprobs with return_tokens_as_token_ids)');
  return { ok: true, value: digestTokenIds('generation', ids) };
}

/** The model name to send canaries to: the adapter's card for an adapter descriptor, else the base card. */
function canaryModel(d: CompatDescriptor, cards: readonly ModelCard[], servedModelName?: string): string | undefined {
  return findAdapterCard(d, cards)?.id ?? findBaseCard(d, cards, servedModelName)?.id ?? servedModelName;
}

async function runCanaries(base: string, model: string, opts: ProbeOptions): Promise<Partial<Record<CanaryKind, Probed<string>>>> {
  const [tokenizer, chatTemplate, generation] = await Promise.all([
    tokenizeDigest(base, 'tokenizer', tokenizerCanaryRequest(model), opts),
    tokenizeDigest(base, 'chatTemplate', chatTemplateCanaryRequest(model), opts),
    opts.generation === true ? generationDigest(base, model, opts) : Promise.resolve(undefined),
  ]);
  return { tokenizer, chatTemplate, ...(generation === undefined ? {} : { generation }) };
}

/**
 * The engine canary, run BEFORE every other probe step: an engine id read first and seen again on a later prefill
 * answer proves that every step in between talked to that same launch (ids are unique per launch). Read last, it
 * could belong to a launch that started after the checks.
 */
async function probeEngineId(base: string, d: CompatDescriptor, opts: ProbeOptions, requestId: string): Promise<Probed<string>> {
  const r = await getJson(`${base}/v1/models`, opts);
  const cards = r.ok ? toModelCards(r.value) : r;
  const model = cards.ok ? canaryModel(d, cards.value, opts.servedModelName) : opts.servedModelName;
  if (model === undefined)
    return fail(`no model to send the canary prefill to (GET /v1/models: ${cards.ok ? 'no usable card' : cards.error})`);
  const answer = await getJson(`${base}/v1/completions`, opts, engineCanaryRequest(model), { 'x-request-id': requestId });
  if (!answer.ok) return answer;
  if (answer.value === null || typeof answer.value !== 'object' || Array.isArray(answer.value))
    return fail('the canary prefill did not answer a JSON object');
  const id = engineIdOf(answer.value as Record<string, unknown>);
  return id.ok ? { ok: true, value: id.value } : fail(id.error);
}

/**
 * One probe round against the worker at `workerUrl`. Never throws: a worker that is down yields `{ down }`, a step
 * that fails yields its error, and `compareObservation` turns both into reasons.
 */
export async function observeWorker(workerUrl: string, d: CompatDescriptor, opts: ProbeOptions = {}): Promise<Observation> {
  const base = workerUrl.replace(/\/+$/, '');
  const engineId = opts.engineCanary === undefined ? undefined : await probeEngineId(base, d, opts, opts.engineCanary.requestId);
  const [version, modelsRaw, cacheConfig] = await Promise.all([
    getJson(`${base}/version`, opts),
    getJson(`${base}/v1/models`, opts),
    probeCacheConfig(base, opts),
  ]);
  if (!version.ok && version.network === true && !modelsRaw.ok && modelsRaw.network === true) return { down: version.error };
  const versionValue = field(version.ok ? version.value : undefined, 'version');
  const versionProbed: Probed<string> = !version.ok
    ? version
    : typeof versionValue === 'string'
      ? { ok: true, value: versionValue }
      : fail('GET /version did not return { version }');
  const models = modelsRaw.ok ? toModelCards(modelsRaw.value) : modelsRaw;
  const model = models.ok ? canaryModel(d, models.value, opts.servedModelName) : opts.servedModelName;
  const canaries = model === undefined ? undefined : await runCanaries(base, model, opts);
  const nixlHash = await readHash(d, opts);
  return {
    version: versionProbed,
    models: models.ok ? models : { ok: false, error: models.error },
    cacheConfig,
    ...(canaries === undefined ? {} : { canaries }),
    ...(engineId === undefined ? {} : { engineId }),
    ...(nixlHash === undefined ? {} : { nixlHash }),
  };
}

/** The live handshake hash, when a side channel is configured and the declared vLLM has a readable one. */
async function readHash(d: CompatDescriptor, opts: ProbeOptions): Promise<Observation['nixlHash']> {
  if (opts.nixlSideChannel === undefined || opts.signal?.aborted === true) return undefined;
  const support = liveHashSupport(d);
  if (support.kind !== 'read') return undefined;
  const r = await readLiveNixlHash(opts.nixlSideChannel, support.ranks, opts.timeoutMs ?? DEFAULT_TIMEOUT_MS, opts.signal);
  if (!r.ok) return { sideChannel: opts.nixlSideChannel, observed: { ok: false, error: r.error } };
  return {
    sideChannel: opts.nixlSideChannel,
    observed: { ok: true, value: r.hash },
    ...(r.engineId === undefined ? {} : { engineId: r.engineId }),
  };
}

/** What `measureCanaries` found: the digests, the model they were measured on, and any step that failed. */
export interface CanaryMeasurement {
  readonly model: string;
  readonly digests: CanaryDigests;
  readonly errors: Partial<Record<CanaryKind, string>>;
}

/**
 * Measure all three canary digests on a known-good worker, for `kvgate fingerprint --worker URL` to record into the
 * descriptor's `canaries`. `model` defaults to the model the sidecar would probe for `descriptor` (the adapter's card
 * when it names an adapter: a sidecar of an adapter revision checks the adapter, so that is what must be recorded),
 * else to the first base model the worker serves.
 */
export async function measureCanaries(
  workerUrl: string,
  opts: Omit<ProbeOptions, 'generation'> & { readonly model?: string; readonly descriptor?: CompatDescriptor } = {},
): Promise<CanaryMeasurement> {
  const base = workerUrl.replace(/\/+$/, '');
  let model = opts.model;
  if (model === undefined) {
    const r = await getJson(`${base}/v1/models`, opts);
    const cards = r.ok ? toModelCards(r.value) : r;
    if (!cards.ok) throw new Error(`cannot list the worker's models at ${base}/v1/models: ${cards.error}`);
    if (opts.descriptor?.adapter != null && findAdapterCard(opts.descriptor, cards.value) === undefined) {
      throw new Error(`the worker at ${base} serves no LoRA card for adapter ${opts.descriptor.adapter.id}; load it, or pass --model`);
    }
    model = opts.descriptor === undefined ? undefined : canaryModel(opts.descriptor, cards.value, opts.servedModelName);
    model ??= cards.value.find((c) => c.parent === null)?.id ?? cards.value[0]?.id;
    if (model === undefined) throw new Error(`the worker at ${base} serves no model`);
  }
  const results = await runCanaries(base, model, { ...opts, generation: true });
  const digests: CanaryDigests = {};
  const errors: Partial<Record<CanaryKind, string>> = {};
  for (const kind of ['tokenizer', 'chatTemplate', 'generation'] as const) {
    const r = results[kind];
    if (r?.ok === true) digests[kind] = r.value;
    else if (r !== undefined) errors[kind] = r.error;
  }
  return { model, digests, errors };
}
