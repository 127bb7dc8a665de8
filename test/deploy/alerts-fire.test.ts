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
 *   key stores of src/key-store.ts reloading key files, each on its own registry as each process has);
 * - then, in the same topology, one condition per test (they run in order and leave it as they found it, but for
 *   what they say): a gate started with `insecure: true`, a second gate on a test clock whose polls of one sidecar
 *   fail past staleAfterMs (beside an endpoint that never answers), a forged header, a cross-group hop, a rejected route table,
 *   the impostor left unverified, sessions sent to a drained pool, a prefill and a decode worker upgraded in place,
 *   a contract under a key id the sidecars lack, a gate whose pod watch loses its RBAC on the test Kubernetes API
 *   server (testbed/kube-apiserver) while its a-decode pool is found by selector;
 * - a decode worker whose replay guard holds 3 contracts (the sidecar's `replayGuardMaxEntries` seam, instead of
 *   200,000) takes 4 routed requests, then a valid contract sent to it directly, and again.
 * Where the runbook (docs/operator-guide.md section 15) names a command, a fix or the metrics to compare, the test
 * runs or reads them as written and checks that they say what the runbook claims and that the alert clears.
 * Only the expression is evaluated, never the rule's `for`: where one waits (KvgateDiscoveryWatchesBroken, `for: 5m`),
 * the test shows its condition holds across what could reset it (retries) and what the operator meets by then.
 * KvgateSilentRecomputes, the one alert of the rule not here, is evaluated in test/e2e/vllm-flavours.test.ts.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { parse as parseYaml, stringify as toYaml } from 'yaml';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadKeyRing } from '../../src/contract/keys.js';
import { gateSigned, testKeyFileText } from '../../src/contract/testing.js';
import { policyCommand } from '../../src/cli/policy-command.js';
import { statusCommand } from '../../src/cli/status-command.js';
import { H } from '../../src/headers.js';
import { PACKAGE_ROOT } from '../../src/package-root.js';
import { parseGateConfig } from '../../src/gate/config.js';
import { startGate } from '../../src/gate/gate.js';
import { optInGauge } from '../../src/gate/opt-ins.js';
import { createKeyStore } from '../../src/key-store.js';
import { reservePorts, SERVED_MODEL, startTopology, startWorker, type Topology } from '../../testbed/demo/topology.js';
import { completion, crossGroupHop, PROMPTS, post } from '../../testbed/demo/scenarios.js';
import {
  client,
  complete,
  counter,
  editRouteTable,
  eventually,
  metricsOf,
  silent,
  topologyContractFields,
} from '../e2e/failure-matrix-support.js';
import { shippedAlerts } from '../support/alert-rules.js';
import { evaluateInstant, type Sample, samplesOf } from '../support/promql.js';
import { readyPod, startKubeApiServer } from '../../testbed/kube-apiserver/server.js';

const execFileAsync = promisify(execFile);

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

/** The runbook's text (docs/operator-guide.md section 15): from its heading to the next. */
async function runbook(alert: string): Promise<string> {
  const guide = await readFile(path.join(PACKAGE_ROOT, 'docs', 'operator-guide.md'), 'utf8');
  const at = guide.indexOf(`\n### ${alert}\n`);
  expect(at, `no runbook heading for ${alert}`).toBeGreaterThan(0);
  const end = guide.indexOf('\n#', at + 5);
  return guide.slice(at, end < 0 ? undefined : end);
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

describe('alerts of routing, capacity and workers, and their runbooks (docs/operator-guide.md section 15) followed literally', () => {
  const admin = () => `http://127.0.0.1:${t.gate.adminPort}`;
  const podOf = (revision: string, role: string) => `${revision}-${role}-0`;
  /** `kvgate status --gate URL`, in process (the gate runs in this process: a child would block on it). */
  async function kvgateStatus(): Promise<string> {
    let out = '';
    expect(await statusCommand(['--gate', admin()], { stdout: (s) => (out += s), stderr: (s) => (out += s) })).toBe(0);
    return out;
  }
  /** The row of `kvgate status` for one endpoint address. */
  const rowOf = (status: string, address: string) => status.split('\n').find((l) => l.includes(` ${address} `)) ?? '';

  it('KvgateGateInsecureTransport: a gate started from the topology config with `insecure: true` instead of `tls`', async () => {
    const expr = await exprOf('KvgateGateInsecureTransport');
    // The runbook's fixed state is the topology's own gate: mTLS with tls.roles, no insecure.
    expect(evaluateInstant(expr, { now: await scrape() })).toEqual([]);
    const { tls: _tls, ...rest } = parseYaml(await readFile(path.join(t.dir, 'gate.yaml'), 'utf8')) as Record<string, unknown>;
    const config = parseGateConfig(toYaml({ ...rest, listen: '127.0.0.1:0', insecure: true }), path.join(t.dir, 'insecure-gate.yaml'));
    if (!config.ok) throw new Error(JSON.stringify(config.error));
    const insecure = await startGate(config.value, { logger: silent, keys: t.keys });
    try {
      const now = samplesOf(await metricsOf(`http://127.0.0.1:${insecure.adminPort}`), { namespace: 'kvgate', pod: 'kvgate-gate-1' });
      expect(evaluateInstant(expr, { now }).map((s) => [s.labels['namespace'], s.labels['pod']])).toEqual([['kvgate', 'kvgate-gate-1']]);
      expect(await runbook('KvgateGateInsecureTransport')).toMatch(/configure `tls` \(mTLS with `tls\.roles`\) and remove `insecure`/);
    } finally {
      await insecure.close();
    }
  });

  it("KvgateWorkerViewStale: one sidecar's status polls fail past staleAfterMs; /status names the last error, and polls that answer again clear it", async () => {
    const expr = await exprOf('KvgateWorkerViewStale');
    // A second gate on a clock the test moves, over a copy of the route table whose a-decode status URL goes through a
    // proxy the test can cut (the address, and so the sidecar's signed answer, stay the real ones).
    const decodeA = t.worker('llama-a', 'decode');
    let cut = false;
    const proxy = http.createServer((req, res) => {
      if (cut) {
        req.socket.destroy();
        return;
      }
      void fetch(`http://${decodeA.address}${req.url}`, { headers: req.headers as Record<string, string> }).then(async (r) => {
        res.writeHead(r.status, Object.fromEntries(r.headers)).end(Buffer.from(await r.arrayBuffer()));
      });
    });
    await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', () => r()));
    const dir = await mkdtemp(path.join(tmpdir(), 'kvgate-alerts-stale-'));
    let clock = Date.now();
    let gate: Awaited<ReturnType<typeof startGate>> | undefined;
    try {
      const table = parseYaml(await readFile(t.routeTablePath, 'utf8')) as { pools: { name: string; endpoints: { status: string }[] }[] };
      table.pools.find((p) => p.name === 'a-decode')!.endpoints[0]!.status = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;
      // And a listed endpoint that never answers (nothing listens there): it must not hide the other one's staleness.
      (table.pools.find((p) => p.name === 'b-prefill')!.endpoints as unknown[]).push({
        address: '127.0.0.1:9',
        status: 'http://127.0.0.1:9',
      });
      await writeFile(path.join(dir, 'route-table.yaml'), toYaml(table));
      const gateYaml = parseYaml(await readFile(path.join(t.dir, 'gate.yaml'), 'utf8')) as Record<string, unknown>;
      const config = parseGateConfig(
        // A poll timeout well above what a loaded test machine needs, so only the cut proxy's polls fail.
        toYaml({
          ...gateYaml,
          listen: '127.0.0.1:0',
          policy: path.join(dir, 'route-table.yaml'),
          workerView: { mode: 'live', intervalMs: 1000, timeoutMs: 5000, staleAfterMs: 10_000 },
        }),
        path.join(dir, 'gate.yaml'),
      );
      if (!config.ok) throw new Error(JSON.stringify(config.error));
      gate = await startGate(config.value, { logger: silent, keys: t.keys, now: () => clock });
      const scrapeGate = async () =>
        samplesOf(await metricsOf(`http://127.0.0.1:${gate!.adminPort}`), { namespace: 'kvgate', pod: 'kvgate-gate-1' });
      await gate.refreshWorkerView();
      expect(evaluateInstant(expr, { now: await scrapeGate() })).toEqual([]);

      cut = true;
      clock += 11_000;
      await gate.refreshWorkerView();
      const firing = evaluateInstant(expr, { now: await scrapeGate() });
      expect(firing.map((x) => [x.labels['pod'], x.value])).toEqual([['kvgate-gate-1', 11]]);
      // The runbook: /status -> workerView.endpoints shows the last error per address.
      const status = (await (await fetch(`http://127.0.0.1:${gate.adminPort}/status`)).json()) as {
        workerView: { endpoints: Record<string, { error?: string }> };
      };
      expect(status.workerView.endpoints[decodeA.address]?.error).toMatch(/\S/);
      expect(status.workerView.endpoints['127.0.0.1:9']?.error).toMatch(/unreachable/);

      cut = false;
      await gate.refreshWorkerView();
      expect(evaluateInstant(expr, { now: await scrapeGate() })).toEqual([]);
    } finally {
      await gate?.close();
      proxy.closeAllConnections();
      await new Promise((r) => proxy.close(r));
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("KvgateDiscoveryWatchesBroken: the gate's Role is revoked under a running pod watch; /status → discovery names the 403 and its fix, and the Role restored clears it", async () => {
    const [expr, noRoutable] = [await exprOf('KvgateDiscoveryWatchesBroken'), await exprOf('KvgatePoolNoRoutableEndpoint')];
    // A second gate, on a clock the test moves, over a copy of the route table whose a-decode pool is found by selector
    // through the test API server (testbed/kube-apiserver) with the real client library, as deploy/kubernetes does.
    const api = await startKubeApiServer({ allowedNamespaces: ['kvgate'], bookmarkIntervalMs: 0 });
    const decodeA = t.worker('llama-a', 'decode');
    const port = Number(decodeA.address.split(':')[1]);
    const labels = { app: 'vllm', 'kvgate.dev/role': 'decode', 'kvgate.io/revision': 'llama-a' };
    api.store.create(readyPod('llama-a-decode-0', 'kvgate', '127.0.0.1', labels, 'uid-llama-a-decode-0'));
    const dir = await mkdtemp(path.join(tmpdir(), 'kvgate-alerts-discovery-'));
    let clock = Date.now();
    let gate: Awaited<ReturnType<typeof startGate>> | undefined;
    try {
      const table = parseYaml(await readFile(t.routeTablePath, 'utf8')) as { pools: Record<string, unknown>[] };
      const pool = table.pools.find((p) => p['name'] === 'a-decode')!;
      delete pool['endpoints'];
      pool['discovery'] = {
        kubernetes: { namespace: 'kvgate', matchLabels: { app: 'vllm', 'kvgate.dev/role': 'decode' }, targetPort: port, statusPort: port },
      };
      await writeFile(path.join(dir, 'route-table.yaml'), toYaml(table));
      const gateYaml = parseYaml(await readFile(path.join(t.dir, 'gate.yaml'), 'utf8')) as Record<string, unknown>;
      const config = parseGateConfig(
        toYaml({ ...gateYaml, listen: '127.0.0.1:0', policy: path.join(dir, 'route-table.yaml'), discovery: { staleAfterMs: 30_000 } }),
        path.join(dir, 'gate.yaml'),
      );
      if (!config.ok) throw new Error(JSON.stringify(config.error));
      gate = await startGate(config.value, {
        logger: silent,
        keys: t.keys,
        now: () => clock,
        kubeConfig: api.kubeConfig(),
        discoveryBackoff: { initialMs: 20, maxMs: 100 },
      });
      const adminUrl = `http://127.0.0.1:${gate.adminPort}`;
      const scrapeGate = async () => samplesOf(await metricsOf(adminUrl), { namespace: 'kvgate', pod: 'kvgate-gate-1' });
      type PoolDiscovery = { state: string; lastError: string | null; restarts: number; endpoints: { address: string }[] };
      const discoveryOf = async () =>
        ((await (await fetch(`${adminUrl}/status`)).json()) as { discovery: Record<string, PoolDiscovery> }).discovery['a-decode']!;
      expect(await eventually(async () => (await discoveryOf()).state === 'ok')).toBe(true);
      expect((await discoveryOf()).endpoints.map((e) => e.address)).toEqual([decodeA.address]);
      expect(evaluateInstant(expr, { now: await scrapeGate() })).toEqual([]);

      // The Role no longer grants pods in the namespace. kube-apiserver authorizes a request once, as it arrives
      // (kubernetes/kubernetes@008b3652, staging/src/k8s.io/apiserver/pkg/endpoints/filters/authorization.go,
      // `withAuthorization`: the handler runs only after `Authorize` allowed it), so the watch already open goes on
      // until its timeoutSeconds; the client re-opens it from its resourceVersion and gets 403, then every re-list
      // does (client-node 1.4.0 dist/cache.js `doneHandler`; src/discovery/pod-watch.ts restarts it).
      api.setAllowedNamespaces([]);
      const forbidden = () => api.counts()['forbidden'] ?? 0;
      expect(forbidden()).toBe(0);
      api.endWatches(); // the watch's timeoutSeconds ran out
      expect(await eventually(() => forbidden() >= 2)).toBe(true);
      const firing = evaluateInstant(expr, { now: await scrapeGate() });
      expect(firing.map((x) => [x.labels['pod'], x.value])).toEqual([['kvgate-gate-1', 1]]);
      // `for: 5m`: the gauge holds through every retry, since only a watch the API server answers mends it.
      const seen = forbidden();
      expect(await eventually(() => forbidden() >= seen + 3)).toBe(true);
      expect(evaluateInstant(expr, { now: await scrapeGate() }).map((x) => x.value)).toEqual([1]);

      // Five minutes on: past discovery.staleAfterMs (30 s), so by the time the alert fires the pool has no endpoints.
      clock += 5 * 60_000 + 1000;
      const broken = await discoveryOf();
      expect(broken.state).toBe('failed');
      expect(broken.endpoints.map((e) => e.address)).toEqual([decodeA.address]); // the last known pods, routed to by none
      expect(broken.restarts).toBeGreaterThanOrEqual(3);
      // The runbook: `/status` → `discovery` says why, and what to grant.
      const text = await runbook('KvgateDiscoveryWatchesBroken');
      expect(text).toMatch(/`\/status` →\s+`discovery`/);
      expect(text).toMatch(/`lastError`/);
      // The 403 line the runbook quotes is the one /status shows (N: the pool's namespace), and its metric counts it.
      const quoted = /\(`(the API server refused[^`]+)`\)/.exec(text)?.[1];
      expect(quoted, text).toBeDefined();
      expect(broken.lastError).toBe(quoted!.replace(/\s+/g, ' ').replace('namespace N ', 'namespace kvgate '));
      expect(text).toContain('kvgate_discovery_watch_restarts_total{status}');
      expect(await counter(adminUrl, 'kvgate_discovery_watch_restarts_total', { status: '403' })).toBeGreaterThanOrEqual(3);
      await gate.refreshWorkerView();
      const endpoints = (await scrapeGate()).filter(
        (s) => s.labels['__name__'] === 'kvgate_worker_endpoints' && s.labels['pool'] === 'a-decode',
      );
      expect(endpoints.length).toBeGreaterThan(0);
      expect(endpoints.every((s) => s.value === 0)).toBe(true);
      expect(evaluateInstant(noRoutable, { now: await scrapeGate() }).map((x) => x.labels['pool'])).toContain('a-decode'); // b-decode is drained above

      // The fix: the Role back. The next retry lists, the watch runs, and the alert clears.
      api.setAllowedNamespaces(['kvgate']);
      // The list makes the pool `ok`; the watch answered right after it clears `lastError` and the gauge.
      expect(await eventually(async () => (await discoveryOf()).state === 'ok' && (await discoveryOf()).lastError === null)).toBe(true);
      expect(evaluateInstant(expr, { now: await scrapeGate() })).toEqual([]);
    } finally {
      await gate?.close();
      await api.close();
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('KvgateForgedHeaders: a public request with a gate-owned header (removed, and the request served)', async () => {
    const expr = await exprOf('KvgateForgedHeaders');
    const before = await scrape();
    expect(evaluateInstant(expr, { before, now: await scrape() })).toEqual([]);
    const r = await complete(t, PROMPTS[0]!, 1, client('acme', 'forged', { [H.revision]: 'llama-b' }));
    expect(r.status).toBe(200); // "nothing is at risk": served on its own bound revision
    expect(r.headers.get(H.revision)).toBe('llama-a');
    expect(evaluateInstant(expr, { before, now: await scrape() }).map((s) => s.labels)).toEqual([
      { namespace: 'kvgate', pod: 'kvgate-gate-0' },
    ]);
  });

  it('KvgateMixedRevisionRefused: a prefill hop on the internal listener that leaves its group', async () => {
    const expr = await exprOf('KvgateMixedRevisionRefused');
    const before = await scrape();
    const r = await crossGroupHop(t, PROMPTS[0]!);
    expect([r.status, r.json.error?.code]).toEqual([409, 'mixed_revision']);
    expect(evaluateInstant(expr, { before, now: await scrape() }).map((s) => s.labels)).toEqual([
      { namespace: 'kvgate', pod: 'kvgate-gate-0' },
    ]);
  });

  it('KvgatePolicyReloadRejected: a route table edit that fails its check; /status and `kvgate policy check` name the same issue', async () => {
    const expr = await exprOf('KvgatePolicyReloadRejected');
    const good = await readFile(t.routeTablePath, 'utf8');
    const before = await scrape();
    await editRouteTable(t, (table) => {
      table.models[SERVED_MODEL].rollout.weight = 250;
    });
    expect((await t.gate.policy.reload('alerts test')).ok).toBe(false);
    expect(evaluateInstant(expr, { before, now: await scrape() }).map((s) => s.labels)).toEqual([
      { namespace: 'kvgate', pod: 'kvgate-gate-0' },
    ]);
    // The runbook: /status -> policy.lastReload, then `kvgate policy check` the file.
    expect(await runbook('KvgatePolicyReloadRejected')).toMatch(/`\/status` → `policy\.lastReload`[\s\S]*`kvgate policy check`/);
    const status = (await (await fetch(`${admin()}/status`)).json()) as { policy: { lastReload: { ok: boolean; message: string } } };
    expect(status.policy.lastReload.ok).toBe(false);
    expect(status.policy.lastReload.message).toMatch(/rollout\.weight/);
    let out = '';
    expect(await policyCommand(['check', t.routeTablePath], { out: (s) => (out += s), err: (s) => (out += s) })).toBe(1);
    expect(out).toContain(status.policy.lastReload.message.split('\n')[0]!);
    await writeFile(t.routeTablePath, good);
    expect((await t.gate.policy.reload('alerts test')).ok).toBe(true);
  });

  it('KvgateEndpointsNotRoutable: the impostor endpoint stays unverified; `kvgate status` names it and why, and removing it clears the alert', async () => {
    const expr = await exprOf('KvgateEndpointsNotRoutable');
    const impostorAddress = t.gate.policy
      .current()
      .pools.get('a-decode')!
      .endpoints.map((e) => e.address)
      .find((a) => a !== t.worker('llama-a', 'decode').address);
    expect(impostorAddress).toBeDefined();
    await t.gate.refreshWorkerView();
    const firing = evaluateInstant(expr, { now: await scrape() });
    expect(firing.map((s) => [s.labels['pool'], s.labels['state'], s.value])).toEqual([['a-decode', 'unverified', 1]]);
    const row = rowOf(await kvgateStatus(), impostorAddress!);
    expect(row).toMatch(/ unverified /);
    expect(row).toMatch(/sign/i); // the why: its answer carried no signature
    // The fix the runbook of KvgateStatusPollSignatureRefused gives: find what answers there; here, take it out.
    await editRouteTable(t, (table) => {
      const pool = table.pools.find((p: { name: string }) => p.name === 'a-decode');
      pool.endpoints = pool.endpoints.filter((e: { address: string }) => e.address !== impostorAddress);
    });
    expect((await t.gate.policy.reload('alerts test')).ok).toBe(true);
    await t.gate.refreshWorkerView();
    expect(evaluateInstant(expr, { now: await scrape() })).toEqual([]);
  });

  it('KvgateNoCompatibleCapacityRefusals and KvgateSidecarDrainStuck: sessions sent to a revision whose decode pool is drained; the runbook undrain clears both', async () => {
    const [refusals, stuck, none] = [
      await exprOf('KvgateNoCompatibleCapacityRefusals'),
      await exprOf('KvgateSidecarDrainStuck'),
      await exprOf('KvgatePoolNoRoutableEndpoint'),
    ];
    const decodeB = t.worker('llama-b', 'decode');
    expect(evaluateInstant(stuck, { now: await scrape() }).map((s) => s.labels['pod'])).toEqual([podOf('llama-b', 'decode')]); // drained above
    await editRouteTable(t, (table) => {
      table.models[SERVED_MODEL].rollout.weight = 100;
    });
    expect((await t.gate.policy.reload('alerts test')).ok).toBe(true);
    await t.gate.refreshWorkerView();
    const before = await scrape();
    const refused = await complete(t, PROMPTS[1]!, 1, client('acme', 'capacity'));
    expect([refused.status, refused.json.error?.code]).toEqual([503, 'no_compatible_capacity']);
    const now = await scrape();
    expect(evaluateInstant(refusals, { before, now }).map((s) => s.labels)).toEqual([{ namespace: 'kvgate', pod: 'kvgate-gate-0' }]);
    // "check the alerts above for lost endpoints": the drained pool is the one without a routable endpoint.
    expect(evaluateInstant(none, { now }).map((s) => s.labels['pool'])).toEqual(['b-decode']);

    // KvgateSidecarDrainStuck's runbook, literally: its kubectl exec command, run where the container runs it.
    // The kvgate image (node:24-slim) has no curl or wget: every command the guide runs in a kvgate container uses node.
    const guide = await readFile(path.join(PACKAGE_ROOT, 'docs', 'operator-guide.md'), 'utf8');
    expect(guide.match(/kubectl exec [^`]*-- (?:curl|wget)\b[^`]*/g) ?? []).toEqual([]);
    const text = await runbook('KvgateSidecarDrainStuck');
    const cmd = /`kubectl exec \S+ -c kvgate-sidecar -- node -e "([^"]+)"`/.exec(text);
    expect(cmd, text).not.toBeNull();
    const script = cmd![1]!.replace('http://127.0.0.1:9092', decodeB.sidecar.adminUrl!);
    expect(script).not.toBe(cmd![1]);
    const ran = await execFileAsync(process.execPath, ['-e', script]);
    expect(ran.stdout).toMatch(/^200 \{"draining":false/);
    await t.gate.refreshWorkerView();
    expect(evaluateInstant(stuck, { now: await scrape() })).toEqual([]);
    expect(evaluateInstant(none, { now: await scrape() })).toEqual([]);
    expect((await complete(t, PROMPTS[1]!, 1, client('acme', 'capacity'))).status).toBe(200);
    await editRouteTable(t, (table) => {
      table.models[SERVED_MODEL].rollout.weight = 0;
    });
    expect((await t.gate.policy.reload('alerts test')).ok).toBe(true);
  });

  it('KvgateWorkerRestartRefused, KvgateRoutedRequestsRefusedBySidecars and KvgateSidecarUnverified: a prefill worker upgraded in place; redeploying its declared revision clears the sidecar alert', async () => {
    const [restart, routed, unverified] = [
      await exprOf('KvgateWorkerRestartRefused'),
      await exprOf('KvgateRoutedRequestsRefusedBySidecars'),
      await exprOf('KvgateSidecarUnverified'),
    ];
    const prefillA = t.worker('llama-a', 'prefill');
    const before = await scrape();
    expect(evaluateInstant(unverified, { now: before })).toEqual([]);
    await t.restartWorker('llama-a', 'prefill', { behaveAs: { tokenizer: { revision: 'tok-changed' } } });
    const r = await complete(t, PROMPTS[1]!, 1, client('acme', 'restart'));
    expect([r.status, r.json.error?.code]).toEqual([409, 'incompatible_transfer']);
    const refusedCount = () => counter(admin(), 'kvgate_routed_responses_total', { outcome: 'refused' });
    expect(await eventually(async () => (await refusedCount()) > 0)).toBe(true);
    const now = await scrape();
    expect(evaluateInstant(restart, { before, now }).map((s) => s.labels)).toEqual([
      { namespace: 'kvgate', pod: podOf('llama-a', 'prefill'), role: 'prefill' },
    ]);
    expect(evaluateInstant(routed, { before, now }).map((s) => s.labels)).toEqual([{ namespace: 'kvgate', revision: 'llama-a' }]);
    expect(evaluateInstant(unverified, { now }).map((s) => s.labels['pod'])).toEqual([podOf('llama-a', 'prefill')]);
    // The routed refusal's code is the sidecar's reason, the one the runbook maps to "a worker changed in place".
    expect(await counter(admin(), 'kvgate_routed_responses_total', { outcome: 'refused', code: 'incompatible_transfer' })).toBe(1);
    expect(await runbook('KvgateRoutedRequestsRefusedBySidecars')).toMatch(/`incompatible_transfer`\s+\(a worker changed in place\)/);
    // "the sidecar's /kvgate/v1/status → reasons names each field", and `kvgate status` shows why on the endpoint.
    const sidecarStatus = (await (await fetch(`${prefillA.sidecar.url}/kvgate/v1/status`)).json()) as { reasons: string[] };
    expect(sidecarStatus.reasons.join('\n')).toMatch(/tokenizer/);
    await t.gate.refreshWorkerView();
    expect(rowOf(await kvgateStatus(), prefillA.address)).toMatch(/ unverified +UNVERIFIED .*tokenizer/);
    // The fix: redeploy the worker with its declared revision; the sidecar's next probe verifies it.
    await t.restartWorker('llama-a', 'prefill', { behaveAs: {} });
    expect((await prefillA.sidecar.probe()).verified).toBe(true);
    expect(evaluateInstant(unverified, { now: await scrape() })).toEqual([]);
    await t.gate.refreshWorkerView();
    expect((await complete(t, PROMPTS[1]!, 1, client('acme', 'restart'))).status).toBe(200);
  });

  it('KvgateAttestationFailures: a decode worker upgraded in place (prompt_tokens_mismatch); its runbook sends the operator to the worker, not to a forger', async () => {
    const [attest, unverified] = [await exprOf('KvgateAttestationFailures'), await exprOf('KvgateSidecarUnverified')];
    const decodeA = t.worker('llama-a', 'decode');
    const before = await scrape();
    await t.restartWorker('llama-a', 'decode', { behaveAs: { tokenizer: { revision: 'tok-changed' } } });
    // PROMPTS[1] is 17 tokens under the declared tokenizer and 16 under `tok-changed`.
    const r = await complete(t, PROMPTS[1]!, 1, client('acme', 'attest'));
    expect([r.status, r.json.error?.code]).toEqual([409, 'incompatible_transfer']);
    const now = await scrape();
    expect(evaluateInstant(attest, { before, now }).map((s) => s.labels)).toEqual([
      { namespace: 'kvgate', pod: podOf('llama-a', 'decode'), reason: 'prompt_tokens_mismatch' },
    ]);
    // The refusal re-probed the decode worker: its sidecar is unverified at once, so the runbook's pointer holds.
    expect(evaluateInstant(unverified, { now }).map((s) => s.labels['pod'])).toEqual([podOf('llama-a', 'decode')]);
    expect(await runbook('KvgateAttestationFailures')).toMatch(/`prompt_tokens_mismatch`[^.]*KvgateSidecarUnverified/);
    await t.restartWorker('llama-a', 'decode', { behaveAs: {} });
    expect((await decodeA.sidecar.probe()).verified).toBe(true);
    expect(evaluateInstant(unverified, { now: await scrape() })).toEqual([]);
    await t.gate.refreshWorkerView();
  });

  it('KvgateContractUnknownKey: a contract signed with a key id the sidecars lack', async () => {
    const expr = await exprOf('KvgateContractUnknownKey');
    const dir = await mkdtemp(path.join(tmpdir(), 'kvgate-alerts-'));
    try {
      const file = path.join(dir, 'ahead.json');
      await writeFile(file, testKeyFileText({ current: 'k2', keys: { k2: 'k2' } }));
      const ahead = loadKeyRing({ file });
      if (!ahead.ok) throw ahead.error;
      const before = await scrape();
      const rid = 'alerts-unknown-key';
      const signed = gateSigned(ahead.value, topologyContractFields(t, rid), { ...completion(PROMPTS[0]!, 1) });
      const decode = t.worker('llama-a', 'decode');
      const r = await post(`${decode.sidecar.url}/v1/completions`, signed.body, { 'x-request-id': rid, [H.contract]: signed.contract });
      expect([r.status, r.json.error?.code]).toEqual([403, 'contract_invalid']);
      expect(evaluateInstant(expr, { before, now: await scrape() }).map((s) => s.labels)).toEqual([
        { namespace: 'kvgate', pod: podOf('llama-a', 'decode') },
      ]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('a replay guard full of live contracts', () => {
  it('KvgateReplayGuardEvictions: a decode sidecar whose guard holds 3 contracts admits 4 the gate routed, then 1 sent past the gate; the metrics the runbook names tell the two apart', async () => {
    const expr = await exprOf('KvgateReplayGuardEvictions');
    // A second llama-a decode worker, the pool's only endpoint, whose replay guard holds 3 live contracts instead of
    // 200,000 (the sidecar's `replayGuardMaxEntries` seam); the contracts are the gate's, and live 30 s (contract.ttlMs).
    const [port] = await reservePorts(1);
    const descriptor = parseYaml(await readFile(path.join(t.dir, 'llama-a.yaml'), 'utf8')) as Record<string, unknown>;
    const small = await startWorker({
      revision: 'llama-a',
      role: 'decode',
      index: 1,
      descriptor,
      port: port!,
      internalUrl: t.internalUrl,
      keys: t.keys,
      opts: { logger: silent, sidecarProbeIntervalMs: 60_000, replayGuardMaxEntries: 3 },
    });
    const good = await readFile(t.routeTablePath, 'utf8');
    const pod = 'llama-a-decode-1';
    const admin = `http://127.0.0.1:${t.gate.adminPort}`;
    try {
      await editRouteTable(t, (table) => {
        table.pools.find((p: { name: string }) => p.name === 'a-decode').endpoints = [
          { address: small.address, status: `http://${small.address}` },
        ];
      });
      expect((await t.gate.policy.reload('alerts test')).ok).toBe(true);
      await t.gate.refreshWorkerView();
      const scrapeAll = async () => [
        ...(await scrape()),
        ...samplesOf(await metricsOf(small.sidecar.url), {
          namespace: 'kvgate',
          pod,
          kvgate_io_revision: 'llama-a',
          kvgate_io_role: 'decode',
        }),
      ];
      const sidecar = (name: string, labels: Record<string, string> = {}) => counter(small.sidecar.url, name, labels);
      const routed = () => counter(admin, 'kvgate_decisions_total', { outcome: 'route', revision: 'llama-a' });
      const before = await scrapeAll();
      const [requests0, routed0] = [await sidecar('kvgate_sidecar_requests_total'), await routed()];

      // Real traffic: four requests through Envoy, each with its own contract minted by the gate for this worker.
      for (let i = 0; i < 3; i++) expect((await complete(t, PROMPTS[i % 2]!, 1, client('acme', `replay-${i}`))).status).toBe(200);
      expect(evaluateInstant(expr, { before, now: await scrapeAll() })).toEqual([]); // 3 held: nothing forgotten yet
      expect((await complete(t, PROMPTS[0]!, 1, client('acme', 'replay-3'))).status).toBe(200); // admitted: the guard fails open
      const firing = evaluateInstant(expr, { before, now: await scrapeAll() });
      expect(firing.map((x) => [x.labels, x.value])).toEqual([[{ namespace: 'kvgate', pod }, 1]]);
      // The runbook's first check: every admission here was a route of the gate (its decisions for the revision rose as
      // much as the sidecar's requests), and nothing was sent twice or to the wrong worker.
      expect((await sidecar('kvgate_sidecar_requests_total')) - requests0).toBe(4);
      expect((await routed()) - routed0).toBe(4);
      expect(await sidecar('kvgate_sidecar_contract_failures_total', { reason: 'replayed' })).toBe(0);

      // Contracts that did not come through the gate's routing: a valid contract (signed with the gate's key) sent to
      // the worker directly, then again. The sidecar's requests outrun the gate's routes, and the copy is `replayed`.
      const rid = 'alerts-replay-sprayed';
      const fields = topologyContractFields(t, rid, 'llama-a', { decode: { cluster: 'a_decode', endpoint: small.address } });
      const signed = gateSigned(t.keys, fields, { ...completion(PROMPTS[0]!, 1) });
      const sprayed = () =>
        post(`${small.sidecar.url}/v1/completions`, signed.body, { 'x-request-id': rid, [H.contract]: signed.contract });
      expect((await sprayed()).status).toBe(200);
      const again = await sprayed();
      expect([again.status, again.json.error?.code]).toEqual([403, 'contract_invalid']);
      expect((await sidecar('kvgate_sidecar_requests_total')) - requests0).toBe(6);
      expect((await routed()) - routed0).toBe(4);
      expect(await sidecar('kvgate_sidecar_contract_failures_total', { reason: 'replayed' })).toBe(1);
      expect(await sidecar('kvgate_sidecar_replay_guard_evictions_total')).toBe(2);

      const text = await runbook('KvgateReplayGuardEvictions');
      for (const named of ['kvgate_sidecar_requests_total', 'kvgate_decisions_total', 'reason="replayed"', 'contract.ttlMs', 'section 8'])
        expect(text).toContain(named);
      // An increase alert clears once its window holds no eviction.
      const quiet = await scrapeAll();
      expect(evaluateInstant(expr, { before: quiet, now: await scrapeAll() })).toEqual([]);
    } finally {
      await writeFile(t.routeTablePath, good);
      expect((await t.gate.policy.reload('alerts test')).ok).toBe(true);
      await small.sidecar.close();
      await small.sim.close();
      await t.gate.refreshWorkerView();
    }
  });
});

describe('key alerts fire on a rotation step that did not reach every replica', () => {
  it('KvgateKeyIdNotOnEveryReplica, KvgateSidecarKeyReloadRejected and KvgateKeyReloadRejected: sidecar b rejected the file that adds k2, then the gate a broken one', async () => {
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

      // KvgateKeyReloadRejected: the gate's copy of step 2 does not parse; it keeps its ring, and says why.
      const gateRejected = await exprOf('KvgateKeyReloadRejected');
      const beforeGate = await scrapeKeys();
      await writeFile(stores[0]!.file, '{"current": "k2", "keys": ');
      expect(stores[0]!.store.reload('SIGHUP').result).toBe('rejected');
      expect(evaluateInstant(gateRejected, { before: beforeGate, now: await scrapeKeys() }).map((x) => x.labels)).toEqual([
        { namespace: 'kvgate', pod: 'kvgate-gate-0' },
      ]);
      expect(stores[0]!.store.status().lastReload).toMatchObject({ result: 'rejected', reason: expect.stringMatching(/\S/) });
      expect(stores[0]!.store.current().currentId).toBe('k1');
      for (const r of stores) r.store.close();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
