/**
 * The `/metrics` a vLLM worker exposes, as far as kvgate reads them, on a registry owned by one server instance.
 *
 * Names and label values follow vLLM: counters carry `_total` (Python prometheus_client appends it), labels are
 * `model_name` and `engine`, and `vllm:cache_config_info` has one label per CacheConfig field with Python's `str()`
 * of the value (`True`, `None`, `0.9`). A few simulator-only counters (prefixed `kvgate_sim_`) make tests precise.
 */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { CompatDescriptor } from '../../src/compat/descriptor.js';
import type { SimSettings } from './config.js';
import { normalizeKvLayout } from '../../src/compat/normalize.js';
import { traitsOf, type FlavourTraits } from './flavour.js';

/** A counter, gauge or histogram already bound to this worker's `model_name` and `engine` labels. */
export interface MetricInc {
  inc(value?: number): void;
}
export interface MetricSet {
  set(value: number): void;
}
export interface MetricObserve {
  observe(value: number): void;
}

export interface SimMetrics {
  readonly running: MetricSet;
  readonly waiting: MetricSet;
  readonly prefixQueries: MetricInc;
  readonly prefixHits: MetricInc;
  readonly promptTokens: MetricInc;
  readonly generationTokens: MetricInc;
  readonly xferTime: MetricObserve;
  readonly bytesTransferred: MetricObserve;
  readonly numDescriptors: MetricObserve;
  readonly failedTransfers: MetricInc;
  readonly failedNotifications: MetricInc;
  readonly expiredReqs: MetricInc;
  /** kvgate_sim_kv_blocks_pulled_total: blocks this worker read from prefill workers. */
  readonly blocksPulled: MetricInc;
  /** kvgate_sim_kv_load_failures_total{reason,policy}: failed KV loads by cause and the policy applied. */
  readonly kvLoadFailures: Counter<'reason' | 'policy'>;
}

/** Python's `str()` of a config value. */
export function pyStr(v: unknown): string {
  if (v === null || v === undefined) return 'None';
  if (v === true) return 'True';
  if (v === false) return 'False';
  return String(v);
}

/**
 * The CacheConfig-like fields vLLM publishes in `vllm:cache_config_info` (values as `str()`; `metrics_info()` in
 * vllm-project/vllm `vllm/config/cache.py`). `kv_cache_layout` is a CacheConfig field only in current vLLM, where it
 * holds a `KVCacheLayout` name (`LBHNC`/`LBNHC` for HND/NHD; @002f10e0), next to the newer `kv_cache_size_tokens`
 * and `kv_cache_max_concurrency`; 0.11 and 0.13 have neither. `sliding_window` is `None` unless every layer slides.
 */
export function cacheConfigLabels(
  d: CompatDescriptor,
  s: SimSettings,
  traits: FlavourTraits = traitsOf(undefined),
): Record<string, string> {
  const fields: Record<string, unknown> = {
    block_size: d.kvCache.blockSize,
    gpu_memory_utilization: s.gpuMemoryUtilization,
    swap_space: 4,
    cache_dtype: d.kvCache.dtype,
    is_attention_free: false,
    num_gpu_blocks_override: null,
    sliding_window: s.slidingWindowLayers === 'mixed' ? null : d.architecture.slidingWindow,
    enable_prefix_caching: s.enablePrefixCaching,
    prefix_caching_hash_algo: s.prefixCachingHashAlgo,
    cpu_offload_gb: 0,
    ...(traits.calculateKvScalesLabel ? { calculate_kv_scales: d.kvCache.scaleScheme === 'dynamic-per-block' } : {}),
    kv_sharing_fast_prefill: false,
    mamba_cache_dtype: 'auto',
    mamba_ssm_cache_dtype: 'auto',
    num_gpu_blocks: s.numGpuBlocks,
    num_cpu_blocks: null,
    kv_cache_memory_bytes: null,
    ...layoutLabels(d, s, traits),
    engine: 0,
  };
  return Object.fromEntries(Object.entries(fields).map(([k, v]) => [k, pyStr(v)]));
}

function layoutLabels(d: CompatDescriptor, s: SimSettings, traits: FlavourTraits): Record<string, unknown> {
  if (traits.layoutLabel === 'absent') return {};
  if (traits.layoutLabel === 'declared') return { kv_cache_layout: d.kvCache.layout };
  const name = normalizeKvLayout(d.kvCache.layout) === 'NHD' ? 'LBNHC' : 'LBHNC';
  return {
    kv_cache_layout: name,
    kv_cache_size_tokens: s.numGpuBlocks * d.kvCache.blockSize,
    kv_cache_max_concurrency: (s.numGpuBlocks * d.kvCache.blockSize) / s.maxModelLen,
  };
}

export function createSimMetrics(
  registry: Registry,
  d: CompatDescriptor,
  s: SimSettings & { servedModelName: string },
  readUsage: () => number,
  opts: { readonly traits?: FlavourTraits; readonly engine?: string } = {},
): SimMetrics {
  const labels = { model_name: s.servedModelName, engine: opts.engine ?? '0' };
  const labelNames = ['model_name', 'engine'] as const;
  const registers = [registry];
  // A series this vLLM version does not export is still counted, on no registry (flavour.ts `nixlMetrics`).
  const nixlMetrics = (opts.traits ?? traitsOf(undefined)).nixlMetrics;
  const nixl = nixlMetrics === 'none' ? [] : registers;
  const nixlExpiry = nixlMetrics === 'all' ? registers : [];
  const info = { ...cacheConfigLabels(d, s, opts.traits), engine: opts.engine ?? '0' };
  new Gauge({
    name: 'vllm:cache_config_info',
    help: 'Information of the LLMEngine CacheConfig',
    labelNames: Object.keys(info),
    registers,
  }).set(info, 1);
  new Gauge({
    name: 'vllm:kv_cache_usage_perc',
    help: 'KV-cache usage. 1 means 100 percent usage.',
    labelNames,
    registers,
    collect() {
      this.set(labels, readUsage());
    },
  });
  const counter = (name: string, help: string, on: Registry[] = registers): MetricInc => {
    const c = new Counter({ name, help, labelNames, registers: on });
    c.inc(labels, 0);
    return c.labels(labels);
  };
  const gauge = (name: string, help: string): MetricSet => {
    const g = new Gauge({ name, help, labelNames, registers });
    g.set(labels, 0);
    return g.labels(labels);
  };
  const histogram = (name: string, help: string, buckets: number[], on: Registry[] = registers): MetricObserve => {
    const h = new Histogram({ name, help, labelNames, buckets, registers: on });
    h.zero(labels);
    return h.labels(labels);
  };
  const failures = new Counter({
    name: 'kvgate_sim_kv_load_failures_total',
    help: 'Simulator: failed KV loads on this decode worker, by cause and the kv_load_failure_policy applied.',
    labelNames: ['reason', 'policy'] as const,
    registers,
  });
  return {
    running: gauge('vllm:num_requests_running', 'Number of requests in model execution batches.'),
    waiting: gauge('vllm:num_requests_waiting', 'Number of requests waiting to be processed.'),
    prefixQueries: counter('vllm:prefix_cache_queries_total', 'Prefix cache queries, in terms of number of queried tokens.'),
    prefixHits: counter('vllm:prefix_cache_hits_total', 'Prefix cache hits, in terms of number of cached tokens.'),
    promptTokens: counter('vllm:prompt_tokens_total', 'Number of prefill tokens processed.'),
    generationTokens: counter('vllm:generation_tokens_total', 'Number of generation tokens processed.'),
    xferTime: histogram(
      'vllm:nixl_xfer_time_seconds',
      'Histogram of transfer duration for NIXL KV Cache transfers.',
      [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
      nixl,
    ),
    bytesTransferred: histogram(
      'vllm:nixl_bytes_transferred',
      'Histogram of bytes transferred per NIXL KV Cache transfers.',
      [2 ** 20, 2 ** 23, 2 ** 25, 2 ** 27, 2 ** 29, 2 ** 31],
      nixl,
    ),
    numDescriptors: histogram(
      'vllm:nixl_num_descriptors',
      'Histogram of number of descriptors per NIXL KV Cache transfers.',
      [10, 100, 1000, 10000, 100000],
      nixl,
    ),
    failedTransfers: counter('vllm:nixl_num_failed_transfers_total', 'Number of failed NIXL KV Cache transfers.', nixl),
    failedNotifications: counter('vllm:nixl_num_failed_notifications_total', 'Number of failed NIXL KV Cache notifications.', nixl),
    expiredReqs: counter(
      'vllm:nixl_num_kv_expired_reqs_total',
      'Number of requests that had their KV expire on the prefill side.',
      nixlExpiry,
    ),
    blocksPulled: counter('kvgate_sim_kv_blocks_pulled_total', 'Simulator: KV blocks this worker read from prefill workers.'),
    kvLoadFailures: failures,
  };
}
