/**
 * Issue 19, metrics dashboards understand: everything the gate and the sidecars serve on `/metrics` passes
 * `promtool check metrics` (its rules applied in-process, test/metrics/promlint.ts), process metrics carry their
 * standard unprefixed names on every process, the sidecars export latency histograms, and routable endpoints are
 * exported per pool, revision, role and state.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTopology, type Topology } from '../../testbed/demo/topology.js';
import { lintExposition, parseExposition } from '../metrics/promlint.js';
import { client, complete, metricSum, metricsOf, silent } from './failure-matrix-support.js';

let t: Topology;
beforeAll(async () => {
  t = await startTopology({ logger: silent, candidateWeight: 0, processMetrics: true, sidecarProbeIntervalMs: 60_000 });
  await t.gate.refreshWorkerView();
  expect((await complete(t, 'metrics exposition', 4, client('acme', 'metrics'))).status).toBe(200);
  expect((await complete(t, 'metrics exposition', 4, client('initech', 'metrics'))).status).toBe(403);
});
afterAll(() => t.close());

const gateMetrics = () => metricsOf(`http://127.0.0.1:${t.gate.adminPort}`);

describe('/metrics of the gate and every sidecar', () => {
  it('passes promtool check metrics', async () => {
    const gate = await gateMetrics();
    expect(parseExposition(gate).filter((f) => f.name.startsWith('kvgate_')).length).toBeGreaterThan(15);
    expect(lintExposition(gate)).toEqual([]);
    for (const w of t.workers)
      expect({ worker: `${w.revision}/${w.role}`, problems: lintExposition(await metricsOf(w.sidecar.url)) }).toEqual({
        worker: `${w.revision}/${w.role}`,
        problems: [],
      });
  });

  it('exports process_* and nodejs_* under their standard names on the gate and on the sidecars', async () => {
    for (const text of [await gateMetrics(), await metricsOf(t.worker('llama-a', 'decode').sidecar.url)]) {
      expect(text).toMatch(/^process_cpu_seconds_total \d/m);
      expect(text).toMatch(/^process_start_time_seconds \d/m);
      expect(text).toContain('# TYPE nodejs_eventloop_lag_seconds gauge');
      expect(text).not.toContain('kvgate_process_');
    }
  });

  it("times the decode sidecar's prefill leg and what it adds to time to first token", async () => {
    const text = await metricsOf(t.worker('llama-a', 'decode').sidecar.url);
    expect(metricSum(text, 'kvgate_sidecar_prefill_leg_seconds_count', { outcome: 'ok' })).toBeGreaterThanOrEqual(1);
    expect(metricSum(text, 'kvgate_sidecar_added_first_token_seconds_count', { path: 'transfer' })).toBeGreaterThanOrEqual(1);
  });

  it('exports endpoints per pool, revision, role and state, so a pool without a routable endpoint reads 0', async () => {
    const text = await gateMetrics();
    const decodeA = { pool: 'a-decode', revision: 'llama-a', role: 'decode' };
    expect(metricSum(text, 'kvgate_worker_endpoints', { ...decodeA, state: 'routable' })).toBe(1);
    expect(text).toMatch(/^kvgate_worker_endpoints\{[^}]*pool="b-decode"[^}]*state="stale"[^}]*\} 0$/m);
    void t.worker('llama-b', 'decode').sidecar.drain(); // draining shows at once; the promise ends after the announce window
    await t.gate.refreshWorkerView();
    const after = await gateMetrics();
    expect(metricSum(after, 'kvgate_worker_endpoints', { pool: 'b-decode', state: 'routable' })).toBe(0);
    expect(metricSum(after, 'kvgate_worker_endpoints', { pool: 'b-decode', revision: 'llama-b', role: 'decode', state: 'draining' })).toBe(
      1,
    );
  });
});
