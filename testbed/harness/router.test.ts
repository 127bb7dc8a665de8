/**
 * Pure routing and load-balancing units: virtual-host domain order, route matching, cluster_header read at
 * resolution time, ORIGINAL_DST address rules, round robin and least request.
 */
import { ENVOY_DEFAULT_BREAKERS } from './circuit-breakers.js';
import { describe, expect, it } from 'vitest';
import { createClusterManager, ipPort } from './cluster-manager.js';
import type { ClusterConfig, HcmConfig, VirtualHost } from './envoy-config-types.js';
import { HeaderMap } from './header-map.js';
import { createRouteTable, findVirtualHost } from './router.js';

const vh = (name: string, domains: string[]): VirtualHost => ({ name, domains, routes: [] });

describe('virtual hosts', () => {
  const hosts = [
    vh('any', ['*']),
    vh('prefix', ['api.*']),
    vh('suffix', ['*.example.com']),
    vh('longer', ['*.eu.example.com']),
    vh('exact', ['api.example.com']),
  ];
  it.each([
    ['api.example.com', 'exact'],
    ['x.eu.example.com', 'longer'],
    ['x.example.com', 'suffix'],
    ['api.other', 'prefix'],
    ['unrelated', 'any'],
  ])('%s -> %s', (authority, expected) => {
    expect(findVirtualHost(hosts, authority)?.name).toBe(expected);
  });
});

describe('routes', () => {
  const hcm: HcmConfig = {
    statPrefix: 'ingress',
    streamIdleTimeoutMs: 300_000,
    requestTimeoutMs: 0,
    requestHeadersTimeoutMs: 0,
    routeConfigName: 'r',
    buffer: undefined,
    extProc: undefined,
    virtualHosts: [
      {
        name: 'all',
        domains: ['*'],
        routes: [
          {
            name: 'exact',
            match: { path: '/health' },
            action: {
              cluster: 'health',
              clusterHeader: undefined,
              clusterNotFoundResponseCode: 503,
              timeoutMs: 0,
              idleTimeoutMs: undefined,
            },
          },
          {
            name: 'v1',
            match: { prefix: '/v1/' },
            action: {
              cluster: undefined,
              clusterHeader: 'x-target-cluster',
              clusterNotFoundResponseCode: 503,
              timeoutMs: 0,
              idleTimeoutMs: undefined,
            },
          },
        ],
      },
    ],
  };
  const table = createRouteTable(hcm);
  const headers = (path: string, extra: Array<[string, string]> = []): HeaderMap =>
    new HeaderMap([[':authority', 'h'], [':path', path], ...extra]);

  it('matches an exact path ignoring the query, and prefixes in order', () => {
    expect(table.resolve(headers('/health?probe=1'))?.clusterName).toBe('health');
    expect(table.resolve(headers('/healthz'))).toBeUndefined();
    expect(table.resolve(headers('/v1/chat', [['x-target-cluster', 'b']]))?.clusterName).toBe('b');
  });

  it('reads cluster_header when resolving; a later header change does not affect an already resolved route', () => {
    const h = headers('/v1/chat', [['x-target-cluster', 'a']]);
    const resolved = table.resolve(h);
    h.set('x-target-cluster', 'b');
    expect(resolved?.clusterName).toBe('a');
    expect(table.resolve(h)?.clusterName).toBe('b');
    expect(table.resolve(headers('/v1/chat'))?.clusterName).toBeUndefined();
  });
});

describe('load balancing', () => {
  const cluster = (over: Partial<ClusterConfig>): ClusterConfig => ({
    name: 'c',
    type: 'STATIC',
    lbPolicy: 'ROUND_ROBIN',
    connectTimeoutMs: 1000,
    maxRequestsPerConnection: undefined,
    endpoints: [
      { address: '10.0.0.1', port: 80 },
      { address: '10.0.0.2', port: 80 },
    ],
    http2: false,
    originalDst: undefined,
    overrideHost: undefined,
    healthChecks: [],
    circuitBreakers: ENVOY_DEFAULT_BREAKERS,
    ...over,
  });
  const ctx = { headers: new HeaderMap(), metadata: new Map() };

  it('round robin cycles through the endpoints', () => {
    const c = cluster({});
    const cm = createClusterManager({ c });
    expect([1, 2, 3].map(() => cm.chooseHost(c, ctx)?.address)).toEqual(['10.0.0.1', '10.0.0.2', '10.0.0.1']);
  });

  it('an EDS update replaces the hosts the cluster is read with from then on', () => {
    const c = cluster({});
    const cm = createClusterManager({ c });
    cm.setEndpoints('c', ['10.0.0.9:81']);
    const now = cm.get('c')!;
    expect(now.endpoints).toEqual([{ address: '10.0.0.9', port: 81 }]);
    expect(cm.chooseHost(now, ctx)?.address).toBe('10.0.0.9');
    expect(c.endpoints).toHaveLength(2); // the loaded config is not touched
    expect(() => cm.setEndpoints('c', ['pod.local:80'])).toThrow(/IP:port/);
    expect(() => cm.setEndpoints('nope', [])).toThrow(/no STATIC/);
  });

  it('least request prefers the host with fewer active requests among two choices', () => {
    const c = cluster({ lbPolicy: 'LEAST_REQUEST' });
    const picks = [0.1, 0.9];
    const cm = createClusterManager({ c }, () => picks.shift() ?? 0);
    const first = c.endpoints[0];
    if (first === undefined) throw new Error('fixture');
    cm.acquire(c, first);
    expect(cm.chooseHost(c, ctx)?.address).toBe('10.0.0.2');
  });

  it('ORIGINAL_DST takes IP:port only', () => {
    expect(ipPort('10.1.2.3:8000')).toEqual({ address: '10.1.2.3', port: 8000 });
    expect(ipPort('[::1]:8000')).toEqual({ address: '::1', port: 8000 });
    expect(ipPort('pod.local:8000')).toBeUndefined();
    expect(ipPort('10.1.2.3')).toBeUndefined();
    const c = cluster({
      type: 'ORIGINAL_DST',
      lbPolicy: 'CLUSTER_PROVIDED',
      endpoints: [],
      originalDst: { httpHeaderName: 'x-dst', metadataKey: undefined },
    });
    const cm = createClusterManager({ c });
    expect(cm.chooseHost(c, { headers: new HeaderMap([['x-dst', '10.9.9.9:81']]), metadata: new Map() })).toEqual({
      address: '10.9.9.9',
      port: 81,
    });
    expect(cm.chooseHost(c, ctx)).toBeUndefined();
  });
});
