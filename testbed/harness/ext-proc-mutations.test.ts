/**
 * Header mutations end to end (GetAndSetHeaders and the mutation rules), response-header mutations
 * (GetAndSetHeadersOnResponse, ...BadStatus) and buffered body mutation with the content-length rule.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { WireCommonResponse, WireProcessingRequest } from './ext-proc-messages.js';
import { continueAll, reply, setHeader, type FakeHandler } from './fake-ext-proc.js';
import { ok, request, startScenario, type Scenario } from './testing.js';

let scenario: Scenario | undefined;
afterEach(async () => {
  await scenario?.close();
  scenario = undefined;
});

/** Replies to the first message with `common`, to everything else with CONTINUE. */
function onFirst(common: WireCommonResponse | ((m: WireProcessingRequest) => WireCommonResponse)): FakeHandler {
  return async (s) => {
    const first = await s.recv();
    if (first === null) return;
    s.send(reply(first, typeof common === 'function' ? common(first) : common));
    await continueAll(s);
  };
}

const NO_RESPONSE = { processing_mode: { response_header_mode: 'SKIP' } };

describe('GetAndSetHeaders', () => {
  it('the upstream sees headers set and removed by the processor (raw_value)', async () => {
    scenario = await startScenario({
      filter: NO_RESPONSE,
      handler: onFirst({
        header_mutation: {
          set_headers: [setHeader('x-target-cluster', 'backend_a'), setHeader('x-kvgate-group', 'g1')],
          remove_headers: ['x-client-secret'],
        },
        clear_route_cache: true,
      }),
    });
    expect(ok(await request(scenario.url, { headers: { 'x-client-secret': 's' } })).status).toBe(200);
    const seen = scenario.upstreams['backend_a']?.requests[0]?.headers;
    expect(seen?.['x-kvgate-group']).toBe('g1');
    expect(seen?.['x-client-secret']).toBeUndefined();
  });

  it('value without raw_value arrives upstream as an empty header', async () => {
    scenario = await startScenario({
      filter: NO_RESPONSE,
      handler: onFirst({ header_mutation: { set_headers: [{ header: { key: 'x-only-value', value: 'lost' } }] } }),
    });
    ok(await request(scenario.url, { headers: { 'x-target-cluster': 'backend_a' } }));
    expect(scenario.upstreams['backend_a']?.requests[0]?.headers['x-only-value']).toBe('');
  });

  it('value and raw_value together: 500 with the error as details', async () => {
    scenario = await startScenario({
      filter: NO_RESPONSE,
      handler: onFirst({ header_mutation: { set_headers: [{ header: { key: 'x-both', value: 'a', raw_value: Buffer.from('b') } }] } }),
    });
    expect(ok(await request(scenario.url, { headers: { 'x-target-cluster': 'backend_a' } })).status).toBe(500);
    const [entry] = await scenario.harness.waitForAccessLog(1);
    expect(entry?.responseCodeDetails).toBe('Only_one_of_value_or_raw_value_in_the_HeaderValue_message_should_be_set.');
    expect(scenario.upstreams['backend_a']?.requests).toHaveLength(0);
  });

  it('with send_header_raw_value off: headers go out in `value` (bad bytes as "!"), and `value` is the field read back', async () => {
    let seen: WireProcessingRequest | undefined;
    scenario = await startScenario({
      filter: NO_RESPONSE,
      runtime: { 'envoy.reloadable_features.send_header_raw_value': false },
      handler: onFirst((m) => {
        seen = m;
        return {
          header_mutation: {
            set_headers: [
              { header: { key: 'x-target-cluster', value: 'backend_a' } },
              { header: { key: 'x-from-value', value: 'kept' } },
              setHeader('x-from-raw', 'lost'),
            ],
          },
          clear_route_cache: true,
        };
      }),
    });
    expect(ok(await request(scenario.url, { headers: { 'x-tenant': 't-\xff\xc3\xa9' } })).status).toBe(200);
    const sent = seen?.request_headers?.headers?.headers ?? [];
    expect(sent.every((h) => h.raw_value === undefined && typeof h.value === 'string')).toBe(true);
    // 0xff is no UTF-8 at all: '!'; c3 a9 is é and stays (MessageUtil::sanitizeUtf8String).
    expect(sent.find((h) => h.key === 'x-tenant')?.value).toBe('t-!é');
    const upstream = scenario.upstreams['backend_a']?.requests[0]?.headers;
    expect(upstream?.['x-from-value']).toBe('kept');
    expect(upstream?.['x-from-raw']).toBe('');
  });

  it('x-envoy-*, host and :authority are refused and counted; :path is applied', async () => {
    scenario = await startScenario({
      filter: NO_RESPONSE,
      handler: onFirst({
        header_mutation: {
          set_headers: [
            setHeader('x-envoy-original-dst-host', '127.0.0.1:1'),
            setHeader('host', 'evil.example'),
            setHeader(':authority', 'evil.example'),
            setHeader(':path', '/rewritten'),
          ],
        },
      }),
    });
    ok(await request(scenario.url, { path: '/original', headers: { 'x-target-cluster': 'backend_a' } }));
    const seen = scenario.upstreams['backend_a']?.requests[0];
    expect(seen?.url).toBe('/rewritten');
    expect(seen?.headers.host).toMatch(/^127\.0\.0\.1:\d+$/);
    expect(seen?.headers['x-envoy-original-dst-host']).toBeUndefined();
    expect(scenario.extProcStat('rejected_header_mutations')).toBe(3);
  });

  it('removing :path is refused and counted; the request still goes through', async () => {
    scenario = await startScenario({ filter: NO_RESPONSE, handler: onFirst({ header_mutation: { remove_headers: [':path'] } }) });
    expect(ok(await request(scenario.url, { path: '/keep', headers: { 'x-target-cluster': 'backend_a' } })).status).toBe(200);
    expect(scenario.upstreams['backend_a']?.requests[0]?.url).toBe('/keep');
    expect(scenario.extProcStat('rejected_header_mutations')).toBe(1);
  });

  it('disallow_is_error makes a refused mutation a 500', async () => {
    scenario = await startScenario({
      filter: { ...NO_RESPONSE, mutation_rules: { disallow_is_error: true } },
      handler: onFirst({ header_mutation: { set_headers: [setHeader('x-envoy-foo', '1')] } }),
    });
    expect(ok(await request(scenario.url, { headers: { 'x-target-cluster': 'backend_a' } })).status).toBe(500);
    expect(scenario.extProcStat('rejected_header_mutations')).toBe(1);
  });
});

describe('response headers', () => {
  const onResponse =
    (common: WireCommonResponse): FakeHandler =>
    async (s) => {
      for (let m = await s.recv(); m !== null; m = await s.recv()) s.send(reply(m, m.request === 'response_headers' ? common : {}));
    };

  it('sends :status with the upstream headers and applies :status 201 and header changes downstream', async () => {
    scenario = await startScenario({
      handler: onResponse({
        header_mutation: { set_headers: [setHeader(':status', '201'), setHeader('x-kvgate-group', 'g1')], remove_headers: ['x-upstream'] },
      }),
    });
    const r = ok(await request(scenario.url, { headers: { 'x-target-cluster': 'backend_a' } }));
    expect(r.status).toBe(201);
    expect(r.headers['x-kvgate-group']).toBe('g1');
    expect(r.headers['x-upstream']).toBeUndefined();
    const sent = scenario.extProc.requests().find((m) => m.request === 'response_headers');
    const keys = sent?.response_headers?.headers?.headers?.map((h) => h.key) ?? [];
    expect(keys[0]).toBe(':status');
    expect(keys).toContain('x-upstream');
  });

  it(':status 100 is ignored and counted', async () => {
    scenario = await startScenario({ handler: onResponse({ header_mutation: { set_headers: [setHeader(':status', '100')] } }) });
    expect(ok(await request(scenario.url, { headers: { 'x-target-cluster': 'backend_a' } })).status).toBe(200);
    expect(scenario.extProcStat('rejected_header_mutations')).toBe(1);
  });

  it('router local replies pass through the encode path too (the processor sees response_headers for a 503)', async () => {
    scenario = await startScenario({ handler: onResponse({ header_mutation: { set_headers: [setHeader('x-seen', 'yes')] } }) });
    const r = ok(await request(scenario.url, { headers: { 'x-target-cluster': 'no_such_cluster' } }));
    expect(r.status).toBe(503);
    expect(r.headers['x-seen']).toBe('yes');
  });
});

describe('buffered body mutation', () => {
  const BUFFERED = { processing_mode: { request_body_mode: 'BUFFERED', response_header_mode: 'SKIP' } };
  const onBody =
    (common: WireCommonResponse): FakeHandler =>
    async (s) => {
      for (let m = await s.recv(); m !== null; m = await s.recv()) s.send(reply(m, m.request === 'request_body' ? common : {}));
    };

  it('sends the whole body in one message and holds the headers for the body reply', async () => {
    scenario = await startScenario({
      filter: BUFFERED,
      handler: onBody({
        header_mutation: { set_headers: [setHeader('x-target-cluster', 'backend_b'), setHeader('content-length', '9')] },
        body_mutation: { body: Buffer.from('{"new":1}') },
        clear_route_cache: true,
      }),
    });
    const r = ok(await request(scenario.url, { headers: { 'x-target-cluster': 'backend_a' }, body: '{"model":"llama"}' }));
    expect(JSON.parse(r.body)).toMatchObject({ upstream: 'backend_b', bodyBytes: 9 });
    const seen = scenario.upstreams['backend_b']?.requests[0];
    expect(seen?.body.toString()).toBe('{"new":1}');
    expect(seen?.headers['content-length']).toBe('9');
    const bodyMsg = scenario.extProc.requests().find((m) => m.request === 'request_body');
    expect(Buffer.from(bodyMsg?.request_body?.body ?? []).toString()).toBe('{"model":"llama"}');
    expect(bodyMsg?.request_body?.end_of_stream).toBe(true);
  });

  it('a new body that no longer matches content-length is a 500', async () => {
    scenario = await startScenario({ filter: BUFFERED, handler: onBody({ body_mutation: { body: Buffer.from('short') } }) });
    const r = ok(await request(scenario.url, { headers: { 'x-target-cluster': 'backend_a' }, body: 'a much longer body' }));
    expect(r.status).toBe(500);
    const [entry] = await scenario.harness.waitForAccessLog(1);
    expect(entry?.responseCodeDetails).toBe('mismatch_between_content_length_and_the_length_of_the_mutated_body');
  });

  it('removing content-length in the same reply makes the new body acceptable (sent chunked)', async () => {
    scenario = await startScenario({
      filter: BUFFERED,
      handler: onBody({ header_mutation: { remove_headers: ['content-length'] }, body_mutation: { body: Buffer.from('short') } }),
    });
    expect(ok(await request(scenario.url, { headers: { 'x-target-cluster': 'backend_a' }, body: 'a much longer body' })).status).toBe(200);
    const seen = scenario.upstreams['backend_a']?.requests[0];
    expect(seen?.body.toString()).toBe('short');
    expect(seen?.headers['transfer-encoding']).toBe('chunked');
  });

  it('clear_body empties the body', async () => {
    scenario = await startScenario({
      filter: BUFFERED,
      handler: onBody({ header_mutation: { remove_headers: ['content-length'] }, body_mutation: { clear_body: true } }),
    });
    ok(await request(scenario.url, { headers: { 'x-target-cluster': 'backend_a' }, body: 'gone' }));
    expect(scenario.upstreams['backend_a']?.requests[0]?.body.length).toBe(0);
  });

  // With request_header_mode SKIP the filter never holds the headers: `Filter::onHeaders` (the only place that calls
  // `state.setHeaders`) does not run, decodeHeaders returns Continue and the router starts the upstream request with
  // the route it has. The body reply's header mutation then finds no headers
  // (`ProcessorState::processHeaderMutationIfAvailable`: "Response had header mutations but headers aren't
  // available"), so neither it nor clear_route_cache can change the upstream or its headers. Read in
  // source/extensions/filters/http/ext_proc/ext_proc.cc and processor_state.cc, envoyproxy/envoy main copies in the
  // public code index (the ones with `closeGrpcStreamIfLastRespReceived` and `validateContentLength`).
  it('headers SKIP: a body reply cannot mutate headers or re-route (they went upstream already)', async () => {
    scenario = await startScenario({
      filter: { processing_mode: { request_header_mode: 'SKIP', request_body_mode: 'BUFFERED', response_header_mode: 'SKIP' } },
      handler: onFirst({
        header_mutation: { set_headers: [setHeader('x-target-cluster', 'backend_b'), setHeader('x-from-body', 'yes')] },
        body_mutation: { body: Buffer.from('rewritten, longer than before') },
        clear_route_cache: true,
      }),
    });
    const r = ok(await request(scenario.url, { headers: { 'x-target-cluster': 'backend_a' }, body: 'original' }));
    expect(r.status).toBe(200);
    expect(scenario.extProc.requests().map((m) => m.request)).toEqual(['request_body']);
    expect(scenario.upstreams['backend_b']?.requests).toHaveLength(0);
    const seen = scenario.upstreams['backend_a']?.requests[0];
    expect(seen?.headers['x-from-body']).toBeUndefined();
    // No content-length check either (no headers); Envoy already dropped content-length for BUFFERED + SKIP.
    expect(seen?.body.toString()).toBe('rewritten, longer than before');
    expect(seen?.headers['content-length']).toBeUndefined();
  });

  it('CONTINUE_AND_REPLACE on the headers reply replaces the body, drops content-length and sends no body message', async () => {
    scenario = await startScenario({
      filter: BUFFERED,
      handler: onFirst({
        status: 'CONTINUE_AND_REPLACE',
        body_mutation: { body: Buffer.from('replaced') },
        header_mutation: { set_headers: [setHeader('x-target-cluster', 'backend_a')] },
        clear_route_cache: true,
      }),
    });
    ok(await request(scenario.url, { body: 'original body' }));
    const seen = scenario.upstreams['backend_a']?.requests[0];
    expect(seen?.body.toString()).toBe('replaced');
    expect(seen?.headers['content-length']).toBeUndefined();
    expect(scenario.extProc.requests().map((m) => m.request)).toEqual(['request_headers']);
  });

  it('a body over the buffer limit gets 413 and never reaches the upstream', async () => {
    scenario = await startScenario({ filter: BUFFERED, bufferLimit: 1024, handler: continueAll });
    const r = ok(await request(scenario.url, { headers: { 'x-target-cluster': 'backend_a' }, body: 'x'.repeat(4096) }));
    expect(r.status).toBe(413);
    expect(scenario.upstreams['backend_a']?.requests).toHaveLength(0);
    expect(scenario.stat('http.ingress.downstream_rq_too_large')).toBe(1);
  });

  it('the 413 runs the encode path: with response headers SEND the processor sees :status 413', async () => {
    scenario = await startScenario({
      filter: { processing_mode: { request_body_mode: 'BUFFERED' } },
      bufferLimit: 1024,
      handler: continueAll,
    });
    const r = ok(await request(scenario.url, { headers: { 'x-target-cluster': 'backend_a' }, body: 'x'.repeat(4096) }));
    expect(r.status).toBe(413);
    expect(r.body).toBe('Payload Too Large');
    const sent = scenario.extProc.requests().find((m) => m.request === 'response_headers');
    expect(sent?.response_headers?.headers?.headers?.find((h) => h.key === ':status')?.raw_value?.toString()).toBe('413');
  });

  it('a response body over the limit in BUFFERED mode is a 500 sent directly (no second response_headers)', async () => {
    scenario = await startScenario({
      filter: { processing_mode: { response_body_mode: 'BUFFERED' } },
      bufferLimit: 1024,
      upstreamHandler: (_req, res) => void res.end('z'.repeat(8192)),
      handler: continueAll,
    });
    const r = ok(await request(scenario.url, { headers: { 'x-target-cluster': 'backend_a' } }));
    expect(r.status).toBe(500);
    await scenario.harness.waitForAccessLog(1);
    // request_headers and the upstream's response_headers; the 500 itself is not sent to the processor.
    expect(scenario.extProcStat('stream_msgs_sent')).toBe(2);
    expect(scenario.stat('http.ingress.rs_too_large')).toBe(1);
  });

  it('a body exactly at the limit is fine', async () => {
    scenario = await startScenario({ filter: BUFFERED, bufferLimit: 1024, handler: continueAll });
    expect(ok(await request(scenario.url, { headers: { 'x-target-cluster': 'backend_a' }, body: 'x'.repeat(1024) })).status).toBe(200);
  });

  it('BUFFERED_PARTIAL sends what it has once past the limit (end_of_stream false) and streams the rest', async () => {
    scenario = await startScenario({
      filter: { processing_mode: { request_body_mode: 'BUFFERED_PARTIAL', response_header_mode: 'SKIP' } },
      bufferLimit: 1024,
      handler: continueAll,
    });
    const body = 'y'.repeat(300_000);
    expect(ok(await request(scenario.url, { headers: { 'x-target-cluster': 'backend_a' }, body })).status).toBe(200);
    const msg = scenario.extProc.requests().find((m) => m.request === 'request_body');
    expect(msg?.request_body?.end_of_stream).toBeUndefined();
    expect(msg?.request_body?.body?.length).toBeGreaterThan(1024);
    expect(msg?.request_body?.body?.length).toBeLessThan(body.length);
    const seen = scenario.upstreams['backend_a']?.requests[0];
    expect(seen?.body.length).toBe(body.length);
    // Envoy drops content-length in BUFFERED_PARTIAL mode.
    expect(seen?.headers['content-length']).toBeUndefined();
  });
});
