/**
 * Rolling the gate Deployment under continuous traffic (docs/operator-guide.md section 6, "Rolling the gate"): three
 * gate replicas behind the harness running the Kubernetes example's Envoy bootstrap (deploy/kubernetes/config/
 * envoy.yaml: STRICT_DNS on the headless Service, gRPC health checks), rolled one at a time as the Deployment's
 * `maxSurge: 1, maxUnavailable: 0` does: a new gate starts, the headless Service's DNS answer gains it, Envoy's
 * health check finds it SERVING; then the old one gets SIGTERM (drain: NOT_SERVING, drain.announceMs, graceMs, exit)
 * and leaves the DNS answer. The harness runs the health checks as Envoy does (activeHealthChecks), so whether the old
 * gate is out of rotation before its announce window ends is measured, not assumed.
 *
 * Timing: the shipped health check (interval, timeout) and the shipped gate drain (announceMs, graceMs) are read from
 * the Kubernetes example's files and run two and a half times faster, so their ratio is the shipped one. Ten times faster left
 * 200 ms between the health check's ejection (interval + timeout) and the end of the announce window, and on a loaded
 * 2-core machine, where the harness, the clients and the three gates share one event loop, one request in a full
 * suite run reached a gate after its window (a 500); five times faster (400 ms) still did so twice at a load average
 * of 10-15; two and a half times faster leaves 800 ms.
 *
 * A second case rolls a gate before this Envoy has sent any request: Envoy then checks the gate cluster every
 * `no_traffic_interval` (60 s unless set), so the shipped bootstrap sets it, or the first requests could go to the
 * gate that has gone.
 *
 * Asserted, on Envoy 1.36 (the ext_proc stream spans a whole streamed generation) and 1.37: no client-visible
 * failure (every response 200, none reset, every streamed generation whole), every 200 stamped with its group,
 * revision and binding and kept on the revision its session's binding names whichever replica decided it, no gate
 * routing a request after its announce window ended, and no refusal at all (no doc rule expects one here).
 */
import { readFileSync } from 'node:fs';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { parse as parseYaml, stringify as toYaml } from 'yaml';
import { PACKAGE_ROOT } from '../../src/package-root.js';
import { clone, twoRevisionTableValue } from '../../src/policy/testing.js';
import {
  ENVOY_VERSIONS,
  type EnvoyHarness,
  type EnvoyVersion,
  type FakeUpstream,
  mustLoadEnvoyConfig,
  request,
  startEnvoyHarness,
  startFakeUpstream,
} from '../../testbed/harness/index.js';
import { createDevPki, shippedEnvoyTls } from '../../testbed/tls/dev-pki.js';
import { type FleetGate, startFleetGate } from '../support/gate-fleet.js';
import { until } from '../support/until.js';

const SEED = 'e2e-gate-roll';
const SPEEDUP = 2.5;
const K8S = path.join(PACKAGE_ROOT, 'deploy', 'kubernetes', 'config');
const GATE_CLUSTERS = ['kvgate_gate', 'kvgate_gate_internal'];
const REPLICAS = 3;
const CLIENTS = 6;
const TOKENS = 8;
const TOKEN_GAP_MS = 60; // a streamed generation takes about as long as a whole drain

/**
 * The Kubernetes example's Envoy bootstrap with its gate health checks' interval and timeout SPEEDUP times shorter,
 * and without `use_remote_address`, which the harness does not model (it decides only whether Envoy trusts a client's
 * x-forwarded-for and x-request-id; these clients send neither, and the gate reads neither).
 */
function fastEnvoyYaml(): string {
  const doc = parseYaml(readFileSync(path.join(K8S, 'envoy.yaml'), 'utf8')) as {
    static_resources: {
      clusters: Array<{ name: string; health_checks?: Array<Record<string, unknown>> }>;
      listeners: Array<{ filter_chains: Array<{ filters: Array<{ typed_config: Record<string, unknown> }> }> }>;
    };
  };
  for (const l of doc.static_resources.listeners) for (const f of l.filter_chains[0]!.filters) delete f.typed_config['use_remote_address'];
  const fast = (d: unknown): string => `${(Number(String(d).replace(/s$/, '')) / SPEEDUP).toString()}s`;
  for (const c of doc.static_resources.clusters) {
    for (const h of c.health_checks ?? []) {
      for (const k of ['interval', 'timeout', 'no_traffic_interval']) if (h[k] !== undefined) h[k] = fast(h[k]);
    }
  }
  return toYaml(doc);
}

/** The Kubernetes example's gate drain, SPEEDUP times shorter. */
function fastDrain(): { announceMs: number; graceMs: number } {
  const d = (parseYaml(readFileSync(path.join(K8S, 'gate.yaml'), 'utf8')) as { drain: { announceMs: number; graceMs: number } }).drain;
  return { announceMs: d.announceMs / SPEEDUP, graceMs: d.graceMs / SPEEDUP };
}

interface Outcome {
  readonly client: number;
  readonly stream: boolean;
  readonly status?: number;
  readonly error?: string;
  readonly headers?: Record<string, unknown>;
  readonly body?: string;
  /** The revision the session's binding named when it was sent. */
  readonly boundTo?: string;
}

let cleanup: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanup.reverse()) await c();
  cleanup = [];
});

async function topology(envoyVersion: EnvoyVersion) {
  const decode = async (name: string): Promise<FakeUpstream> => {
    const up = await startFakeUpstream(name, async (req, res) => {
      const stream = (JSON.parse(req.body.toString('utf8')) as { stream?: boolean }).stream === true;
      if (!stream) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ pool: name, choices: [{ text: 'ok' }] }));
        return;
      }
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      for (let i = 0; i < TOKENS; i++) {
        res.write(`data: {"pool":"${name}","token":${i}}\n\n`);
        await new Promise((r) => setTimeout(r, TOKEN_GAP_MS));
      }
      res.end('data: [DONE]\n\n');
    });
    cleanup.push(() => up.close());
    return up;
  };
  const a = await decode('a-decode');
  const b = await decode('b-decode');
  const table = clone(twoRevisionTableValue()) as { pools: { name: string; endpoints: { address: string }[] }[] };
  table.pools.find((p) => p.name === 'a-decode')!.endpoints = [{ address: a.address }];
  table.pools.find((p) => p.name === 'b-decode')!.endpoints = [{ address: b.address }];
  const dir = await mkdtemp(path.join(tmpdir(), 'kvgate-gate-roll-'));
  await writeFile(path.join(dir, 'route-table.yaml'), toYaml(table));
  const pki = await createDevPki(path.join(dir, 'tls')); // one Secret: every replica serves the same certificate
  const drain = fastDrain();
  const startReplica = async (): Promise<FleetGate> => {
    const g = await startFleetGate(dir, pki, SEED, { drain });
    cleanup.push(() => g.gate.close());
    return g;
  };
  const gates: FleetGate[] = [];
  for (let i = 0; i < REPLICAS; i++) gates.push(await startReplica());
  const harness = await startEnvoyHarness(
    mustLoadEnvoyConfig(fastEnvoyYaml(), {
      listenerPorts: { public: 0, internal: 0 },
      ...shippedEnvoyTls(
        pki,
        gates.map((g) => g.address),
      ),
    }),
    { envoyVersion, activeHealthChecks: true },
  );
  cleanup.push(() => harness.close());
  return { harness, gates, startReplica, drain };
}

/** One client: a session that carries its binding, alternating short completions and long streamed generations. */
async function client(harness: EnvoyHarness, id: number, stop: () => boolean, out: Outcome[], generating: Set<number>): Promise<void> {
  let binding: string | undefined;
  let boundTo: string | undefined;
  for (let n = 0; !stop(); n++) {
    const stream = n % 2 === 1;
    if (stream) generating.add(id);
    const pending = request(harness.listeners['public']!.url, {
      path: '/v1/completions',
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'x-tenant-id': 'acme',
        'x-session-id': `roll-${id}`,
        ...(binding === undefined ? {} : { 'x-kvgate-binding': binding }),
      },
      body: JSON.stringify({ model: 'llama-3-8b', prompt: `turn ${n}`, stream }),
    });
    const r = await pending;
    generating.delete(id);
    if ('error' in r) {
      out.push({ client: id, stream, error: r.error });
      continue;
    }
    out.push({ client: id, stream, status: r.status, headers: r.headers, body: r.body, ...(boundTo === undefined ? {} : { boundTo }) });
    if (r.status === 200 && typeof r.headers['x-kvgate-binding'] === 'string') {
      binding = r.headers['x-kvgate-binding'];
      boundTo = String(r.headers['x-kvgate-revision']);
    }
  }
}

describe.each(ENVOY_VERSIONS)('rolling the gate Deployment on Envoy %s', (envoyVersion) => {
  it('drops nothing: every request 200 and whole, stamped, on its binding, never routed past an announce window', async () => {
    const { harness, gates, startReplica, drain } = await topology(envoyVersion);
    const setDns = (fleet: readonly FleetGate[]) => {
      for (const c of GATE_CLUSTERS)
        harness.setClusterEndpoints(
          c,
          fleet.map((g) => g.address),
        );
    };
    const healthy = (g: FleetGate) => GATE_CLUSTERS.every((c) => harness.hostHealth(c)[g.address] === 'healthy');
    const gone = (g: FleetGate) => GATE_CLUSTERS.every((c) => harness.hostHealth(c)[g.address] === undefined);
    const outcomes: Outcome[] = [];
    const generating = new Set<number>();
    let stopped = false;
    const traffic = Array.from({ length: CLIENTS }, (_, i) => client(harness, i, () => stopped, outcomes, generating));
    const everyone: FleetGate[] = [...gates];
    /** When each old gate's announce window ended. */
    const announceEnds = new Map<FleetGate, number>();
    try {
      await until(() => outcomes.length >= CLIENTS * 2, 'traffic through the first replicas');
      const live = [...gates];
      for (let i = 0; i < REPLICAS; i++) {
        // maxSurge 1: the new pod starts, turns Ready, and the headless Service's answer gains it.
        const fresh = await startReplica();
        everyone.push(fresh);
        setDns([...live, fresh]);
        await until(() => healthy(fresh), 'the new gate healthy in Envoy');
        live.push(fresh);
        const before = fresh.decisions().length;
        await until(() => fresh.decisions().length > before, 'the new gate deciding');
        // SIGTERM to the oldest while generations stream; on 1.36 while the gate holds streams open for them.
        const old = live.shift()!;
        await until(
          async () => generating.size > 0 && (envoyVersion !== '1.36' || (await old.openStreams()) > 0),
          'a generation in flight through the old gate',
        );
        const started = Date.now();
        const drained = old.gate.drain();
        // Envoy's health check, not the DNS answer, takes it out (the readiness probe and DNS TTL come later).
        await until(() => !healthy(old), 'Envoy health check ejecting the draining gate');
        await drained;
        announceEnds.set(old, started + drain.announceMs);
        await old.gate.close();
        setDns(live); // the pod is gone from the headless Service
        await until(() => gone(old), 'the old host removed from the cluster');
        await until(() => outcomes.length >= CLIENTS * 2 * (i + 2), 'traffic after the roll step');
      }
    } finally {
      stopped = true;
      await Promise.all(traffic);
    }

    // No client-visible failure: no reset, no 5xx, every generation whole.
    const failed = outcomes.filter((o) => o.error !== undefined || o.status !== 200);
    expect(failed.map((o) => `${o.client}: ${o.error ?? `${o.status} ${o.body}`}`)).toEqual([]);
    const streamed = outcomes.filter((o) => o.stream);
    expect(streamed.length).toBeGreaterThanOrEqual(CLIENTS);
    for (const o of streamed) {
      for (let t = 0; t < TOKENS; t++) expect(o.body).toContain(`"token":${t}}`);
      expect(o.body).toContain('[DONE]');
    }
    // Every 200 stamped, served by its revision's pool, and on the revision its binding names (any replica signed it).
    for (const o of outcomes) {
      const h = o.headers!;
      expect(h['x-kvgate-group']).toMatch(/^g_/);
      expect(h['x-kvgate-binding']).toEqual(expect.any(String));
      const revision = String(h['x-kvgate-revision']);
      expect(o.body).toContain(revision === 'llama-a' ? '"pool":"a-decode"' : '"pool":"b-decode"');
      if (o.boundTo !== undefined) expect(revision).toBe(o.boundTo);
    }
    // Every request the gates routed is one a client got, and no gate routed one after its announce window.
    const decided = everyone.flatMap((g) => g.decisions());
    expect(decided.length).toBe(outcomes.length);
    for (const [g, end] of announceEnds) {
      const late = g.decisions().filter((l) => l.time > end);
      expect(late.map((l) => l['request_id'])).toEqual([]);
    }
    // No refusal is expected at all, so no audit line of one.
    expect(everyone.flatMap((g) => g.refusals())).toEqual([]);
    expect(harness.stats()['http.kvgate_public.ext_proc.streams_failed'] ?? 0).toBe(0);
  }, 60_000);

  it('a gateway that has sent nothing yet: a gate drained before the first request gets none of them', async () => {
    const { harness, gates } = await topology(envoyVersion);
    const healthy = (g: FleetGate) => GATE_CLUSTERS.every((c) => harness.hostHealth(c)[g.address] === 'healthy');
    await until(() => gates.every(healthy), 'every gate healthy in Envoy');
    // The roll's last step before any client came: the old gate drains, exits and leaves the headless Service.
    const [old, ...live] = gates as [FleetGate, ...FleetGate[]];
    await old.gate.drain();
    await old.gate.close();
    for (const c of GATE_CLUSTERS)
      harness.setClusterEndpoints(
        c,
        live.map((g) => g.address),
      );
    const outcomes: Outcome[] = [];
    for (let i = 0; i < REPLICAS * 2; i++) await client(harness, i, () => outcomes.length > i, outcomes, new Set());
    expect(outcomes.map((o) => o.error ?? `${o.status} ${o.status === 200 ? '' : o.body}`)).toEqual(outcomes.map(() => '200 '));
    expect(old.decisions()).toEqual([]);
  }, 20_000);
});
