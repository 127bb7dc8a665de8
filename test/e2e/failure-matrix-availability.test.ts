/**
 * Issue 8, availability faults through the full topology with two workers per revision and role: a prefill worker
 * killed outright (the leg is retried on the other prefill worker of the SAME group), the gate restarted under
 * traffic (requests in the outage fail closed with Envoy's 500 and never reach a worker), and route-table reloads
 * under traffic (a good table changes the cohort weight; a bad one is rejected and routing does not change).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { baseline, firstDivergence, PROMPTS, tokenIds, type HttpResult } from '../../testbed/demo/scenarios.js';
import { REVISIONS, startTopology, type RevisionName, type Topology } from '../../testbed/demo/topology.js';
import type { ReloadResult } from '../../src/gate/policy-store.js';
import { H } from '../../src/headers.js';
import { client, complete, counter, editRouteTable, eventually, silent } from './failure-matrix-support.js';

const MAX_TOKENS = 8;
const TRAFFIC_PROMPTS = [PROMPTS[0], PROMPTS[2], PROMPTS[3]] as const;

let t: Topology;
/** Baseline token ids per revision and prompt, computed once on each revision's non-disaggregated decode worker. */
const expected = new Map<string, number[]>();
const key = (rev: string, prompt: string) => `${rev}\n${prompt}`;

beforeAll(async () => {
  t = await startTopology({ logger: silent, replicas: 2, candidateWeight: 0, sidecarProbeIntervalMs: 60_000 });
  for (const rev of REVISIONS) for (const p of TRAFFIC_PROMPTS) expected.set(key(rev, p), await baseline(t, rev, p, MAX_TOKENS));
});
afterAll(() => t.close());

/**
 * A 200 must carry the baseline token ids of the revision the gate says it bound. With `unstamped`, a 200 without the
 * stamp is accepted when its ids are one revision's baseline (never a mix): a request the old gate had already decided
 * when it stopped keeps going (gate close() ends decided streams OK, so no generation is cut), and its response phase,
 * where the stamp is written, never reaches a gate.
 */
function expectBaseline(r: HttpResult, prompt: string, unstamped = false): void {
  if (unstamped && r.headers.get(H.revision) === null) {
    const ids = tokenIds(r);
    const matches = REVISIONS.filter((rev) => firstDivergence(ids, expected.get(key(rev, prompt))!) === -1);
    expect(matches.length, `unstamped 200 for ${JSON.stringify(prompt)} is a revision's baseline`).toBeGreaterThan(0);
    return;
  }
  const rev = r.headers.get(H.revision) ?? '(none)';
  const want = expected.get(key(rev, prompt));
  expect(want, `revision ${rev}`).toBeDefined();
  expect(firstDivergence(tokenIds(r), want!)).toBe(-1);
}

/** Sequential requests from `clients` concurrent clients until `stop()` says so; every result, in order. */
async function traffic(label: string, clients: number, stop: () => boolean): Promise<Array<{ prompt: string; r: HttpResult }>> {
  const out: Array<{ prompt: string; r: HttpResult }> = [];
  await Promise.all(
    Array.from({ length: clients }, async (_, c) => {
      for (let i = 0; !stop(); i++) {
        const prompt = TRAFFIC_PROMPTS[(c + i) % TRAFFIC_PROMPTS.length]!;
        const r = await complete(t, prompt, MAX_TOKENS, client('acme', `${label}-${c}-${i}`));
        out.push({ prompt, r });
        if (r.status !== 200) await new Promise((resolve) => setTimeout(resolve, 25)); // a client backing off
      }
    }),
  );
  return out;
}

/**
 * Reload until the result is the one for the file as now written. The store shares a reload already under way, and
 * its directory watcher starts one 200 ms after every write: a call can get a reload that read the previous file.
 */
async function reloadUntil(reason: string, done: (r: ReloadResult) => boolean): Promise<ReloadResult> {
  let r = await t.gate.policy.reload(reason);
  for (let i = 0; i < 10 && !done(r); i++) r = await t.gate.policy.reload(reason);
  return r;
}

async function revisionsOfFreshSessions(label: string, n: number): Promise<RevisionName[]> {
  const out: RevisionName[] = [];
  for (let i = 0; i < n; i++) {
    const r = await complete(t, PROMPTS[0], MAX_TOKENS, client('acme', `${label}-${i}`));
    expect(r.status).toBe(200);
    expectBaseline(r, PROMPTS[0]);
    out.push(r.headers.get(H.revision) as RevisionName);
  }
  return out;
}

describe('a prefill worker killed outright', () => {
  it('its legs are retried on the other prefill worker of the same group: baseline ids, no leg ever leaves revision A', async () => {
    const dead = t.worker('llama-a', 'prefill', 0);
    await dead.sim.close();
    try {
      const before = t.harness.accessLog().length;
      const retried: string[] = [];
      // The gate's tie-break hashes the request id with the endpoint, so some requests try the dead worker first.
      for (let i = 0; i < 16 && retried.length < 2; i++) {
        const r = await complete(t, PROMPTS[0], MAX_TOKENS, client('acme', `kill-${i}`, { 'x-request-id': `kill-${i}-${Date.now()}` }));
        expect(r.status, JSON.stringify(r.json)).toBe(200);
        expect(r.headers.get(H.revision)).toBe('llama-a');
        expectBaseline(r, PROMPTS[0]);
        const legs = t.harness.accessLog().filter((e) => e.listener === 'internal' && e.requestId === r.headers.get(H.requestId));
        if (legs.length > 1) retried.push(r.headers.get(H.requestId)!);
      }
      expect(retried.length).toBeGreaterThan(0);
      const log = t.harness.accessLog().slice(before);
      const aPrefill = new Set([0, 1].map((i) => t.worker('llama-a', 'prefill', i).address));
      const legs = log.filter((e) => e.listener === 'internal');
      // Every prefill leg of every request went to revision A's prefill cluster, and only to its two workers.
      expect(legs.every((e) => e.upstreamCluster === 'a_prefill' && aPrefill.has(e.upstreamHost ?? ''))).toBe(true);
      for (const id of retried) {
        const mine = legs.filter((e) => e.requestId === id).map((e) => [e.upstreamHost, e.status]);
        expect(mine).toEqual([
          [dead.address, 502],
          [t.worker('llama-a', 'prefill', 1).address, 200],
        ]);
      }
      // The decode sidecars counted the retries as connection-level failures of the prefill side.
      const retries = await Promise.all(
        [0, 1].map((i) => counter(`http://${t.worker('llama-a', 'decode', i).address}`, 'kvgate_sidecar_prefill_retries_total')),
      );
      expect(retries.reduce((a, b) => a + b, 0)).toBe(retried.length);
    } finally {
      await t.restartWorker('llama-a', 'prefill', {}, 0);
      for (let i = 0; i < 3; i++) await new Promise((resolve) => setImmediate(resolve));
      expect((await dead.sidecar.probe()).verified).toBe(true);
    }
  });
});

describe('the gate restarted under traffic', () => {
  it('requests in the outage fail closed with 500 and reach no worker; traffic recovers with baseline ids', async () => {
    const contractFailures = () =>
      Promise.all(t.workers.map((w) => counter(`http://${w.address}`, 'kvgate_sidecar_contract_failures_total'))).then((v) =>
        v.reduce((a, b) => a + b, 0),
      );
    const failuresBefore = await contractFailures();
    const before = t.harness.accessLog().length;
    let recovered = false;
    const load = traffic('restart', 3, () => recovered);
    let outageSeen = (): void => undefined;
    const seen = new Promise<void>((resolve) => (outageSeen = resolve));
    try {
      await new Promise((r) => setTimeout(r, 50));
      // restartGate stops the gate's gRPC server at once and starts a new gate on the port after downMs, and not before
      // this test has seen the outage (a fixed window can close before a request of ours lands in it on a slow machine).
      const restart = t.restartGate({ downMs: 600, downUntil: seen });
      // A request of our own while the gate is down: Envoy's ext_proc filter fails closed.
      const failedClosed = await eventually(
        async () => (await complete(t, PROMPTS[0], MAX_TOKENS, client('acme', 'outage'))).status === 500,
        10_000,
        10,
      );
      outageSeen();
      expect(failedClosed, 'a request during the outage fails closed with 500').toBe(true);
      await restart;
      // Envoy reconnects to the new gate (gRPC reconnect backoff, at most 1 s in the harness).
      expect(
        await eventually(async () => (await complete(t, PROMPTS[0], MAX_TOKENS, client('acme', 'after'))).status === 200, 10_000, 50),
      ).toBe(true);
    } finally {
      outageSeen();
      recovered = true;
    }
    const results = await load;
    const statuses = new Set(results.map((x) => x.r.status));
    expect(
      [...statuses].every((s) => s === 200 || s === 500 || s === 502),
      [...statuses].join(),
    ).toBe(true);
    // A 502 is a request the old gate bound whose prefill leg then met the outage (the internal listener's ext_proc
    // failed closed): its decode sidecar refused with worker_error before any token. How many there are depends on
    // timing only; each is a clean refusal, never output.
    for (const { r } of results.filter((x) => x.r.status === 502)) {
      expect(r.headers.get('x-kvgate-reject-reason'), JSON.stringify(r.json)).toBe('worker_error');
      expect(JSON.stringify(r.json)).toMatch(/prefill/i);
    }
    for (const { prompt, r } of results) if (r.status === 200) expectBaseline(r, prompt, true);
    // Every 500 is Envoy failing closed because its ext_proc stream failed. Requests that arrived in the outage went to
    // no upstream at all; requests the old gate had already bound failed closed on their way (the prefill leg's hop
    // check or the response path), and not one request reached a worker without a contract.
    const log = t.harness.accessLog().slice(before);
    const closed = log.filter((e) => e.status === 500);
    expect(
      closed.every((e) => /^ext_proc_error_gRPC_error/.test(e.responseCodeDetails)),
      JSON.stringify(closed.slice(0, 3)),
    ).toBe(true);
    const unbound = closed.filter((e) => e.listener === 'public' && e.upstreamHost === undefined);
    expect(unbound.length).toBeGreaterThan(0);
    expect(unbound.every((e) => e.upstreamCluster === undefined)).toBe(true);
    expect(await contractFailures()).toBe(failuresBefore);
    const after = await complete(t, PROMPTS[2], MAX_TOKENS, client('acme', 'after-2'));
    expect(after.status).toBe(200);
    expectBaseline(after, PROMPTS[2]);
  });
});

describe('route-table reloads under traffic', () => {
  it('a good table changes the cohort weight; requests in flight keep their binding and baseline ids', async () => {
    expect(await revisionsOfFreshSessions('pre-reload', 4)).toEqual(Array(4).fill('llama-a'));
    let done = false;
    const load = traffic('reload-good', 3, () => done);
    await new Promise((r) => setTimeout(r, 30));
    await editRouteTable(t, (table) => (table.models['llama-3-8b'].rollout.weight = 100));
    const version = t.gate.policy.version();
    const result = await reloadUntil('failure matrix: candidate to 100%', (r) => r.ok && r.version !== version);
    done = true;
    const results = await load;
    expect(result.ok, result.message).toBe(true);
    expect(results.length).toBeGreaterThan(0);
    for (const { prompt, r } of results) {
      expect(r.status, JSON.stringify(r.json)).toBe(200);
      expectBaseline(r, prompt);
    }
    expect(await revisionsOfFreshSessions('post-reload', 4)).toEqual(Array(4).fill('llama-b'));
  });

  it('a bad table is rejected whole: the table in use, its version and the routing stay as they were', async () => {
    const version = t.gate.policy.version();
    const rejected = () => counter(`http://127.0.0.1:${t.gate.adminPort}`, 'kvgate_policy_reloads_total', { result: 'rejected' });
    const rejectedBefore = await rejected();
    let done = false;
    const load = traffic('reload-bad', 3, () => done);
    await new Promise((r) => setTimeout(r, 30));
    // A schema error (weight over 100), then a table that parses but fails the semantic checks (a pool of a
    // revision that does not exist): each is rejected whole, with the path to fix.
    await editRouteTable(t, (table) => (table.models['llama-3-8b'].rollout.weight = 150));
    const schema = await reloadUntil('failure matrix: weight 150', (r) => /weight/.test(r.message));
    await editRouteTable(t, (table) => {
      table.models['llama-3-8b'].rollout.weight = 100;
      table.pools[0].revision = 'llama-c';
    });
    const semantic = await reloadUntil('failure matrix: unknown revision', (r) => /llama-c/.test(r.message));
    done = true;
    const results = await load;
    expect(schema.ok).toBe(false);
    expect(schema.message).toMatch(/models\.llama-3-8b\.rollout\.weight: must be between 0 and 100/);
    expect(semantic.ok).toBe(false);
    expect(semantic.message).toMatch(/pools\[0\]\.revision: .*llama-c/);
    expect(t.gate.policy.version()).toBe(version);
    expect(await rejected()).toBeGreaterThan(rejectedBefore);
    for (const { prompt, r } of results) {
      expect(r.status, JSON.stringify(r.json)).toBe(200);
      expect(r.headers.get(H.revision)).toBe('llama-b');
      expectBaseline(r, prompt);
    }
    expect(await revisionsOfFreshSessions('post-bad', 4)).toEqual(Array(4).fill('llama-b'));
  });
});
