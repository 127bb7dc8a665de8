/**
 * The compatibility descriptor: everything that decides whether KV cache computed by one worker means the same
 * thing to another. Declared per revision in the route table, declared per worker by its sidecar, and probed live.
 *
 * This file is the schema only (the shared contract between policy, sidecar and simulator). Normalisation lives in
 * `normalize.ts`, the fingerprint and group id in `fingerprint.ts`, connector rules in `connector-rules.ts`, and
 * vLLM's own handshake hash in `nixl-hash.ts`.
 */
import { z } from 'zod';
import { defaultCrossLayersBlocks, defaultHybridKvCacheManager } from './vllm-defaults.js';

const nonEmpty = z.string().min(1, 'must not be empty');

/** vLLM's speculative config is a flat-ish JSON object; anything much deeper is not one. */
const SPECULATIVE_MAX_DEPTH = 16;

/**
 * True for a value JSON can carry as is, nested at most `depth` deep. The one free-form field of the descriptor is
 * hashed as canonical JSON into the fingerprint: a non-finite number (YAML `.inf`), a non-plain object or a nesting
 * deep enough to overflow the stack would otherwise throw out of loading instead of being a config issue.
 */
function isPlainJson(v: unknown, depth: number): boolean {
  if (v === null || typeof v === 'string' || typeof v === 'boolean') return true;
  if (typeof v === 'number') return Number.isFinite(v);
  if (typeof v !== 'object' || depth <= 0) return false;
  if (Array.isArray(v)) return v.every((x) => isPlainJson(x, depth - 1));
  const proto = Object.getPrototypeOf(v) as unknown;
  if (proto !== Object.prototype && proto !== null) return false;
  return Object.values(v).every((x) => isPlainJson(x, depth - 1));
}

/** An identity with a revision: a model, an adapter, a tokenizer, a chat template. */
export const RevisionedIdSchema = z
  .object({
    id: nonEmpty.describe('name, e.g. the Hugging Face repo id'),
    revision: nonEmpty.describe('immutable revision: a commit sha, a content digest or a release tag'),
  })
  .strict();

export const RopeScalingSchema = z
  .object({
    type: nonEmpty.describe('e.g. linear, dynamic, yarn, llama3, longrope'),
    factor: z.number().positive(),
  })
  .strict();

export const PositionSchema = z
  .object({
    type: z.enum(['rope', 'alibi', 'learned', 'none']),
    /** RoPE base frequency (theta). */
    ropeTheta: z.number().positive().optional(),
    ropeScaling: RopeScalingSchema.nullable().optional(),
  })
  .strict();

export const ArchitectureSchema = z
  .object({
    name: nonEmpty.describe('model architecture class, e.g. LlamaForCausalLM'),
    numLayers: z.number().int().positive(),
    numKvHeads: z.number().int().positive(),
    headSize: z.number().int().positive(),
    attentionBackend: nonEmpty.describe('vLLM attention backend name, e.g. FLASH_ATTN, FLASHINFER'),
    position: PositionSchema,
    slidingWindow: z.number().int().positive().nullable().default(null),
  })
  .strict();

export const KV_SCALE_SCHEMES = ['none', 'static-checkpoint', 'dynamic-per-block', 'packed'] as const;
export type KvScaleScheme = (typeof KV_SCALE_SCHEMES)[number];

/** Layout names a descriptor may use: the HND/NHD pair and current vLLM's names for the same two layouts. */
export const KV_LAYOUTS = ['HND', 'NHD', 'LBHNC', 'LBNHC'] as const;
export const KvCacheSchema = z
  .object({
    /** As passed to `--kv-cache-dtype` (`auto`, `fp8`, `fp8_e4m3`, `bfloat16`, ...). Kept raw: vLLM hashes it raw. */
    dtype: nonEmpty,
    scaleScheme: z.enum(KV_SCALE_SCHEMES),
    blockSize: z.number().int().positive(),
    /**
     * The physical KV layout. `HND`/`NHD` are the names vLLM used up to 0.13; current vLLM resolves them to
     * `KVCacheLayout` members `LBHNC`/`LBNHC` and reports those (normalize.ts maps them back, so both spellings
     * land in one group).
     */
    layout: z.enum(KV_LAYOUTS),
  })
  .strict();

export const EngineSchema = z
  .object({
    name: z.literal('vllm'),
    /** `vllm.__version__`, exactly as `/version` reports it. */
    version: nonEmpty,
  })
  .strict();

export const ConnectorSchema = z
  .object({
    name: nonEmpty.describe('e.g. NixlConnector'),
    /** The connector's own protocol version (vLLM's NIXL_CONNECTOR_VERSION). */
    version: z.number().int().positive(),
    transferMode: z.enum(['pull', 'push']).default('pull'),
  })
  .strict();

/** The descriptor's fields as written (runtime flags may be left out: see `CompatDescriptorSchema`). */
const CompatDescriptorObjectSchema = z
  .object({
    model: RevisionedIdSchema.extend({
      /** The model string given to `vllm serve` (a path or a hub id). vLLM's NIXL hash hashes this string. */
      path: nonEmpty.optional(),
    }).strict(),
    adapter: RevisionedIdSchema.nullable().default(null),
    tokenizer: RevisionedIdSchema,
    chatTemplate: RevisionedIdSchema,
    architecture: ArchitectureSchema,
    /** Model weights dtype as passed to `--dtype` (bfloat16, float16, ...). */
    modelDtype: nonEmpty,
    kvCache: KvCacheSchema,
    engine: EngineSchema,
    connector: ConnectorSchema,
    /**
     * vLLM's hybrid KV cache manager on (`is_hma_enabled`, a NIXL hash factor from v2 on vLLM 0.18, and v3 on).
     * Left out: what vLLM of `engine.version` does for a P/D worker (src/compat/vllm-defaults.ts: off before 0.21, on
     * from 0.21).
     */
    hybridKvCacheManager: z.boolean().optional(),
    /**
     * Cross-layer KV blocks in use (`kv_connector_extra_config.enable_cross_layers_blocks`, honoured by vLLM for
     * FLASH_ATTN/FLASHINFER with the HND layout): the `cross_layers_blocks` NIXL hash factor. Left out: off.
     */
    crossLayersBlocks: z.boolean().optional(),
    /** Speculative decoding config as vLLM hashes it (EAGLE/MTP, connector v6+); null when off. */
    speculative: z
      .record(z.string(), z.unknown())
      .refine((v) => isPlainJson(v, SPECULATIVE_MAX_DEPTH), {
        message: `must be plain JSON (strings, finite numbers, booleans, null, lists, mappings) nested at most ${SPECULATIVE_MAX_DEPTH} deep`,
        params: { fix: "copy vLLM's --speculative-config JSON as it is (no .inf or .nan: it is hashed as JSON)" },
      })
      .nullable()
      .default(null),
    /**
     * Evidence, not identity: sha256 digests of what a known-good worker of this revision answers to kvgate's fixed
     * probes (`/tokenize` of the canary text, of the canary chat, and the token ids of a canary greedy completion).
     * Recorded with `kvgate fingerprint --worker URL`. The sidecar compares live workers against them; a field with no
     * recorded digest is reported "declared, not verified". Never part of the fingerprint.
     */
    canaries: z
      .object({
        tokenizer: z
          .string()
          .regex(/^[0-9a-f]{64}$/)
          .optional(),
        chatTemplate: z
          .string()
          .regex(/^[0-9a-f]{64}$/)
          .optional(),
        generation: z
          .string()
          .regex(/^[0-9a-f]{64}$/)
          .optional(),
      })
      .strict()
      .optional(),
    /** May safely differ between P and D (vLLM validates at handshake); never part of the fingerprint. */
    parallel: z
      .object({ tensorParallelSize: z.number().int().positive().default(1) })
      .strict()
      .default({ tensorParallelSize: 1 }),
  })
  .strict();

/**
 * The descriptor schema: the object above, with every runtime flag vLLM hashes resolved to the value the declared
 * vLLM version uses when the descriptor leaves it out, so the fingerprint, the NIXL hash prediction and the checks
 * all see what the worker really hashes.
 */
export const CompatDescriptorSchema = CompatDescriptorObjectSchema.transform((d) => ({
  ...d,
  hybridKvCacheManager: d.hybridKvCacheManager ?? defaultHybridKvCacheManager(d.engine.version),
  crossLayersBlocks: d.crossLayersBlocks ?? defaultCrossLayersBlocks(d.engine.version),
}));

export type CompatDescriptor = z.infer<typeof CompatDescriptorSchema>;
export type CompatDescriptorInput = z.input<typeof CompatDescriptorSchema>;

/** Parse and freeze a descriptor; throws a ZodError with paths on bad input (callers format it). */
export function parseDescriptor(input: unknown): CompatDescriptor {
  return deepFreeze(CompatDescriptorSchema.parse(input));
}

export function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const v of Object.values(value as Record<string, unknown>)) deepFreeze(v);
  }
  return value;
}
