/**
 * The worker's load as vLLM reports it on /metrics, read when the gate asks for this sidecar's status (and cached
 * for a short while, so several gates polling do not each cost a scrape): `vllm:num_requests_running`,
 * `vllm:num_requests_waiting` and `vllm:kv_cache_usage_perc` (0..1; `vllm:gpu_cache_usage_perc` before vLLM 0.9.2) — the gauges llm-d's scorers read
 * (vllm-project/vllm, vllm/v1/metrics/loggers.py, PrometheusStatLogger). Summed over every engine/label set, as a
 * data-parallel worker exports one sample per engine; KV usage takes the highest. A worker whose /metrics cannot
 * be read reports no load (the gate then falls back to its own in-flight count).
 */
import { callUpstream, type FetchFn } from './http-io.js';
import { parsePrometheusText, samplesNamed } from './prometheus-text.js';

export interface WorkerLoad {
  readonly running: number;
  readonly waiting: number;
  readonly kvCacheUsage: number;
}

/** Load from a /metrics exposition; null when none of the three gauges is present. */
export function loadFromMetrics(text: string): WorkerLoad | null {
  const parsed = parsePrometheusText(text);
  if (!parsed.ok) return null;
  const sum = (name: string): number | null => {
    const s = samplesNamed(parsed.value, name);
    return s.length === 0 ? null : s.reduce((t, x) => t + (Number.isFinite(x.value) ? x.value : 0), 0);
  };
  // vLLM before 0.9.2 names KV use `vllm:gpu_cache_usage_perc` (renamed then; 0.11.x still shows the old name under
  // --show-hidden-metrics-for-version=0.10; vllm-project/vllm vllm/v1/metrics/loggers.py): the new name wins.
  const current = samplesNamed(parsed.value, 'vllm:kv_cache_usage_perc');
  const kv = current.length > 0 ? current : samplesNamed(parsed.value, 'vllm:gpu_cache_usage_perc');
  const running = sum('vllm:num_requests_running');
  const waiting = sum('vllm:num_requests_waiting');
  if (running === null && waiting === null && kv.length === 0) return null;
  return {
    running: running ?? 0,
    waiting: waiting ?? 0,
    kvCacheUsage: kv.reduce((m, x) => Math.max(m, Number.isFinite(x.value) ? x.value : 0), 0),
  };
}

/** A reader that scrapes at most once per `maxAgeMs` and never waits longer than `timeoutMs`. */
export function createLoadReader(
  fetchFn: FetchFn,
  workerUrl: string,
  now: () => number,
  maxAgeMs = 500,
  timeoutMs = 500,
): () => Promise<WorkerLoad | null> {
  let last: { at: number; load: WorkerLoad | null } | undefined;
  let pending: Promise<WorkerLoad | null> | undefined;
  return async () => {
    if (last !== undefined && now() - last.at < maxAgeMs) return last.load;
    pending ??= (async () => {
      const reply = await callUpstream(fetchFn, `${workerUrl}/metrics`, { timeoutMs });
      const load = reply.ok && reply.value.status === 200 ? loadFromMetrics(reply.value.text) : null;
      last = { at: now(), load };
      return load;
    })().finally(() => {
      pending = undefined;
    });
    return pending;
  };
}
