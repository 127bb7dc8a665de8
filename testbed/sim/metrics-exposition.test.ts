import { Counter, Histogram, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { traitsOf } from './flavour.js';
import { metricsExposition, restricted } from './metrics-exposition.js';

const FULL = [
  '# HELP vllm:nixl_num_failed_transfers_total Number of failed NIXL KV Cache transfers.',
  '# TYPE vllm:nixl_num_failed_transfers_total counter',
  'vllm:nixl_num_failed_transfers_total{model_name="m",engine="0"} 2',
  '# HELP vllm:nixl_xfer_time_seconds Histogram of transfer duration.',
  '# TYPE vllm:nixl_xfer_time_seconds histogram',
  'vllm:nixl_xfer_time_seconds_bucket{le="0.1",model_name="m",engine="0"} 1',
  'vllm:nixl_xfer_time_seconds_sum{model_name="m",engine="0"} 0.05',
  '',
].join('\n');

describe("the simulated worker's /metrics filter", () => {
  it('keeps exactly the named samples with their family comments, as a restricted prometheus_client registry does', () => {
    expect(restricted(FULL, new Set(['vllm:nixl_num_failed_transfers_total']))).toBe(`${FULL.split('\n').slice(0, 3).join('\n')}\n`);
    expect(restricted(FULL, new Set(['vllm:nixl_xfer_time_seconds_sum']))).toBe(
      `${[...FULL.split('\n').slice(3, 5), FULL.split('\n')[6]].join('\n')}\n`,
    );
    expect(restricted(FULL, new Set(['vllm:nope']))).toBe('');
  });

  it('answers name[] by version: honoured on main, ignored on 0.11 and 0.13, empty under several API servers', async () => {
    const registry = new Registry();
    const failed = new Counter({
      name: 'vllm:nixl_num_failed_transfers_total',
      help: 'failed',
      labelNames: ['engine'],
      registers: [registry],
    });
    const xfer = new Histogram({
      name: 'vllm:nixl_xfer_time_seconds',
      help: 'time',
      labelNames: ['engine'],
      buckets: [0.1],
      registers: [registry],
    });
    failed.inc({ engine: '0' }, 2);
    xfer.observe({ engine: '0' }, 0.05);
    const full = await registry.metrics();
    const q = (s: string) => new URLSearchParams(s);
    const counter = q('name%5B%5D=vllm%3Anixl_num_failed_transfers_total');
    const onMain = await metricsExposition(registry, counter, traitsOf('main'), 1);
    expect(onMain).toContain('vllm:nixl_num_failed_transfers_total{engine="0"} 2');
    expect(onMain).not.toContain('xfer_time');
    const sum = await metricsExposition(registry, q('name%5B%5D=vllm%3Anixl_xfer_time_seconds_sum'), traitsOf('main'), 1);
    expect(sum.split('\n').filter((l) => l !== '' && !l.startsWith('#'))).toEqual(['vllm:nixl_xfer_time_seconds_sum{engine="0"} 0.05']);
    expect(await metricsExposition(registry, counter, traitsOf('0.13'), 1)).toBe(full);
    expect(await metricsExposition(registry, counter, traitsOf('0.11'), 4)).toBe(full);
    expect(await metricsExposition(registry, counter, traitsOf('main'), 2)).toBe('');
    expect(await metricsExposition(registry, q(''), traitsOf('main'), 2)).toBe(full);
  });
});
