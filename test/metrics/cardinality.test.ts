/**
 * A client must not be able to grow the gate's /metrics: every label value comes from a closed set or from the
 * route table, never from what a request carries. Many distinct model names, tenants, paths, request kinds, error
 * reasons and a sidecar's made-up reject reasons are sent through the real session and admission; the exposition
 * keeps the same series (values change, series do not), and stays valid.
 */
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { createDevKeyRing } from '../../src/contract/keys.js';
import { createInFlightTracker, createStaticWorkerView } from '../../src/decide/worker-view.js';
import type { WireProcessingRequest } from '../../src/envoy/wire.js';
import { createAdmission } from '../../src/gate/admission.js';
import { createGateMetrics } from '../../src/gate/metrics.js';
import { createRolloutMetrics } from '../../src/gate/rollout-metrics.js';
import { ExtProcSession } from '../../src/gate/session.js';
import { queueTableValue } from '../../src/gate/testing.js';
import { tableFromValue } from '../../src/policy/testing.js';
import { lintExposition } from './promlint.js';

const headerMap = (h: Record<string, string>) => ({ headers: Object.entries(h).map(([key, v]) => ({ key, raw_value: Buffer.from(v) })) });

/** The series of an exposition: every sample line's name and labels. */
const series = (text: string): string[] =>
  text
    .split('\n')
    .filter((l) => l !== '' && !l.startsWith('#'))
    .map((l) => l.slice(0, l.lastIndexOf(' ')));

describe('gate /metrics: bounded label values whatever clients send', () => {
  it('distinct models, tenants, paths, bodies, statuses and reject reasons add no series', async () => {
    const registry = new Registry();
    const table = tableFromValue(queueTableValue((v) => (v['models']['llama-3-8b']['tenants'] = ['*'])));
    const inFlight = createInFlightTracker();
    const ring = createDevKeyRing('cardinality');
    const admission = createAdmission({
      state: () => ({ table, view: createStaticWorkerView(table, inFlight) }),
      keys: () => ring,
      inFlight,
      now: Date.now,
      metrics: createRolloutMetrics(registry),
    });
    let n = 0;
    const deps = {
      admission,
      logger: pino({ level: 'silent' }),
      metrics: createGateMetrics(registry),
      newRequestId: () => `id-${++n}`,
      now: Date.now,
      gieHeaders: false,
    };
    /** One request of round `i`: each field a value no earlier round sent, some of them hostile label text. */
    const round = async (i: number): Promise<void> => {
      const hostile = `"} evil{x="${i}\\\n\u202e${'\u0430'.repeat(i % 5)}`;
      const chat = (model: string) => JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }] });
      const cases: Array<{ method: string; path: string; body?: string }> = [
        { method: 'POST', path: '/v1/chat/completions', body: chat(`model-${i}-${hostile}`) },
        { method: 'POST', path: '/v1/chat/completions', body: chat('llama-3-8b') },
        { method: 'POST', path: `/v1/other-${i}-${hostile}`, body: `{"model": ${i}` },
        { method: 'GET', path: `/v1/models?x=${i}` },
      ];
      for (const [k, c] of cases.entries()) {
        const s = new ExtProcSession(deps, 'public', () => undefined);
        await s.onMessage({
          request: 'request_headers',
          request_headers: {
            headers: headerMap({
              ':method': c.method,
              ':path': c.path,
              'x-tenant-id': `tenant-${i}-"}\u202e${k}`,
              'x-session-id': `s-${i}`,
            }),
            end_of_stream: c.body === undefined,
          },
          protocol_config: { request_body_mode: 'BUFFERED' },
        } satisfies WireProcessingRequest);
        if (c.body !== undefined)
          await s.onMessage({ request: 'request_body', request_body: { body: Buffer.from(c.body), end_of_stream: true } });
        // A response with a made-up reject reason and status (whatever answered upstream).
        await s.onMessage({
          request: 'response_headers',
          response_headers: {
            headers: headerMap({ ':status': String(400 + i), 'x-kvgate-reject-reason': `reason-${i}-${hostile}` }),
            end_of_stream: true,
          },
        });
        await s.onMessage({} as WireProcessingRequest); // no kind Envoy's protos know: counted as unknown
        s.finish();
      }
    };
    // Warm up every outcome once, then many more rounds of new values: the series stay the same.
    for (let i = 0; i < 3; i++) await round(i);
    const before = series(await registry.metrics());
    for (let i = 3; i < 60; i++) await round(i);
    const after = await registry.metrics();
    expect(series(after).filter((s) => !before.includes(s))).toEqual([]);
    expect(after).not.toContain('evil');
    // Every kind of outcome was reached, so their labels were exercised: routed, refused, answered, failed upstream.
    for (const outcome of ['route', 'refuse', 'answer']) expect(after).toMatch(new RegExp(`kvgate_decisions_total\\{outcome="${outcome}"`));
    expect(after).toMatch(/kvgate_routed_responses_total\{revision="llama-b",outcome="failed",code="http_4xx"\} [1-9]/);
    expect(lintExposition(after)).toEqual([]);
    admission.close();
  });
});
