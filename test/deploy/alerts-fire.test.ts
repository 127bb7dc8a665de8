/**
 * Alerts of deploy/kubernetes/monitoring.yaml fire on the real condition: a topology of real gate and sidecars
 * (testbed/demo/topology.ts) is driven into it, and the alert's own expression is evaluated against what `/metrics`
 * of each process serves, scraped as Prometheus would (target labels added). The evaluator is test support
 * (test/support/promql.ts: the rules' subset of PromQL over two scrapes), so each alert is also shown not to fire
 * before the condition.
 *
 * - loud opt-ins: the topology runs on a development key seed (`keys.devSeed`), a loud opt-in of gate and sidecars;
 * - a status answer nobody signed: an impostor listed in a pool answers the gate's polls with a copy of the real
 *   sidecar's status and no signature;
 * - a pool with nothing routable: its only decode worker drains;
 * - a key rotation step that reached the gate and one sidecar but not another, whose reload was rejected (the real
 *   key stores of src/key-store.ts reloading key files, each on its own registry as each process has).
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadKeyRing } from '../../src/contract/keys.js';
import { testKeyFileText } from '../../src/contract/testing.js';
import { optInGauge } from '../../src/gate/opt-ins.js';
import { createKeyStore } from '../../src/key-store.js';
import { startTopology, type Topology } from '../../testbed/demo/topology.js';
import { editRouteTable, eventually, metricsOf, silent } from '../e2e/failure-matrix-support.js';
import { shippedAlerts } from '../support/alert-rules.js';
import { evaluateInstant, type Sample, samplesOf } from '../support/promql.js';

let t: Topology;
let impostor: http.Server | undefined;

beforeAll(async () => {
  t = await startTopology({ logger: silent, candidateWeight: 0, sidecarProbeIntervalMs: 60_000, workerViewIntervalMs: 200 });
  await t.gate.refreshWorkerView();
}, 60_000);
afterAll(async () => {
  impostor?.closeAllConnections();
  await new Promise((r) => (impostor ? impostor.close(r) : r(undefined)));
  await t?.close();
});

/** One scrape of the gate and every sidecar, with the target labels the ServiceMonitor / PodMonitor add. */
async function scrape(): Promise<Sample[]> {
  const gate = samplesOf(await metricsOf(`http://127.0.0.1:${t.gate.adminPort}`), { namespace: 'kvgate', pod: 'kvgate-gate-0' });
  const sidecars = await Promise.all(
    t.workers.map(async (w) =>
      samplesOf(await metricsOf(w.sidecar.url), {
        namespace: 'kvgate',
        pod: `${w.revision}-${w.role}-${w.index}`,
        kvgate_io_revision: w.revision,
        kvgate_io_role: w.role,
      }),
    ),
  );
  return [...gate, ...sidecars.flat()];
}

async function exprOf(alert: string): Promise<string> {
  const rule = (await shippedAlerts()).find((a) => a.alert === alert);
  if (rule === undefined) throw new Error(`no alert ${alert} in monitoring.yaml`);
  return rule.expr;
}

describe('alerts fire on the condition they name', () => {
  it('KvgateGateOptInInUse and KvgateSidecarOptInInUse: one alert per loud opt-in the gate and each sidecar run with', async () => {
    const now = await scrape();
    const gate = evaluateInstant(await exprOf('KvgateGateOptInInUse'), { now });
    const status = (await (await fetch(`http://127.0.0.1:${t.gate.adminPort}/status`)).json()) as { optIns: string[] };
    expect(status.optIns).toContain('keys.devSeed');
    expect(gate.map((s) => s.labels['setting']).sort()).toEqual([...status.optIns].sort());
    expect(gate.every((s) => s.labels['pod'] === 'kvgate-gate-0')).toBe(true);
    const sidecars = evaluateInstant(await exprOf('KvgateSidecarOptInInUse'), { now });
    expect(new Set(sidecars.filter((s) => s.labels['setting'] === 'keys.devSeed').map((s) => s.labels['pod'])).size).toBe(t.workers.length);
    // With the safe defaults the gauge has no series, so the same expression yields nothing.
    const safe = new Registry();
    optInGauge(safe).set([]);
    expect(evaluateInstant(await exprOf('KvgateGateOptInInUse'), { now: samplesOf(await safe.metrics()) })).toEqual([]);
  });

  it('KvgateStatusPollSignatureRefused: an unsigned status answer at a pool endpoint', async () => {
    const expr = await exprOf('KvgateStatusPollSignatureRefused');
    const before = await scrape();
    await t.gate.refreshWorkerView();
    expect(evaluateInstant(expr, { before, now: await scrape() })).toEqual([]); // real sidecars sign: nothing fires
    // Whatever answers at a listed address, here a copy of the real sidecar's status JSON without a signature.
    const real = `http://${t.worker('llama-a', 'decode').address}/kvgate/v1/status`;
    impostor = http.createServer((_req, res) => {
      void fetch(real)
        .then((r) => r.arrayBuffer())
        .then((b) => res.writeHead(200, { 'content-type': 'application/json' }).end(Buffer.from(b)));
    });
    await new Promise<void>((r) => impostor!.listen(0, '127.0.0.1', () => r()));
    const address = `127.0.0.1:${(impostor.address() as AddressInfo).port}`;
    await editRouteTable(t, (table) => {
      table.pools.find((p: { name: string }) => p.name === 'a-decode').endpoints.push({ address, status: `http://${address}` });
    });
    expect(
      await eventually(async () => {
        await t.gate.policy.reload('alerts test');
        return t.gate.policy.current().pools.get('a-decode')!.endpoints.length === 2;
      }),
    ).toBe(true);
    const polled = await scrape();
    await t.gate.refreshWorkerView();
    const firing = evaluateInstant(expr, { before: polled, now: await scrape() });
    expect(firing.map((s) => s.labels)).toEqual([{ namespace: 'kvgate', pod: 'kvgate-gate-0', result: 'unsigned' }]);
    expect(firing[0]!.value).toBeGreaterThanOrEqual(1);
  });

  it('KvgatePoolNoRoutableEndpoint: the only decode worker of a pool drains', async () => {
    const expr = await exprOf('KvgatePoolNoRoutableEndpoint');
    await t.gate.refreshWorkerView();
    expect(evaluateInstant(expr, { now: await scrape() })).toEqual([]);
    void t.worker('llama-b', 'decode').sidecar.drain(); // draining shows at once; the promise ends after the announce window
    await t.gate.refreshWorkerView();
    const firing = evaluateInstant(expr, { now: await scrape() });
    expect(firing.map((s) => [s.labels['pool'], s.labels['revision'], s.labels['role'], s.labels['state']])).toEqual([
      ['b-decode', 'llama-b', 'decode', 'routable'],
    ]);
  });
});

describe('key alerts fire on a rotation step that did not reach every replica', () => {
  it('KvgateKeyIdNotOnEveryReplica and KvgateSidecarKeyReloadRejected: sidecar b rejected the file that adds k2', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'kvgate-alerts-'));
    try {
      const replicas = (['kvgate-gate-0', 'sidecar-a', 'sidecar-b'] as const).map((pod) => {
        const file = path.join(dir, `${pod}.json`);
        return {
          pod,
          file,
          registry: new Registry(),
          prefix: pod.startsWith('kvgate-gate') ? ('kvgate_' as const) : ('kvgate_sidecar_' as const),
        };
      });
      const step0 = testKeyFileText({ current: 'k1', keys: { k1: 'k1' } });
      for (const r of replicas) await writeFile(r.file, step0);
      const stores = replicas.map((r) => {
        const initial = loadKeyRing({ file: r.file });
        if (!initial.ok) throw initial.error;
        const store = createKeyStore({
          source: { file: r.file },
          initial: initial.value,
          logger: silent,
          registry: r.registry,
          metricPrefix: r.prefix,
        });
        return { ...r, store };
      });
      const scrapeKeys = async () =>
        (await Promise.all(stores.map(async (r) => samplesOf(await r.registry.metrics(), { namespace: 'kvgate', pod: r.pod })))).flat();
      const [missing, rejected] = [await exprOf('KvgateKeyIdNotOnEveryReplica'), await exprOf('KvgateSidecarKeyReloadRejected')];
      const before = await scrapeKeys();
      expect(evaluateInstant(missing, { now: before })).toEqual([]);

      // Step 1 (add k2) reaches the gate and sidecar a; sidecar b's copy maps k1 to another secret and is rejected.
      const step1 = testKeyFileText({ current: 'k1', keys: { k1: 'k1', k2: 'k2' } });
      await writeFile(stores[0]!.file, step1);
      await writeFile(stores[1]!.file, step1);
      await writeFile(stores[2]!.file, testKeyFileText({ current: 'k1', keys: { k1: 'another secret', k2: 'k2' } }));
      expect(stores.map((r) => r.store.reload('SIGHUP').result)).toEqual(['applied', 'applied', 'rejected']);
      const now = await scrapeKeys();
      expect(evaluateInstant(missing, { now }).map((x) => [x.labels, x.value])).toEqual([[{ key_id: 'k2' }, 2]]);
      expect(evaluateInstant(rejected, { before, now }).map((x) => x.labels)).toEqual([{ namespace: 'kvgate', pod: 'sidecar-b' }]);
      expect(evaluateInstant(await exprOf('KvgateKeyReloadRejected'), { before, now })).toEqual([]);

      // The fixed file reaches sidecar b: every replica holds k1 and k2 again.
      await writeFile(stores[2]!.file, step1);
      expect(stores[2]!.store.reload('SIGHUP').result).toBe('applied');
      expect(evaluateInstant(missing, { now: await scrapeKeys() })).toEqual([]);
      for (const r of stores) r.store.close();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
