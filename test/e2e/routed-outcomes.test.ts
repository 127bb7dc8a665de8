/**
 * Issue 19 through the full topology: a sidecar's refusal behind a route reaches the gate's metrics and audit per
 * revision (not counted as a successful route), and `log.decisions` writes one line per routed request with the
 * endpoints it chose.
 */
import { randomUUID } from 'node:crypto';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTopology, type Topology } from '../../testbed/demo/topology.js';
import { client, complete, counter, eventually, jsonLineSink } from './failure-matrix-support.js';

const { lines, sink } = jsonLineSink();

let t: Topology;
beforeAll(async () => {
  // The gate polls once at start and then not for a minute: a sidecar that starts draining is still routed to.
  t = await startTopology({
    logger: pino({ level: 'info' }, sink),
    candidateWeight: 0,
    logDecisions: true,
    workerViewIntervalMs: 60_000,
    sidecarProbeIntervalMs: 60_000,
    // No announce window: a drained sidecar refuses at once, so the refusal's accounting can be seen.
    sidecar: { drainAnnounceMs: 0 },
  });
});
afterAll(() => t.close());

const admin = () => `http://127.0.0.1:${t.gate.adminPort}`;

describe('what came back for a routed request', () => {
  it('a served request: one decision line with the decode and prefill endpoints, counted served for its revision', async () => {
    const rid = `routed-ok-${randomUUID()}`;
    expect((await complete(t, 'routed outcome', 4, client('acme', 'ok', { 'x-request-id': rid }))).status).toBe(200);
    // The gate mints the request id; the client's is kept beside it as client_request_id.
    const decision = lines.filter((l) => l['client_request_id'] === rid && l['event'] === 'decision' && l['outcome'] === 'route');
    expect(decision).toHaveLength(1);
    const id = decision[0]!['request_id'];
    expect(decision[0]).toMatchObject({
      log: 'decisions',
      tenant: 'acme',
      revision: 'llama-a',
      decode: { pool: 'a-decode', cluster: 'a_decode', endpoint: t.worker('llama-a', 'decode').address },
      prefill: { pool: 'a-prefill', cluster: 'a_prefill' },
    });
    // The prefill leg's hop has its own line.
    expect(lines.some((l) => l['request_id'] === id && l['event'] === 'decision' && l['outcome'] === 'hop')).toBe(true);
    expect(await counter(admin(), 'kvgate_routed_responses_total', { revision: 'llama-a', outcome: 'served' })).toBeGreaterThanOrEqual(1);
  });

  it("a decode sidecar's refusal (draining, 503) is counted refused for its revision and noted by the gate, audited by the sidecar alone", async () => {
    await t.worker('llama-a', 'decode').sidecar.drain();
    const rid = `routed-refused-${randomUUID()}`;
    const r = await complete(t, 'routed outcome', 4, client('acme', 'refused', { 'x-request-id': rid }));
    expect([r.status, r.headers.get('x-kvgate-reject-reason')]).toEqual([503, 'draining']);
    expect(await counter(admin(), 'kvgate_routed_responses_total', { revision: 'llama-a', outcome: 'refused', code: 'draining' })).toBe(1);
    // Still a route in the decision counts (the gate did route it); the outcome says what became of it.
    expect(await counter(admin(), 'kvgate_decisions_total', { outcome: 'route', revision: 'llama-a' })).toBeGreaterThanOrEqual(2);
    expect(await eventually(() => lines.some((l) => l['client_request_id'] === rid && l['event'] === 'upstream_refusal'))).toBe(true);
    const audit = lines.filter((l) => l['client_request_id'] === rid && l['event'] === 'upstream_refusal');
    expect(audit).toHaveLength(1);
    expect(audit[0]).toMatchObject({ component: 'gate', code: 'draining', status: '503', revision: 'llama-a', tenant: 'acme' });
    // One refusal, one audit line: the decode sidecar's.
    const id = audit[0]!['request_id'];
    expect(lines.filter((l) => l['request_id'] === id && 'audit' in l).map((l) => [l['component'], l['audit']])).toEqual([
      ['sidecar', 'refusal'],
    ]);
  });
});
