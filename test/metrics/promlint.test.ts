/** The in-process promtool rules catch what promtool catches, and pass what it passes. */
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { registerProcessMetrics } from '../../src/process-metrics.js';
import { lintExposition } from './promlint.js';

const texts = (problems: ReturnType<typeof lintExposition>) => problems.map((p) => `${p.metric}: ${p.text}`);

describe('promtool check metrics rules', () => {
  it('flags each rule promtool applies', () => {
    const bad = [
      '# TYPE a_requests counter',
      'a_requests 1',
      '# HELP b_active_total x',
      '# TYPE b_active_total gauge',
      'b_active_total 1',
      '# HELP c_latency_milliseconds x',
      '# TYPE c_latency_milliseconds gauge',
      'c_latency_milliseconds 1',
      '# HELP d_wait_ms x',
      '# TYPE d_wait_ms gauge',
      'd_wait_ms 1',
      '# HELP e_queue_gauge x',
      '# TYPE e_queue_gauge gauge',
      'e_queue_gauge 1',
      '# HELP f_inFlight x',
      '# TYPE f_inFlight gauge',
      'f_inFlight{poolName="x"} 1',
      '# HELP g_x_count x',
      '# TYPE g_x_count gauge',
      'g_x_count{le="1"} 1',
      '# HELP h:rate x',
      '# TYPE h:rate gauge',
      'h:rate 1',
    ].join('\n');
    expect(texts(lintExposition(bad))).toEqual([
      'a_requests: no help text',
      'a_requests: counter metrics should have "_total" suffix',
      'b_active_total: non-counter metrics should not have "_total" suffix',
      'c_latency_milliseconds: use base unit "seconds" instead of "milliseconds"',
      'd_wait_ms: metric names should not contain abbreviated units',
      "e_queue_gauge: metric name should not include type 'gauge'",
      "f_inFlight: metric names should be written in 'snake_case' not 'camelCase'",
      "f_inFlight: label names should be written in 'snake_case' not 'camelCase'",
      'g_x_count: non-histogram and non-summary metrics should not have "_count" suffix',
      'g_x_count: non-histogram metrics should not have "le" label',
      "h:rate: metric names should not contain ':'",
    ]);
  });

  it('passes well-named counters, gauges and histograms (their _bucket/_sum/_count samples included)', async () => {
    const r = new Registry();
    new Counter({ name: 'x_requests_total', help: 'h', labelNames: ['code'], registers: [r] }).inc({ code: '200' });
    new Gauge({ name: 'x_in_flight', help: 'h', registers: [r] }).set(2);
    new Histogram({ name: 'x_wait_seconds', help: 'h', labelNames: ['outcome'], registers: [r] }).observe({ outcome: 'ok' }, 0.2);
    expect(lintExposition(await r.metrics())).toEqual([]);
  });

  it("prom-client's default collectors fail it; registerProcessMetrics passes, under unprefixed names", async () => {
    const raw = new Registry();
    collectDefaultMetrics({ register: raw });
    expect(texts(lintExposition(await raw.metrics()))).toContain(
      'nodejs_active_handles_total: non-counter metrics should not have "_total" suffix',
    );
    const fixed = new Registry();
    registerProcessMetrics(fixed);
    const text = await fixed.metrics();
    expect(lintExposition(text)).toEqual([]);
    for (const name of [
      'process_cpu_seconds_total',
      'process_start_time_seconds',
      'nodejs_eventloop_lag_seconds',
      'nodejs_active_handles',
    ]) {
      expect(text).toContain(`# TYPE ${name} `);
    }
  });
});
