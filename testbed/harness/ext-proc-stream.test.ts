/**
 * Stream lifecycle and message framing (docs/envoy-ext-proc.md §2, §9, §10, §13): GetAndCloseStream,
 * GetAndFailStream, connect refused, protocol_config on the first message only, raw_value headers with
 * pseudo-headers, message order per processing mode, stats.
 */
import * as grpc from '@grpc/grpc-js';
import { afterEach, describe, expect, it } from 'vitest';
import { continueAll, headersOf, reply, type FakeHandler } from './fake-ext-proc.js';
import { mustLoadEnvoyConfig } from './envoy-config.js';
import { startEnvoyHarness } from './data-plane.js';
import { startFakeUpstream } from './fake-upstream.js';
import { ok, request, scenarioYaml, startScenario, type Scenario } from './testing.js';

let scenario: Scenario | undefined;
afterEach(async () => {
  await scenario?.close();
  scenario = undefined;
});

const TO_A = { 'x-target-cluster': 'backend_a' };

describe('stream lifecycle', () => {
  it('GetAndCloseStream: an OK close means "continue without the processor" even when failing closed', async () => {
    scenario = await startScenario({
      handler: async (s) => {
        await s.recv();
        s.closeOk();
      },
    });
    const r = ok(await request(scenario.url, { headers: TO_A }));
    expect(r.status).toBe(200);
    expect(JSON.parse(r.body)).toMatchObject({ upstream: 'backend_a' });
    expect(scenario.extProcStat('streams_started')).toBe(1);
    expect(scenario.extProcStat('streams_closed')).toBe(1);
    expect(scenario.extProcStat('streams_failed')).toBe(0);
    expect(scenario.extProcStat('stream_msgs_sent')).toBe(1);
    expect(scenario.extProcStat('stream_msgs_received')).toBe(0);
  });

  it('GetAndFailStream: a gRPC error fails the request with 500 and the gRPC status in the details', async () => {
    scenario = await startScenario({
      handler: async (s) => {
        await s.recv();
        s.fail(grpc.status.PERMISSION_DENIED, 'nope');
      },
    });
    const r = ok(await request(scenario.url, { headers: TO_A }));
    expect(r.status).toBe(500);
    expect(scenario.upstreams['backend_a']?.requests).toHaveLength(0);
    const [entry] = await scenario.harness.waitForAccessLog(1);
    expect(entry?.responseCodeDetails).toBe('ext_proc_error_gRPC_error_7{nope}');
    expect(scenario.extProcStat('streams_failed')).toBe(1);
    expect(scenario.extProcStat('failure_mode_allowed')).toBe(0);
  });

  it('GetAndFailStream with failure_mode_allow: the request continues to the upstream', async () => {
    scenario = await startScenario({
      filter: { failure_mode_allow: true },
      handler: async (s) => {
        await s.recv();
        s.fail(grpc.status.INTERNAL, 'boom');
      },
    });
    const r = ok(await request(scenario.url, { headers: TO_A }));
    expect(r.status).toBe(200);
    expect(scenario.extProcStat('streams_failed')).toBe(1);
    expect(scenario.extProcStat('failure_mode_allowed')).toBe(1);
  });

  it('GetAndCloseStreamOnResponse / GetAndFailStreamOnResponse: the same rules on the response path', async () => {
    const onResponse =
      (end: (s: Parameters<FakeHandler>[0]) => void): FakeHandler =>
      async (s) => {
        const m = await s.recv();
        if (m === null) return;
        s.send(reply(m));
        await s.recv();
        end(s);
      };
    scenario = await startScenario({ handler: onResponse((s) => s.closeOk()) });
    expect(ok(await request(scenario.url, { headers: TO_A })).status).toBe(200);
    await scenario.close();
    scenario = await startScenario({ handler: onResponse((s) => s.fail(grpc.status.INTERNAL, 'late')) });
    const r = ok(await request(scenario.url, { headers: TO_A }));
    expect(r.status).toBe(500);
    expect(scenario.upstreams['backend_a']?.requests).toHaveLength(1);
  });

  it('status_on_error replaces the 500 for a failed stream', async () => {
    scenario = await startScenario({
      filter: { status_on_error: { code: 'ServiceUnavailable' } },
      handler: async (s) => {
        await s.recv();
        s.fail(grpc.status.UNAVAILABLE, 'down');
      },
    });
    expect(ok(await request(scenario.url, { headers: TO_A })).status).toBe(503);
  });

  it('connect refused: 500 when failing closed, 200 with failure_mode_allow', async () => {
    const upstream = await startFakeUpstream('backend_a');
    try {
      for (const [allow, status] of [
        [false, 500],
        [true, 200],
      ] as const) {
        const yaml = scenarioYaml({ upstreams: ['backend_a'], filter: { failure_mode_allow: allow } });
        const config = mustLoadEnvoyConfig(yaml, {
          listenerPorts: { public: 0 },
          clusterEndpoints: { ext_proc: ['127.0.0.1:1'], backend_a: [upstream.address] },
        });
        const h = await startEnvoyHarness(config);
        try {
          const r = ok(await request(h.listeners['public']?.url ?? '', { headers: TO_A }));
          expect(r.status).toBe(status);
          const [entry] = await h.waitForAccessLog(1);
          if (!allow) expect(entry?.responseCodeDetails).toMatch(/^ext_proc_error_gRPC_error_14\{/);
          expect(h.stats()['http.ingress.ext_proc.streams_failed']).toBe(1);
        } finally {
          await h.close();
        }
      }
    } finally {
      await upstream.close();
    }
  });
});

describe('message framing', () => {
  it('sends headers as raw_value bytes with lower-case keys and the pseudo-headers, end_of_stream on a GET', async () => {
    scenario = await startScenario({ filter: { processing_mode: { response_header_mode: 'SKIP' } }, handler: continueAll });
    ok(await request(scenario.url, { path: '/v1/models?x=1', headers: { ...TO_A, 'X-Mixed-Case': 'Value' } }));
    const [first] = scenario.extProc.requests();
    expect(first?.request).toBe('request_headers');
    expect(first?.request_headers?.end_of_stream).toBe(true);
    const entries = first?.request_headers?.headers?.headers ?? [];
    expect(entries.every((e) => e.value === undefined && Buffer.isBuffer(e.raw_value))).toBe(true);
    expect(entries.slice(0, 4).map((e) => e.key)).toEqual([':authority', ':path', ':method', ':scheme']);
    const h = headersOf(first);
    expect(h).toMatchObject({ ':path': '/v1/models?x=1', ':method': 'GET', ':scheme': 'http', 'x-mixed-case': 'Value' });
    expect(h[':authority']).toMatch(/^127\.0\.0\.1:\d+$/);
    expect(h['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('opens the stream with :authority = the cluster name and the configured initial_metadata', async () => {
    scenario = await startScenario({
      filter: {
        grpc_service: {
          envoy_grpc: { cluster_name: 'ext_proc' },
          timeout: '35s',
          initial_metadata: [{ key: 'x-kvgate-listener', value: 'public' }],
        },
      },
      handler: continueAll,
    });
    ok(await request(scenario.url, { headers: TO_A }));
    expect(scenario.extProc.streams[0]?.metadata.get('x-kvgate-listener')).toEqual(['public']);
    expect(scenario.extProc.streams[0]?.authority).toBe('ext_proc');
  });

  it('keeps a client x-request-id and forwards it upstream (adds one only when absent)', async () => {
    scenario = await startScenario({ filter: { processing_mode: { response_header_mode: 'SKIP' } }, handler: continueAll });
    ok(await request(scenario.url, { headers: { ...TO_A, 'x-request-id': 'req-42' } }));
    expect(headersOf(scenario.extProc.requests()[0])['x-request-id']).toBe('req-42');
    expect(scenario.upstreams['backend_a']?.requests[0]?.headers['x-request-id']).toBe('req-42');
    const [entry] = await scenario.harness.waitForAccessLog(1);
    expect(entry?.requestId).toBe('req-42');
  });

  it('puts protocol_config on the first message of the stream only', async () => {
    scenario = await startScenario({
      filter: { processing_mode: { request_body_mode: 'BUFFERED' } },
      handler: continueAll,
    });
    ok(await request(scenario.url, { headers: TO_A, body: '{"model":"m"}' }));
    const msgs = scenario.extProc.requests();
    expect(msgs.map((m) => m.request)).toEqual(['request_headers', 'request_body', 'response_headers']);
    expect(msgs[0]?.protocol_config).toEqual({ request_body_mode: 'BUFFERED' });
    expect(msgs.slice(1).every((m) => m.protocol_config === undefined || m.protocol_config === null)).toBe(true);
  });

  it('GET sends no body message even in BUFFERED mode', async () => {
    scenario = await startScenario({
      filter: { processing_mode: { request_body_mode: 'BUFFERED', response_header_mode: 'SKIP' } },
      handler: continueAll,
    });
    expect(ok(await request(scenario.url, { headers: TO_A })).status).toBe(200);
    expect(scenario.extProc.requests().map((m) => m.request)).toEqual(['request_headers']);
  });
});

describe('message order per processing mode', () => {
  const order = async (filter: Record<string, unknown>, body?: string): Promise<string[]> => {
    scenario = await startScenario({ filter, handler: continueAll });
    ok(await request(scenario.url, { headers: TO_A, ...(body === undefined ? {} : { body }) }));
    await scenario.harness.waitForAccessLog(1);
    return scenario.extProc.requests().map((m) => `${m.request}${eos(m)}`);
  };
  const eos = (m: ReturnType<Scenario['extProc']['requests']>[number]): string => {
    const part = m.request_headers ?? m.response_headers ?? m.request_body ?? m.response_body;
    return part !== undefined && 'end_of_stream' in part && part.end_of_stream === true ? '(eos)' : '';
  };

  it('headers only (response headers skipped)', async () => {
    expect(await order({ processing_mode: { response_header_mode: 'SKIP' } }, 'abc')).toEqual(['request_headers']);
  });

  it('defaults: request and response headers (response_header_mode defaults to SEND)', async () => {
    expect(await order({}, 'abc')).toEqual(['request_headers', 'response_headers']);
  });

  it('buffered request body with response headers', async () => {
    expect(await order({ processing_mode: { request_body_mode: 'BUFFERED' } }, 'abc')).toEqual([
      'request_headers',
      'request_body(eos)',
      'response_headers',
    ]);
  });

  it('buffered request and response bodies', async () => {
    expect(await order({ processing_mode: { request_body_mode: 'BUFFERED', response_body_mode: 'BUFFERED' } }, 'abc')).toEqual([
      'request_headers',
      'request_body(eos)',
      'response_headers',
      'response_body(eos)',
    ]);
  });

  it('request headers skipped, body buffered: the body is the first message and carries protocol_config', async () => {
    expect(
      await order({ processing_mode: { request_header_mode: 'SKIP', request_body_mode: 'BUFFERED', response_header_mode: 'SKIP' } }, 'abc'),
    ).toEqual(['request_body(eos)']);
    expect(scenario?.extProc.requests()[0]?.protocol_config).toEqual({ request_body_mode: 'BUFFERED' });
  });

  it('nothing to send opens no stream at all', async () => {
    expect(await order({ processing_mode: { request_header_mode: 'SKIP', response_header_mode: 'SKIP' } })).toEqual([]);
    expect(scenario?.extProcStat('streams_started')).toBe(0);
  });
});

describe('stats', () => {
  it('counts one buffered POST exactly as Envoy does, and closes the stream after the last reply', async () => {
    let ended: Promise<'end' | 'cancelled'> | undefined;
    const handler: FakeHandler = async (s) => {
      ended = s.ended;
      await continueAll(s);
    };
    scenario = await startScenario({ filter: { processing_mode: { request_body_mode: 'BUFFERED' } }, handler });
    ok(await request(scenario.url, { headers: TO_A, body: 'hello' }));
    await scenario.harness.waitForAccessLog(1);
    expect(await ended).toBeDefined();
    expect({
      started: scenario.extProcStat('streams_started'),
      sent: scenario.extProcStat('stream_msgs_sent'),
      received: scenario.extProcStat('stream_msgs_received'),
      closed: scenario.extProcStat('streams_closed'),
      failed: scenario.extProcStat('streams_failed'),
      spurious: scenario.extProcStat('spurious_msgs_received'),
    }).toEqual({ started: 1, sent: 3, received: 3, closed: 1, failed: 0, spurious: 0 });
    expect(scenario.stat('http.ingress.downstream_rq_2xx')).toBe(1);
    expect(scenario.stat('cluster.backend_a.upstream_rq_total')).toBe(1);
  });

  it('replies that carry a response for the wrong direction count as spurious', async () => {
    scenario = await startScenario({
      handler: async (s) => {
        const m = await s.recv();
        if (m !== null) s.send({ response_headers: { response: {} } });
      },
    });
    expect(ok(await request(scenario.url, { headers: TO_A })).status).toBe(500);
    expect(scenario.extProcStat('spurious_msgs_received')).toBe(1);
  });
});
