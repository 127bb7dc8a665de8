/**
 * Issue 14 item 7: planned and survivable faults are invisible to clients, through the full topology with two
 * workers per role of revision A.
 *
 * - A prefill worker killed after its prefill and before the decode worker read its KV: the decode sidecar runs the
 *   prefill leg once more, on the other prefill worker of the SAME group (the gate's hop check picks it, the
 *   attestation is checked again), and the client gets the baseline answer, not 502 `worker_error`.
 * - A decode worker drained while the gate has not yet seen it: the sidecar announces the drain in its status at
 *   once and keeps admitting for `drainAnnounceMs`, so a request the gate routed there meanwhile is served, not
 *   refused with 503 `draining`; once the gate has seen the drain it routes nothing there.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { baseline, firstDivergence, PROMPTS, tokenIds } from '../../testbed/demo/scenarios.js';
import { startTopology, type Topology } from '../../testbed/demo/topology.js';
import { H } from '../../src/headers.js';
import { client, complete, counter, eventually, silent } from './failure-matrix-support.js';

const MAX_TOKENS = 8;
let t: Topology;
let expected: number[];

beforeAll(async () => {
  // The gate polls the sidecars once at start (and a decode endpoint again when a stream ends), so a drain stays
  // unseen until the test says otherwise.
  t = await startTopology({
    logger: silent,
    replicas: 2,
    candidateWeight: 0,
    workerViewIntervalMs: 60_000,
    sidecarProbeIntervalMs: 60_000,
    // A window longer than this test's requests take, so none of them can land after it.
    sidecar: { drainAnnounceMs: 20_000, drainGraceMs: 30_000 },
  });
  expected = await baseline(t, 'llama-a', PROMPTS[0], MAX_TOKENS);
});
afterAll(() => t.close());

const decodeCounter = async (name: string, labels: Record<string, string>): Promise<number> =>
  (await Promise.all([0, 1].map((i) => counter(`http://${t.worker('llama-a', 'decode', i).address}`, name, labels)))).reduce(
    (a, b) => a + b,
    0,
  );

describe('a prefill worker killed after its prefill, before its KV was read', () => {
  it('the prefill leg runs once more on the other prefill worker of the group; the client gets the baseline', async () => {
    const prefills = [0, 1].map((i) => t.worker('llama-a', 'prefill', i));
    // Block reads are answered late, so the KV is still on the prefill worker when it dies.
    for (const w of prefills) w.sim.setFaults({ transferDelayMs: 1_500 });
    const before = t.harness.accessLog().length;
    let killed: (typeof prefills)[number] | undefined;
    try {
      const pending = complete(t, PROMPTS[0], MAX_TOKENS, client('acme', 'kill-after-prefill'));
      // The first prefill leg has answered: kill the vLLM that computed it.
      expect(
        await eventually(() =>
          t.harness
            .accessLog()
            .slice(before)
            .some((e) => e.listener === 'internal' && e.status === 200),
        ),
      ).toBe(true);
      const leg = t.harness
        .accessLog()
        .slice(before)
        .find((e) => e.listener === 'internal')!;
      killed = prefills.find((w) => w.address === leg.upstreamHost)!;
      await killed.sim.close();
      const r = await pending;
      expect(r.status, JSON.stringify(r.json)).toBe(200);
      expect(r.headers.get(H.revision)).toBe('llama-a');
      expect(firstDivergence(tokenIds(r), expected)).toBe(-1);
      // Two legs, both inside revision A's prefill cluster: the killed worker, then the other one.
      const legs = t.harness.accessLog().filter((e) => e.listener === 'internal' && e.requestId === r.headers.get(H.requestId));
      const other = prefills.find((w) => w !== killed)!;
      expect(legs.map((e) => [e.upstreamCluster, e.upstreamHost, e.status])).toEqual([
        ['a_prefill', killed.address, 200],
        ['a_prefill', other.address, 200],
      ]);
      expect(await decodeCounter('kvgate_sidecar_prefill_reruns_total', { reason: 'kv_load_failed' })).toBe(1);
    } finally {
      for (const w of prefills) if (w !== killed) w.sim.setFaults({ reset: true });
      if (killed !== undefined) await t.restartWorker('llama-a', 'prefill', {}, killed.index);
      await Promise.all(prefills.map((w) => w.sidecar.probe()));
    }
  });
});

describe('a decode drain the gate has not seen yet', () => {
  it('requests routed to the draining worker are served; once the gate has seen the drain, none go there', async () => {
    const drained = t.worker('llama-a', 'decode', 1);
    const publicHosts = (from: number) =>
      t.harness
        .accessLog()
        .slice(from)
        .filter((e) => e.listener === 'public')
        .map((e) => e.upstreamHost);
    const start = t.harness.accessLog().length;
    const drain = await fetch(`${drained.sidecar.adminUrl}/kvgate/v1/drain`, { method: 'POST' });
    expect(drain.status).toBe(202);
    // The gate's pick depends on the request id it mints: send until one went to the draining worker (bounded).
    for (let i = 0; i < 40 && !publicHosts(start).includes(drained.address); i++) {
      const r = await complete(t, PROMPTS[0], MAX_TOKENS, client('acme', `drain-window-${i}`));
      expect([r.status, r.headers.get(H.rejectReason)], JSON.stringify(r.json)).toEqual([200, null]);
      expect(firstDivergence(tokenIds(r), expected)).toBe(-1);
    }
    expect(publicHosts(start)).toContain(drained.address);
    // The gate sees the drain: nothing new goes there, and nothing is refused.
    await t.gate.refreshWorkerView();
    const seen = t.harness.accessLog().length;
    for (let i = 0; i < 6; i++) {
      const r = await complete(t, PROMPTS[0], MAX_TOKENS, client('acme', `drain-seen-${i}`));
      expect(r.status).toBe(200);
    }
    expect(publicHosts(seen).filter((h) => h === drained.address)).toEqual([]);
    expect(await counter(`http://${drained.address}`, 'kvgate_sidecar_requests_total', { code: 'draining' })).toBe(0);
  });
});
