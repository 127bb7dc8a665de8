import { pino } from 'pino';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import { createDevKeyRing } from '../contract/keys.js';
import { createInFlightTracker, createStaticWorkerView } from '../decide/worker-view.js';
import type { WireProcessingRequest, WireProcessingResponse } from '../envoy/wire.js';
import { tableFromValue } from '../policy/testing.js';
import { createGateMetrics } from './metrics.js';
import { type AdmissionControl, createAdmission } from './admission.js';
import type { RoutingState } from './admission-types.js';
import { ExtProcSession } from './session.js';
import { queueTableValue, tick, type TableValue } from './testing.js';

const B_DECODE = '10.0.4.1:9090';

/** A fixed clock: the override's size is then exact (real timers still run the queue's deadlines). */
const NOW = 1_700_000_000_000;
const now = (): number => NOW;

function harness(value: TableValue = queueTableValue(), logger = pino({ level: 'silent' })) {
  const inFlight = createInFlightTracker();
  const table = tableFromValue(value);
  let state: RoutingState = { table, view: createStaticWorkerView(table, inFlight) };
  const ring = createDevKeyRing('session-test');
  const admission = createAdmission({ state: () => state, keys: () => ring, inFlight, now, recheckMs: 0 });
  const deps = { admission, logger, metrics: createGateMetrics(new Registry()), newRequestId: () => 'generated', now, gieHeaders: false };
  return {
    admission,
    inFlight,
    swap(v: TableValue) {
      const t = tableFromValue(v);
      state = { table: t, view: createStaticWorkerView(t, inFlight) };
      admission.notifyChanged();
    },
    /** A session whose early messages (override_message_timeout) land in `sent`. */
    session(withSend = true) {
      const sent: WireProcessingResponse[] = [];
      const s = new ExtProcSession(deps, 'public', withSend ? (r) => sent.push(r) : undefined);
      return { s, sent };
    },
  };
}

const headers = (id: string): WireProcessingRequest => ({
  request: 'request_headers',
  request_headers: {
    headers: {
      headers: Object.entries({
        ':method': 'POST',
        ':path': '/v1/chat/completions',
        'x-request-id': id,
        'x-tenant-id': 'acme',
        'x-session-id': `s-${id}`,
      }).map(([key, v]) => ({ key, raw_value: Buffer.from(v) })),
    },
    end_of_stream: false,
  },
  protocol_config: { request_body_mode: 'BUFFERED' },
});
const body = (): WireProcessingRequest => ({
  request: 'request_body',
  request_body: {
    body: Buffer.from(JSON.stringify({ model: 'llama-3-8b', messages: [{ role: 'user', content: 'hi' }] })),
    end_of_stream: true,
  },
});
const stamped = (r: WireProcessingResponse | null): Record<string, string> =>
  Object.fromEntries(
    (r?.request_body?.response?.header_mutation?.set_headers ?? []).map((h) => [
      h.header.key,
      Buffer.from(h.header.raw_value ?? []).toString(),
    ]),
  );

describe('session: a queued request', () => {
  let admission: AdmissionControl | undefined;
  afterEach(() => admission?.close());

  async function started(h: ReturnType<typeof harness>, id: string) {
    const x = h.session();
    expect((await x.s.onMessage(headers(id)))?.request_headers).toBeDefined();
    return x;
  }

  it('sends override_message_timeout once, before its single answer, and routes inside its group when capacity frees', async () => {
    const h = harness();
    admission = h.admission;
    const one = await started(h, 'r1');
    const first = await one.s.onMessage(body());
    expect(stamped(first)['x-kvgate-decode-endpoint']).toBe(B_DECODE);
    const two = await started(h, 'r2');
    let answer: WireProcessingResponse | null | undefined;
    void two.s.onMessage(body()).then((r) => (answer = r));
    await tick();
    expect(answer).toBeUndefined();
    // 2000 ms deadline + 250 ms margin, as a protobuf Duration and nothing else in the message.
    expect(two.sent).toEqual([{ override_message_timeout: { seconds: 2, nanos: 250_000_000 } }]);
    one.s.finish(); // the first request ends: its decode slot frees
    await tick();
    expect(stamped(answer!)).toMatchObject({
      'x-kvgate-group': stamped(first)['x-kvgate-group'],
      'x-kvgate-revision': 'llama-b',
      'x-kvgate-decode-endpoint': B_DECODE,
    });
    expect(two.sent).toHaveLength(1);
    expect(h.inFlight.inFlight(B_DECODE)).toBe(1);
    two.s.finish();
    expect(h.inFlight.inFlight(B_DECODE)).toBe(0);
  });

  it('without a way to send early messages it never queues (Envoy would time the request out), and its audit line says why', async () => {
    const lines: Record<string, unknown>[] = [];
    const h = harness(
      queueTableValue(),
      pino({ level: 'info' }, { write: (l: string) => void lines.push(JSON.parse(l) as Record<string, unknown>) }),
    );
    admission = h.admission;
    await (await started(h, 'r1')).s.onMessage(body());
    const x = h.session(false);
    await x.s.onMessage(headers('r2'));
    const r = await x.s.onMessage(body());
    expect(r?.immediate_response?.status.code).toBe(503);
    expect(Buffer.from(r?.immediate_response?.body ?? []).toString()).toContain('the fallback queue was skipped (cannot_hold)');
    expect(lines.filter((l) => l['audit'] === 'refusal')).toEqual([
      expect.objectContaining({ code: 'no_compatible_capacity', queueSkipped: 'cannot_hold' }),
    ]);
  });

  it('a cancelled stream leaves the queue, answers nothing, and holds no capacity', async () => {
    const h = harness();
    admission = h.admission;
    const one = await started(h, 'r1');
    await one.s.onMessage(body());
    const two = await started(h, 'r2');
    const pending = two.s.onMessage(body());
    await tick();
    expect(h.admission.queueStatus().waiting).toBe(1);
    two.s.finish();
    expect(await pending).toEqual({ request_body: { response: {} } });
    expect(h.admission.queueStatus().waiting).toBe(0);
    one.s.finish();
    await tick();
    expect(h.inFlight.inFlight(B_DECODE)).toBe(0);
  });
});

describe('session: a bound request never moves', () => {
  it('keeps its group, revision and binding through a cohort change and a drain, and releases what it held', async () => {
    const h = harness(queueTableValue((v) => (v['pools'][3]['maxInFlightPerEndpoint'] = 8)));
    const x = h.session();
    await x.s.onMessage(headers('r1'));
    const routed = stamped(await x.s.onMessage(body()));
    expect(routed['x-kvgate-revision']).toBe('llama-b');
    h.swap(
      queueTableValue((v) => {
        v['models']['llama-3-8b']['rollout']['weight'] = 0;
        v['pools'][3]['draining'] = true;
      }),
    );
    const resp = await x.s.onMessage({
      request: 'response_headers',
      response_headers: { headers: { headers: [{ key: ':status', raw_value: Buffer.from('200') }] } },
    });
    const out = Object.fromEntries(
      (resp?.response_headers?.response?.header_mutation?.set_headers ?? []).map((s) => [
        s.header.key,
        Buffer.from(s.header.raw_value ?? []).toString(),
      ]),
    );
    expect(out['x-kvgate-revision']).toBe('llama-b');
    expect(out['x-kvgate-group']).toBe(routed['x-kvgate-group']);
    expect(h.inFlight.inFlight(B_DECODE)).toBe(1);
    x.s.finish();
    expect(h.inFlight.inFlight(B_DECODE)).toBe(0);
    h.admission.close();
  });
});
