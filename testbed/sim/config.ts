/**
 * Configuration of one simulated vLLM worker: the descriptor operators declared for it, the serving knobs vLLM
 * would take on its command line, and (optionally) `behaveAs`, what the worker really runs.
 *
 * `behaveAs` exists so tests and demos can reproduce the failure kvgate is built to catch: a worker whose label says
 * revision A while it serves revision B. Every observable behaviour of the simulator follows the merged ("real")
 * descriptor, exactly as a mislabelled vLLM would; the declared one is only logged.
 */
import { readFile } from 'node:fs/promises';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { CompatDescriptorSchema, deepFreeze, type CompatDescriptor } from '../../src/compat/descriptor.js';
import { simRuntimeFlags, type SimHashFlags } from './nixl-compat-hash.js';
import { fromZodIssues } from '../../src/config/from-zod.js';
import { formatIssues as formatConfigIssues } from '../../src/config/issues.js';
import { KvgateError, err, ok, type Result } from '../../src/errors.js';
import { SIM_FLAVOURS, traitsOf } from './flavour.js';

const port = z.number().int().min(0).max(65535);
const nonNegative = z.number().min(0);

export const SimLatencySchema = z
  .object({
    /** Cost of each prompt token computed locally (not served from the prefix cache or pulled over NIXL). */
    prefillMsPerToken: nonNegative.default(0),
    /** Cost of each generated token. */
    decodeMsPerToken: nonNegative.default(0),
    /** Cost of each KV block pulled from a prefill worker. */
    transferMsPerBlock: nonNegative.default(0),
    /** Cost of one NIXL handshake (done once per remote engine, then cached, as vLLM does). */
    handshakeMs: nonNegative.default(0),
  })
  .strict();

export const SimSettingsSchema = z
  .object({
    host: z.string().min(1).default('127.0.0.1'),
    port: port.default(0),
    /** The NIXL data stand-in (block reads, notifications, heartbeats over HTTP); 0 picks a free port. */
    sideChannelPort: port.default(0),
    /** The ZMQ handshake side channel (VLLM_NIXL_SIDE_CHANNEL_PORT), served as vLLM serves it; 0 picks a free port. */
    nixlSideChannelPort: port.default(0),
    /** `--served-model-name`; vLLM defaults it to the model argument, and so does the simulator. */
    servedModelName: z.string().min(1).optional(),
    /** `kv_transfer_config.engine_id`; a fresh uuid4 per launch when absent, like vLLM. */
    engineId: z.string().min(1).optional(),
    maxModelLen: z.number().int().positive().default(4096),
    numGpuBlocks: z.number().int().positive().default(4096),
    enablePrefixCaching: z.boolean().default(true),
    prefixCachingHashAlgo: z.enum(['sha256', 'sha256_cbor', 'builtin']).default('sha256'),
    gpuMemoryUtilization: z.number().gt(0).max(1).default(0.9),
    /** Which vLLM the worker is (flavour.ts); absent: the simulator's composite behaviour. */
    flavour: z.enum(SIM_FLAVOURS).optional(),
    /**
     * `--api-key`: every guarded path (`/v1`; main also `/v2`, `/inference`, `/cohere`) needs
     * `Authorization: Bearer <key>` (401 `{"error": "Unauthorized"}` otherwise).
     */
    apiKey: z.string().min(1).optional(),
    /**
     * `--api-server-count`; only its effect on `/metrics` is modelled: above 1 vLLM sets `PROMETHEUS_MULTIPROC_DIR`
     * (vllm `vllm/entrypoints/cli/serve.py` `run_multi_api_server`) and serves a `MultiProcessCollector` registry, which
     * registers no names, so a `name[]` filter that prometheus_client honours finds nothing (client_python
     * `prometheus_client/registry.py` `RestrictedRegistry` at 009d885).
     */
    apiServerCount: z.number().int().min(1).max(64).default(1),
    /** `--data-parallel-size`: engine ranks behind one API server, engine ids `<id>_dp<rank>`, one side channel each. */
    dataParallelSize: z.number().int().min(1).max(16).default(1),
    /** A reasoning model: the first N generated tokens of a chat completion are reasoning, not content. */
    reasoningTokens: z.number().int().min(0).default(0),
    /** `mixed`: not every attention layer slides (Gemma style), so vLLM reports `sliding_window: None`. */
    slidingWindowLayers: z.enum(['all', 'mixed']).default('all'),
    /** Default: the flavour's (`recompute` on 0.11 and 0.13, `fail` on main and without a flavour). */
    kvLoadFailurePolicy: z.enum(['fail', 'recompute']).optional(),
    /** `kv_connector_extra_config.kv_lease_duration` (ms here): how long P holds blocks for D without a heartbeat. */
    leaseMs: z.number().int().positive().default(30_000),
    /**
     * `VLLM_NIXL_ABORT_REQUEST_TIMEOUT` (ms here; vLLM's default 480 s): how long P holds blocks no D has read on
     * connectors before leases (version < 4), with no heartbeat to extend it. From v4 `leaseMs` applies instead.
     */
    abortRequestTimeoutMs: z.number().int().positive().default(480_000),
    /**
     * `--scheduling-policy`. Only its request check is modelled: under `fcfs` (vLLM's default) a request whose
     * `priority` is not 0 is refused 400, as vLLM refuses it ("Any priority other than 0 will raise an error if the
     * served model does not use priority scheduling": `CompletionRequest.priority` in vllm-project/vllm
     * `vllm/entrypoints/openai/completion/protocol.py` @002032ee); `priority` accepts it. The order it would impose
     * (vLLM's `PriorityRequestQueue`, `vllm/v1/core/sched/request_queue.py` @0097c7ed) is not simulated.
     */
    schedulingPolicy: z.enum(['fcfs', 'priority']).default('fcfs'),
    /** `--max-num-seqs`: requests beyond it wait (vllm:num_requests_waiting). */
    maxNumSeqs: z.number().int().positive().default(256),
    /** `kv_connector_extra_config.enforce_handshake_compat` (vLLM default true). */
    enforceHandshakeCompat: z.boolean().default(true),
    /** D's wait for a handshake answer (vLLM: ZMQ RCVTIMEO 5000 ms). */
    handshakeTimeoutMs: z.number().int().positive().default(5_000),
    /** D's wait for a block read before it counts a failed transfer (a simulator choice; NIXL has no such knob). */
    transferTimeoutMs: z.number().int().positive().default(5_000),
    latency: SimLatencySchema.default({ prefillMsPerToken: 0, decodeMsPerToken: 0, transferMsPerBlock: 0, handshakeMs: 0 }),
    /** Partial descriptor: what the worker really runs when it differs from its declared descriptor. */
    behaveAs: z.record(z.string(), z.unknown()).optional(),
  })
  .strict();

export const SimConfigFileSchema = z
  .object({
    descriptor: z.unknown(),
    sim: SimSettingsSchema,
  })
  .strict();

export type SimSettings = Omit<z.infer<typeof SimSettingsSchema>, 'kvLoadFailurePolicy'> & {
  readonly kvLoadFailurePolicy: 'fail' | 'recompute';
};
export type SimSettingsInput = z.input<typeof SimSettingsSchema>;
/** A validated, frozen simulator configuration. */
export interface SimConfig {
  /** What operators wrote down for this worker. */
  readonly descriptor: CompatDescriptor;
  /** What it really runs: `descriptor` with `sim.behaveAs` merged over it. Drives everything observable. */
  readonly behaviour: CompatDescriptor;
  readonly sim: Readonly<SimSettings>;
  /** True when `behaviour` differs from `descriptor` (the worker lies). */
  readonly lies: boolean;
  /**
   * The runtime flags vLLM hashes, as this launch really has them: read from the descriptor as written (plus
   * `behaveAs`) with the simulator's own defaults per vLLM version (nixl-compat-hash.ts), not kvgate's.
   */
  readonly runtime: SimHashFlags;
}

/**
 * Validate a config object (parsed YAML/JSON or built in code). Every problem is reported with its path and a fix,
 * so an operator can correct the file in one pass.
 */
export function parseSimConfig(input: unknown): Result<SimConfig> {
  const top = SimConfigFileSchema.safeParse(input);
  if (!top.success) return err(configError(formatIssues(top.error.issues, SimConfigFileSchema, input, [])));
  const declared = CompatDescriptorSchema.safeParse(top.data.descriptor);
  if (!declared.success)
    return err(configError(formatIssues(declared.error.issues, CompatDescriptorSchema, top.data.descriptor, ['descriptor'])));
  const sim = top.data.sim;
  let behaviour = declared.data;
  let runtime = simRuntimeFlags(top.data.descriptor);
  if (sim.behaveAs !== undefined) {
    const merged = deepMerge(top.data.descriptor, sim.behaveAs);
    runtime = simRuntimeFlags(merged);
    const real = CompatDescriptorSchema.safeParse(merged);
    if (!real.success) return err(configError(formatIssues(real.error.issues, CompatDescriptorSchema, merged, ['sim', 'behaveAs'])));
    behaviour = real.data;
  }
  const capacity = sim.numGpuBlocks * behaviour.kvCache.blockSize;
  if (sim.maxModelLen > capacity) {
    return err(
      configError(
        `sim.maxModelLen: ${sim.maxModelLen} tokens do not fit in the KV cache (${sim.numGpuBlocks} blocks x ` +
          `${behaviour.kvCache.blockSize} tokens = ${capacity}). Fix: raise sim.numGpuBlocks to at least ` +
          `${Math.ceil(sim.maxModelLen / behaviour.kvCache.blockSize)} or lower sim.maxModelLen (vLLM refuses to start the same way)`,
      ),
    );
  }
  const lies = JSON.stringify(declared.data) !== JSON.stringify(behaviour);
  const resolved = { ...sim, kvLoadFailurePolicy: sim.kvLoadFailurePolicy ?? traitsOf(sim.flavour).defaultKvLoadFailurePolicy };
  return ok(deepFreeze({ descriptor: declared.data, behaviour, sim: resolved, lies, runtime }));
}

/** Read a YAML or JSON config file (JSON is YAML) and validate it; I/O failures are returned, not thrown. */
export async function loadSimConfigFile(path: string): Promise<Result<SimConfig>> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (e) {
    return err(new KvgateError('bad_request', `cannot read sim config ${path}: ${(e as Error).message}`, { cause: e }));
  }
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (e) {
    return err(new KvgateError('bad_request', `sim config ${path} is not valid YAML/JSON: ${(e as Error).message}`, { cause: e }));
  }
  const parsed = parseSimConfig(doc);
  if (!parsed.ok) return err(new KvgateError('bad_request', `${path}: ${parsed.error.reason}`));
  return parsed;
}

function configError(detail: string): KvgateError {
  return new KvgateError('bad_request', `invalid sim config:\n${detail}`);
}

/** zod issues as the one `ConfigIssue` format every kvgate config uses, under `prefix` (e.g. `sim.behaveAs`). */
export function formatIssues(issues: readonly z.core.$ZodIssue[], schema: z.ZodType, data: unknown, prefix: readonly string[]): string {
  return formatConfigIssues(fromZodIssues(issues, { file: 'sim config', root: schema, data, prefix }));
}

/** Plain-object deep merge: arrays and scalars in `over` replace; `null` replaces (e.g. `adapter: null`). */
export function deepMerge(base: unknown, over: unknown): unknown {
  if (!isPlainObject(base) || !isPlainObject(over)) return over;
  const out: Record<string, unknown> = { ...base };
  for (const [k, v] of Object.entries(over)) out[k] = k in out ? deepMerge(out[k], v) : v;
  return out;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}
