/**
 * FULL_DUPLEX_STREAMED, as Envoy runs it (ext-proc-duplex.ts, docs/envoy-ext-proc.md §14): load-time checks, body
 * chunks sent as they arrive while the headers are held, the empty end-of-stream chunk or the trailers message,
 * no message timer, only `streamed_response` body answers taken, the processor's stream injected as the body,
 * CONTINUE_AND_REPLACE, the response direction, and the 1.37 stream close after the body's last chunk.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { loadEnvoyConfig } from './envoy-config.js';
import type { FakeExtProcStream } from './fake-ext-proc.js';
import { setHeader } from './fake-ext-proc.js';
import type { WireProcessingRequest, WireProcessingResponse } from './ext-proc-messages.js';
import { chunkedRequest, ok, request, scenarioYaml, startScenario, type HttpResult, type Scenario } from './testing.js';

let scenario: Scenario | undefined;
afterEach(async () => {
  await scenario?.close();
  scenario = undefined;
});

const DUPLEX = { request_body_mode: 'FULL_DUPLEX_STREAMED', request_trailer_mode: 'SEND', response_header_mode: 'SKIP' };
const TO_A = { 'x-target-cluster': 'backend_a' };

const streamed = (kind: 'request_body' | 'response_body', body: string, eos: boolean): WireProcessingResponse => ({
  [kind]: { response: { body_mutation: { streamed_response: { body: Buffer.from(body), end_of_stream: eos } } } },
});
const headersReply = (extra: Record<string, unknown> = {}): WireProcessingResponse => ({ request_headers: { response: extra } });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Reads messages until (and including) one that satisfies `last`. */
async function recvUntil(s: FakeExtProcStream, last: (m: WireProcessingRequest) => boolean): Promise<WireProcessingRequest[]> {
  const out: WireProcessingRequest[] = [];
  for (let m = await s.recv(); m !== null; m = await s.recv()) {
    out.push(m);
    if (last(m)) break;
  }
  return out;
}
const bodyEnd = (m: WireProcessingRequest) => m.request_body?.end_of_stream === true || m.request === 'request_trailers';
const text = (m: WireProcessingRequest) => Buffer.from(m.request_body?.body ?? new Uint8Array()).toString();

/** A chunked POST to backend_a written in `parts` (testing.ts `chunkedRequest`). */
async function chunkedPost(url: string, parts: readonly (string | Buffer)[], trailers?: Record<string, string>): Promise<HttpResult> {
  return ok(await chunkedRequest(url, parts, { headers: TO_A, ...(trailers ? { trailers } : {}) }));
}

describe('FULL_DUPLEX_STREAMED: load-time checks (config.cc verifyProcessingModeConfig)', () => {
  const load = (filter: Record<string, unknown>) =>
    loadEnvoyConfig(scenarioYaml({ filter }), { listenerPorts: { public: 0 }, clusterEndpoints: { ext_proc: ['127.0.0.1:1'] } });

  it('refuses a duplex body without trailer mode SEND, with Envoy’s words; a duplex filter may fail open (1.36+)', () => {
    const noTrailers = load({ processing_mode: { request_body_mode: 'FULL_DUPLEX_STREAMED' } });
    expect(noTrailers.ok).toBe(false);
    expect(JSON.stringify(noTrailers)).toContain('then the request_trailer_mode has to be set to SEND');
    const respNoTrailers = load({ processing_mode: { response_body_mode: 'FULL_DUPLEX_STREAMED' } });
    expect(JSON.stringify(respNoTrailers)).toContain('then the response_trailer_mode has to be set to SEND');
    // The refusal (#39740) was reverted before 1.36 (#40503; changelogs/1.36.0.yaml: "Reverted #39740 to re-enable
    // fail_open + FULL_DUPLEX_STREAMED configuration combination"); #41276 then made it fail open only until the
    // first body chunk reaches the filter (`Filter::failureModeAllow()` in ext_proc.cc).
    expect(load({ processing_mode: DUPLEX, failure_mode_allow: true }).ok).toBe(true);
    expect(load({ processing_mode: DUPLEX }).ok).toBe(true);
  });
});

describe('FULL_DUPLEX_STREAMED with failure_mode_allow (Filter::failureModeAllow, envoyproxy/envoy#41276)', () => {
  const failOn = (kind: string) => async (s: FakeExtProcStream) => {
    for (let m = await s.recv(); m !== null; m = await s.recv()) {
      if (m.request === kind) return s.fail(14, 'processor gone');
    }
  };

  it('fails open while no body chunk has reached the filter (a GET: the request goes on without the processor)', async () => {
    scenario = await startScenario({ filter: { processing_mode: DUPLEX, failure_mode_allow: true }, handler: failOn('request_headers') });
    const r = ok(await request(scenario.url, { headers: TO_A }));
    expect(r.status).toBe(200);
    expect(scenario.extProcStat('failure_mode_allowed')).toBe(1);
  });

  it('fails closed once body chunks went to the processor (Envoy kept no copy of them)', async () => {
    scenario = await startScenario({ filter: { processing_mode: DUPLEX, failure_mode_allow: true }, handler: failOn('request_body') });
    const r = await chunkedPost(scenario.url, ['{"model":', '"m"}']);
    expect(r.status).toBe(500);
    expect(scenario.extProcStat('failure_mode_allowed')).toBe(0);
    expect(scenario.upstreams['backend_a']?.requests).toHaveLength(0);
  });
});

describe('FULL_DUPLEX_STREAMED request bodies', () => {
  it('streams chunks while the headers wait, ends with an empty end_of_stream chunk, and forwards only what the processor streams back', async () => {
    let seen: WireProcessingRequest[] = [];
    scenario = await startScenario({
      filter: { processing_mode: DUPLEX, message_timeout: '0.1s' },
      handler: async (s) => {
        seen = await recvUntil(s, bodyEnd);
        await sleep(300); // past message_timeout: no timer runs in this mode
        s.send(headersReply({ header_mutation: { set_headers: [setHeader('x-rewritten', 'yes')] } }));
        s.send(streamed('request_body', '{"model":', false));
        s.send(streamed('request_body', '"m","x":1}', true));
      },
    });
    const r = await chunkedPost(scenario.url, ['{"mo', 'del":"m"', '}']);
    expect(r.status).toBe(200);
    expect(seen.map((m) => m.request)).toEqual(['request_headers', 'request_body', 'request_body', 'request_body', 'request_body']);
    expect(seen[0]?.protocol_config?.request_body_mode).toBe('FULL_DUPLEX_STREAMED');
    expect(seen.slice(1).map(text)).toEqual(['{"mo', 'del":"m"', '}', '']);
    expect(seen.slice(1).map((m) => m.request_body?.end_of_stream === true)).toEqual([false, false, false, true]);
    const up = scenario.upstreams['backend_a']?.requests[0];
    expect(up?.body.toString()).toBe('{"model":"m","x":1}');
    expect(up?.headers['x-rewritten']).toBe('yes');
    expect(up?.headers['content-length']).toBeUndefined();
    expect(scenario.extProcStat('message_timeouts')).toBe(0);
  });

  it('duplexRepeatEndOfStream: the empty end_of_stream chunk comes again once the body ended and the stream is open; unanswered, all is well', async () => {
    let again: WireProcessingRequest | null | undefined;
    scenario = await startScenario({
      filter: { processing_mode: { ...DUPLEX, response_header_mode: 'SEND' } },
      harness: { duplexRepeatEndOfStream: true },
      handler: async (s) => {
        await recvUntil(s, bodyEnd);
        s.send(headersReply());
        s.send(streamed('request_body', '{"model":"m"}', true));
        again = await s.recv();
        const rh = await s.recv(); // the response headers: answered, the duplicate never is
        if (rh !== null) s.send({ response_headers: { response: {} } });
      },
    });
    const r = await chunkedPost(scenario.url, ['{"model":"m"}']);
    expect(r.status).toBe(200);
    expect(again?.request_body).toEqual({ end_of_stream: true });
    expect(scenario.upstreams['backend_a']?.requests[0]?.body.toString()).toBe('{"model":"m"}');
  });

  it('duplexRepeatEndOfStream: a plain answer to the repeated chunk is spurious in this mode, and fails the request', async () => {
    scenario = await startScenario({
      filter: { processing_mode: { ...DUPLEX, response_header_mode: 'SEND' } },
      harness: { duplexRepeatEndOfStream: true },
      upstreamHandler: () => new Promise<void>(() => undefined), // the upstream never answers: the error wins
      handler: async (s) => {
        await recvUntil(s, bodyEnd);
        s.send(headersReply());
        s.send(streamed('request_body', '{"model":"m"}', true));
        if ((await s.recv())?.request_body?.end_of_stream === true) s.send({ request_body: { response: {} } });
      },
    });
    const r = await chunkedRequest(scenario.url, ['{"model":"m"}'], { headers: TO_A });
    expect('error' in r ? r.error : r.status).toBe(500);
    expect(scenario.extProcStat('spurious_msgs_received')).toBe(1);
  });

  it('a headers answer before the body lets the headers go on at once; chunks echoed as they come follow them', async () => {
    let upstreamStartedBeforeBodyEnd: boolean | undefined;
    scenario = await startScenario({
      filter: { processing_mode: DUPLEX },
      handler: async (s) => {
        await s.recv(); // headers
        s.send(headersReply({ header_mutation: { set_headers: [setHeader('x-early', 'yes')] } }));
        for (let m = await s.recv(); m !== null; m = await s.recv()) {
          const eos = m.request_body?.end_of_stream === true;
          // When the body's end arrives, the upstream request has long started (its headers went on at once).
          if (eos) upstreamStartedBeforeBodyEnd = scenario?.stat('cluster.backend_a.upstream_rq_total') === 1;
          s.send(streamed('request_body', text(m).toUpperCase(), eos));
          if (eos) break;
        }
      },
      upstreamHandler: (req, res) => {
        res.writeHead(200, { 'content-length': String(req.body.length) });
        res.end(req.body);
      },
    });
    const r = ok(await chunkedRequest(scenario.url, ['one;', 'two;', 'three'], { headers: TO_A, gapMs: 40 }));
    expect(r.body).toBe('ONE;TWO;THREE');
    expect(scenario.upstreams['backend_a']?.requests[0]?.headers['x-early']).toBe('yes');
    expect(upstreamStartedBeforeBodyEnd).toBe(true);
  });

  it('a body with trailers ends with the trailers message; the trailers reply lets the (mutated) trailers go on', async () => {
    let seen: WireProcessingRequest[] = [];
    scenario = await startScenario({
      filter: { processing_mode: DUPLEX },
      handler: async (s) => {
        seen = await recvUntil(s, bodyEnd);
        s.send(headersReply());
        s.send(streamed('request_body', 'one;two', false));
        s.send({ request_trailers: { header_mutation: { set_headers: [setHeader('x-checksum', 'rewritten')] } } });
      },
    });
    const r = await chunkedPost(scenario.url, ['one;', 'two'], { 'x-checksum': 'original' });
    expect(r.status).toBe(200);
    expect(seen.map((m) => m.request)).toEqual(['request_headers', 'request_body', 'request_body', 'request_trailers']);
    expect(seen.slice(1, 3).every((m) => m.request_body?.end_of_stream !== true)).toBe(true);
    const up = scenario.upstreams['backend_a']?.requests[0];
    expect(up?.body.toString()).toBe('one;two');
    expect(up?.trailers['x-checksum']).toBe('rewritten');
  });

  it('end_of_stream on the streamed body while trailers are due is a protocol error, not a silent loss', async () => {
    scenario = await startScenario({
      filter: { processing_mode: DUPLEX },
      handler: async (s) => {
        await recvUntil(s, bodyEnd);
        s.send(headersReply());
        s.send(streamed('request_body', 'one;two', true));
      },
    });
    const r = await chunkedPost(scenario.url, ['one;', 'two'], { 'x-checksum': 'original' });
    expect(r.status).toBe(500);
    expect(scenario.upstreams['backend_a']?.requests).toHaveLength(0);
  });

  it.each([
    ['a whole-body `body` mutation', { request_body: { response: { body_mutation: { body: Buffer.from('{}') } } } }],
    ['a plain CONTINUE with no body mutation', { request_body: { response: {} } }],
    ['a clear_body mutation', { request_body: { response: { body_mutation: { clear_body: true } } } }],
  ] as const)('%s as a body answer is spurious: fail closed with 500', async (_name, bad) => {
    scenario = await startScenario({
      filter: { processing_mode: DUPLEX },
      handler: async (s) => {
        await recvUntil(s, bodyEnd);
        s.send(headersReply());
        s.send(bad as WireProcessingResponse);
      },
    });
    const r = ok(await request(scenario.url, { headers: TO_A, body: '{"model":"m"}' }));
    expect(r.status).toBe(500);
    expect(scenario.extProcStat('spurious_msgs_received')).toBe(1);
    expect(scenario.upstreams['backend_a']?.requests).toHaveLength(0);
    // handleErrorResponse puts the status message in the details (processor_state.cc handleStreamedBodyCallback).
    const [entry] = await scenario.harness.waitForAccessLog(1);
    expect(entry?.responseCodeDetails).toBe(
      'spurious_message:_Normal_body_mutation_response_is_received_while_body_mode__is_FULL_DUPLEX_STREAMED',
    );
  });

  it('a body answer before the headers answer is spurious: the headers must be answered first', async () => {
    scenario = await startScenario({
      filter: { processing_mode: DUPLEX },
      handler: async (s) => {
        await recvUntil(s, bodyEnd);
        s.send(streamed('request_body', '{"model":"m"}', true));
        s.send(headersReply());
      },
    });
    const r = ok(await request(scenario.url, { headers: TO_A, body: '{"model":"m"}' }));
    expect(r.status).toBe(500);
    expect(scenario.extProcStat('spurious_msgs_received')).toBe(1);
  });

  it('a header mutation on a body answer is not applied: the headers have gone on', async () => {
    scenario = await startScenario({
      filter: { processing_mode: DUPLEX },
      handler: async (s) => {
        await recvUntil(s, bodyEnd);
        s.send(headersReply());
        s.send({
          request_body: {
            response: {
              header_mutation: { set_headers: [setHeader('x-late', 'yes')] },
              body_mutation: { streamed_response: { body: Buffer.from('abc'), end_of_stream: true } },
            },
          },
        });
      },
    });
    ok(await request(scenario.url, { headers: TO_A, body: 'abc' }));
    const up = scenario.upstreams['backend_a']?.requests[0];
    expect(up?.body.toString()).toBe('abc');
    expect(up?.headers['x-late']).toBeUndefined();
  });

  it('CONTINUE_AND_REPLACE on the headers answer replaces the body; the peer’s chunks are drained', async () => {
    scenario = await startScenario({
      filter: { processing_mode: DUPLEX },
      handler: async (s) => {
        await s.recv();
        s.send(headersReply({ status: 'CONTINUE_AND_REPLACE', body_mutation: { body: Buffer.from('replaced') } }));
      },
    });
    const r = await chunkedPost(scenario.url, ['original ', 'body']);
    expect(r.status).toBe(200);
    expect(scenario.upstreams['backend_a']?.requests[0]?.body.toString()).toBe('replaced');
  });

  it('a GET has no body: the headers answer alone lets it go on', async () => {
    scenario = await startScenario({
      filter: { processing_mode: DUPLEX },
      handler: async (s) => {
        const m = await s.recv();
        expect(m?.request_headers?.end_of_stream).toBe(true);
        s.send(headersReply());
      },
    });
    const r = ok(await request(scenario.url, { headers: TO_A }));
    expect(r.status).toBe(200);
    expect(scenario.upstreams['backend_a']?.requests[0]?.headers['transfer-encoding']).toBeUndefined();
  });
});

describe('FULL_DUPLEX_STREAMED response bodies', () => {
  const mode = { ...DUPLEX, response_header_mode: 'SEND', response_body_mode: 'FULL_DUPLEX_STREAMED', response_trailer_mode: 'SEND' };

  it('the client gets what the processor streams back for each response chunk', async () => {
    scenario = await startScenario({
      filter: { processing_mode: mode },
      handler: async (s) => {
        const req = await recvUntil(s, bodyEnd);
        s.send(headersReply());
        s.send(streamed('request_body', req.slice(1).map(text).join(''), true));
        for (let m = await s.recv(); m !== null; m = await s.recv()) {
          if (m.request === 'response_headers') s.send({ response_headers: { response: {} } });
          if (m.request === 'response_body') {
            const b = Buffer.from(m.response_body?.body ?? new Uint8Array())
              .toString()
              .toUpperCase();
            s.send(streamed('response_body', b, m.response_body?.end_of_stream === true));
          }
        }
      },
    });
    const r = ok(await request(scenario.url, { headers: TO_A, body: 'hello' }));
    expect(r.status).toBe(200);
    expect(JSON.parse(r.body)).toEqual({ UPSTREAM: 'BACKEND_A', METHOD: 'POST', PATH: '/', BODYBYTES: 5 });
    expect(r.headers['content-length']).toBeUndefined();
  });

  it('a response chunk answered without streamed_response fails the request (reset once the response started)', async () => {
    scenario = await startScenario({
      filter: { processing_mode: mode },
      handler: async (s) => {
        await recvUntil(s, bodyEnd);
        s.send(headersReply());
        s.send(streamed('request_body', 'x', true));
        for (let m = await s.recv(); m !== null; m = await s.recv()) {
          if (m.request === 'response_headers') s.send({ response_headers: { response: {} } });
          if (m.request === 'response_body') s.send({ response_body: { response: {} } });
        }
      },
    });
    const r = await request(scenario.url, { headers: TO_A, body: 'x' });
    expect('error' in r || r.status === 500).toBe(true);
    expect(scenario.extProcStat('spurious_msgs_received')).toBe(1);
  });
});

describe.each(['1.36', '1.37'] as const)('FULL_DUPLEX_STREAMED stream lifetime on Envoy %s', (envoyVersion) => {
  it('1.37 closes the stream after the end_of_stream chunk when nothing else is processed; 1.36 keeps it to the end', async () => {
    let streamEnded = false;
    let endedBeforeResponse: boolean | undefined;
    scenario = await startScenario({
      filter: { processing_mode: DUPLEX },
      harness: { envoyVersion },
      handler: async (s) => {
        await recvUntil(s, bodyEnd);
        s.send(headersReply());
        s.send(streamed('request_body', 'abc', true));
        await s.ended;
        streamEnded = true;
      },
      upstreamHandler: async (req, res) => {
        await sleep(200); // time for a close that is due now to arrive
        endedBeforeResponse = streamEnded;
        res.writeHead(200, { 'content-length': String(req.body.length) });
        res.end(req.body);
      },
    });
    const r = ok(await request(scenario.url, { headers: TO_A, body: 'abc' }));
    expect(r.body).toBe('abc');
    expect(endedBeforeResponse).toBe(envoyVersion === '1.37');
    await scenario.extProc.streams[0]?.ended;
    expect(scenario.extProcStat('streams_closed')).toBe(1);
  });
});
