import { describe, expect, it } from 'vitest';
import { refusalResponse, responseHeadersMutation, routeMutation } from '../envoy/responses.js';
import { clone, tableFromValue, twoRevisionTableValue } from '../policy/testing.js';
import { clientRefusal, explainRequest, type ExplainInput } from './explain.js';
import { formatExplanation } from './explain-format.js';
import { createExplainQueueView, createExplainWorkerView, parseWorkerFlag } from './explain-view.js';
import { testKeys } from './testing.js';
import { TEST_NOW_MS } from '../../test/support/clock.js';
import type { Refusal } from './types.js';

const table = tableFromValue(twoRevisionTableValue());
const chat = { model: 'llama-3-8b', messages: [{ role: 'user', content: 'hi' }] };
function input(extra: Partial<ExplainInput> = {}): ExplainInput {
  return {
    table,
    keys: testKeys(),
    nowMs: TEST_NOW_MS,
    method: 'POST',
    path: '/v1/chat/completions',
    headers: { 'x-tenant-id': 'acme', 'x-session-id': 's-1' },
    body: new TextEncoder().encode(JSON.stringify(chat)),
    view: createExplainWorkerView(table, new Map()),
    queue: createExplainQueueView(0),
    maxMessageTimeoutMs: 30_000,
    ...extra,
  };
}

describe('explainRequest', () => {
  it('a refusal is shown exactly as the gate sends it', () => {
    const r: Refusal = {
      kind: 'refuse',
      requestId: 'r1',
      code: 'no_compatible_capacity',
      message: 'no room',
      retryAfterSeconds: 2.5,
      trace: [],
    };
    const wire = refusalResponse(r);
    const headers = Object.fromEntries(
      (wire.headers?.set_headers ?? []).map((h) => [h.header.key, Buffer.from(h.header.raw_value ?? []).toString()]),
    );
    const c = clientRefusal(r);
    expect(c.status).toBe(wire.status.code);
    expect(c.headers).toEqual(headers);
    expect(JSON.stringify(c.body)).toBe(Buffer.from(wire.body!).toString());
  });

  it('removes client-sent gate-owned headers as the gate does, and reads x-kvgate-binding as the binding', () => {
    const first = explainRequest(input());
    const binding = first.responseHeaders!['x-kvgate-binding']!;
    const e = explainRequest(
      input({ headers: { 'x-tenant-id': 'acme', 'x-session-id': 's-1', 'x-kvgate-decode-cluster': 'evil', 'x-kvgate-binding': binding } }),
    );
    expect(e.removedHeaders).toEqual(['x-kvgate-decode-cluster']);
    expect(e.trace.some((l) => l.includes("kept by the session's binding"))).toBe(true);
    expect(e.upstreamHeaders!['x-kvgate-decode-cluster']).not.toBe('evil');
  });

  it('a wait shows the override Envoy gets and the 504 at the deadline', () => {
    const view = createExplainWorkerView(
      table,
      new Map([
        ['10.0.4.1:9090', { busy: true }],
        ['10.0.2.1:9090', { busy: true }],
        ['10.0.2.2:9090', { busy: true }],
      ]),
    );
    const v = clone(twoRevisionTableValue()) as Record<string, any>;
    v['fallback'] = [{ queue: { deadlineMs: 1500, maxDepth: 4 } }, { refuse: { retryAfterSeconds: 3 } }];
    const t = tableFromValue(v);
    const e = explainRequest(input({ table: t, view }));
    expect(e.kind).toBe('wait');
    expect(e.wait).toMatchObject({ deadlineMs: 1500, overrideMessageTimeoutMs: 1750, ahead: 0 });
    expect(e.wait!.atDeadline.refusal).toMatchObject({ status: 504, code: 'queue_deadline_exceeded' });
    expect(formatExplanation(e)).toMatch(
      /decision: wait in the fifo queue of group g_[0-9a-f]+ .* for decode capacity \(fallback step 1\)\n {2}deadline: 1500 ms; 0 request\(s\) ahead; queue maxDepth 4\n {2}Envoy: the gate first sends override_message_timeout 1750 ms/,
    );
  });
});

describe('explain worker flags', () => {
  it('parses states and refuses unknown ones with the list', () => {
    expect(parseWorkerFlag('10.0.4.1:9090=busy')).toEqual({ ok: true, value: { address: '10.0.4.1:9090', patch: { busy: true } } });
    expect(parseWorkerFlag('10.0.4.1:9090=inflight=3,draining,unverified,foreign')).toEqual({
      ok: true,
      value: { address: '10.0.4.1:9090', patch: { inFlight: 3, draining: true, verified: false, fingerprint: 'foreign' } },
    });
    const bad = parseWorkerFlag('10.0.4.1:9090=sleepy');
    expect(!bad.ok && bad.error).toBe(
      '--worker "10.0.4.1:9090=sleepy": unknown state "sleepy"; use busy, inflight=N, draining, unverified, unobserved, foreign',
    );
    const typo = parseWorkerFlag('10.0.4.1:9090=drainig');
    expect(!typo.ok && typo.error).toBe(
      '--worker "10.0.4.1:9090=drainig": unknown state "drainig"; did you mean "draining"? use busy, inflight=N, draining, unverified, unobserved, foreign',
    );
    expect(parseWorkerFlag('busy').ok).toBe(false);
  });

  it('a busy endpoint sits at its pool limit; a foreign one runs another fingerprint', () => {
    const view = createExplainWorkerView(
      table,
      new Map([
        ['10.0.4.1:9090', { busy: true }],
        ['10.0.3.1:9090', { fingerprint: 'foreign' }],
      ]),
    );
    expect(view.endpoints('b-decode')[0]).toMatchObject({ inFlight: 64, verified: true, draining: false });
    expect(view.endpoints('b-prefill')[0]!.fingerprint).not.toBe(table.pools.get('b-prefill')!.fingerprint);
  });
});

describe('explain shows what the gate stamps', () => {
  const wireHeaders = (set: readonly { header: { key: string; raw_value?: Uint8Array } }[] | undefined) =>
    Object.fromEntries((set ?? []).map((h) => [h.header.key, Buffer.from(h.header.raw_value ?? []).toString()]));

  it('a route: the same headers, body length and GIE aliases as the gate', () => {
    const e = explainRequest(input({ gieHeaders: true, headers: { 'x-tenant-id': 'acme', 'x-session-id': 's-1', 'x-kvgate-foo': 'x' } }));
    const d = e.decision;
    if (d.kind !== 'route') throw new Error(d.kind);
    const wire = routeMutation(d, new TextEncoder().encode(JSON.stringify(chat)), ['x-kvgate-foo'], { gieHeaders: true });
    expect(e.upstreamHeaders).toEqual(wireHeaders(wire.common.header_mutation?.set_headers));
    expect(e.upstreamHeaders!['x-gateway-destination-endpoint']).toBe(d.decode.endpoint);
    expect(e.upstreamHeaders!['content-length']).toBe(String(wire.common.body_mutation!.body!.byteLength));
    expect(e.upstreamMetadata).toEqual({ 'envoy.lb': { 'x-gateway-destination-endpoint': d.decode.endpoint } });
    expect(e.responseHeaders).toEqual(wireHeaders(responseHeadersMutation(d).header_mutation?.set_headers));
    expect(formatExplanation(e)).toContain(`Envoy dynamic metadata envoy.lb: {"x-gateway-destination-endpoint":"${d.decode.endpoint}"}`);
    // Without gieHeaders, as the gate's default: no aliases, no metadata.
    const plain = explainRequest(input());
    expect(plain.upstreamHeaders!['x-gateway-destination-endpoint']).toBeUndefined();
    expect(plain.upstreamMetadata).toBeUndefined();
  });
});
