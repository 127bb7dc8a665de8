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
});
