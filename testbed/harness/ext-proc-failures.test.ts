/**
 * Failure behaviour (docs/envoy-ext-proc.md §9) and the reply types that end or reshape processing:
 * ImmediateResponse, message_timeout and override_message_timeout, spurious replies, errors after the response
 * started, dynamic metadata, mode_override.
 */
import http from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { toStruct } from './ext-proc-messages.js';
import { continueAll, reply, setHeader, type FakeHandler } from './fake-ext-proc.js';
import { ok, request, startScenario, type Scenario } from './testing.js';

let scenario: Scenario | undefined;
afterEach(async () => {
  await scenario?.close();
  scenario = undefined;
});

const TO_A = { 'x-target-cluster': 'backend_a' };
const NO_RESPONSE = { processing_mode: { response_header_mode: 'SKIP' } };
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe('ImmediateResponse', () => {
  const refusal = {
    immediate_response: {
      status: { code: 'Conflict' },
      headers: { set_headers: [setHeader('content-type', 'application/json'), setHeader('x-kvgate-reject-reason', 'mixed_revision')] },
      body: Buffer.from('{"error":{"type":"kvgate_error","code":"mixed_revision"}}'),
      details: 'kvgate refused mixed revision',
    },
  };

  it('becomes the local reply: status, headers, JSON body, details; the upstream is never called', async () => {
    scenario = await startScenario({
      handler: async (s) => {
        await s.recv();
        s.send(refusal);
      },
    });
    const r = ok(await request(scenario.url, { headers: TO_A, body: '{}' }));
    expect(r.status).toBe(409);
    expect(r.headers['content-type']).toBe('application/json');
    expect(r.headers['x-kvgate-reject-reason']).toBe('mixed_revision');
    expect(JSON.parse(r.body)).toEqual({ error: { type: 'kvgate_error', code: 'mixed_revision' } });
    expect(scenario.upstreams['backend_a']?.requests).toHaveLength(0);
    const [entry] = await scenario.harness.waitForAccessLog(1);
    expect(entry?.responseCodeDetails).toBe('kvgate_refused_mixed_revision');
    expect(scenario.extProc.requests().map((m) => m.request)).toEqual(['request_headers']);
  });

  it('a text body without headers is text/plain; a status below 200 becomes 200; later messages are ignored', async () => {
    scenario = await startScenario({
      handler: async (s) => {
        await s.recv();
        s.send({ immediate_response: { status: { code: 'Continue' }, body: Buffer.from('hi') } });
        s.send({ immediate_response: { status: { code: 'BadRequest' } } });
      },
    });
    const r = ok(await request(scenario.url, { headers: TO_A }));
    expect(r.status).toBe(200);
    expect(r.headers['content-type']).toBe('text/plain');
    expect(r.body).toBe('hi');
    expect(scenario.extProcStat('stream_msgs_received')).toBe(1);
  });

  it('with disable_immediate_response it is a spurious message (500)', async () => {
    scenario = await startScenario({
      filter: { disable_immediate_response: true },
      handler: async (s) => {
        await s.recv();
        s.send(refusal);
      },
    });
    expect(ok(await request(scenario.url, { headers: TO_A })).status).toBe(500);
    expect(scenario.extProcStat('spurious_msgs_received')).toBe(1);
  });

  it('works on the response path too (replaces the upstream response)', async () => {
    scenario = await startScenario({
      handler: async (s) => {
        for (let m = await s.recv(); m !== null; m = await s.recv()) {
          s.send(
            m.request === 'response_headers'
              ? { immediate_response: { status: { code: 'ServiceUnavailable' }, body: Buffer.from('nope') } }
              : reply(m),
          );
        }
      },
    });
    const r = ok(await request(scenario.url, { headers: TO_A }));
    expect(r.status).toBe(503);
    expect(r.body).toBe('nope');
    expect(scenario.upstreams['backend_a']?.requests).toHaveLength(1);
  });
});

describe('message_timeout', () => {
  const silent: FakeHandler = async (s) => {
    await s.recv();
  };

  it('no reply within the default 200 ms: 504 ext_proc_error_per-message_timeout_exceeded', async () => {
    scenario = await startScenario({ handler: silent, envoyDefaultMessageTimeout: true });
    const started = Date.now();
    const r = ok(await request(scenario.url, { headers: TO_A }));
    expect(r.status).toBe(504);
    expect(Date.now() - started).toBeGreaterThanOrEqual(190);
    const [entry] = await scenario.harness.waitForAccessLog(1);
    expect(entry?.responseCodeDetails).toBe('ext_proc_error_per-message_timeout_exceeded');
    expect(scenario.extProcStat('message_timeouts')).toBe(1);
  });

  it('with failure_mode_allow the request continues without the processor', async () => {
    scenario = await startScenario({ filter: { failure_mode_allow: true, message_timeout: '0.050s' }, handler: silent });
    expect(ok(await request(scenario.url, { headers: TO_A })).status).toBe(200);
    expect(scenario.extProcStat('message_timeouts')).toBe(1);
    expect(scenario.extProcStat('failure_mode_allowed')).toBe(1);
  });

  const extendThenAnswer =
    (extendTo: string, answerAfterMs: number): FakeHandler =>
    async (s) => {
      const m = await s.recv();
      if (m === null) return;
      const [sec, frac = '0'] = extendTo.replace('s', '').split('.');
      s.send({ override_message_timeout: { seconds: Number(sec), nanos: Number(frac.padEnd(9, '0')) } });
      await sleep(answerAfterMs);
      s.send(reply(m));
      await continueAll(s);
    };

  it('override_message_timeout within max_message_timeout extends the wait once', async () => {
    scenario = await startScenario({
      filter: { ...NO_RESPONSE, message_timeout: '0.300s', max_message_timeout: '2s' },
      handler: extendThenAnswer('1.500s', 600),
    });
    expect(ok(await request(scenario.url, { headers: TO_A })).status).toBe(200);
    expect(scenario.extProcStat('override_message_timeout_received')).toBe(1);
    expect(scenario.extProcStat('message_timeouts')).toBe(0);
  });

  it('beyond max_message_timeout it is ignored (and the original timer fires)', async () => {
    scenario = await startScenario({
      filter: { ...NO_RESPONSE, message_timeout: '0.300s', max_message_timeout: '1s' },
      handler: extendThenAnswer('3s', 600),
    });
    expect(ok(await request(scenario.url, { headers: TO_A })).status).toBe(504);
    expect(scenario.extProcStat('override_message_timeout_ignored')).toBe(1);
  });

  it('ignored when max_message_timeout is 0 (the default)', async () => {
    scenario = await startScenario({ filter: { ...NO_RESPONSE, message_timeout: '0.500s' }, handler: extendThenAnswer('0.050s', 10) });
    expect(ok(await request(scenario.url, { headers: TO_A })).status).toBe(200);
    expect(scenario.extProcStat('override_message_timeout_ignored')).toBe(1);
    expect(scenario.extProcStat('override_message_timeout_received')).toBe(0);
  });

  it('only the first override per state counts', async () => {
    scenario = await startScenario({
      filter: { ...NO_RESPONSE, message_timeout: '0.300s', max_message_timeout: '1s' },
      handler: async (s) => {
        const m = await s.recv();
        if (m === null) return;
        s.send({ override_message_timeout: { nanos: 300_000_000 } });
        s.send({ override_message_timeout: { nanos: 900_000_000 } });
        await sleep(20);
        s.send(reply(m));
      },
    });
    expect(ok(await request(scenario.url, { headers: TO_A })).status).toBe(200);
    expect(scenario.extProcStat('override_message_timeout_received')).toBe(1);
    expect(scenario.extProcStat('override_message_timeout_ignored')).toBe(1);
  });
});

describe('spurious and late errors', () => {
  it('a reply with the wrong oneof for the state fails closed with 500 (Envoy 1.35+)', async () => {
    scenario = await startScenario({
      filter: { processing_mode: { request_body_mode: 'BUFFERED' } },
      handler: async (s) => {
        const m = await s.recv();
        if (m !== null) s.send({ request_body: { response: {} } });
      },
    });
    const r = ok(await request(scenario.url, { headers: TO_A, body: 'x' }));
    expect(r.status).toBe(500);
    const [entry] = await scenario.harness.waitForAccessLog(1);
    expect(entry?.responseCodeDetails).toBe('spurious_message');
    expect(scenario.extProcStat('spurious_msgs_received')).toBe(1);
  });

  it('with failure_mode_allow a spurious reply is ignored and the request continues', async () => {
    scenario = await startScenario({
      filter: { failure_mode_allow: true },
      handler: async (s) => {
        const m = await s.recv();
        if (m !== null) s.send({ response_trailers: {} });
      },
    });
    expect(ok(await request(scenario.url, { headers: TO_A })).status).toBe(200);
    expect(scenario.extProcStat('failure_mode_allowed')).toBe(1);
  });

  it('an error after the response started resets the downstream stream', async () => {
    let release: () => void = () => undefined;
    const gate = new Promise<void>((r) => (release = r));
    scenario = await startScenario({
      // The upstream streams one event, then waits until the processor has misbehaved.
      upstreamHandler: async (_req, res) => {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write('data: one\n\n');
        await gate;
        res.end('data: two\n\n');
      },
      // Trailer mode SEND keeps the stream open after the response headers, so a late message can still arrive.
      filter: { processing_mode: { response_trailer_mode: 'SEND' } },
      handler: continueAll,
    });
    const outcome = await new Promise<{ first: string; error: string | undefined }>((resolve) => {
      const req = http.request(scenario?.url ?? '', { headers: TO_A, agent: false }, (res) => {
        let first = '';
        res.setEncoding('utf8');
        res.once('data', (c: string) => {
          first = c;
          // The response has started: now a reply nobody asked for.
          scenario?.extProc.streams[0]?.send({ request_headers: { response: {} } });
        });
        res.on('error', (e) => resolve({ first, error: e.message }));
        res.on('aborted', () => resolve({ first, error: 'aborted' }));
        res.on('end', () => resolve({ first, error: undefined }));
      });
      req.on('error', (e) => resolve({ first: '', error: e.message }));
      req.end();
    });
    release();
    expect(outcome.first).toContain('data: one');
    expect(outcome.error).toBeDefined();
    const [entry] = await scenario.harness.waitForAccessLog(1);
    expect(entry?.reset).toBe(true);
    expect(entry?.responseCodeDetails).toBe('spurious_message');
    expect(scenario.extProcStat('spurious_msgs_received')).toBe(1);
  });
});

// With `ext_proc_graceful_grpc_close` on (the shipped envoy/envoy.yaml turns it on) only the "finished" closes are
// graceful: `Filter::closeStreamMaybeGraceful()` runs from onDestroy, the last-response close, the encodeHeaders close
// and an ImmediateResponse. A message timeout, a spurious reply and a mutation error call `Filter::closeStream()`,
// i.e. `ExternalProcessorStreamImpl::close()`: END_STREAM then RST_STREAM at once (client_impl.cc). Read in
// source/extensions/filters/http/ext_proc/ext_proc.cc and client_impl.cc, envoyproxy/envoy main copies in the public
// code index (ext_proc.cc: the one with `closeGrpcStreamIfLastRespReceived`).
describe('graceful close applies to finished streams only', () => {
  const GRACEFUL = { 'envoy.reloadable_features.ext_proc_graceful_grpc_close': true };

  /** A processor that never ends its side; reports how the client side ended. */
  function watch(
    onFirst: (s: Parameters<FakeHandler>[0], m: NonNullable<Awaited<ReturnType<Parameters<FakeHandler>[0]['recv']>>>) => void,
  ) {
    let stream: Parameters<FakeHandler>[0] | undefined;
    const handler: FakeHandler = async (s) => {
      stream = s;
      const m = await s.recv();
      if (m !== null) onFirst(s, m);
      await s.ended;
    };
    return { handler, cancelled: () => stream?.wasCancelled() ?? false };
  }

  it('a message timeout resets the stream at once, graceful guard or not', async () => {
    const w = watch(() => undefined);
    scenario = await startScenario({ filter: { message_timeout: '0.050s' }, runtime: GRACEFUL, handler: w.handler });
    expect(ok(await request(scenario.url, { headers: TO_A })).status).toBe(504);
    await sleep(300); // well under the 1 s remote-close wait a graceful close would give
    expect(w.cancelled()).toBe(true);
  });

  it('a spurious reply resets it at once too', async () => {
    const w = watch((s) => s.send({ response_headers: { response: {} } }));
    scenario = await startScenario({ filter: NO_RESPONSE, runtime: GRACEFUL, handler: w.handler });
    expect(ok(await request(scenario.url, { headers: TO_A })).status).toBe(500);
    await sleep(300);
    expect(w.cancelled()).toBe(true);
  });

  it('an ImmediateResponse closes gracefully: half-close, no reset while the processor finishes', async () => {
    const w = watch((s) => s.send({ immediate_response: { status: { code: 'TooManyRequests' } } }));
    scenario = await startScenario({ filter: NO_RESPONSE, runtime: GRACEFUL, handler: w.handler });
    expect(ok(await request(scenario.url, { headers: TO_A })).status).toBe(429);
    await sleep(300);
    expect(w.cancelled()).toBe(false);
  });
});

describe('dynamic metadata', () => {
  it('is kept only for receiving namespaces and forwarded to later messages for forwarding namespaces', async () => {
    scenario = await startScenario({
      filter: {
        processing_mode: { request_body_mode: 'BUFFERED', response_header_mode: 'SKIP' },
        metadata_options: { receiving_namespaces: { untyped: ['envoy.lb'] }, forwarding_namespaces: { untyped: ['envoy.lb', 'other'] } },
      },
      handler: async (s) => {
        const m = await s.recv();
        if (m === null) return;
        s.send(
          reply(
            m,
            {},
            { dynamic_metadata: toStruct({ 'envoy.lb': { 'x-gateway-destination-endpoint': '10.0.0.1:9090' }, other: { dropped: true } }) },
          ),
        );
        await continueAll(s);
      },
    });
    ok(await request(scenario.url, { headers: TO_A, body: 'b' }));
    const [entry] = await scenario.harness.waitForAccessLog(1);
    expect(entry?.dynamicMetadata).toEqual({ 'envoy.lb': { 'x-gateway-destination-endpoint': '10.0.0.1:9090' } });
    const [first, second] = scenario.extProc.requests();
    expect(first?.metadata_context?.filter_metadata ?? {}).toEqual({});
    expect(Object.keys(second?.metadata_context?.filter_metadata ?? {})).toEqual(['envoy.lb']);
  });

  it('is dropped entirely without receiving namespaces', async () => {
    scenario = await startScenario({
      filter: NO_RESPONSE,
      handler: async (s) => {
        const m = await s.recv();
        if (m !== null) s.send(reply(m, {}, { dynamic_metadata: toStruct({ 'envoy.lb': { a: 'b' } }) }));
      },
    });
    ok(await request(scenario.url, { headers: TO_A }));
    const [entry] = await scenario.harness.waitForAccessLog(1);
    expect(entry?.dynamicMetadata).toEqual({});
  });
});

describe('mode_override', () => {
  const override: FakeHandler = async (s) => {
    const m = await s.recv();
    if (m === null) return;
    s.send(reply(m, {}, { mode_override: { request_body_mode: 'BUFFERED', response_header_mode: 'SKIP' } }));
    await continueAll(s);
  };

  it('applies in the headers state when allow_mode_override is set', async () => {
    scenario = await startScenario({ filter: { allow_mode_override: true }, handler: override });
    ok(await request(scenario.url, { headers: TO_A, body: 'body' }));
    expect(scenario.extProc.requests().map((m) => m.request)).toEqual(['request_headers', 'request_body']);
  });

  it('is ignored without allow_mode_override', async () => {
    scenario = await startScenario({ handler: override });
    ok(await request(scenario.url, { headers: TO_A, body: 'body' }));
    expect(scenario.extProc.requests().map((m) => m.request)).toEqual(['request_headers', 'response_headers']);
  });
});

describe('attributes and trailers', () => {
  it('sends request_attributes on the first request-direction message only', async () => {
    scenario = await startScenario({
      filter: { request_attributes: ['request.path', 'request.method', 'source.port'], processing_mode: { request_body_mode: 'BUFFERED' } },
      handler: continueAll,
    });
    ok(await request(scenario.url, { path: '/v1/completions', headers: TO_A, body: 'b' }));
    const [first, second] = scenario.extProc.requests();
    const attrs = first?.attributes?.['envoy.filters.http.ext_proc']?.fields;
    expect(attrs?.['request.path']?.stringValue).toBe('/v1/completions');
    expect(attrs?.['request.method']?.stringValue).toBe('POST');
    expect(attrs?.['source.port']?.numberValue).toBeGreaterThan(0);
    expect(second?.attributes ?? {}).toEqual({});
  });
});
