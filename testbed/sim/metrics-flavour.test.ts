/**
 * Which `vllm:nixl_*` series a vLLM version exports. NIXL's Prometheus metrics came with PR #26811 ("[KVConnector]
 * Add metrics to Prometheus-Grafana dashboard", opened 2025-10-14, reviewed to 2025-10-28), after v0.11.0 was cut,
 * so a 0.11 worker has none; `vllm:nixl_num_kv_expired_reqs` came with PR #32340 (2026-01-14), after v0.13.0. Names
 * and labels where present: `NixlPromMetrics` (vllm-project/vllm `vllm/distributed/kv_transfer/kv_connector/v1/
 * nixl_connector.py`, later `nixl/stats.py`), counters `vllm:nixl_num_failed_transfers` etc. with labelnames
 * `model_name`, `engine` (prometheus_client writes `_total`).
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { SimServer } from './server.js';
import { scrape, startTestSim } from './testing.js';

const servers: SimServer[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()));
});

const names = (text: string) =>
  new Set([...text.matchAll(/^(vllm:nixl_[a-z_]+?)(?:_total|_bucket|_count|_sum|_created)?[{ ]/gm)].map((m) => m[1]));

describe('vllm:nixl_* series per flavour', () => {
  it.each([
    ['0.11', []],
    ['0.13', ['vllm:nixl_xfer_time_seconds', 'vllm:nixl_num_failed_transfers', 'vllm:nixl_num_failed_notifications']],
    ['main', ['vllm:nixl_xfer_time_seconds', 'vllm:nixl_num_failed_transfers', 'vllm:nixl_num_kv_expired_reqs']],
  ] as const)('vLLM %s', async (flavour, present) => {
    const s = await startTestSim({}, { flavour });
    servers.push(s);
    const text = await scrape(s);
    const seen = names(text);
    for (const n of present) expect(seen).toContain(n);
    if (flavour === '0.11') expect([...seen]).toEqual([]);
    if (flavour === '0.13') expect(seen).not.toContain('vllm:nixl_num_kv_expired_reqs');
    if (flavour !== '0.11') expect(text).toMatch(/^vllm:nixl_num_failed_transfers_total\{model_name="[^"]+",engine="0"\} 0$/m);
  });
});

describe('vllm:cache_config_info labels per flavour', () => {
  // `metrics_info()` is `{key: str(value) for key, value in self.__dict__.items()}` of CacheConfig
  // (vllm-project/vllm `vllm/config/cache.py` @002f10e0). `calculate_kv_scales` was a field through 0.13 (PR #11906),
  // deprecated by PR #37201 and removed by PR #49389 (merged 2026-07-22): current main has no such label.
  it.each([
    ['0.11', true],
    ['0.13', true],
    ['main', false],
  ] as const)('vLLM %s: calculate_kv_scales label present: %s', async (flavour, present) => {
    const s = await startTestSim({}, { flavour });
    servers.push(s);
    const line = (await scrape(s)).split('\n').find((l) => l.startsWith('vllm:cache_config_info{'));
    expect(line).toBeDefined();
    expect(line!.includes('calculate_kv_scales=')).toBe(present);
  });
});
