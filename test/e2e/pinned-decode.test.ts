/**
 * Decode contracts pinned to their pod, as the shipped manifests run the sidecars: the real gate finds the pods by
 * selector through the real informer (testbed/kube-apiserver), each pod's sidecar is `kvgate sidecar` started with the
 * args of deploy/kubernetes/workers.yaml with `$(POD_IP)` and `$(POD_UID)` expanded (`--config FILE
 * --nixl-side-channel "[IP]:PORT" --pod-uid UID --advertise "[IP]:PORT"`) in front of a simulated vLLM, and each
 * "pod" is a loopback address (127.0.0.x) whose target port is a recording proxy in front of the sidecar, so a test
 * can replay exactly what the data plane delivered. Two data planes: the shipped envoy/envoy.yaml (ORIGINAL_DST on
 * the gate's decode endpoint) and a GIE gateway (test/support/gie-gateway.ts: override_host on
 * `x-gateway-destination-endpoint`, the pick then its fallback alternates).
 */
import { EventEmitter } from 'node:events';
import { mkdtemp, writeFile } from 'node:fs/promises';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify as toYaml } from 'yaml';
import type { RunningGate } from '../../src/gate/gate.js';
import { H } from '../../src/headers.js';
import { type CommandIo, sidecarCommand } from '../../src/sidecar/command.js';
import { jsonLineSink } from '../../src/sidecar/testing.js';
import { loadExampleDescriptor, SERVED_MODEL } from '../../testbed/demo/topology.js';
import { type EnvoyHarness, ok, request as rawRequest } from '../../testbed/harness/index.js';
import { readyPod, startKubeApiServer, type KubeApiServer } from '../../testbed/kube-apiserver/server.js';
import { parseSimConfig } from '../../testbed/sim/config.js';
import { simCanaryDigests } from '../../testbed/sim/recorded-canaries.js';
import { createSimServer, type SimServer } from '../../testbed/sim/server.js';
import { createDevPki } from '../../testbed/tls/dev-pki.js';
import { startDiscoveringGate } from '../support/e2e-gate.js';
import { behindGieGateway, type GieGateway } from '../support/gie-gateway.js';
import { freePort, until } from '../support/rollout-traffic.js';
import { counter } from './failure-matrix-support.js';

const SEED = 'e2e-pinned-decode';
const NS = 'serving';
const silent = pino({ level: 'silent' });

/** What the data plane delivered to a pod's target port. */
interface Delivered {
  readonly headers: http.IncomingHttpHeaders;
  readonly body: Buffer;
}

/** One pod: its simulated vLLM, its `kvgate sidecar` process (in-process, as the CLI runs it) and its target port. */
interface Pod {
  readonly name: string;
  readonly role: 'prefill' | 'decode';
  /** `podIP:targetPort`: what the gate's discovery names. */
  readonly address: string;
  readonly url: string;
  readonly sim: SimServer;
  /** Completion requests delivered to the target port, in order. */
  readonly delivered: Delivered[];
  /** The sidecar's log lines (JSON). */
  readonly lines: Array<Record<string, any>>;
  stop(): Promise<void>;
}

/** The args of deploy/kubernetes/workers.yaml's kvgate-sidecar container, `$(POD_IP)` and `$(POD_UID)` expanded. */
function manifestArgs(config: string, podIP: string, uid: string, port: number, sideChannelPort: number): string[] {
  // The manifest reads --nixl-side-channel "[$(POD_IP)]:5600"; here vLLM's side channel is the simulator's, on 127.0.0.1.
  return [
    '--config',
    config,
    '--nixl-side-channel',
    `[127.0.0.1]:${sideChannelPort}`,
    '--pod-uid',
    uid,
    '--advertise',
    `[${podIP}]:${port}`,
  ];
}

/** Forwards everything at `ip:port` to the sidecar, recording each completion request it delivers. */
async function targetPort(ip: string, port: number, sidecar: URL, delivered: Delivered[]): Promise<http.Server> {
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      if (req.method === 'POST' && req.url?.startsWith('/v1/')) delivered.push({ headers: req.headers, body });
      const up = http.request(
        { host: sidecar.hostname, port: sidecar.port, method: req.method, path: req.url, headers: req.headers },
        (answer) => {
          res.writeHead(answer.statusCode ?? 502, answer.headers);
          answer.pipe(res);
        },
      );
      up.on('error', () => res.destroy());
      up.end(body);
    });
  });
  await new Promise<void>((r, j) => server.once('error', j).listen(port, ip, () => r()));
  return server;
}

async function startPod(o: {
  readonly name: string;
  readonly role: 'prefill' | 'decode';
  readonly ip: string;
  readonly port: number;
  readonly descriptor: Record<string, unknown>;
  readonly prefillVia: string | 'direct';
  readonly dir: string;
}): Promise<Pod> {
  const simCfg = parseSimConfig({
    descriptor: o.descriptor,
    sim: { servedModelName: SERVED_MODEL, maxModelLen: 4096, numGpuBlocks: 2048 },
  });
  if (!simCfg.ok) throw simCfg.error;
  const sim = await createSimServer(simCfg.value, { logger: silent });
  const config = path.join(o.dir, `${o.name}.yaml`);
  await writeFile(
    config,
    toYaml({
      role: o.role,
      worker: sim.url,
      listen: `${o.ip}:0`,
      admin: '',
      metrics: '',
      descriptor: o.descriptor,
      servedModelName: SERVED_MODEL,
      keys: { devSeed: SEED },
      probe: { intervalMs: 60_000, timeoutMs: 2_000, generation: 'declared' },
      prefill: {
        via: o.prefillVia === 'direct' ? 'direct' : { envoy: o.prefillVia },
        maxAttempts: 3,
        backoffMs: 20,
        maxBackoffMs: 200,
        timeoutMs: 30_000,
      },
      drainGraceMs: 2_000,
      drainAnnounceMs: 0,
    }),
  );
  const { lines, sink } = jsonLineSink();
  const signals = new EventEmitter();
  let stderr = '';
  let ready: (url: string) => void = () => undefined;
  const listening = new Promise<string>((r) => (ready = r));
  const io: CommandIo = {
    signals: signals as unknown as CommandIo['signals'],
    stdout: () => undefined,
    stderr: (t) => (stderr += t),
    env: {},
    onReady: ready,
    log: sink,
  };
  const exit = sidecarCommand(manifestArgs(config, o.ip, `uid-${o.name}`, o.port, sim.nixlSideChannelPort), io);
  const url = await Promise.race([listening, exit.then((code) => Promise.reject(new Error(`sidecar exited ${code}: ${stderr}`)))]);
  const delivered: Delivered[] = [];
  const proxy = await targetPort(o.ip, o.port, new URL(url), delivered);
  const address = `${o.ip}:${o.port}`;
  return {
    name: o.name,
    role: o.role,
    address,
    url: `http://${address}`,
    sim,
    delivered,
    lines,
    async stop() {
      proxy.closeAllConnections();
      await new Promise((r) => proxy.close(r));
      signals.emit('SIGTERM');
      await exit;
      await sim.close();
    },
  };
}

interface Rig {
  readonly gate: RunningGate;
  readonly harness: EnvoyHarness;
  readonly gateway: GieGateway | undefined;
  readonly pods: Record<'a' | 'b' | 'p0' | 'p1', Pod>;
  readonly close: () => Promise<void>;
}

/**
 * A gate over one revision's prefill and decode pools found by selector, two pods each, and the data plane: the
 * shipped envoy.yaml harness (decode sidecars' prefill legs through its internal listener), or with `gie` a GIE
 * gateway in front of a gate writing `x-gateway-destination-endpoint` with one fallback (prefill legs direct).
 */
async function startRig(gie: boolean): Promise<Rig> {
  const cleanup: Array<() => Promise<void>> = [];
  const close = async () => {
    for (const c of cleanup.reverse()) await c();
  };
  try {
    const port = await freePort();
    const api: KubeApiServer = await startKubeApiServer({ bookmarkIntervalMs: 200 });
    cleanup.push(() => api.close());
    const example = await loadExampleDescriptor('llama-a');
    const descriptor = { ...example, canaries: await simCanaryDigests(example as never) };
    const pool = (role: 'prefill' | 'decode') => ({
      name: `a-${role}`,
      cluster: `a_${role}`,
      role,
      revision: 'llama-a',
      discovery: {
        kubernetes: { namespace: NS, matchLabels: { app: 'vllm', 'kvgate.io/role': role }, targetPort: port, statusPort: port },
      },
    });
    const dir = await mkdtemp(path.join(tmpdir(), 'kvgate-pinned-'));
    await writeFile(
      path.join(dir, 'route-table.yaml'),
      toYaml({
        version: 1,
        revisions: { 'llama-a': { descriptor } },
        models: { [SERVED_MODEL]: { tenants: ['acme'], rollout: { stable: 'llama-a' } } },
        pools: [pool('prefill'), pool('decode')],
        tenancy: { source: { header: 'x-tenant-id' }, required: true, prefixScope: 'tenant' },
        fallback: [{ refuse: { retryAfterSeconds: 1 } }],
      }),
    );
    const picker = gie ? behindGieGateway(1) : undefined;
    const { gate, harness } = await startDiscoveringGate({
      dir,
      pki: await createDevPki(path.join(dir, 'tls')),
      seed: SEED,
      kubeConfig: api.kubeConfig(),
      pollMs: 100,
      logger: silent,
      ...(picker === undefined ? {} : { extra: picker.extra, harness: picker.harness }),
    });
    cleanup.push(() => gate.close());
    cleanup.push(() => harness.close());
    const prefillVia = gie ? 'direct' : harness.listeners['internal']!.url;
    // Pod IPs of their own (other e2e files use 127.0.0.2-5 and 127.0.30+), one /24 per rig.
    const net = gie ? '127.0.10' : '127.0.9';
    const ips = { a: `${net}.2`, b: `${net}.3`, p0: `${net}.4`, p1: `${net}.5` };
    const pods = {} as Record<keyof typeof ips, Pod>;
    for (const [name, ip] of Object.entries(ips) as Array<[keyof typeof ips, string]>) {
      const role = name.startsWith('p') ? 'prefill' : 'decode';
      pods[name] = await startPod({ name, role, ip, port, descriptor, prefillVia, dir });
      cleanup.push(() => pods[name].stop());
      api.store.create(readyPod(name, NS, ip, { app: 'vllm', 'kvgate.io/role': role, 'kvgate.io/revision': 'llama-a' }, `uid-${name}`));
    }
    const gateway = picker?.gateway();
    gateway?.setMembers([pods.a.address, pods.b.address]);
    const rig: Rig = { gate, harness, gateway, pods, close };
    await until(async () => (await complete(rig, 'warm-up')).status === 200, 'every pod discovered and verified');
    return rig;
  } catch (e) {
    await close();
    throw e;
  }
}

/** A client request through the data plane's public listener. */
async function complete(rig: Rig, prompt: string) {
  const url = rig.gateway?.harness.listeners['http']?.url ?? rig.harness.listeners['public']!.url;
  const r = ok(
    await rawRequest(url, {
      path: '/v1/completions',
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-tenant-id': 'acme' },
      body: JSON.stringify({ model: SERVED_MODEL, prompt, max_tokens: 4 }),
    }),
  );
  return { status: r.status, headers: r.headers, json: JSON.parse(r.body || 'null') as any };
}

/** Send `d` again, byte for byte (headers and body), to `pod`'s target port. */
function replay(d: Delivered, pod: Pod): Promise<{ status: number; json: any }> {
  return new Promise((resolve, reject) => {
    const { connection: _c, 'keep-alive': _k, ...headers } = d.headers;
    const req = http.request(`${pod.url}/v1/completions`, { method: 'POST', headers }, (res) => {
      let text = '';
      res.on('data', (c: Buffer) => (text += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, json: JSON.parse(text) }));
    });
    req.on('error', reject);
    req.end(d.body);
  });
}

const audits = (pod: Pod, requestId: string) => pod.lines.filter((l) => l['audit'] === 'refusal' && l['request_id'] === requestId);

describe('plain Envoy (ORIGINAL_DST on the gate pick): each decode sidecar serves only contracts routed to it', () => {
  let rig: Rig;
  beforeAll(async () => {
    rig = await startRig(false);
  }, 60_000);
  afterAll(() => rig?.close());

  it('serves traffic on both decode pods, each request on the pod its contract names', async () => {
    for (let i = 0; i < 12; i++) expect((await complete(rig, `normal ${i}`)).status).toBe(200);
    const { a, b } = rig.pods;
    expect(a.delivered.length).toBeGreaterThan(0);
    expect(b.delivered.length).toBeGreaterThan(0);
    for (const pod of [a, b]) for (const d of pod.delivered) expect(d.headers[H.decodeEndpoint]).toBe(pod.address);
  });

  it('a contract routed to pod A and replayed, same headers and body, at pod B is refused 403 with one audit line', async () => {
    const { a, b } = rig.pods;
    const captured = a.delivered.at(-1)!;
    const requestId = String(captured.headers['x-request-id']);
    const generatedBefore = await counter(b.sim.url, 'vllm:generation_tokens_total');
    const r = await replay(captured, b);
    expect([r.status, r.json.error?.code]).toEqual([403, 'contract_invalid']);
    expect(r.json.error.message).toContain(`routes its decode to ${a.address}, not to this worker (${b.address})`);
    expect(audits(b, requestId)).toEqual([expect.objectContaining({ code: 'contract_invalid', audit: 'refusal' })]);
    expect(await counter(b.url, 'kvgate_sidecar_contract_failures_total', { reason: 'wrong_endpoint' })).toBe(1);
    expect(await counter(b.sim.url, 'vllm:generation_tokens_total')).toBe(generatedBefore);
    // Pod A itself admitted it once already: the same bytes there are a replay, refused too.
    const again = await replay(captured, a);
    expect([again.status, again.json.error?.code]).toEqual([403, 'contract_invalid']);
    expect(again.json.error.message).toContain('already admitted by this worker');
  });

  it('retries still work: a failing prefill pod is excluded, and the retried leg is served by the other one', async () => {
    const { p0, p1, a, b } = rig.pods;
    const fault = await fetch(`${p0.sim.url}/admin/faults`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ errorRate: 1, errorStatus: 503 }),
    });
    expect(fault.status).toBeLessThan(300);
    try {
      const retriesBefore =
        (await counter(a.url, 'kvgate_sidecar_prefill_retries_total')) + (await counter(b.url, 'kvgate_sidecar_prefill_retries_total'));
      const p1Before = p1.delivered.length;
      for (let i = 0; i < 8; i++) expect((await complete(rig, `retried ${i}`)).status).toBe(200);
      const retries =
        (await counter(a.url, 'kvgate_sidecar_prefill_retries_total')) + (await counter(b.url, 'kvgate_sidecar_prefill_retries_total'));
      expect(retries).toBeGreaterThan(retriesBefore); // some first legs went to p0 and were retried...
      // ...with p0 excluded (the name its sidecar answered with, x-kvgate-served-by), so the gate's hop check sent
      // each retried leg to p1.
      const retriedLegs = [...a.lines, ...b.lines].filter((l) => l['event'] === 'prefill_retry');
      expect(retriedLegs.length).toBeGreaterThan(0);
      for (const l of retriedLegs) expect(l['excluded']).toEqual([p0.address]);
      expect(p1.delivered.length - p1Before).toBe(8);
    } finally {
      await fetch(`${p0.sim.url}/admin/faults`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: '{"reset":true}',
      });
    }
  });
});

describe('GIE (override_host on x-gateway-destination-endpoint): the fallback alternates the contract lists are served', () => {
  let rig: Rig;
  beforeAll(async () => {
    rig = await startRig(true);
  }, 60_000);
  afterAll(() => rig?.close());

  it('the gateway cannot reach the pick (pod A): it falls back to pod B, which the contract lists, and B serves', async () => {
    const { a, b } = rig.pods;
    // The gateway's cluster has lost pod A while its subset hint still lists it: the gate may pick A, and the data
    // plane then takes the next listed member.
    rig.gateway!.harness.setClusterEndpoints('pool', [b.address]);
    const before = b.delivered.length;
    for (let i = 0; i < 12; i++) expect((await complete(rig, `fallback ${i}`)).status).toBe(200);
    const lists = b.delivered.slice(before).map((d) => String(d.headers[H.gieDestination]));
    expect(lists.length).toBe(12);
    expect(lists.filter((l) => l === `${a.address},${b.address}`).length).toBeGreaterThan(0); // picked A, served on B
    expect(lists.every((l) => l === `${a.address},${b.address}` || l === `${b.address},${a.address}`)).toBe(true);
    expect(await counter(b.url, 'kvgate_sidecar_contract_failures_total', { reason: 'wrong_endpoint' })).toBe(0);
  });
});
