/**
 * Two gate replicas behind one Envoy (the harness spreads ext_proc streams over the gate cluster's endpoints round
 * robin): the same request and session get the same decision on either replica, and what one replica signs (the
 * binding, the contract) holds on the other. What stays per replica (queue, in-flight bridge): docs/gie.md.
 */
import { readFileSync } from 'node:fs';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import { stringify as toYaml } from 'yaml';
import { verifyContract } from '../../src/contract/contract.js';
import { createDevKeyRing } from '../../src/contract/keys.js';
import { startGate, type RunningGate } from '../../src/gate/gate.js';
import { PACKAGE_ROOT } from '../../src/package-root.js';
import { clone, twoRevisionTableValue } from '../../src/policy/testing.js';
import { mustLoadEnvoyConfig, ok, request as rawRequest, startEnvoyHarness, startFakeUpstream } from '../../testbed/harness/index.js';
import { createDevPki, shippedEnvoyTls, type DevPki } from '../../testbed/tls/dev-pki.js';
import { e2eGateConfig } from '../support/e2e-gate.js';

const ENVOY_YAML = readFileSync(path.join(PACKAGE_ROOT, 'envoy', 'envoy.yaml'), 'utf8');
const SEED = 'e2e-replicas';
const keys = createDevKeyRing(SEED);
const silent = pino({ level: 'silent' });

let cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanup.reverse()) await c();
  cleanup = [];
});

async function startReplica(dir: string, registry: Registry, pki: DevPki): Promise<RunningGate> {
  const gate = await startGate(e2eGateConfig(dir, pki, SEED), { logger: silent, keys, registry, defaultMetrics: false });
  cleanup.push(() => gate.close());
  return gate;
}

async function decisions(r: Registry): Promise<number> {
  const m = (await r.getMetricsAsJSON()).find((x) => x.name === 'kvgate_decisions_total');
  return (m?.values ?? []).reduce((n, v) => n + v.value, 0);
}

describe('two gate replicas behind one Envoy', () => {
  it("decide alike for the same request and session, and honour each other's binding and contract", async () => {
    const a = await startFakeUpstream('a-decode');
    const b = await startFakeUpstream('b-decode');
    cleanup.push(
      () => a.close(),
      () => b.close(),
    );
    const v = clone(twoRevisionTableValue()) as { pools: { name: string; endpoints: { address: string }[] }[] };
    v.pools.find((p) => p.name === 'a-decode')!.endpoints = [{ address: a.address }];
    v.pools.find((p) => p.name === 'b-decode')!.endpoints = [{ address: b.address }];
    const dir = await mkdtemp(path.join(tmpdir(), 'kvgate-replicas-'));
    await writeFile(path.join(dir, 'route-table.yaml'), toYaml(v));
    const regs = [new Registry(), new Registry()];
    const pki = await createDevPki(path.join(dir, 'tls')); // both replicas serve one certificate, as a Secret gives them
    const gates = [await startReplica(dir, regs[0]!, pki), await startReplica(dir, regs[1]!, pki)];
    const harness = await startEnvoyHarness(
      mustLoadEnvoyConfig(ENVOY_YAML, {
        listenerPorts: { public: 0, internal: 0 },
        ...shippedEnvoyTls(
          pki,
          gates.map((g) => `127.0.0.1:${g.grpcPort}`),
        ),
      }),
    );
    cleanup.push(() => harness.close());
    const send = async (session: string, requestId: string, binding?: string) => {
      const before = [a.requests.length, b.requests.length];
      const r = ok(
        await rawRequest(harness.listeners['public']!.url, {
          path: '/v1/completions',
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            'x-tenant-id': 'acme',
            'x-session-id': session,
            'x-request-id': requestId,
            ...(binding === undefined ? {} : { 'x-kvgate-binding': binding }),
          },
          body: JSON.stringify({ model: 'llama-3-8b', prompt: 'hello' }),
        }),
      );
      // Requests are sent one at a time: the upstream whose count grew served this one.
      const up = [a, b].find((u, i) => u.requests.length > before[i]!);
      return { r, seen: up?.requests.at(-1)?.headers };
    };
    for (let i = 0; i < 24; i++) {
      // Consecutive streams go to alternate replicas: the pair is decided once by each.
      const one = await send(`s-${i}`, `req-${i}`);
      const two = await send(`s-${i}`, `req-${i}`);
      expect(one.r.status).toBe(200);
      expect(two.r.status).toBe(200);
      // The binding decision (group, revision, pools) is the same; the endpoint inside a pool follows each replica's
      // own load view and the gate's own request id, so only its pool is compared.
      for (const h of ['x-kvgate-group', 'x-kvgate-revision', 'x-kvgate-decode-cluster', 'x-kvgate-prefill-cluster']) {
        expect(two.seen![h], `${h} for session s-${i}`).toBe(one.seen![h]);
      }
      const prefillOf = (rev: unknown) => (rev === 'llama-a' ? ['10.0.1.1:9090', '10.0.1.2:9090'] : ['10.0.3.1:9090']);
      for (const s of [one.seen!, two.seen!]) expect(prefillOf(s['x-kvgate-revision'])).toContain(s['x-kvgate-prefill-endpoint']);
      // A contract minted by either replica verifies with the shared keys (what every sidecar does).
      for (const s of [one.seen!, two.seen!]) {
        expect(verifyContract(String(s['x-kvgate-contract']), keys, Date.now(), { requestId: String(s['x-request-id']) }).ok).toBe(true);
      }
      // The binding one replica signed keeps the session on its revision on the next request, whichever replica.
      const three = await send(`s-${i}`, `req-${i}-b`, String(one.r.headers['x-kvgate-binding']));
      expect(three.seen!['x-kvgate-revision']).toBe(one.seen!['x-kvgate-revision']);
    }
    expect(await decisions(regs[0]!)).toBeGreaterThan(10);
    expect(await decisions(regs[1]!)).toBeGreaterThan(10);
  });
});
