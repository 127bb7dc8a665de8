/**
 * One simulated vLLM engine: admission, prefix cache, prefill (local, or pulled from a prefill worker), greedy
 * generation and, on a prefill worker, holding blocks for the decode worker under a lease.
 *
 * It speaks in engine terms (token ids, finish reasons, `kv_transfer_params` dicts) and knows nothing of HTTP; the
 * server turns its events into OpenAI responses. Clock, sleep and the side-channel client are injected.
 */
import type { Logger } from 'pino';
import type { BlockPool } from './block-pool.js';
import type { SimConfig } from './config.js';
import type { RequestFaults } from './faults.js';
import { createGenerator, type GeneratedToken } from './generator.js';
import { computeBlocks, kvDigest, numBlocks, prefixCacheKeys, tokenChain, type KvBlock, type KvSemantics } from './kv-model.js';
import type { FlavourTraits } from './flavour.js';
import type { LeaseTable } from './leases.js';
import type { SimMetrics } from './metrics.js';
import {
  notifyWithoutReading,
  producerKeepsBlocks,
  producerParams,
  pullRemoteKv,
  type KvTransferRole,
  type PullDeps,
  type RemotePrefill,
} from './pd.js';
import type { Scheduler } from './scheduler.js';
import { StopText } from './stop-text.js';
import type { SimTokenizer } from './tokenizer.js';

export interface SamplingParams {
  readonly maxTokens: number;
  readonly minTokens: number;
  readonly ignoreEos: boolean;
  readonly stop: readonly string[];
  /** How many alternatives to report per token (0 when logprobs are off). */
  readonly topN: number;
}

export interface EngineRequest {
  /** Engine-internal request id; P reports it as `remote_request_id`. */
  readonly requestId: string;
  readonly promptTokens: readonly number[];
  readonly sampling: SamplingParams;
  /** The request names the LoRA adapter rather than the base model. */
  readonly useAdapter: boolean;
  readonly cacheSalt: string | null;
  readonly kvTransfer: KvTransferRole;
  readonly faults: RequestFaults;
  readonly signal: AbortSignal;
  /** Streaming: hold back text that could still turn into a stop string, so one is never half-emitted. */
  readonly streaming: boolean;
}

export type FinishReason = 'stop' | 'length';

export type EngineEvent =
  | { readonly type: 'token'; readonly token: GeneratedToken; readonly text: string }
  | {
      readonly type: 'finish';
      readonly reason: FinishReason;
      readonly stopReason: string | null;
      readonly text: string;
      readonly kvTransferParams: Record<string, unknown> | null;
      readonly cachedTokens: number;
    }
  /** vLLM's FINISHED_ERROR (finish_reason "error"): the server turns it into a 500 InternalServerError. */
  | { readonly type: 'error'; readonly message: string };

export interface EngineDeps {
  readonly config: SimConfig;
  readonly engineId: string;
  readonly tokenizer: SimTokenizer;
  readonly semantics: { readonly base: KvSemantics; readonly adapter: KvSemantics };
  readonly pool: BlockPool;
  readonly leases: LeaseTable;
  readonly scheduler: Scheduler;
  readonly metrics: SimMetrics;
  readonly logger: Logger;
  readonly pull: PullDeps;
  /** Where this worker's side channel listens (P reports it as remote_host/remote_port). */
  readonly sideChannel: () => { host: string; port: number };
  readonly sleep: (ms: number) => Promise<void>;
  /** What the simulated vLLM version answers and expects (flavour.ts). */
  readonly traits: FlavourTraits;
}

interface Plan {
  readonly hitIds: number[];
  /** Prompt blocks after the hits, then extra blocks for tokens a prefill worker generates. */
  readonly newIds: number[];
}

export class SimEngine {
  readonly #d: EngineDeps;

  constructor(deps: EngineDeps) {
    this.#d = deps;
  }

  async *run(req: EngineRequest): AsyncGenerator<EngineEvent, void, undefined> {
    const deps = this.#d;
    const role = req.kvTransfer;
    if (role.kind === 'invalid') {
      deps.logger.warn(
        { requestId: req.requestId },
        `Got invalid KVTransferParams: ${JSON.stringify(role.raw)}. This request will not utilize KVTransfer`,
      );
    }
    const remote = role.kind === 'consumer' ? role.remote : null;
    const stopHeartbeat = remote ? this.#heartbeat(remote) : () => {};
    let plan: Plan | null = null;
    let admission;
    try {
      admission = await deps.scheduler.admit(() => (plan = this.#allocate(req, remote !== null)) !== null, req.signal);
    } catch {
      stopHeartbeat();
      // The client went away before the request was scheduled: vLLM's request_finished still finds do_remote_prefill
      // set and queues an empty read, so P is notified and frees its blocks (none are read).
      if (remote) await notifyWithoutReading(deps.pull, req.requestId, remote, 'was aborted before it was scheduled');
      return;
    }
    const owned = new Set<number>([...plan!.hitIds, ...plan!.newIds]);
    try {
      yield* this.#execute(req, plan!, remote, owned, stopHeartbeat);
    } finally {
      stopHeartbeat();
      for (const id of owned) deps.pool.unref(id);
      admission.release();
    }
  }

  /**
   * vLLM's `notify_kv_transfer_request_rejected` (PR #41269): the OpenAI layer refused a `do_remote_prefill` request
   * before the engine admitted it, and the pre-aborted request it submits makes D's worker notify P without reading.
   */
  async notifyRejected(requestId: string, remote: RemotePrefill): Promise<boolean> {
    return notifyWithoutReading(this.#d.pull, requestId, remote, 'was refused before admission');
  }

  /** Synchronous: look up the prefix cache and take the blocks this request needs, or nothing. */
  #allocate(req: EngineRequest, remote: boolean): Plan | null {
    const { pool, config } = this.#d;
    const bs = config.behaviour.kvCache.blockSize;
    const len = req.promptTokens.length;
    const keys = this.#cacheKeys(req);
    // vLLM never serves the last prompt token from the cache (it must compute logits); a remote prefill loads it.
    const maxHits = remote ? keys.length : Math.min(keys.length, Math.floor((len - 1) / bs));
    const hitIds: number[] = [];
    for (let i = 0; i < maxHits; i++) {
      const id = pool.lookup(keys[i]!);
      if (id === undefined) break;
      hitIds.push(id);
    }
    const producerExtra =
      req.kvTransfer.kind === 'producer' ? Math.max(0, numBlocks(len + req.sampling.maxTokens - 1, bs) - numBlocks(len, bs)) : 0;
    for (const id of hitIds) pool.ref(id);
    const newIds = pool.allocateMany(numBlocks(len, bs) - hitIds.length + producerExtra);
    if (newIds === null) {
      for (const id of hitIds) pool.unref(id);
      return null;
    }
    return { hitIds, newIds };
  }

  #cacheKeys(req: EngineRequest): string[] {
    const { config } = this.#d;
    if (!config.sim.enablePrefixCaching) return [];
    const lora = req.useAdapter && config.behaviour.adapter ? config.behaviour.adapter.id : null;
    return prefixCacheKeys(req.promptTokens, config.behaviour.kvCache.blockSize, { cacheSalt: req.cacheSalt, loraName: lora });
  }

  async *#execute(
    req: EngineRequest,
    plan: Plan,
    remote: RemotePrefill | null,
    owned: Set<number>,
    stopHeartbeat: () => void,
  ): AsyncGenerator<EngineEvent, void, undefined> {
    const { pool, metrics, config, logger } = this.#d;
    const sem = req.useAdapter ? this.#d.semantics.adapter : this.#d.semantics.base;
    const bs = sem.blockSize;
    const len = req.promptTokens.length;
    const nPrompt = numBlocks(len, bs);
    const blocks: KvBlock[] = plan.hitIds.map((id) => pool.get(id)!);
    if (config.sim.enablePrefixCaching) {
      metrics.prefixQueries.inc(len);
      metrics.prefixHits.inc(plan.hitIds.length * bs);
    }
    if (remote) {
      const out = await pullRemoteKv(this.#d.pull, req.requestId, remote, nPrompt - blocks.length, req.faults);
      stopHeartbeat();
      if (out.ok) blocks.push(...out.blocks);
      else {
        const policy = config.sim.kvLoadFailurePolicy;
        metrics.kvLoadFailures.inc({ reason: out.reason, policy });
        if (policy === 'fail') {
          logger.error({ requestId: req.requestId, reason: out.reason }, `KV load failed (${out.message}); kv_load_failure_policy=fail`);
          yield { type: 'error', message: out.message };
          return;
        }
        logger.warn({ requestId: req.requestId, reason: out.reason }, `KV load failed (${out.message}); recomputing prefill locally`);
      }
    }
    const chain = tokenChain(req.promptTokens, bs);
    const local = computeBlocks(sem, chain, blocks);
    await this.#d.sleep(config.sim.latency.prefillMsPerToken * Math.max(0, len - blocks.length * bs));
    blocks.push(...local);
    const ids = [...plan.hitIds, ...plan.newIds];
    const keys = this.#cacheKeys(req);
    for (let i = plan.hitIds.length; i < nPrompt; i++) pool.set(ids[i]!, blocks[i]!);
    for (let i = 0; i < keys.length; i++) pool.cache(ids[i]!, keys[i]!);
    metrics.promptTokens.inc(len);
    yield* this.#generate(req, sem, blocks, ids, owned, plan.hitIds.length * bs);
  }

  async *#generate(
    req: EngineRequest,
    sem: KvSemantics,
    blocks: KvBlock[],
    ids: number[],
    owned: Set<number>,
    cachedTokens: number,
  ): AsyncGenerator<EngineEvent, void, undefined> {
    const { tokenizer, metrics, config } = this.#d;
    const s = req.sampling;
    const gen = createGenerator({
      weightsSeed: sem.weightsSeed,
      digest: kvDigest(sem, blocks),
      position: req.promptTokens.length,
      wordIds: tokenizer.wordIds,
      eosId: tokenizer.eosId,
    });
    const out: number[] = [];
    const text = new StopText(s.stop, req.streaming);
    // vLLM V1 runs the engine core in its own process (`VLLM_ENABLE_V1_MULTIPROCESSING`, on by default: vllm-project/vllm
    // `vllm/envs.py`, `vllm/v1/engine/core_client.py` `AsyncMPClient`, v0.11.0 to main). Its steps keep their pace while
    // the API server's event loop is busy with other calls (/tokenize, /metrics, other streams), whose outputs then
    // arrive late and together. Here one Node thread plays both, so token n is due at start + n x decodeMs: a step timer
    // that fired late shortens the next wait instead of pushing every later token back. A wait is never longer than one
    // step, so a clock that stands still (a test's) keeps the plain per-token pacing.
    const step = config.sim.latency.decodeMsPerToken;
    let due = this.#d.pull.now();
    for (;;) {
      if (req.signal.aborted) return;
      const token = gen.next({ allowEos: !s.ignoreEos && out.length >= s.minTokens, topN: Math.max(1, s.topN) });
      due += step;
      await this.#d.sleep(stepWait(step, due, this.#d.pull.now()));
      out.push(token.id);
      metrics.generationTokens.inc();
      const eos = token.id === tokenizer.eosId && !s.ignoreEos;
      const hit = text.push(tokenizer.decode([token.id]), out.length >= s.minTokens);
      yield { type: 'token', token, text: text.take() };
      const reason: FinishReason | null = eos || hit !== null ? 'stop' : out.length >= s.maxTokens ? 'length' : null;
      if (reason === null) continue;
      const kvTransferParams = this.#maybeLease(req, sem, blocks, ids, owned, out, reason);
      yield { type: 'finish', reason, stopReason: hit, text: text.flush(), kvTransferParams, cachedTokens };
      return;
    }
  }

  /** On a prefill worker, move the request's blocks under a lease and describe them for the decode worker. */
  #maybeLease(
    req: EngineRequest,
    sem: KvSemantics,
    blocks: KvBlock[],
    ids: number[],
    owned: Set<number>,
    out: readonly number[],
    reason: FinishReason,
  ): Record<string, unknown> | null {
    const { config, pool, leases, engineId } = this.#d;
    const version = config.behaviour.connector.version;
    if (req.kvTransfer.kind !== 'producer' || !producerKeepsBlocks(reason, version)) return null;
    const bs = sem.blockSize;
    // KV exists for every token but the last sampled one.
    const computed = [...req.promptTokens, ...out].slice(0, req.promptTokens.length + out.length - 1);
    const full = Math.floor(req.promptTokens.length / bs);
    const all = [...blocks.slice(0, full), ...computeBlocks(sem, tokenChain(computed, bs), blocks.slice(0, full))];
    const leased = ids.slice(0, numBlocks(computed.length, bs));
    leased.forEach((id, i) => {
      if (i >= full) pool.set(id, all[i]!);
      owned.delete(id); // the lease holds these references now
    });
    // Connector v4+ (PR #41383): a lease of kv_lease_duration that D's heartbeats extend. Before: a fixed
    // VLLM_NIXL_ABORT_REQUEST_TIMEOUT with no heartbeat (`_reqs_need_send`, single-file connector @002a1057).
    const holdMs = version >= 4 ? config.sim.leaseMs : config.sim.abortRequestTimeoutMs;
    leases.grant(req.requestId, leased, computed.length, req.faults.leaseMs ?? holdMs);
    const side = this.#d.sideChannel();
    return producerParams({
      traits: this.#d.traits,
      blockIds: leased,
      engineId,
      requestId: req.requestId,
      host: side.host,
      port: side.port,
      tpSize: config.behaviour.parallel.tensorParallelSize,
      numTokens: computed.length,
      connectorVersion: version,
      transferMode: config.behaviour.connector.transferMode,
    });
  }

  /** Connector v4+: keep P's lease alive while this request waits or transfers (every lease/6). */
  #heartbeat(remote: RemotePrefill): () => void {
    const { config, pull } = this.#d;
    if (config.behaviour.connector.version < 4) return () => {};
    const every = Math.max(1, Math.floor(config.sim.leaseMs / 6));
    const url = `http://${remote.remoteHost}:${remote.remotePort}`;
    const timer = setInterval(() => void pull.client.heartbeat(url, [remote.remoteRequestId], every), every);
    timer.unref();
    return () => clearInterval(timer);
  }
}

/**
 * How long the engine waits before token due at `due` (see `#generate`): until it is due, at once when it is overdue
 * (the loop was busy), never longer than one step.
 */
export function stepWait(step: number, due: number, now: number): number {
  return Math.min(step, Math.max(0, due - now));
}
