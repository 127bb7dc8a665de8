/**
 * Pools by selector, end to end: the real gate (live worker view) discovers pods through the real
 * @kubernetes/client-node informer from the test API server (testbed/kube-apiserver), and the Envoy-faithful
 * harness running the shipped envoy/envoy.yaml routes to them. Each "pod" is a loopback address (127.0.0.x) whose
 * server answers both the generation and its sidecar's status.
 */
import { mkdtemp, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { service as healthService } from 'grpc-health-check';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import { stringify as toYaml } from 'yaml';
import { createDevKeyRing } from '../../src/contract/keys.js';
import { answerStatus } from '../../src/sidecar/testing.js';
import { parseGateConfig } from '../../src/gate/config.js';
import { startGate, type RunningGate } from '../../src/gate/gate.js';
import { clone, tableFromValue, twoRevisionTableValue } from '../../src/policy/testing.js';
import { ok, request as rawRequest, type EnvoyHarness } from '../../testbed/harness/index.js';
import { readyPod, startKubeApiServer, type KubeApiServer } from '../../testbed/kube-apiserver/server.js';
import { createDevPki } from '../../testbed/tls/dev-pki.js';
import { startDiscoveringGate } from '../support/e2e-gate.js';

const SEED = 'e2e-kube';
const NS = 'serving';
const silent = pino({ level: 'silent' });

/** Two revisions, each one role-both pool found by selector (so no prefill leg is needed). */
function tableValue(port: number): Record<string, unknown> {
  const v = clone(twoRevisionTableValue()) as { pools: unknown[]; models: Record<string, { rollout: Record<string, unknown> }> };
  const pool = (name: string, cluster: string, revision: string) => ({
    name,
    cluster,
    role: 'both',
    revision,
    discovery: { kubernetes: { namespace: NS, matchLabels: { app: 'llama' }, targetPort: port, statusPort: port } },
  });
  v.pools = [pool('a-decode', 'a_decode', 'llama-a'), pool('b-decode', 'b_decode', 'llama-b')];
  v.models['llama-3-8b']!.rollout = { stable: 'llama-a' };
  return v;
}

/** A pod's servers: the worker (answers with its name) and its sidecar status (what revision it runs now). */
interface FakePod {
  name: string;
  /** The pod UID its sidecar reports (`--pod-uid`), as the API server lists it. */
  uid: string;
  fingerprint: string;
  served: number;
}

let cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanup.reverse()) await c();
  cleanup = [];
});

async function startPodServer(ip: string, port: number, pod: FakePod): Promise<void> {
  const server: Server = createServer((req, res) => {
    if (req.url === '/kvgate/v1/status') {
      // Signed for the gate's poll, as a sidecar holding the gate's key ring does.
      answerStatus(
        req,
        res,
        { fingerprint: pod.fingerprint, verified: true, draining: false, reasons: [], podUid: pod.uid },
        createDevKeyRing(SEED),
      );
      return;
    }
    req.resume();
    req.on('end', () => {
      pod.served++;
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ pod: pod.name }));
    });
  });
  await new Promise<void>((r, j) => server.once('error', j).listen(port, ip, () => r()));
  cleanup.push(() => new Promise((r) => server.close(() => r())));
}

async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.2', () => r()));
  const port = (s.address() as { port: number }).port;
  await new Promise((r) => s.close(r));
  return port;
}

async function until(check: () => boolean | Promise<boolean>, what: string, ms = 8000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

interface Rig {
  api: KubeApiServer;
  gate: RunningGate;
  harness: EnvoyHarness;
  port: number;
  fp: { a: string; b: string };
}

async function startRig(): Promise<Rig> {
  const port = await freePort();
  const api = await startKubeApiServer({ bookmarkIntervalMs: 200 });
  cleanup.push(() => api.close());
  const value = tableValue(port);
  const compiled = tableFromValue(value);
  const fp = { a: compiled.revisions.get('llama-a')!.fingerprint, b: compiled.revisions.get('llama-b')!.fingerprint };
  const dir = await mkdtemp(path.join(tmpdir(), 'kvgate-kube-'));
  await writeFile(path.join(dir, 'route-table.yaml'), toYaml(value));
  const pki = await createDevPki(path.join(dir, 'tls'));
  // TLS on the gate port: the shipped envoy.yaml speaks mTLS to it.
  const { gate, harness } = await startDiscoveringGate({ dir, pki, seed: SEED, kubeConfig: api.kubeConfig(), pollMs: 100, logger: silent });
  cleanup.push(() => gate.close());
  cleanup.push(() => harness.close());
  return { api, gate, harness, port, fp };
}

async function send(rig: Rig, session: string) {
  return ok(
    await rawRequest(rig.harness.listeners['public']!.url, {
      path: '/v1/completions',
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-tenant-id': 'acme', 'x-session-id': session },
      body: JSON.stringify({ model: 'llama-3-8b', prompt: 'hello' }),
    }),
  );
}

const podLabels = (rev: string) => ({ app: 'llama', 'kvgate.io/revision': rev });

describe('a pool found by selector, through the harness', () => {
  it('receives traffic on pods as they become Ready and stops at deletion', async () => {
    const rig = await startRig();
    const p0: FakePod = { name: 'a-0', uid: 'uid-a0', fingerprint: rig.fp.a, served: 0 };
    const p1: FakePod = { name: 'a-1', uid: 'uid-a1', fingerprint: rig.fp.a, served: 0 };
    await startPodServer('127.0.0.2', rig.port, p0);
    await startPodServer('127.0.0.3', rig.port, p1);
    // No pods yet: refused, nothing served.
    expect((await send(rig, 's0')).headers['x-kvgate-reject-reason']).toBe('no_compatible_capacity');
    const pending = readyPod('a-0', NS, '127.0.0.2', podLabels('llama-a'), 'uid-a0');
    pending.status.conditions = [{ type: 'Ready', status: 'False' }];
    rig.api.store.create(pending);
    await new Promise((r) => setTimeout(r, 300));
    expect((await send(rig, 's1')).status).toBe(503); // listed, but not Ready
    rig.api.store.update(NS, 'a-0', (p) => void (p.status.conditions = [{ type: 'Ready', status: 'True' }]));
    await until(async () => (await send(rig, 'probe')).status === 200, 'a-0 takes traffic once Ready and verified');
    rig.api.store.create(readyPod('a-1', NS, '127.0.0.3', podLabels('llama-a'), 'uid-a1'));
    await until(async () => {
      await send(rig, `s${Math.random()}`);
      return p1.served > 0;
    }, 'a-1 takes traffic too');
    // A graceful delete: the pod is only marked (deletionTimestamp) and still Ready while its containers stop; it
    // takes nothing from then on.
    rig.api.store.deletePod(NS, 'a-0');
    await until(
      async () =>
        (rig.gate.status() as { discovery: Record<string, { endpoints: unknown[] }> }).discovery['a-decode']!.endpoints.length === 1,
      'deletion seen',
    );
    const before = p0.served;
    for (let i = 0; i < 10; i++) expect((await send(rig, `after-${i}`)).status).toBe(200);
    expect(p0.served).toBe(before); // the deleted pod gets nothing
    rig.api.store.deletePod(NS, 'a-0', { gracePeriodSeconds: 0 }); // the kubelet's final delete
    for (let i = 0; i < 5; i++) expect((await send(rig, `gone-${i}`)).status).toBe(200);
    expect(p0.served).toBe(before);
  });

  it('a pod IP reused by a pod of another revision is never routed as the old one', async () => {
    const rig = await startRig();
    const pod: FakePod = { name: 'a-0', uid: 'uid-a0', fingerprint: rig.fp.a, served: 0 };
    await startPodServer('127.0.0.4', rig.port, pod);
    rig.api.store.create(readyPod('a-0', NS, '127.0.0.4', podLabels('llama-a'), 'uid-a0'));
    await until(async () => (await send(rig, 'warm')).status === 200, 'a-0 serving llama-a');
    // The IP now belongs to a llama-b pod; the old pod's deletion has not reached the gate yet.
    pod.name = 'b-0';
    pod.uid = 'uid-b0';
    pod.fingerprint = rig.fp.b;
    rig.api.store.create(readyPod('b-0', NS, '127.0.0.4', podLabels('llama-b'), 'uid-b0'));
    await until(
      async () =>
        (rig.gate.status() as { discovery: Record<string, { endpoints: unknown[] }> }).discovery['b-decode']!.endpoints.length === 1,
      'b-0 seen',
    );
    const served = pod.served;
    const r = await send(rig, 'after-reuse');
    expect(r.status).toBe(503);
    expect(r.headers['x-kvgate-reject-reason']).toBe('no_compatible_capacity');
    expect(pod.served).toBe(served);
  });

  it('a pod IP reused by a new pod of the same revision is not the old endpoint until the watch says so', async () => {
    const rig = await startRig();
    const pod: FakePod = { name: 'a-0', uid: 'uid-a0', fingerprint: rig.fp.a, served: 0 };
    await startPodServer('127.0.0.5', rig.port, pod);
    rig.api.store.create(readyPod('a-0', NS, '127.0.0.5', podLabels('llama-a'), 'uid-a0'));
    await until(async () => (await send(rig, 'warm')).status === 200, 'a-0 serving');
    // a-0 is gone and a new pod answers on its IP, but the watch still lists a-0 there: the answer is not a-0's.
    pod.name = 'a-9';
    pod.uid = 'uid-a9';
    await rig.gate.refreshWorkerView();
    const served = pod.served;
    const r = await send(rig, 'during-reuse');
    expect(r.status).toBe(503);
    expect(pod.served).toBe(served);
    const states = (rig.gate.status() as { workerView: { pools: Array<{ pool: string; endpoints: Array<{ reasons: string[] }> }> } })
      .workerView.pools;
    expect(states.find((p) => p.pool === 'a-decode')!.endpoints[0]!.reasons.join(' ')).toMatch(
      /is pod uid-a9, but discovery lists pod uid-a0/,
    );
    // The watch catches up: the new pod is listed under its own UID and takes traffic.
    rig.api.store.delete(NS, 'a-0');
    rig.api.store.create(readyPod('a-9', NS, '127.0.0.5', podLabels('llama-a'), 'uid-a9'));
    await until(async () => (await send(rig, `after-${Math.random()}`)).status === 200, 'a-9 serving under its own UID');
  });
});

describe('readiness and reloads that add pools found by selector', () => {
  /** The gate's grpc.health.v1 `readiness` status on its plaintext health port. */
  async function readiness(port: number): Promise<string | number> {
    const Health = grpc.makeGenericClientConstructor(healthService, 'Health');
    const client = new Health(`127.0.0.1:${port}`, grpc.credentials.createInsecure()) as unknown as {
      Check(req: { service: string }, cb: (e: grpc.ServiceError | null, r: { status: string | number }) => void): void;
      close(): void;
    };
    try {
      return await new Promise((res, rej) => client.Check({ service: 'readiness' }, (e, r) => (e ? rej(e) : res(r.status))));
    } finally {
      client.close();
    }
  }

  /**
   * A gate over the two-revision table with static pools only (it needs no pod watch to start), plaintext, live worker
   * view; `value` is the table as written, for a test to change and write again before a reload.
   */
  async function staticGate(extraConfig: Record<string, unknown>, deps: Partial<Parameters<typeof startGate>[1]>) {
    const dir = await mkdtemp(path.join(tmpdir(), 'kvgate-kube-reload-'));
    const table = path.join(dir, 'route-table.yaml');
    const value = clone(twoRevisionTableValue()) as { pools: Record<string, unknown>[] };
    await writeFile(table, toYaml(value));
    const cfg = parseGateConfig(
      toYaml({
        listen: '127.0.0.1:0',
        health: '127.0.0.1:0',
        admin: '',
        insecure: true,
        policy: 'route-table.yaml',
        keys: { devSeed: SEED },
        workerView: { mode: 'live', intervalMs: 100, timeoutMs: 200, staleAfterMs: 2000 },
        ...extraConfig,
      }),
      path.join(dir, 'gate.yaml'),
    );
    if (!cfg.ok) throw new Error(JSON.stringify(cfg.error));
    const gate = await startGate(cfg.value, {
      logger: silent,
      keys: createDevKeyRing(SEED),
      registry: new Registry(),
      defaultMetrics: false,
      ...deps,
    });
    cleanup.push(() => gate.close());
    /** b-decode found by selector in `namespace` from now on: the table written again, and reloaded. */
    const reloadWithSelectorPool = async (namespace: string) => {
      const b = value.pools.find((p) => p['name'] === 'b-decode')!;
      b['endpoints'] = [];
      b['discovery'] = { kubernetes: { namespace, matchLabels: { app: 'llama' }, targetPort: 8000, statusPort: 9090 } };
      await writeFile(table, toYaml(value));
      return gate.policy.reload('test');
    };
    return { gate, reloadWithSelectorPool };
  }

  it('a reload adding a pool in a namespace the gate may not watch (403) leaves a serving gate SERVING', async () => {
    const api = await startKubeApiServer({ allowedNamespaces: [NS] });
    cleanup.push(() => api.close());
    const { gate, reloadWithSelectorPool } = await staticGate(
      {},
      { kubeConfig: api.kubeConfig(), discoveryBackoff: { initialMs: 20, maxMs: 100 } },
    );
    expect(await readiness(gate.healthPort!)).toBe('SERVING');
    // The reload: b-decode is now found by selector, in a namespace without RBAC for the gate.
    expect((await reloadWithSelectorPool('no-rbac-here')).ok).toBe(true);
    await until(() => (api.counts()['forbidden'] ?? 0) >= 2, 'the new pool refused');
    expect(await readiness(gate.healthPort!)).toBe('SERVING');
    const discovery = (gate.status() as { discovery: Record<string, { state: string; lastError: string | null }> }).discovery;
    expect(discovery['b-decode']).toMatchObject({ state: 'syncing', lastError: expect.stringMatching(/403 Forbidden/) });
  });

  it('a reload adding the first selector pool with a kubeconfig that does not load keeps the gate serving its other pools', async () => {
    const lines: string[] = [];
    const logger = pino({ level: 'error' }, { write: (l: string) => void lines.push(l) });
    const { gate, reloadWithSelectorPool } = await staticGate({ discovery: { kubeconfig: 'no-such-kubeconfig.yaml' } }, { logger });
    expect((await reloadWithSelectorPool(NS)).ok).toBe(true);
    await until(() => lines.some((l) => l.includes('Kubernetes discovery could not start')), 'the discovery error logged');
    expect(await readiness(gate.healthPort!)).toBe('SERVING');
  });
});
