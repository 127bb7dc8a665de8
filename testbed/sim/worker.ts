/**
 * Wires one simulated worker's parts together (tokenizer, block pool, leases, scheduler, metrics, engine) from its
 * config, without opening any port. `server.ts` adds the two listeners.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import { Registry } from 'prom-client';
import type { CompatDescriptor } from '../../src/compat/descriptor.js';
import { simCompatHash } from './nixl-compat-hash.js';
import { normalizeKvLayout } from '../../src/compat/normalize.js';
import { BlockPool } from './block-pool.js';
import { resolveChatTemplate } from './chat-template.js';
import type { SimConfig } from './config.js';
import { SimEngine } from './engine.js';
import { NO_FAULTS, parseFaultPatch, type FaultPatch, type FaultState } from './faults.js';
import type { WorkerContext } from './generate-handler.js';
import { blockBytes, blockLen, createKvSemantics } from './kv-model.js';
import { LeaseTable } from './leases.js';
import { traitsOf, type FlavourTraits } from './flavour.js';
import { createSimMetrics, type SimMetrics } from './metrics.js';
import type { LocalAgent } from './pd.js';
import { Scheduler } from './scheduler.js';
import type { HandshakePayload, SideChannelClient, SideChannelDeps } from './side-channel.js';
import { loadSimTokenizer, type SimTokenizer } from './tokenizer.js';

export interface WorkerOptions {
  readonly logger: Logger;
  readonly now: () => number;
  readonly random: () => number;
  readonly sideChannelClient: SideChannelClient;
  /** Where the side channel listens; known only once it is bound. */
  readonly sideChannelPort: () => number;
  /** This engine's id (a data-parallel rank's is `<id>_dp<rank>`); default `sim.engineId` or a fresh uuid4. */
  readonly engineId?: string;
  /** Data-parallel rank: the `engine` label of its metrics. */
  readonly rank?: number;
}

export interface Worker {
  readonly engineId: string;
  readonly compatibilityHash: string;
  readonly registry: Registry;
  readonly ctx: WorkerContext;
  readonly sideChannelDeps: SideChannelDeps;
  readonly leases: LeaseTable;
  readonly pool: BlockPool;
  getFaults(): FaultState;
  setFaults(patch: FaultPatch): FaultState;
}

export async function createWorker(config: SimConfig, opts: WorkerOptions): Promise<Worker> {
  const d = config.behaviour;
  const s = config.sim;
  const engineId = opts.engineId ?? s.engineId ?? randomUUID();
  const traits = traitsOf(s.flavour);
  const servedModelName = s.servedModelName ?? d.model.path ?? d.model.id;
  const logger = opts.logger.child({ component: 'sim', engineId });
  if (config.lies)
    logger.warn({ declared: config.descriptor, behaviour: d }, 'simulated worker does not run its declared descriptor (behaveAs)');
  const tokenizer = await loadSimTokenizer(d.tokenizer);
  const pool = new BlockPool(s.numGpuBlocks);
  const registry = new Registry();
  const metrics = createSimMetrics(registry, d, { ...s, servedModelName }, () => pool.usage, { traits, engine: String(opts.rank ?? 0) });
  const scheduler = new Scheduler(s.maxNumSeqs, (running, waiting) => {
    metrics.running.set(running);
    metrics.waiting.set(waiting);
  });
  const leases = createLeases(config, opts.now, pool, metrics, logger, () => scheduler.poke());
  const faults = createFaultState(leases);
  const sleep = (ms: number): Promise<void> => (ms > 0 ? new Promise((r) => setTimeout(r, ms)) : Promise.resolve());
  const local = localAgent(config);
  const engine = createEngine(config, { engineId, tokenizer, pool, leases, scheduler, metrics, logger, local, sleep, opts, traits });
  const ctx: WorkerContext = {
    config,
    servedModelName,
    tokenizer,
    template: resolveChatTemplate(d.chatTemplate),
    engine,
    faults: faults.get,
    random: opts.random,
    now: opts.now,
    randomHex: () => randomBytes(16).toString('hex'),
    logger,
    sleep,
    traits,
  };
  const sideChannelDeps: SideChannelDeps = {
    payload: handshakePayload(d, engineId, local, s.numGpuBlocks),
    leases,
    pool,
    faults: faults.get,
    logger,
    sleep,
    onFreed: () => scheduler.poke(),
  };
  return {
    engineId,
    compatibilityHash: local.compatibilityHash,
    registry,
    ctx,
    sideChannelDeps,
    leases,
    pool,
    getFaults: faults.get,
    setFaults: faults.set,
  };
}

interface EngineParts {
  readonly engineId: string;
  readonly tokenizer: SimTokenizer;
  readonly pool: BlockPool;
  readonly leases: LeaseTable;
  readonly scheduler: Scheduler;
  readonly metrics: SimMetrics;
  readonly logger: Logger;
  readonly local: LocalAgent;
  readonly sleep: (ms: number) => Promise<void>;
  readonly opts: WorkerOptions;
  readonly traits: FlavourTraits;
}

function createEngine(config: SimConfig, p: EngineParts): SimEngine {
  const d = config.behaviour;
  const s = config.sim;
  // Dynamic KV scales are computed per instance: this salt makes them differ between any two workers.
  const scaleSalt = randomBytes(8).toString('hex');
  return new SimEngine({
    config,
    engineId: p.engineId,
    tokenizer: p.tokenizer,
    semantics: {
      base: createKvSemantics(d, { withAdapter: false, scaleSalt }),
      adapter: createKvSemantics(d, { withAdapter: true, scaleSalt }),
    },
    pool: p.pool,
    leases: p.leases,
    scheduler: p.scheduler,
    metrics: p.metrics,
    logger: p.logger,
    pull: {
      client: p.opts.sideChannelClient,
      local: p.local,
      handshakes: new Map(),
      handshakeTimeoutMs: s.handshakeTimeoutMs,
      transferTimeoutMs: s.transferTimeoutMs,
      latency: s.latency,
      bytesPerBlock: blockBytes(d),
      metrics: p.metrics,
      logger: p.logger,
      sleep: p.sleep,
      now: p.opts.now,
    },
    sideChannel: () => ({ host: s.host, port: p.opts.sideChannelPort() }),
    sleep: p.sleep,
    traits: p.traits,
  });
}

/** Run-time faults: validated patches, `reset`, and the one-shot `expireLeasesNow`. */
function createFaultState(leases: LeaseTable): { get: () => FaultState; set: (patch: FaultPatch) => FaultState } {
  let faults: FaultState = NO_FAULTS;
  return {
    get: () => faults,
    set: (patch) => {
      const p = parseFaultPatch(patch);
      if (!p.ok) throw new TypeError(p.error);
      const { reset, expireLeasesNow, ...rest } = p.value;
      const defined = Object.fromEntries(Object.entries(rest).filter(([, v]) => v !== undefined));
      faults = Object.freeze({ ...(reset ? NO_FAULTS : faults), ...defined }) as FaultState;
      if (expireLeasesNow) leases.expireAll();
      return faults;
    },
  };
}

function createLeases(
  config: SimConfig,
  now: () => number,
  pool: BlockPool,
  metrics: SimMetrics,
  logger: Logger,
  onFreed: () => void,
): LeaseTable {
  return new LeaseTable({
    now,
    leaseMs: config.sim.leaseMs,
    onExpire: (lease) => {
      for (const id of lease.blockIds) pool.unref(id);
      metrics.expiredReqs.inc();
      logger.warn(
        { requestId: lease.requestId },
        `Releasing expired KV blocks for request ${lease.requestId} which were retrieved by 0 decode worker(s) within ${lease.durationMs / 1000} seconds.`,
      );
      onFreed();
    },
  });
}

/** This worker's side of the handshake: vLLM's hash of what it really runs, and the runtime-checked geometry. */
export function localAgent(config: SimConfig): LocalAgent {
  const d = config.behaviour;
  return {
    // The simulator's own factor table (never kvgate's prediction). The HTTP stand-in pull hashes every version,
    // including those before 0.13 that have no hash: a simplification the ZMQ side channel does not make.
    compatibilityHash: simCompatHash(d, config.runtime, true)!,
    layout: simLayout(d),
    blockSize: d.kvCache.blockSize,
    blockLen: blockLen(d),
    numLayers: d.architecture.numLayers,
    hma: config.runtime.hma,
    // vLLM 0.11/0.12 have no compatibility hash in the handshake (it shipped in 0.13, PR #29503).
    enforceCompatHash: config.sim.enforceHandshakeCompat && traitsOf(config.sim.flavour).hashCheck,
  };
}

function handshakePayload(d: CompatDescriptor, engineId: string, local: LocalAgent, numBlocks: number): HandshakePayload {
  return {
    compatibility_hash: local.compatibilityHash,
    agent_metadata: {
      engine_id: engineId,
      kv_cache_layout: simLayout(d),
      block_size: d.kvCache.blockSize,
      block_len: local.blockLen,
      num_layers: d.architecture.numLayers,
      num_blocks: numBlocks,
      tp_size: d.parallel.tensorParallelSize,
      connector_version: d.connector.version,
      attn_backend_name: d.architecture.attentionBackend,
    },
  };
}

/** The per-layer layout the handshake compares: HND or NHD (current vLLM's LBHNC/LBNHC are the same two). */
function simLayout(d: CompatDescriptor): 'HND' | 'NHD' {
  return normalizeKvLayout(d.kvCache.layout) === 'NHD' ? 'NHD' : 'HND';
}
