import * as grpc from '@grpc/grpc-js';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import { extProcClientConstructor } from '../envoy/protos.js';
import type { RouteDecision } from '../decide/types.js';
import type { RawRequestFacts } from '../decide/decide-request.js';
import type { Admission } from './admission.js';
import type { Admitted } from './admission-types.js';
import { createGateMetrics } from './metrics.js';
import { receiveLimitFor, startGateServer, type GateServer } from './server.js';

const route = (req: RawRequestFacts): RouteDecision => ({
  kind: 'route',
  requestId: req.requestId,
  group: {
    id: 'g_test',
    fingerprint: 'f'.repeat(64),
    tenantScope: 'tenant:acme',
    tenant: 'acme',
    model: 'm',
    revision: 'rev-a',
    adapter: null,
  },
  decode: { pool: 'a-decode', cluster: 'a_decode', endpoint: '127.0.0.1:9101' },
  prefill: { pool: 'a-prefill', cluster: 'a_prefill', endpoint: '127.0.0.1:9201' },
  cacheSalt: 'salt123',
  contract: 'kvgate.v1.k1.payload.sig',
  binding: 'kvgate.v1.k1.binding.sig',
  pendingBinding: { token: () => 'kvgate.v1.k1.binding.sig' },
  trace: [],
});

type Msg = Record<string, any>;

async function openStream(port: number, md?: Record<string, string>) {
  const Client = extProcClientConstructor();
  const client = new Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure()) as any;
  const metadata = new grpc.Metadata();
  for (const [k, v] of Object.entries(md ?? {})) metadata.set(k, v);
  const call: grpc.ClientDuplexStream<Msg, Msg> = client.Process(metadata);
  const received: Msg[] = [];
  const waiters: Array<() => void> = [];
  call.on('data', (m: Msg) => {
    received.push(m);
    waiters.shift()?.();
  });
  const status = new Promise<grpc.StatusObject>((resolve) => call.on('status', resolve));
  call.on('error', () => undefined);
  return {
    call,
    client,
    status,
    async next(): Promise<Msg> {
      if (received.length === 0) await new Promise<void>((r) => waiters.push(r));
      return received.shift()!;
    },
    send(m: Msg) {
      call.write(m);
    },
  };
}

const hdrs = (h: Record<string, string>, eos = false) => ({
  request_headers: {
    headers: { headers: Object.entries(h).map(([key, v]) => ({ key, raw_value: Buffer.from(v) })) },
    end_of_stream: eos,
  },
});

const setHeaders = (resp: Msg): Record<string, string> =>
  Object.fromEntries(
    (resp['header_mutation']?.set_headers ?? []).map((s: Msg) => [s.header.key, Buffer.from(s.header.raw_value).toString()]),
  );

describe('gate gRPC server', () => {
  let gate: GateServer | undefined;
  afterEach(() => {
    gate?.close();
    gate = undefined;
  });

  async function start(admission: Admission) {
    gate = await startGateServer({
      admission,
      logger: pino({ level: 'silent' }),
      metrics: createGateMetrics(new Registry()),
      listen: '127.0.0.1:0',
      transport: { kind: 'insecure' },
      drainGraceMs: 2000,
    });
    return gate;
  }

  it('answers headers, then binds on the buffered body: raw_value headers, clear_route_cache, cache_salt body', async () => {
    const seen: RawRequestFacts[] = [];
    const g = await start({
      admit: (req): Admitted => {
        seen.push(req);
        return { decision: route(req), ...(req.body === undefined ? {} : { body: req.body }) };
      },
    });
    const s = await openStream(g.port);
    s.send({
      ...hdrs({
        ':method': 'POST',
        ':path': '/v1/completions',
        'x-request-id': 'r1',
        'x-kvgate-decode-cluster': 'evil',
        'x-kvgate-foo': 'x',
        // llm-d's sidecar routes by this one too (another data-parallel rank's port); kvgate never writes it.
        'x-data-parallel-host-port': '10.9.9.9:8001',
      }),
      protocol_config: { request_body_mode: 'BUFFERED' },
    });
    const r1 = await s.next();
    expect(r1['response']).toBe('request_headers');
    // Forged gate-owned headers are removed already on the headers response.
    expect(r1['request_headers'].response.header_mutation.remove_headers.sort()).toEqual([
      'x-data-parallel-host-port',
      'x-kvgate-decode-cluster',
      'x-kvgate-foo',
    ]);

    const body = JSON.stringify({ model: 'm', prompt: 'hi' });
    s.send({ request_body: { body: Buffer.from(body), end_of_stream: true } });
    const r2 = await s.next();
    expect(r2['response']).toBe('request_body');
    const common = r2['request_body'].response;
    expect(common.clear_route_cache).toBe(true);
    const set = setHeaders(common);
    expect(set['x-kvgate-decode-cluster']).toBe('a_decode');
    expect(set['x-kvgate-decode-endpoint']).toBe('127.0.0.1:9101');
    expect(set['x-kvgate-prefill-cluster']).toBe('a_prefill');
    expect(set['x-kvgate-group']).toBe('g_test');
    // On the public listener the gate mints the request id; the client's 'r1' is never the request's identity.
    expect(set['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
    expect(seen[0]!.requestId).toBe(set['x-request-id']);
    for (const s2 of common.header_mutation.set_headers) {
      expect(s2.header.value ?? '').toBe(''); // raw_value only
      expect(s2.append_action).toBe('OVERWRITE_IF_EXISTS_OR_ADD');
    }
    // x-kvgate-decode-cluster is overwritten, x-kvgate-foo and llm-d's rank header removed.
    expect(common.header_mutation.remove_headers.sort()).toEqual(['x-data-parallel-host-port', 'x-kvgate-foo']);
    const newBody = Buffer.from(common.body_mutation.body).toString();
    expect(JSON.parse(newBody)).toEqual({ model: 'm', prompt: 'hi', cache_salt: 'salt123' });
    expect(set['content-length']).toBe(String(Buffer.byteLength(newBody)));
    expect(seen[0]!.hop).toBeUndefined(); // public listener: gate-owned headers are not trusted

    s.send({ response_headers: { headers: { headers: [{ key: ':status', raw_value: Buffer.from('200') }] } } });
    const r3 = await s.next();
    expect(setHeaders(r3['response_headers'].response)).toMatchObject({
      'x-kvgate-group': 'g_test',
      'x-kvgate-revision': 'rev-a',
      'x-kvgate-binding': 'kvgate.v1.k1.binding.sig',
    });
    s.call.end();
    expect((await s.status).code).toBe(grpc.status.OK);
    s.client.close();
  });

  it('turns a refusal into an ImmediateResponse with the JSON error body and reason header', async () => {
    const g = await start({
      admit: (req) => ({
        decision: { kind: 'refuse', requestId: req.requestId, code: 'kv_params_forbidden', message: 'remove it', trace: [] },
      }),
    });
    const s = await openStream(g.port);
    s.send(hdrs({ ':method': 'POST', ':path': '/v1/completions', 'x-request-id': 'r2' }));
    await s.next();
    s.send({ request_body: { body: Buffer.from('{}'), end_of_stream: true } });
    const r = await s.next();
    const ir = r['immediate_response'];
    expect(ir.status.code).toBe('BadRequest'); // envoy.type.v3.StatusCode, decoded as its enum name
    expect(setHeaders({ header_mutation: ir.headers })).toMatchObject({
      'content-type': 'application/json',
      'x-kvgate-reject-reason': 'kv_params_forbidden',
    });
    const minted = setHeaders({ header_mutation: ir.headers })['x-request-id'];
    expect(minted).not.toBe('r2');
    expect(JSON.parse(Buffer.from(ir.body).toString())).toEqual({
      error: { type: 'kvgate_error', code: 'kv_params_forbidden', message: 'remove it', request_id: minted },
    });
    s.call.end();
    s.client.close();
  });

  it('decides on the headers message when there is no body (GET)', async () => {
    const g = await start({ admit: (req) => ({ decision: route(req) }) });
    const s = await openStream(g.port);
    s.send(hdrs({ ':method': 'GET', ':path': '/v1/models' }, true));
    const r = await s.next();
    expect(setHeaders(r['request_headers'].response)['x-kvgate-decode-cluster']).toBe('a_decode');
    expect(r['request_headers'].response.body_mutation).toBeUndefined();
    s.call.end();
    s.client.close();
  });

  it('refuses when the filter does not buffer the request body (cannot route)', async () => {
    const g = await start({ admit: (req) => ({ decision: route(req) }) });
    const s = await openStream(g.port);
    s.send({ ...hdrs({ ':method': 'POST', ':path': '/v1/completions' }), protocol_config: { request_body_mode: 'STREAMED' } });
    const r = await s.next();
    expect(r['immediate_response'].status.code).toBe('InternalServerError');
    expect(Buffer.from(r['immediate_response'].body).toString()).toContain('request_body_mode BUFFERED');
    s.call.end();
    s.client.close();
  });

  it('decides on a buffered body that trailers follow (end_of_stream false), and refuses trailers before a decision', async () => {
    const seen: RawRequestFacts[] = [];
    const g = await start({ admit: (req) => (seen.push(req), { decision: route(req) }) });
    // BUFFERED with trailers: the whole body arrives with end_of_stream false.
    const s = await openStream(g.port);
    s.send({ ...hdrs({ ':method': 'POST', ':path': '/v1/completions' }), protocol_config: { request_body_mode: 'BUFFERED' } });
    await s.next();
    s.send({ request_body: { body: Buffer.from('{"model":"m"}'), end_of_stream: false } });
    const r = await s.next();
    expect(setHeaders(r['request_body'].response)['x-kvgate-decode-cluster']).toBe('a_decode');
    expect(seen[0]!.bodyTruncated).toBe(false);
    s.send({ request_trailers: { trailers: { headers: [] } } });
    expect((await s.next())['response']).toBe('request_trailers');
    s.call.end();
    s.client.close();
    // Trailers with no decision yet (a body mode that sent none): refused, never passed through undecided.
    const t = await openStream(g.port);
    t.send({ ...hdrs({ ':method': 'POST', ':path': '/v1/completions' }), protocol_config: { request_body_mode: 'BUFFERED' } });
    await t.next();
    t.send({ request_trailers: { trailers: { headers: [] } } });
    const refused = await t.next();
    expect(refused['immediate_response'].status.code).toBe('InternalServerError');
    t.call.end();
    t.client.close();
  });

  it('BUFFERED_PARTIAL: a non-final chunk is the whole body (trailers follow) only when it is as long as the content-length', async () => {
    const seen: RawRequestFacts[] = [];
    const g = await start({ admit: (req) => (seen.push(req), { decision: route(req) }) });
    const whole = '{"model":"m"}';
    for (const [body, length] of [
      ['{"model":"m","prompt":"aaaa', '40'],
      [whole, String(whole.length)],
      [whole, undefined], // parses, but nothing says it is all of it
    ] as const) {
      const s = await openStream(g.port);
      const h = { ':method': 'POST', ':path': '/v1/completions', ...(length === undefined ? {} : { 'content-length': length }) };
      s.send({ ...hdrs(h), protocol_config: { request_body_mode: 'BUFFERED_PARTIAL' } });
      await s.next();
      s.send({ request_body: { body: Buffer.from(body), end_of_stream: false } });
      await s.next();
      s.call.end();
      s.client.close();
    }
    expect(seen.map((r) => r.bodyTruncated)).toEqual([true, false, true]);
  });

  it('an older Envoy that does not announce its mode and streams the body: the first chunk is decided (fail closed)', async () => {
    let decided = 0;
    const g = await start({
      admit: (req) => {
        decided++;
        return { decision: { kind: 'refuse', requestId: req.requestId, code: 'bad_request', message: 'not valid JSON', trace: [] } };
      },
    });
    const s = await openStream(g.port);
    s.send(hdrs({ ':method': 'POST', ':path': '/v1/completions' }));
    expect((await s.next())['response']).toBe('request_headers');
    s.send({ request_body: { body: Buffer.from('{"model":'), end_of_stream: false } });
    expect((await s.next())['immediate_response'].status.code).toBe('BadRequest');
    expect(decided).toBe(1);
    s.call.end();
    s.client.close();
  });

  it('trusts gate-owned headers only on the internal listener', async () => {
    const seen: RawRequestFacts[] = [];
    const g = await start({
      admit: (req) => {
        seen.push(req);
        return { decision: route(req) };
      },
    });
    for (const listener of ['internal', 'public']) {
      const s = await openStream(g.port, { 'x-kvgate-listener': listener });
      s.send(hdrs({ ':method': 'GET', ':path': '/x', 'x-kvgate-contract': 'tok' }, true));
      await s.next();
      s.call.end();
      s.client.close();
    }
    expect(seen[0]!.listener).toBe('internal');
    expect(seen[0]!.hop).toEqual({ contract: 'tok' });
    expect(seen[1]!.listener).toBe('public');
    expect(seen[1]!.hop).toBeUndefined();
  });

  it('answers every message exactly once and in order, even when decisions are slow', async () => {
    const g = await start({
      admit: async (req) => {
        await new Promise((r) => setTimeout(r, 30));
        return { decision: route(req) };
      },
    });
    const s = await openStream(g.port);
    s.send({ ...hdrs({ ':method': 'POST', ':path': '/v1/completions' }), protocol_config: { request_body_mode: 'BUFFERED' } });
    s.send({ request_body: { body: Buffer.from('{"model":"m"}'), end_of_stream: true } });
    s.send({ response_headers: { headers: { headers: [] } } });
    s.send({ response_body: { body: Buffer.from('x'), end_of_stream: true } });
    const kinds = [];
    for (let i = 0; i < 4; i++) kinds.push((await s.next())['response']);
    expect(kinds).toEqual(['request_headers', 'request_body', 'response_headers', 'response_body']);
    s.call.end();
    s.client.close();
  });

  it('releases in-flight accounting once when the stream ends', async () => {
    let released = 0;
    const g = await start({ admit: (req) => ({ decision: route(req), hold: { release: () => released++, served: () => undefined } }) });
    const s = await openStream(g.port);
    s.send(hdrs({ ':method': 'GET', ':path': '/x' }, true));
    await s.next();
    s.call.end();
    await s.status;
    await new Promise((r) => setTimeout(r, 20));
    expect(released).toBe(1);
    expect(g.activeStreams()).toBe(0);
    s.client.close();
  });

  it("accepts a body message up to its receive limit (limits.maxBodyBytes + headroom), past grpc-js's 4 MiB default", async () => {
    const seen: number[] = [];
    gate = await startGateServer({
      admission: { admit: (req) => (seen.push(req.body?.byteLength ?? -1), { decision: route(req) }) },
      logger: pino({ level: 'silent' }),
      metrics: createGateMetrics(new Registry()),
      listen: '127.0.0.1:0',
      transport: { kind: 'insecure' },
      maxReceiveMessageBytes: receiveLimitFor(6 * 1024 * 1024),
    });
    const s = await openStream(gate.port);
    s.send({ ...hdrs({ ':method': 'POST', ':path': '/v1/completions' }), protocol_config: { request_body_mode: 'BUFFERED' } });
    await s.next();
    const big = Buffer.alloc(5 * 1024 * 1024, 0x20);
    s.send({ request_body: { body: big, end_of_stream: true } });
    expect((await s.next())['response']).toBe('request_body');
    expect(seen).toEqual([big.length]);
    expect(receiveLimitFor(1024)).toBe(4 * 1024 * 1024);
    s.call.end();
    s.client.close();
  });

  it('FULL_DUPLEX_STREAMED: holds the headers, collects the chunks, then answers headers and the whole body as one streamed_response', async () => {
    const seen: string[] = [];
    gate = await startGateServer({
      admission: {
        admit: (req): Admitted => {
          seen.push(Buffer.from(req.body ?? []).toString());
          if (req.bodyTruncated === true)
            return { decision: { kind: 'refuse', requestId: req.requestId, code: 'body_too_large', message: 'too large', trace: [] } };
          return { decision: route(req), ...(req.body === undefined ? {} : { body: req.body }) };
        },
      },
      logger: pino({ level: 'silent' }),
      metrics: createGateMetrics(new Registry()),
      listen: '127.0.0.1:0',
      transport: { kind: 'insecure' },
      maxBodyBytes: () => 64,
    });
    const s = await openStream(gate.port);
    s.send({
      ...hdrs({ ':method': 'POST', ':path': '/v1/completions', 'content-length': '30', 'x-kvgate-foo': 'forged' }),
      protocol_config: { request_body_mode: 'FULL_DUPLEX_STREAMED' },
    });
    s.send({ request_body: { body: Buffer.from('{"seed": 9007199254740993,'), end_of_stream: false } });
    s.send({ request_body: { body: Buffer.from(' "model":"m"}'), end_of_stream: true } });
    const h = await s.next();
    expect(h['response']).toBe('request_headers');
    const stamped = setHeaders(h['request_headers'].response);
    expect(stamped['x-kvgate-decode-cluster']).toBe('a_decode');
    expect(stamped['content-length']).toBeUndefined(); // Envoy streams the body on without one
    expect(h['request_headers'].response.clear_route_cache).toBe(true);
    expect(h['request_headers'].response.header_mutation.remove_headers).toEqual(['x-kvgate-foo']);
    expect(h['request_headers'].response.body_mutation).toBeUndefined();
    const b = await s.next();
    expect(b['response']).toBe('request_body');
    const streamed = b['request_body'].response.body_mutation.streamed_response;
    expect(streamed.end_of_stream).toBe(true);
    expect(Buffer.from(streamed.body).toString()).toBe('{"seed": 9007199254740993, "model":"m","cache_salt":"salt123"}');
    expect(seen).toEqual(['{"seed": 9007199254740993, "model":"m"}']);
    // Envoy's empty end_of_stream chunk come again (a filter ahead of ext_proc resuming, 1.35 to 1.39): unanswered,
    // since a plain answer is spurious in this mode (a 500) and a streamed one would add to an ended body. The next
    // answer is the response headers'.
    s.send({ request_body: { end_of_stream: true } });
    s.send({ response_headers: { headers: { headers: [{ key: ':status', raw_value: Buffer.from('200') }] } } });
    expect((await s.next())['response']).toBe('response_headers');
    s.call.end();
    s.client.close();
    // A body past limits.maxBodyBytes is refused as soon as it passes the limit: 413, nothing else collected.
    const big = await openStream(gate.port);
    big.send({
      ...hdrs({ ':method': 'POST', ':path': '/v1/completions' }),
      protocol_config: { request_body_mode: 'FULL_DUPLEX_STREAMED' },
    });
    big.send({ request_body: { body: Buffer.alloc(65, 0x20), end_of_stream: false } });
    const refused = await big.next();
    expect(refused['immediate_response'].status.code).toBe('PayloadTooLarge');
    expect(seen).toHaveLength(2);
    big.call.end();
    big.client.close();
  });

  it('FULL_DUPLEX_STREAMED with trailers and a streamed response: decides at the trailers, streams every response chunk back', async () => {
    gate = await startGateServer({
      admission: { admit: (req): Admitted => ({ decision: route(req), ...(req.body === undefined ? {} : { body: req.body }) }) },
      logger: pino({ level: 'silent' }),
      metrics: createGateMetrics(new Registry()),
      listen: '127.0.0.1:0',
      transport: { kind: 'insecure' },
    });
    const s = await openStream(gate.port);
    const duplex = { request_body_mode: 'FULL_DUPLEX_STREAMED', response_body_mode: 'FULL_DUPLEX_STREAMED' };
    s.send({ ...hdrs({ ':method': 'POST', ':path': '/v1/completions' }), protocol_config: duplex });
    s.send({ request_body: { body: Buffer.from('{"model":"m"}'), end_of_stream: false } });
    s.send({ request_trailers: { trailers: { headers: [{ key: 'x-checksum', raw_value: Buffer.from('1') }] } } });
    const h = await s.next();
    expect(setHeaders(h['request_headers'].response)['x-kvgate-decode-cluster']).toBe('a_decode');
    const b = await s.next();
    const chunk = b['request_body'].response.body_mutation.streamed_response;
    expect(Buffer.from(chunk.body).toString()).toBe('{"model":"m","cache_salt":"salt123"}');
    expect(chunk.end_of_stream ?? false).toBe(false); // the trailers answer ends the body, not this chunk
    expect((await s.next())['response']).toBe('request_trailers');
    s.send({ response_headers: { headers: { headers: [{ key: ':status', raw_value: Buffer.from('200') }] } } });
    expect((await s.next())['response']).toBe('response_headers');
    s.send({ response_body: { body: Buffer.from('data: 1\n\n'), end_of_stream: false } });
    s.send({ response_body: { end_of_stream: true } });
    const r1 = (await s.next())['response_body'].response.body_mutation.streamed_response;
    const r2 = (await s.next())['response_body'].response.body_mutation.streamed_response;
    expect(Buffer.from(r1.body).toString()).toBe('data: 1\n\n');
    expect(r1.end_of_stream ?? false).toBe(false);
    expect(r2.end_of_stream).toBe(true);
    // The response's end_of_stream chunk come again: unanswered too (the trailers answer comes next).
    s.send({ response_body: { end_of_stream: true } });
    s.send({ response_trailers: { trailers: { headers: [] } } });
    expect((await s.next())['response']).toBe('response_trailers');
    s.call.end();
    s.client.close();
  });

  it('drains without cutting a generation: settled streams end OK at once, decided ones OK at the grace, only unanswered ones cancelled', async () => {
    const never = new Promise<Admitted>(() => undefined);
    gate = await startGateServer({
      admission: { admit: (req) => (req.path === '/hang' ? never : { decision: route(req) }) },
      logger: pino({ level: 'silent' }),
      metrics: createGateMetrics(new Registry()),
      listen: '127.0.0.1:0',
      transport: { kind: 'insecure' },
      drainGraceMs: 300,
    });
    const g = gate;
    // A: routed, and its response headers answered (a generation streaming on Envoy 1.36, whose stream stays open).
    const a = await openStream(g.port);
    a.send(hdrs({ ':method': 'GET', ':path': '/a' }, true));
    await a.next();
    a.send({ response_headers: { headers: { headers: [{ key: ':status', raw_value: Buffer.from('200') }] } } });
    expect(setHeaders((await a.next())['response_headers'].response)['x-kvgate-binding']).toBeDefined();
    // B: routed, its response not started yet (a long prefill): it gets the response stamps if they come in time.
    const b = await openStream(g.port);
    b.send(hdrs({ ':method': 'GET', ':path': '/b' }, true));
    await b.next();
    // C: a message the gate has not answered.
    const c = await openStream(g.port);
    c.send(hdrs({ ':method': 'GET', ':path': '/hang' }, true));
    await new Promise((r) => setTimeout(r, 50));
    const started = Date.now();
    const drained = g.drain();
    expect((await a.status).code).toBe(grpc.status.OK);
    expect(Date.now() - started).toBeLessThan(300); // at once, not at the end of the grace period
    await drained;
    expect((await b.status).code).toBe(grpc.status.OK);
    expect((await c.status).code).not.toBe(grpc.status.OK);
    expect(g.activeStreams()).toBe(0);
    for (const s of [a, b, c]) s.client.close();
  });

  it('audits each request a drain or a gate failure refuses, once: an undecided stream cancelled at the grace, a thrown answer', async () => {
    const lines: Record<string, unknown>[] = [];
    const sink = { write: (l: string) => void lines.push(JSON.parse(l) as Record<string, unknown>) };
    const never = new Promise<Admitted>(() => undefined);
    gate = await startGateServer({
      // /bad: a route whose body cannot be stamped (the rewrite throws), the gate's own failure.
      admission: {
        admit: (req) =>
          req.path === '/hang'
            ? never
            : req.path === '/bad'
              ? { decision: route(req), body: Buffer.from('[1]') }
              : { decision: route(req) },
      },
      logger: pino({ level: 'info' }, sink),
      metrics: createGateMetrics(new Registry()),
      listen: '127.0.0.1:0',
      transport: { kind: 'insecure' },
      drainGraceMs: 200,
      // The tenant these requests were never decided under is still named on their audit lines, from their headers.
      tenancy: () => ({ source: { header: 'x-tenant' }, required: false, prefixScope: 'tenant' }),
    });
    const g = gate;
    const bad = await openStream(g.port);
    bad.send({
      ...hdrs({ ':method': 'POST', ':path': '/bad', 'x-tenant': 'acme' }),
      protocol_config: { request_body_mode: 'BUFFERED' },
    });
    await bad.next();
    bad.send({ request_body: { body: Buffer.from('{}'), end_of_stream: true } });
    expect((await bad.status).code).toBe(grpc.status.INTERNAL);
    const routed = await openStream(g.port);
    routed.send(hdrs({ ':method': 'GET', ':path': '/a' }, true));
    await routed.next();
    const hung = await openStream(g.port);
    hung.send(hdrs({ ':method': 'GET', ':path': '/hang', 'x-request-id': 'client-hung-1', 'x-tenant': 'globex' }, true));
    const idle = await openStream(g.port); // no request on it yet: nothing to audit
    await new Promise((r) => setTimeout(r, 50));
    await g.drain();
    expect((await hung.status).code).toBe(grpc.status.UNAVAILABLE);
    const audits = lines.filter((l) => l['audit'] === 'refusal');
    expect(audits.map((l) => [l['code'], typeof l['request_id'], typeof l['reason'], l['tenant']])).toEqual([
      ['internal', 'string', 'string', 'acme'],
      ['draining', 'string', 'string', 'globex'],
    ]);
    // Joinable to the client's own id too, like every other audit line of a public request.
    expect(audits[1]).toMatchObject({
      listener: 'public',
      client_request_id: 'client-hung-1',
      reason: expect.stringMatching(/drain\.graceMs/),
    });
    for (const s of [bad, routed, hung, idle]) s.client.close();
  });

  it('a second signal (close) cuts no generation either: decided streams end OK, only undecided ones are cancelled, audited', async () => {
    const lines: Record<string, unknown>[] = [];
    const sink = { write: (l: string) => void lines.push(JSON.parse(l) as Record<string, unknown>) };
    const never = new Promise<Admitted>(() => undefined);
    gate = await startGateServer({
      admission: { admit: (req) => (req.path === '/hang' ? never : { decision: route(req) }) },
      logger: pino({ level: 'info' }, sink),
      metrics: createGateMetrics(new Registry()),
      listen: '127.0.0.1:0',
      transport: { kind: 'insecure' },
      drainGraceMs: 60_000,
      drainAnnounceMs: 60_000,
    });
    const g = gate;
    // A: a generation streaming on Envoy 1.36 (its stream stays open); a cancel would reset the client's response.
    const a = await openStream(g.port);
    a.send(hdrs({ ':method': 'GET', ':path': '/a' }, true));
    await a.next();
    a.send({ response_headers: { headers: { headers: [{ key: ':status', raw_value: Buffer.from('200') }] } } });
    await a.next();
    // B: routed, its response not started yet.
    const b = await openStream(g.port);
    b.send(hdrs({ ':method': 'GET', ':path': '/b' }, true));
    await b.next();
    // C: not decided (queued): nothing of it reached a worker.
    const c = await openStream(g.port);
    c.send(hdrs({ ':method': 'GET', ':path': '/hang' }, true));
    await new Promise((r) => setTimeout(r, 50));
    // SIGTERM starts a drain still in its announce window; the second signal closes.
    void g.drain();
    await g.close();
    expect((await a.status).code).toBe(grpc.status.OK);
    expect((await b.status).code).toBe(grpc.status.OK);
    expect((await c.status).code).toBe(grpc.status.UNAVAILABLE);
    expect(g.activeStreams()).toBe(0);
    const audits = lines.filter((l) => l['audit'] === 'refusal');
    expect(audits.map((l) => l['code'])).toEqual(['draining']);
    expect(audits[0]).toMatchObject({ reason: expect.stringMatching(/second signal/) });
    for (const s of [a, b, c]) s.client.close();
  });

  it('drains a FULL_DUPLEX_STREAMED response: OK once its body is over, cancelled at the grace if it is not', async () => {
    gate = await startGateServer({
      admission: { admit: (req): Admitted => ({ decision: route(req) }) },
      logger: pino({ level: 'silent' }),
      metrics: createGateMetrics(new Registry()),
      listen: '127.0.0.1:0',
      transport: { kind: 'insecure' },
      drainGraceMs: 300,
    });
    const g = gate;
    const open = async () => {
      const s = await openStream(g.port);
      s.send({ ...hdrs({ ':method': 'GET', ':path': '/a' }, true), protocol_config: { response_body_mode: 'FULL_DUPLEX_STREAMED' } });
      await s.next();
      s.send({ response_headers: { headers: { headers: [{ key: ':status', raw_value: Buffer.from('200') }] } } });
      await s.next();
      s.send({ response_body: { body: Buffer.from('data: 1\n\n') } });
      await s.next();
      return s;
    };
    const finishing = await open();
    const stuck = await open();
    const drained = g.drain();
    await new Promise((r) => setTimeout(r, 50)); // both are routed and mid-body: neither ends OK now
    finishing.send({ response_body: { end_of_stream: true } });
    expect((await finishing.next())['response_body'].response.body_mutation.streamed_response.end_of_stream).toBe(true);
    expect((await finishing.status).code).toBe(grpc.status.OK);
    await drained;
    expect((await stuck.status).code).not.toBe(grpc.status.OK); // never an OK close with the body half-way
    for (const s of [finishing, stuck]) s.client.close();
  });

  it('drains: health NOT_SERVING, a stream in flight finishes, then the server stops', async () => {
    const g = await start({ admit: (req) => ({ decision: route(req) }) });
    const s = await openStream(g.port);
    s.send({ ...hdrs({ ':method': 'POST', ':path': '/v1/completions' }), protocol_config: { request_body_mode: 'BUFFERED' } });
    await s.next();
    const drained = g.drain();
    // The stream in flight still gets its answer.
    s.send({ request_body: { body: Buffer.from('{"model":"m"}'), end_of_stream: true } });
    expect((await s.next())['response']).toBe('request_body');
    s.call.end();
    await drained;
    expect(g.activeStreams()).toBe(0);
    s.client.close();
  });
});
