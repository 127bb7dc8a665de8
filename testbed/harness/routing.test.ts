/**
 * Routing (docs/envoy-ext-proc.md §7): cluster_header with and without clear_route_cache, the route
 * cache actions, unknown/missing cluster -> 503, ORIGINAL_DST by header and by metadata, override_host, plus the
 * router's own failures (connect refused, route timeout).
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { WireCommonResponse } from './ext-proc-messages.js';
import { continueAll, reply, setHeader, type FakeHandler } from './fake-ext-proc.js';
import { toStruct } from './ext-proc-messages.js';
import { startFakeUpstream, type FakeUpstream } from './fake-upstream.js';
import { GIE_OVERRIDE_HOST_POLICY, ok, request, startScenario, type HttpResult, type Scenario } from './testing.js';

/** The fake upstream that answered, after checking that it did answer (a local reply has no such body). */
function upstreamOf(r: HttpResult): string {
  expect(r.status, r.body).toBe(200);
  return (JSON.parse(r.body) as { upstream: string }).upstream;
}

let scenario: Scenario | undefined;
const extra: FakeUpstream[] = [];
afterEach(async () => {
  await scenario?.close();
  scenario = undefined;
  await Promise.all(extra.splice(0).map((u) => u.close()));
});

const NO_RESPONSE = { processing_mode: { response_header_mode: 'SKIP' } };

function onHeaders(common: WireCommonResponse, extraFields = {}): FakeHandler {
  return async (s) => {
    const m = await s.recv();
    if (m === null) return;
    s.send(reply(m, common, extraFields));
    await continueAll(s);
  };
}

const pickB = (clear: boolean): WireCommonResponse => ({
  header_mutation: { set_headers: [setHeader('x-target-cluster', 'backend_b')] },
  clear_route_cache: clear,
});

describe('cluster_header', () => {
  it('without clear_route_cache the cached route keeps the original cluster (but the header still changes)', async () => {
    scenario = await startScenario({ filter: NO_RESPONSE, handler: onHeaders(pickB(false)) });
    const r = ok(await request(scenario.url, { headers: { 'x-target-cluster': 'backend_a' } }));
    expect(upstreamOf(r)).toBe('backend_a');
    expect(scenario.upstreams['backend_a']?.requests[0]?.headers['x-target-cluster']).toBe('backend_b');
  });

  it('with clear_route_cache and a header mutation the route is recomputed', async () => {
    scenario = await startScenario({ filter: NO_RESPONSE, handler: onHeaders(pickB(true)) });
    const r = ok(await request(scenario.url, { headers: { 'x-target-cluster': 'backend_a' } }));
    expect(upstreamOf(r)).toBe('backend_b');
    const [entry] = await scenario.harness.waitForAccessLog(1);
    expect(entry?.upstreamCluster).toBe('backend_b');
  });

  it('clear_route_cache without a header mutation is ignored and counted', async () => {
    scenario = await startScenario({ filter: NO_RESPONSE, handler: onHeaders({ clear_route_cache: true }) });
    ok(await request(scenario.url, { headers: { 'x-target-cluster': 'backend_a' } }));
    expect(scenario.extProcStat('clear_route_cache_ignored')).toBe(1);
  });

  it('route_cache_action RETAIN refuses to clear and counts clear_route_cache_disabled', async () => {
    scenario = await startScenario({ filter: { ...NO_RESPONSE, route_cache_action: 'RETAIN' }, handler: onHeaders(pickB(true)) });
    const r = ok(await request(scenario.url, { headers: { 'x-target-cluster': 'backend_a' } }));
    expect(upstreamOf(r)).toBe('backend_a');
    expect(scenario.extProcStat('clear_route_cache_disabled')).toBe(1);
  });

  it('route_cache_action CLEAR clears after any request-path reply with a mutation', async () => {
    scenario = await startScenario({ filter: { ...NO_RESPONSE, route_cache_action: 'CLEAR' }, handler: onHeaders(pickB(false)) });
    const r = ok(await request(scenario.url, { headers: { 'x-target-cluster': 'backend_a' } }));
    expect(upstreamOf(r)).toBe('backend_b');
  });

  it('a BUFFERED body reply can pick the cluster (headers are held until then)', async () => {
    scenario = await startScenario({
      filter: { processing_mode: { request_body_mode: 'BUFFERED', response_header_mode: 'SKIP' } },
      handler: async (s) => {
        for (let m = await s.recv(); m !== null; m = await s.recv()) {
          const body = Buffer.from(m.request_body?.body ?? []).toString();
          const model = m.request === 'request_body' ? (JSON.parse(body) as { model: string }).model : '';
          s.send(
            reply(
              m,
              m.request === 'request_body'
                ? { header_mutation: { set_headers: [setHeader('x-target-cluster', model)] }, clear_route_cache: true }
                : {},
            ),
          );
        }
      },
    });
    const r = ok(await request(scenario.url, { body: '{"model":"backend_b"}' }));
    expect(upstreamOf(r)).toBe('backend_b');
  });

  it('a missing or unknown cluster gets 503 (no_cluster), or cluster_not_found_response_code', async () => {
    scenario = await startScenario({ filter: NO_RESPONSE, handler: continueAll });
    expect(ok(await request(scenario.url)).status).toBe(503);
    expect(ok(await request(scenario.url, { headers: { 'x-target-cluster': 'nope' } })).status).toBe(503);
    expect(scenario.stat('http.ingress.no_cluster')).toBe(2);
    const [entry] = await scenario.harness.waitForAccessLog(1);
    expect(entry?.responseFlags).toEqual(['NC']);
    await scenario.close();
    scenario = await startScenario({
      filter: NO_RESPONSE,
      route: { cluster_header: 'x-target-cluster', cluster_not_found_response_code: 'NOT_FOUND', timeout: '0s' },
      handler: continueAll,
    });
    expect(ok(await request(scenario.url)).status).toBe(404);
  });
});

// `Utility::prepareLocalReply` (source/common/http/utility.cc, envoyproxy/envoy main copy in the public code index):
// an empty local-reply body gets `removeContentLength()` and `removeContentType()`, so the encoder filters (ext_proc,
// and through it the processor) see `:status` alone; HTTP/1's codec puts `content-length: 0` on the wire.
describe('an empty local reply through the encode path', () => {
  it('reaches the processor without content-length or content-type; the client still sees content-length 0', async () => {
    scenario = await startScenario({
      handler: async (s) => {
        for (let m = await s.recv(); m !== null; m = await s.recv()) {
          // A content-type on an empty ImmediateResponse is dropped the same way.
          s.send(reply(m, { header_mutation: { set_headers: [setHeader('x-seen', 'yes')] } }));
        }
      },
    });
    const r = ok(await request(scenario.url, { headers: { 'x-target-cluster': 'nope' } }));
    expect(r.status).toBe(503);
    expect(r.headers['content-length']).toBe('0');
    const sent = scenario.extProc.requests().find((m) => m.request === 'response_headers');
    const keys = sent?.response_headers?.headers?.headers?.map((h) => h.key) ?? [];
    expect(keys).toContain(':status');
    expect(keys).not.toContain('content-length');
    expect(keys).not.toContain('content-type');
  });

  it('an ImmediateResponse with an empty body loses its content-type, as Envoy drops it', async () => {
    scenario = await startScenario({
      filter: NO_RESPONSE,
      handler: async (s) => {
        await s.recv();
        s.send({
          immediate_response: {
            status: { code: 'TooManyRequests' },
            headers: { set_headers: [setHeader('content-type', 'application/json'), setHeader('retry-after', '1')] },
          },
        });
      },
    });
    const r = ok(await request(scenario.url, { headers: { 'x-target-cluster': 'backend_a' } }));
    expect(r.status).toBe(429);
    expect(r.headers['retry-after']).toBe('1');
    expect(r.headers['content-type']).toBeUndefined();
    expect(r.headers['content-length']).toBe('0');
  });
});

describe('ORIGINAL_DST', () => {
  const dst = (metadataKey = false): Record<string, unknown> => ({
    name: 'dynamic_dst',
    type: 'ORIGINAL_DST',
    lb_policy: 'CLUSTER_PROVIDED',
    connect_timeout: '1s',
    original_dst_lb_config: {
      use_http_header: true,
      http_header_name: 'x-target-endpoint',
      ...(metadataKey ? { metadata_key: { key: 'envoy.lb', path: [{ key: 'x-gateway-destination-endpoint' }] } } : {}),
    },
  });

  it('connects to the IP:port in the header, read at load-balancing time (no route-cache clearing)', async () => {
    const target = await startFakeUpstream('pod-7');
    extra.push(target);
    scenario = await startScenario({
      filter: NO_RESPONSE,
      route: { cluster: 'dynamic_dst', timeout: '0s' },
      extraClusters: [dst()],
      handler: onHeaders({ header_mutation: { set_headers: [setHeader('x-target-endpoint', target.address)] } }),
    });
    const r = ok(await request(scenario.url));
    expect(upstreamOf(r)).toBe('pod-7');
    const [entry] = await scenario.harness.waitForAccessLog(1);
    expect(entry?.upstreamHost).toBe(target.address);
  });

  it('a missing header or a hostname gives 503 no healthy upstream', async () => {
    scenario = await startScenario({
      filter: NO_RESPONSE,
      route: { cluster: 'dynamic_dst', timeout: '0s' },
      extraClusters: [dst()],
      handler: continueAll,
    });
    const missing = ok(await request(scenario.url));
    expect(missing.status).toBe(503);
    expect(missing.body).toBe('no healthy upstream');
    expect(ok(await request(scenario.url, { headers: { 'x-target-endpoint': 'localhost:8080' } })).status).toBe(503);
    expect(scenario.stat('cluster.dynamic_dst.upstream_cx_none_healthy')).toBe(2);
  });

  it('metadata_key reads the destination from dynamic metadata in a receiving namespace', async () => {
    const target = await startFakeUpstream('pod-9');
    extra.push(target);
    scenario = await startScenario({
      filter: { ...NO_RESPONSE, metadata_options: { receiving_namespaces: { untyped: ['envoy.lb'] } } },
      route: { cluster: 'dynamic_dst', timeout: '0s' },
      extraClusters: [dst(true)],
      handler: onHeaders({}, { dynamic_metadata: toStruct({ 'envoy.lb': { 'x-gateway-destination-endpoint': target.address } }) }),
    });
    expect(upstreamOf(ok(await request(scenario.url)))).toBe('pod-9');
  });
});

describe('override_host', () => {
  it('picks the member named in dynamic metadata, else falls back to round robin', async () => {
    const pool = [await startFakeUpstream('p1'), await startFakeUpstream('p2')];
    extra.push(...pool);
    const cluster = {
      name: 'pool',
      type: 'STATIC',
      load_assignment: {
        cluster_name: 'pool',
        endpoints: [
          { lb_endpoints: pool.map((p) => ({ endpoint: { address: { socket_address: { address: '127.0.0.1', port_value: p.port } } } })) },
        ],
      },
      load_balancing_policy: GIE_OVERRIDE_HOST_POLICY,
    };
    const target = pool[1]?.address ?? '';
    scenario = await startScenario({
      filter: { ...NO_RESPONSE, metadata_options: { receiving_namespaces: { untyped: ['envoy.lb'] } } },
      route: { cluster: 'pool', timeout: '0s' },
      extraClusters: [cluster],
      handler: onHeaders({}, { dynamic_metadata: toStruct({ 'envoy.lb': { 'x-gateway-destination-endpoint': target } }) }),
    });
    for (let i = 0; i < 3; i++) expect(upstreamOf(ok(await request(scenario.url)))).toBe('p2');
    // A non-member is skipped: the fallback round-robins over both.
    scenario.extProc.setHandler(
      onHeaders({}, { dynamic_metadata: toStruct({ 'envoy.lb': { 'x-gateway-destination-endpoint': '10.9.9.9:80' } }) }),
    );
    const seen = new Set<string>();
    for (let i = 0; i < 2; i++) seen.add(upstreamOf(ok(await request(scenario.url))));
    expect(seen).toEqual(new Set(['p1', 'p2']));
  });
});

describe('router failures', () => {
  it('connect refused upstream: 503 upstream connect error, counted on the cluster', async () => {
    scenario = await startScenario({ filter: NO_RESPONSE, handler: continueAll });
    await scenario.upstreams['backend_a']?.close();
    const r = ok(await request(scenario.url, { headers: { 'x-target-cluster': 'backend_a' } }));
    expect(r.status).toBe(503);
    expect(r.body).toMatch(/^upstream connect error or disconnect\/reset before headers/);
    expect(scenario.stat('cluster.backend_a.upstream_cx_connect_fail')).toBe(1);
    const [entry] = await scenario.harness.waitForAccessLog(1);
    expect(entry?.responseFlags).toEqual(['UF']);
  });

  it('route timeout: 504 upstream request timeout when the upstream is too slow', async () => {
    scenario = await startScenario({
      filter: NO_RESPONSE,
      route: { cluster: 'backend_a', timeout: '0.100s' },
      upstreams: ['backend_a'],
      upstreamHandler: (_req, res) => void setTimeout(() => res.end('late'), 1000),
      handler: continueAll,
    });
    const r = ok(await request(scenario.url));
    expect(r.status).toBe(504);
    expect(r.body).toBe('upstream request timeout');
    expect(scenario.upstreams['backend_a']?.requests[0]?.headers['x-envoy-expected-rq-timeout-ms']).toBe('100');
  });

  it('route idle_timeout: 408 when nothing moves before the response starts', async () => {
    scenario = await startScenario({
      filter: NO_RESPONSE,
      route: { cluster: 'backend_a', timeout: '0s', idle_timeout: '0.100s' },
      upstreams: ['backend_a'],
      upstreamHandler: (_req, res) => void setTimeout(() => res.end('late'), 1000),
      handler: continueAll,
    });
    const r = ok(await request(scenario.url));
    expect(r.status).toBe(408);
    expect(scenario.stat('http.ingress.downstream_rq_idle_timeout')).toBe(1);
  });

  it('no matching route: 404 route_not_found', async () => {
    scenario = await startScenario({ filter: NO_RESPONSE, route: { cluster: 'backend_a' }, prefix: '/v1', handler: continueAll });
    expect(ok(await request(scenario.url, { path: '/other' })).status).toBe(404);
    expect(ok(await request(scenario.url, { path: '/v1/x' })).status).toBe(200);
    expect(scenario.stat('http.ingress.no_route')).toBe(1);
    const log = await scenario.harness.waitForAccessLog(2);
    expect(log.find((e) => e.path === '/other')?.responseFlags).toEqual(['NR']);
  });
});
