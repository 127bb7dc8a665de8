/**
 * The config loader: the example bootstrap YAMLs load, everything unsupported is refused with its YAML path, and
 * the test-time overrides remap ports and endpoints.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parseEnvoyDuration } from './duration.js';
import { loadEnvoyConfig, type EnvoyConfig } from './envoy-config.js';
import { scenarioYaml } from './testing.js';

// Example bootstraps kept as fixtures, one per routing pattern of docs/envoy-ext-proc.md §7 (same files as
// test/envoy-static/fixtures/reference), kept byte for byte.
const REFERENCE = new URL('./fixtures', import.meta.url).pathname;
const reference = (name: string): string => readFileSync(`${REFERENCE}/${name}.yaml`, 'utf8');

function mustLoad(text: string, overrides?: Parameters<typeof loadEnvoyConfig>[1]): EnvoyConfig {
  const r = loadEnvoyConfig(text, overrides);
  if (!r.ok) throw new Error(r.error.message);
  return r.value;
}

function issues(text: string, overrides?: Parameters<typeof loadEnvoyConfig>[1]): readonly string[] {
  const r = loadEnvoyConfig(text, overrides);
  if (r.ok) throw new Error('expected the config to be refused');
  return r.error.issues;
}

describe('reference YAML', () => {
  it('Variant A (cluster_header) loads with Envoy defaults filled in', () => {
    const c = mustLoad(reference('envoy-cluster-header'));
    const l = c.listeners[0];
    expect(l?.perConnectionBufferLimitBytes).toBe(1024 * 1024);
    expect(l?.hcm.statPrefix).toBe('ingress');
    expect(l?.hcm.virtualHosts[0]?.routes[0]?.action).toMatchObject({
      clusterHeader: 'x-target-cluster',
      clusterNotFoundResponseCode: 503,
      timeoutMs: 0,
    });
    expect(l?.hcm.extProc).toMatchObject({
      clusterName: 'ext_proc',
      failureModeAllow: false,
      messageTimeoutMs: 2000,
      maxMessageTimeoutMs: 0,
      routeCacheAction: 'DEFAULT',
      statusOnError: 500,
      processingMode: { request_body_mode: 'BUFFERED', response_header_mode: 'SKIP', request_trailer_mode: 'SKIP' },
    });
    expect(c.clusters['ext_proc']?.http2).toBe(true);
    expect(c.clusters['backend_b']?.endpoints).toEqual([{ address: '127.0.0.1', port: 8002 }]);
    expect(Object.isFrozen(c.clusters['backend_b']?.endpoints)).toBe(true);
  });

  it('Variant C (ORIGINAL_DST) loads', () => {
    const c = mustLoad(reference('envoy-original-dst'));
    expect(c.clusters['dynamic_dst']).toMatchObject({
      type: 'ORIGINAL_DST',
      lbPolicy: 'CLUSTER_PROVIDED',
      connectTimeoutMs: 1000,
      originalDst: { httpHeaderName: 'x-target-endpoint' },
    });
  });

  it('Variant B (override_host) loads, with the unset processing modes at their defaults', () => {
    const c = mustLoad(reference('envoy-override-host'));
    expect(c.clusters['pool']?.overrideHost).toEqual({
      sources: [{ metadata: { key: 'envoy.lb', path: ['x-gateway-destination-endpoint'] } }, { header: 'x-gateway-destination-endpoint' }],
      fallback: 'ROUND_ROBIN',
    });
    expect(c.listeners[0]?.hcm.extProc?.receivingNamespaces).toEqual(['envoy.lb']);
    expect(c.listeners[0]?.hcm.extProc?.processingMode).toEqual({
      request_header_mode: 'SEND',
      response_header_mode: 'SKIP',
      request_body_mode: 'BUFFERED',
      response_body_mode: 'NONE',
      request_trailer_mode: 'SKIP',
      response_trailer_mode: 'SKIP',
    });
    expect(c.listeners[0]?.hcm.virtualHosts[0]?.routes[0]?.action.cluster).toBe('pool');
  });
});

describe("kvgate's shipped envoy/envoy.yaml", () => {
  const shipped = new URL('../../envoy/envoy.yaml', import.meta.url).pathname;

  it('loads: both listeners, the gate cluster with its metadata, ORIGINAL_DST pools', () => {
    const c = mustLoad(readFileSync(shipped, 'utf8'), {
      listenerPorts: { public: 0, internal: 0 },
      clusterEndpoints: { kvgate_gate: ['127.0.0.1:1'] },
    });
    expect(c.listeners.map((l) => l.name)).toEqual(['public', 'internal']);
    const pub = c.listeners[0]?.hcm;
    expect(pub?.streamIdleTimeoutMs).toBe(300_000);
    expect(pub?.extProc?.initialMetadata).toEqual([['x-kvgate-listener', 'public']]);
    expect(pub?.extProc?.maxMessageTimeoutMs).toBe(30_000);
    expect(pub?.extProc?.mutationRules.disallowIsError).toBe(true);
    expect(c.listeners[1]?.hcm.extProc?.initialMetadata).toEqual([['x-kvgate-listener', 'internal']]);
    expect(c.clusters['kvgate_gate']?.healthChecks[0]?.check).toEqual({ grpc: 'envoy.service.ext_proc.v3.ExternalProcessor' });
    expect(c.clusters['a_decode']?.originalDst?.httpHeaderName).toBe('x-kvgate-decode-endpoint');
  });
});

describe('refusals name the YAML path', () => {
  it('an unknown field in the ext_proc filter', () => {
    const text = reference('envoy-cluster-header').replace('failure_mode_allow: false', 'failure_mode_allow: false\n              foo: 1');
    expect(issues(text)).toEqual([
      'static_resources.listeners[0].filter_chains[0].filters[0].typed_config.http_filters[0].typed_config.foo: unsupported by the kvgate harness',
    ]);
  });

  it('unknown fields anywhere, all of them at once', () => {
    const text = reference('envoy-cluster-header')
      .replace('stat_prefix: ingress', 'stat_prefix: ingress\n          use_remote_address: true')
      .replace('  - name: backend_b\n', '  - name: backend_b\n    outlier_detection: {}\n')
      .replace('admin:', 'overload_manager: {}\nadmin:');
    expect(issues(text)).toEqual([
      '(root).overload_manager: unsupported by the kvgate harness',
      'static_resources.clusters[2].outlier_detection: unsupported by the kvgate harness',
      'static_resources.listeners[0].filter_chains[0].filters[0].typed_config.use_remote_address: unsupported by the kvgate harness',
    ]);
  });

  it('unsupported modes, values and @types', () => {
    const text = scenarioYaml({
      filter: { observability_mode: true, processing_mode: { request_body_mode: 'STREAMED' }, message_timeout: '200ms' },
    });
    const found = issues(text);
    const base = 'static_resources.listeners[0].filter_chains[0].filters[0].typed_config.http_filters[0].typed_config';
    expect(found).toContain(`${base}.observability_mode: true is unsupported by the kvgate harness`);
    expect(found).toContain(
      `${base}.processing_mode.request_body_mode: STREAMED unsupported by the kvgate harness (supported: NONE, BUFFERED, BUFFERED_PARTIAL, FULL_DUPLEX_STREAMED)`,
    );
    expect(found.some((i) => i.startsWith(`${base}.message_timeout: "200ms" is not a non-negative duration`))).toBe(true);
    const badFilter = reference('envoy-cluster-header').replace('envoy.filters.http.router\n', 'envoy.filters.http.lua\n');
    expect(issues(badFilter).some((i) => i.includes('http_filters[1].name: "envoy.filters.http.lua"'))).toBe(true);
  });

  it('Envoy load-time checks: ORIGINAL_DST policy, STATIC hostnames, unknown clusters, HTTP/2 for gRPC, route cache conflict', () => {
    const dst = reference('envoy-original-dst').replace('CLUSTER_PROVIDED', 'ROUND_ROBIN');
    expect(issues(dst)).toEqual([
      'static_resources.clusters[0].lb_policy: ORIGINAL_DST clusters need CLUSTER_PROVIDED (Envoy refuses ROUND_ROBIN)',
    ]);
    const host = reference('envoy-cluster-header').replace(
      'address: 127.0.0.1, port_value: 8001',
      'address: backend.local, port_value: 8001',
    );
    expect(issues(host)[0]).toMatch(
      /clusters\[1\]\.load_assignment\.endpoints\[0\]\.lb_endpoints\[0\]\.endpoint\.address\.socket_address\.address: "backend\.local" is not an IP address/,
    );
    const strictDns = reference('envoy-cluster-header')
      .replace('  - name: backend_a\n    type: STATIC', '  - name: backend_a\n    type: STRICT_DNS')
      .replace('address: 127.0.0.1, port_value: 8001', 'address: localhost, port_value: 8001');
    expect(mustLoad(strictDns).clusters['backend_a']?.endpoints).toEqual([{ address: '127.0.0.1', port: 8001 }]);
    const route = scenarioYaml({ route: { cluster: 'missing' } });
    expect(issues(route)[0]).toMatch(/routes\[0\]\.route\.cluster: unknown cluster "missing"/);
    const h1 = reference('envoy-cluster-header').replace(
      'explicit_http_config: { http2_protocol_options: {} }',
      'explicit_http_config: { http_protocol_options: {} }',
    );
    expect(issues(h1)[0]).toMatch(/cluster "ext_proc" must set http2_protocol_options: gRPC needs HTTP\/2/);
    const conflict = scenarioYaml({ filter: { disable_clear_route_cache: true, route_cache_action: 'CLEAR' } });
    expect(issues(conflict)[0]).toMatch(/disable_clear_route_cache and route_cache_action can not be set/);
  });

  it('health checks are accepted and recorded (HTTP only), not silently dropped', () => {
    const hc =
      '    health_checks:\n    - { timeout: 1s, interval: 5s, unhealthy_threshold: 2, healthy_threshold: 1, http_health_check: { path: /health } }\n';
    const text = reference('envoy-cluster-header').replace('  - name: backend_b\n', `  - name: backend_b\n${hc}`);
    expect(mustLoad(text).clusters['backend_b']?.healthChecks).toEqual([
      {
        timeoutMs: 1000,
        intervalMs: 5000,
        noTrafficIntervalMs: 60_000, // Envoy's defaults
        noTrafficHealthyIntervalMs: 60_000,
        intervalJitterMs: 0,
        unhealthyThreshold: 2,
        healthyThreshold: 1,
        check: { http: '/health' },
      },
    ]);
    const noTraffic = text.replace('interval: 5s,', 'interval: 5s, no_traffic_interval: 2s, interval_jitter: 0.1s,');
    expect(mustLoad(noTraffic).clusters['backend_b']?.healthChecks[0]).toMatchObject({
      noTrafficIntervalMs: 2000,
      noTrafficHealthyIntervalMs: 2000, // follows no_traffic_interval unless set
      intervalJitterMs: 100,
    });
    const tcp = text.replace('http_health_check: { path: /health }', 'tcp_health_check: {}');
    expect(issues(tcp)).toEqual([
      'static_resources.clusters[2].health_checks[0].tcp_health_check: unsupported by the kvgate harness',
      'static_resources.clusters[2].health_checks[0]: needs http_health_check or grpc_health_check (the kinds the harness records)',
    ]);
  });

  it('malformed YAML is an error value, not an exception', () => {
    expect(issues('static_resources: [unclosed')[0]).toMatch(/^\(yaml\): /);
  });
});

describe('overrides', () => {
  it('remap listener ports and cluster endpoints', () => {
    const c = mustLoad(reference('envoy-cluster-header'), {
      listenerPorts: { http: 0 },
      clusterEndpoints: { ext_proc: ['127.0.0.1:45678'], backend_a: ['127.0.0.1:1111', '[::1]:2222'] },
    });
    expect(c.listeners[0]?.port).toBe(0);
    expect(c.clusters['ext_proc']?.endpoints).toEqual([{ address: '127.0.0.1', port: 45678 }]);
    expect(c.clusters['backend_a']?.endpoints).toEqual([
      { address: '127.0.0.1', port: 1111 },
      { address: '::1', port: 2222 },
    ]);
  });

  it("take a STRICT_DNS cluster's DNS answer from clusterEndpoints (the harness resolves no names)", () => {
    const dns = reference('envoy-cluster-header')
      .replace(
        '  - name: backend_a\n    type: STATIC',
        '  - name: backend_a\n    type: STRICT_DNS\n    dns_lookup_family: V4_ONLY\n    dns_refresh_rate: 5s',
      )
      .replace('address: 127.0.0.1, port_value: 8001', 'address: backend.svc.cluster.local, port_value: 8001');
    expect(issues(dns)).toEqual([
      'static_resources.clusters.backend_a: "backend.svc.cluster.local:8001": the harness resolves only IP literals and localhost; give the hosts its DNS answer holds in clusterEndpoints',
    ]);
    const c = mustLoad(dns, { clusterEndpoints: { backend_a: ['127.0.0.1:1111', '127.0.0.1:2222'] } }).clusters['backend_a'];
    expect(c?.endpoints).toEqual([
      { address: '127.0.0.1', port: 1111 },
      { address: '127.0.0.1', port: 2222 },
    ]);
    expect(c?.dnsRefreshMs).toBe(5000);
  });

  it('refuse names that match nothing and endpoints that are not host:port', () => {
    expect(
      issues(reference('envoy-cluster-header'), {
        listenerPorts: { public: 0 },
        clusterEndpoints: { nope: ['127.0.0.1:1'], backend_a: ['no-port'] },
      }),
    ).toEqual([
      '(overrides).listenerPorts.public: no such listener',
      '(overrides).clusterEndpoints.nope: no such cluster',
      '(overrides).clusterEndpoints.backend_a[0]: "no-port" is not host:port',
    ]);
    expect(issues(reference('envoy-original-dst'), { clusterEndpoints: { dynamic_dst: ['127.0.0.1:1'] } })).toEqual([
      '(overrides).clusterEndpoints.dynamic_dst: ORIGINAL_DST clusters have no endpoints to override',
    ]);
  });
});

describe('durations', () => {
  it.each([
    ['2s', 2000],
    ['0.200s', 200],
    ['0s', 0],
    ['1.5s', 1500],
    ['0.0005s', 0],
  ])('%s is %d ms', (text, ms) => {
    expect(parseEnvoyDuration(text)).toEqual({ ok: true, value: ms });
  });

  it.each(['200ms', '-1s', '2', 'abc'])('%s is refused', (text) => {
    expect(parseEnvoyDuration(text).ok).toBe(false);
  });
});
