import { describe, expect, it } from 'vitest';
import { loadFromMetrics } from './worker-load.js';

describe("the worker's load from vLLM /metrics", () => {
  it('sums running and waiting over engines and takes the highest KV use', () => {
    const text = [
      '# TYPE vllm:num_requests_running gauge',
      'vllm:num_requests_running{engine="0",model_name="m"} 3',
      'vllm:num_requests_running{engine="1",model_name="m"} 2',
      'vllm:num_requests_waiting{engine="0",model_name="m"} 4',
      'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5',
      'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.75',
    ].join('\n');
    expect(loadFromMetrics(text)).toEqual({ running: 5, waiting: 4, kvCacheUsage: 0.75 });
  });

  it('no load gauges, or a malformed exposition: no load (the gate falls back to its own count)', () => {
    expect(loadFromMetrics('vllm:cache_config_info{block_size="16"} 1\n')).toBeNull();
    expect(loadFromMetrics('vllm:num_requests_running{ 3\n')).toBeNull();
  });

  it('reads KV use from vllm:gpu_cache_usage_perc where a vLLM before 0.9.2 has no vllm:kv_cache_usage_perc', () => {
    // vllm/v1/metrics/loggers.py: "Deprecated in 0.9.2 - Renamed as vllm:kv_cache_usage_perc"; 0.11.x shows the old
    // name only under --show-hidden-metrics-for-version=0.10, so both can appear: the new one wins.
    const old = ['vllm:num_requests_running{engine="0",model_name="m"} 1', 'vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.4'];
    expect(loadFromMetrics(old.join('\n'))).toEqual({ running: 1, waiting: 0, kvCacheUsage: 0.4 });
    const both = [...old, 'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.6'];
    expect(loadFromMetrics(both.join('\n'))).toEqual({ running: 1, waiting: 0, kvCacheUsage: 0.6 });
  });
});
