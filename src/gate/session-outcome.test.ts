/**
 * Issue 19: the decision line (`log.decisions`) and what came back for a routed request (a sidecar's refusal is
 * counted per revision and audited, not taken for a successful route).
 */
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { createDevKeyRing } from '../contract/keys.js';
import { createInFlightTracker, createStaticWorkerView } from '../decide/worker-view.js';
import type { WireProcessingRequest } from '../envoy/wire.js';
import { tableFromValue, twoRevisionTableValue } from '../policy/testing.js';
import { createAdmission } from './admission.js';
import { DECISION_LOG_TAG } from './decision-log.js';
import { createGateMetrics } from './metrics.js';
import { ExtProcSession } from './session.js';

type Line = Record<string, any>;

function setup(decisions: boolean) {
  const lines: Line[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _e, done) {
      for (const l of chunk.toString().split('\n')) if (l.trim() !== '') lines.push(JSON.parse(l) as Line);
      done();
    },
  });
  const logger = pino({ level: 'info' }, sink);
  const table = tableFromValue(twoRevisionTableValue());
  const inFlight = createInFlightTracker();
  const ring = createDevKeyRing('outcome-test');
  const admission = createAdmission({
    state: () => ({ table, view: createStaticWorkerView(table, inFlight) }),
    keys: () => ring,
    inFlight,
    now: Date.now,
    recheckMs: 0,
  });
  const registry = new Registry();
  const deps = {
    admission,
    logger,
    metrics: createGateMetrics(registry),
    newRequestId: () => 'generated',
    now: Date.now,
    gieHeaders: false,
    decisionLog: decisions ? logger.child({ log: DECISION_LOG_TAG }) : undefined,
  };
  return { lines, registry, session: () => new ExtProcSession(deps, 'public'), close: () => admission.close() };
}

const headerMap = (h: Record<string, string>) => ({ headers: Object.entries(h).map(([key, v]) => ({ key, raw_value: Buffer.from(v) })) });
const requestHeaders = (id: string): WireProcessingRequest => ({
  request: 'request_headers',
  request_headers: {
    headers: headerMap({ ':method': 'POST', ':path': '/v1/completions', 'x-request-id': id, 'x-tenant-id': 'acme' }),
    end_of_stream: false,
  },
  protocol_config: { request_body_mode: 'BUFFERED' },
});
const requestBody = (): WireProcessingRequest => ({
  request: 'request_body',
  request_body: { body: Buffer.from(JSON.stringify({ model: 'llama-3-8b', prompt: 'hello' })), end_of_stream: true },
});
const responseHeaders = (h: Record<string, string>): WireProcessingRequest => ({
  request: 'response_headers',
  response_headers: { headers: headerMap(h), end_of_stream: false },
});

async function routed(s: ExtProcSession, id: string): Promise<void> {
  await s.onMessage(requestHeaders(id));
  const r = await s.onMessage(requestBody());
  expect(r?.immediate_response).toBeUndefined();
}

const count = async (registry: Registry, labels: Record<string, string>) =>
  (await registry.getSingleMetric('kvgate_routed_responses_total')!.get()).values.find((v) =>
    Object.entries(labels).every(([k, x]) => v.labels[k] === x),
  )?.value ?? 0;

describe('session: after the route', () => {
  it("counts a sidecar's refusal per revision with its code and notes it in one upstream_refusal line, not a second audit line", async () => {
    const t = setup(false);
    const s = t.session();
    await routed(s, 'r-refused');
    const answer = await s.onMessage(
      responseHeaders({ ':status': '409', 'x-kvgate-reject-reason': 'incompatible_transfer', 'content-type': 'application/json' }),
    );
    expect(answer?.response_headers).toBeDefined(); // still answered: Envoy waits for it
    const audit = t.lines.filter((l) => l['event'] === 'upstream_refusal');
    expect(audit).toHaveLength(1);
    // The sidecar that refused audited it; the gate only records what came back.
    expect(t.lines.filter((l) => 'audit' in l)).toEqual([]);
    expect(audit[0]).toMatchObject({
      request_id: 'generated',
      client_request_id: 'r-refused',
      code: 'incompatible_transfer',
      status: '409',
      tenant: 'acme',
    });
    expect(await count(t.registry, { revision: audit[0]!['revision'], outcome: 'refused', code: 'incompatible_transfer' })).toBe(1);
    // A second response_headers (never sent by Envoy, but harmless) does not count twice.
    await s.onMessage(responseHeaders({ ':status': '409', 'x-kvgate-reject-reason': 'incompatible_transfer' }));
    expect(await count(t.registry, { outcome: 'refused' })).toBe(1);
    t.close();
  });

  it('counts a served response, and writes no decision line unless log.decisions is on', async () => {
    const t = setup(false);
    const s = t.session();
    await routed(s, 'r-served');
    await s.onMessage(responseHeaders({ ':status': '200' }));
    expect(await count(t.registry, { outcome: 'served' })).toBe(1);
    expect(t.lines.filter((l) => l['event'] === 'decision')).toEqual([]);
    t.close();
  });

  it('log.decisions: one info line per routed request with id, tenant, group, revision, endpoints, fallback, time', async () => {
    const t = setup(true);
    await routed(t.session(), 'r-line');
    const lines = t.lines.filter((l) => l['event'] === 'decision');
    expect(lines).toHaveLength(1);
    const l = lines[0]!;
    expect(l).toMatchObject({
      level: 30,
      log: 'decisions',
      outcome: 'route',
      request_id: 'generated',
      client_request_id: 'r-line',
      tenant: 'acme',
      model: 'llama-3-8b',
      fallback: [],
    });
    expect(l['group']).toMatch(/\S/);
    expect(l['revision']).toMatch(/\S/);
    expect(l['decode']).toMatchObject({ pool: expect.any(String), cluster: expect.any(String) });
    expect(typeof l['decision_ms']).toBe('number');
    expect(JSON.stringify(l)).not.toContain('hello'); // no prompt text
    t.close();
  });
});
