/**
 * What the gate's stream does with hostile client input, through the real route decider: identity headers decoded
 * strictly, the request id minted on the public listener, bounded audit lines, and JSON nested too deep for any
 * recursive walk refused with 400 before anything processes it. Each refusal: its JSON code and one audit line.
 */
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { createDevKeyRing } from '../contract/keys.js';
import { createInFlightTracker, createStaticWorkerView } from '../decide/worker-view.js';
import type { WireProcessingRequest, WireProcessingResponse } from '../envoy/wire.js';
import { tableFromValue } from '../policy/testing.js';
import { createGateMetrics } from './metrics.js';
import { createAdmission } from './admission.js';
import { ExtProcSession } from './session.js';
import { queueTableValue } from './testing.js';

function gate() {
  const lines: Record<string, unknown>[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _e, done) {
      for (const l of chunk.toString('utf8').split('\n')) if (l.trim() !== '') lines.push(JSON.parse(l) as Record<string, unknown>);
      done();
    },
  });
  const inFlight = createInFlightTracker();
  const table = tableFromValue(queueTableValue());
  const ring = createDevKeyRing('hardening');
  const admission = createAdmission({
    state: () => ({ table, view: createStaticWorkerView(table, inFlight) }),
    keys: () => ring,
    inFlight,
    now: Date.now,
  });
  const registry = new Registry();
  let n = 0;
  const deps = {
    admission,
    logger: pino({ level: 'info' }, sink),
    metrics: createGateMetrics(registry),
    newRequestId: () => `minted-${++n}`,
    now: Date.now,
    gieHeaders: false,
    tenancy: () => table.tenancy,
  };
  /** One request through a fresh public session: headers (name -> raw bytes), then the body. */
  const send = async (
    h: Record<string, Buffer | string>,
    body: Buffer | string,
    field: 'raw_value' | 'value' = 'raw_value',
  ): Promise<WireProcessingResponse | null> => {
    const s = new ExtProcSession(deps, 'public', () => undefined);
    const all = { ':method': 'POST', ':path': '/v1/chat/completions', 'x-session-id': 's1', ...h };
    const header = ([key, v]: [string, Buffer | string]) =>
      field === 'raw_value' ? { key, raw_value: Buffer.from(v) } : { key, value: Buffer.from(v).toString() };
    await s.onMessage({
      request: 'request_headers',
      request_headers: {
        headers: { headers: Object.entries(all).map(header) },
        end_of_stream: false,
      },
      protocol_config: { request_body_mode: 'BUFFERED' },
    } satisfies WireProcessingRequest);
    const r = await s.onMessage({ request: 'request_body', request_body: { body: Buffer.from(body), end_of_stream: true } });
    s.finish();
    return r;
  };
  return {
    send,
    lines,
    registry,
    inFlight,
    session: () => new ExtProcSession(deps, 'public', () => undefined),
    audits: () => lines.filter((l) => l['audit'] === 'refusal'),
  };
}

const chat = JSON.stringify({ model: 'llama-3-8b', messages: [{ role: 'user', content: 'hi' }] });
const refusal = (r: WireProcessingResponse | null) => {
  const ir = r?.immediate_response;
  return ir === undefined
    ? undefined
    : (JSON.parse(Buffer.from(ir.body ?? []).toString()) as { error: { code: string; message: string; request_id: string } }).error;
};
const stamped = (r: WireProcessingResponse | null, name: string) =>
  Buffer.from(
    r?.request_body?.response?.header_mutation?.set_headers?.find((h) => h.header.key === name)?.header.raw_value ?? [],
  ).toString();

describe('identity headers are decoded strictly', () => {
  it('t-\\xE9 and t-\\xFF are not one tenant: both are refused 400, with an audit line each', async () => {
    const g = gate();
    for (const byte of [0xe9, 0xff]) {
      const r = await g.send({ 'x-tenant-id': Buffer.from([0x74, 0x2d, byte]) }, chat);
      expect(refusal(r)).toMatchObject({ code: 'bad_request', message: expect.stringContaining('x-tenant-id is not valid UTF-8') });
    }
    expect(g.audits().map((l) => [l['code'], l['tenant']])).toEqual([
      ['bad_request', null],
      ['bad_request', null],
    ]);
    // Valid UTF-8 is read as the tenant it names (this table lists only acme, so t-é is then refused by scope).
    expect(refusal(await g.send({ 'x-tenant-id': 't-é' }, chat))).toMatchObject({
      code: 'tenant_scope_denied',
      message: expect.stringContaining('tenant t-é '),
    });
  });

  it('the session header is an identity too', async () => {
    const g = gate();
    const r = await g.send({ 'x-tenant-id': 'acme', 'x-session-id': Buffer.from([0xc3, 0x28]) }, chat);
    expect(refusal(r)).toMatchObject({ code: 'bad_request', message: expect.stringContaining('x-session-id is not valid UTF-8') });
  });
});

describe('an Envoy with send_header_raw_value off (header values in `value` both ways)', () => {
  it('gets its stamps in `value`, the field it reads; raw_value there would set every header empty', async () => {
    const g = gate();
    const r = await g.send({ 'x-tenant-id': 'acme' }, chat, 'value');
    const sets = r?.request_body?.response?.header_mutation?.set_headers ?? [];
    expect(sets.length).toBeGreaterThan(0);
    for (const o of sets) {
      expect(o.header.raw_value).toBeUndefined();
      expect(o.header.value).not.toBe('');
    }
    expect(sets.find((o) => o.header.key === 'x-kvgate-revision')?.header.value).toMatch(/^llama-/);
    // The same request from a default Envoy: raw_value only, as before.
    expect(stamped(await g.send({ 'x-tenant-id': 'acme' }, chat), 'x-kvgate-revision')).toMatch(/^llama-/);
  });

  it("refuses a tenant holding a '!' (Envoy's mark for a byte that is not UTF-8), once, with a reason, in `value`", async () => {
    const g = gate();
    const r = await g.send({ 'x-tenant-id': 'acme!' }, chat, 'value');
    expect(refusal(r)).toMatchObject({
      code: 'bad_request',
      message: expect.stringContaining("header x-tenant-id holds a '!' and came from an Envoy whose runtime guard"),
    });
    const reason = r?.immediate_response?.headers?.set_headers?.find((o) => o.header.key === 'x-kvgate-reject-reason')?.header;
    expect(reason).toEqual({ key: 'x-kvgate-reject-reason', value: 'bad_request' });
    expect(g.audits().map((l) => l['code'])).toEqual(['bad_request']);
    // In raw_value a '!' is the byte itself: read as the tenant it names (refused by scope here, not as undecodable).
    expect(refusal(await g.send({ 'x-tenant-id': 'acme!' }, chat))).toMatchObject({ code: 'tenant_scope_denied' });
  });
});

describe('the request id on the public listener', () => {
  it("is minted by the gate; the client's id is kept apart as client_request_id", async () => {
    const g = gate();
    const [a, b] = [
      await g.send({ 'x-tenant-id': 'acme', 'x-request-id': 'same' }, chat),
      await g.send({ 'x-tenant-id': 'globex', 'x-request-id': 'same' }, '{'),
    ];
    expect(stamped(a, 'x-request-id')).toBe('minted-1');
    expect(refusal(b)?.request_id).toBe('minted-2');
    // Two tenants sending one id never share an audit line's id.
    expect(g.audits().map((l) => [l['request_id'], l['client_request_id']])).toEqual([['minted-2', 'same']]);
  });
});

describe('audit lines carry bounded client text', () => {
  it('a 3 KB path, ext_proc message kind or tenant becomes at most 128 characters of it', async () => {
    const g = gate();
    const long = 'p'.repeat(3000);
    await g.send({ ':path': `/v1/${long}`, 'x-tenant-id': `t${long}`, 'x-request-id': `r${long}` }, chat);
    const [line] = g.audits();
    expect(line).toMatchObject({ code: 'bad_request' });
    expect(String(line!['tenant']).length).toBeLessThanOrEqual(129);
    expect(String(line!['client_request_id']).length).toBeLessThanOrEqual(129);
    expect(String(line!['reason']).length).toBeLessThan(400);
    expect(JSON.stringify(line).length).toBeLessThan(1200);
  });
});

describe('JSON nested too deep', () => {
  it('20,000 levels are refused 400 before any processing: one audit line, counted as a refusal, not a route', async () => {
    const g = gate();
    const deep = `{"model":"llama-3-8b","messages":[{"role":"user","content":"hi"}],"x":${'{"a":'.repeat(20_000)}1${'}'.repeat(20_000)}}`;
    const r = await g.send({ 'x-tenant-id': 'acme' }, deep);
    expect(refusal(r)).toMatchObject({ code: 'bad_request', message: expect.stringContaining('more than 64 levels deep') });
    expect(g.audits()).toHaveLength(1);
    // Refused before the decision resolved a tenant: the line names the one the trusted header carries.
    expect(g.audits()[0]).toMatchObject({ tenant: 'acme' });
    const decisions = await g.registry.getSingleMetricAsString('kvgate_decisions_total');
    expect(decisions).toContain('outcome="refuse",code="bad_request"');
    expect(decisions).not.toContain('outcome="route"');
  });
});

describe('media URLs a worker would fetch from inside the mesh', () => {
  it('cloud metadata, a worker side channel or any origin the table does not allow is refused 400: one audit line, counted', async () => {
    const g = gate();
    const urls = ['http://169.254.169.254/latest/meta-data/', 'https://media.example.com/cat.png', 'file:///proc/self/environ'];
    for (const url of urls) {
      const body = JSON.stringify({
        model: 'llama-3-8b',
        messages: [
          {
            role: 'user',
            content: [
              { type: 'text', text: 'what is this?' },
              { type: 'image_url', image_url: { url } },
            ],
          },
        ],
      });
      const r = await g.send({ 'x-tenant-id': 'acme' }, body);
      expect(refusal(r), url).toMatchObject({
        code: 'bad_request',
        message: expect.stringMatching(/^messages\[0\]\.content\[1\]\.image_url: its URL /),
      });
      const reason = r?.immediate_response?.headers?.set_headers?.find((o) => o.header.key === 'x-kvgate-reject-reason')?.header;
      expect(reason?.raw_value === undefined ? reason?.value : Buffer.from(reason.raw_value).toString()).toBe('bad_request');
    }
    expect(g.audits().map((l) => [l['code'], l['tenant']])).toEqual(urls.map(() => ['bad_request', 'acme']));
    expect(await g.registry.getSingleMetricAsString('kvgate_decisions_total')).toContain(
      `kvgate_decisions_total{outcome="refuse",code="bad_request",revision=""} ${urls.length}`,
    );
  });
});

describe('numbers beyond a double', () => {
  it('1e400 in a prompt field (tools, chat_template_kwargs, a message) is refused 400 at the gate, not failed as internal', async () => {
    const g = gate();
    const bodies = [
      `{"model":"llama-3-8b","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"maximum":1e400}}}]}`,
      `{"model":"llama-3-8b","messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"budget":-1e400}}`,
      `{"model":"llama-3-8b","messages":[{"role":"user","content":"hi","weight":1e400}]}`,
      // Outside the prompt fields too: the sidecars refuse any, so the gate must not mint a contract for it.
      `{"model":"llama-3-8b","messages":[{"role":"user","content":"hi"}],"temperature":1e400}`,
    ];
    for (const body of bodies) {
      const r = await g.send({ 'x-tenant-id': 'acme' }, body);
      expect(refusal(r), body).toMatchObject({ code: 'bad_request', message: expect.stringContaining('beyond the range of a double') });
    }
    expect(g.audits().map((l) => l['code'])).toEqual(bodies.map(() => 'bad_request'));
    expect(g.lines.filter((l) => l['level'] === 50)).toEqual([]); // no error line: a client's body is not a gate failure
    expect([...g.inFlight.snapshot().values()].filter((v) => v !== 0)).toEqual([]); // and no worker is left counted busy
  });
});

const headersMsg = (h: Record<string, string>, mode: 'BUFFERED' | 'BUFFERED_PARTIAL' = 'BUFFERED'): WireProcessingRequest => ({
  request: 'request_headers',
  request_headers: {
    headers: {
      headers: Object.entries({
        ':method': 'POST',
        ':path': '/v1/chat/completions',
        'x-session-id': 's1',
        'x-tenant-id': 'acme',
        ...h,
      }).map(([key, v]) => ({ key, raw_value: Buffer.from(v) })),
    },
    end_of_stream: false,
  },
  protocol_config: { request_body_mode: mode },
});
const bodyMsg = (body: string, eos: boolean): WireProcessingRequest => ({
  request: 'request_body',
  request_body: { body: Buffer.from(body), end_of_stream: eos },
});

describe('messages out of the protocol order', () => {
  it('a second request_headers on a routed stream is refused (internal, one audit line); the first hold is still given back', async () => {
    const g = gate();
    const s = g.session();
    await s.onMessage(headersMsg({}));
    const routed = await s.onMessage(bodyMsg(chat, true));
    expect(stamped(routed, 'x-kvgate-group')).not.toBe('');
    const busy = g.inFlight.snapshot().size;
    expect(busy).toBeGreaterThan(0);
    const again = await s.onMessage({ ...headersMsg({}), request_headers: { headers: { headers: [] }, end_of_stream: true } });
    expect(refusal(again)).toMatchObject({ code: 'internal', message: expect.stringContaining('second request_headers') });
    expect(g.audits()).toHaveLength(1);
    expect(g.audits()[0]).toMatchObject({ tenant: 'acme' });
    s.finish();
    // Without the check the second decision's hold replaced the first's, which then stayed taken forever.
    expect([...g.inFlight.snapshot().values()].reduce((a, b) => a + b, 0)).toBe(0);
  });

  it('an unknown message kind is refused with a code, a reason and one audit line, not a bare stream error', async () => {
    const g = gate();
    const s = g.session();
    const r = await s.onMessage({} as WireProcessingRequest);
    expect(refusal(r)).toMatchObject({ code: 'internal', message: expect.stringContaining('unexpected ext_proc message kind') });
    expect(g.audits()).toHaveLength(1);
    expect(g.audits()[0]!['request_id']).toBe(refusal(r)!.request_id);
  });
});

describe('BUFFERED_PARTIAL: a non-final chunk is the whole body only when its length is the content-length', () => {
  it('a complete JSON object padded to the buffer limit, with more to come, is refused 413 and never routed', async () => {
    const g = gate();
    const s = g.session();
    await s.onMessage(headersMsg({}, 'BUFFERED_PARTIAL'));
    const r = await s.onMessage(bodyMsg(`${chat}${' '.repeat(100)}`, false));
    expect(refusal(r)).toMatchObject({ code: 'body_too_large' });
    expect(g.audits()).toHaveLength(1);
    expect(g.audits()[0]).toMatchObject({ tenant: 'acme' });
    s.finish();
  });

  it('a chunk as long as the declared content-length (trailers follow) is routed; a shorter one is refused', async () => {
    const g = gate();
    for (const [declared, routed] of [
      [String(Buffer.byteLength(chat)), true],
      [String(Buffer.byteLength(chat) + 10), false],
      ['0x40', false],
    ] as const) {
      const s = g.session();
      await s.onMessage(headersMsg({ 'content-length': declared }, 'BUFFERED_PARTIAL'));
      const r = await s.onMessage(bodyMsg(chat, false));
      expect(refusal(r)?.code).toBe(routed ? undefined : 'body_too_large');
      s.finish();
    }
  });
});

describe('identities longer than a signed token can carry', () => {
  it('a 20 KB user, tenant or session id is refused 400 before anything is minted: one audit line each', async () => {
    const g = gate();
    const long = 'é'.repeat(20_000);
    const asks = [
      {
        h: { 'x-tenant-id': 'acme' },
        body: JSON.stringify({ model: 'llama-3-8b', messages: [{ role: 'user', content: 'hi' }], user: long }),
      },
      { h: { 'x-tenant-id': `acme${long}` }, body: chat },
      { h: { 'x-tenant-id': 'acme', 'x-session-id': long }, body: chat },
    ];
    for (const a of asks) {
      const r = await g.send(a.h, a.body);
      expect(refusal(r)).toMatchObject({ code: 'bad_request', message: expect.stringContaining('at most 256 bytes') });
      expect(stamped(r, 'x-kvgate-contract')).toBe('');
    }
    expect(g.audits()).toHaveLength(3);
    // At the limit it routes, and the contract it carries is one a verifier accepts.
    const ok = await g.send({ 'x-tenant-id': 'acme', 'x-session-id': 'é'.repeat(128) }, chat);
    expect(refusal(ok)).toBeUndefined();
    expect(stamped(ok, 'x-kvgate-contract').length).toBeLessThanOrEqual(8192);
  });
});
