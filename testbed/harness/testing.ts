/**
 * Test helpers: a scenario = fake ext_proc server + fake upstreams + the harness, wired through a real Envoy
 * bootstrap YAML (built here from the same shape as fixtures/envoy-cluster-header.yaml, so every
 * scenario also goes through the config loader), and a small HTTP/1.1 client that reports resets as values.
 */
import http from 'node:http';
import { stringify } from 'yaml';
import { mustLoadEnvoyConfig } from './envoy-config.js';
import { startEnvoyHarness, type EnvoyHarness, type EnvoyHarnessOptions } from './data-plane.js';
import { startFakeExtProc, type FakeExtProc, type FakeHandler } from './fake-ext-proc.js';
import { startFakeUpstream, type FakeUpstream, type UpstreamHandler } from './fake-upstream.js';

/**
 * A GIE data plane's pool cluster load balancing (gateway-api-inference-extension's Envoy config; Envoy
 * `envoy.load_balancing_policies.override_host`): the endpoint the picker set in `envoy.lb` metadata or the
 * `x-gateway-destination-endpoint` header, else round robin.
 */
export const GIE_OVERRIDE_HOST_POLICY = {
  policies: [
    {
      typed_extension_config: {
        name: 'envoy.load_balancing_policies.override_host',
        typed_config: {
          '@type': 'type.googleapis.com/envoy.extensions.load_balancing_policies.override_host.v3.OverrideHost',
          override_host_sources: [
            { metadata: { key: 'envoy.lb', path: [{ key: 'x-gateway-destination-endpoint' }] } },
            { header: 'x-gateway-destination-endpoint' },
          ],
          fallback_policy: {
            policies: [
              {
                typed_extension_config: {
                  name: 'envoy.load_balancing_policies.round_robin',
                  typed_config: { '@type': 'type.googleapis.com/envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin' },
                },
              },
            ],
          },
        },
      },
    },
  ],
};

export interface ScenarioOptions {
  readonly handler: FakeHandler;
  /** ext_proc `typed_config` fields besides `@type` and `grpc_service` (e.g. processing_mode). */
  readonly filter?: Record<string, unknown>;
  /**
   * Keep Envoy's own 200 ms `message_timeout` when `filter` sets none. Scenarios otherwise give the fake processor
   * 5 s, so a busy machine cannot turn a slow answer into a 504 in a test about something else.
   */
  readonly envoyDefaultMessageTimeout?: boolean;
  /** Route action; default `{ cluster_header: x-target-cluster, timeout: 0s }`. */
  readonly route?: Record<string, unknown>;
  /** The route's match prefix; default "/". */
  readonly prefix?: string;
  /** STATIC clusters backed by fake upstreams; default backend_a and backend_b. */
  readonly upstreams?: readonly string[];
  /** Further clusters, verbatim (e.g. an ORIGINAL_DST one). */
  readonly extraClusters?: readonly Record<string, unknown>[];
  readonly bufferLimit?: number;
  /** Fields merged into a generated cluster, by name (`ext_proc` or an upstream), e.g. circuit_breakers. */
  readonly clusterFields?: Readonly<Record<string, Record<string, unknown>>>;
  /** `layered_runtime` static layer values. */
  readonly runtime?: Readonly<Record<string, boolean>>;
  readonly upstreamHandler?: UpstreamHandler;
  readonly harness?: EnvoyHarnessOptions;
  /** HTTP filters before the ext_proc filter, verbatim (e.g. a buffer filter). */
  readonly filtersBefore?: readonly Record<string, unknown>[];
  /** Fields merged into the HTTP connection manager's typed_config (e.g. request_timeout). */
  readonly hcmFields?: Record<string, unknown>;
}

export interface Scenario {
  readonly harness: EnvoyHarness;
  readonly extProc: FakeExtProc;
  readonly upstreams: Readonly<Record<string, FakeUpstream>>;
  readonly url: string;
  /** `http.ingress.ext_proc.<name>` */
  extProcStat(name: string): number;
  stat(name: string): number;
  close(): Promise<void>;
}

/** The bootstrap a scenario runs, as YAML text. */
export function scenarioYaml(o: Omit<ScenarioOptions, 'handler' | 'harness' | 'upstreamHandler'>): string {
  const upstreams = o.upstreams ?? ['backend_a', 'backend_b'];
  const staticCluster = (name: string, port: number, http2 = false): Record<string, unknown> => ({
    name,
    type: 'STATIC',
    connect_timeout: '1s',
    ...(http2
      ? {
          typed_extension_protocol_options: {
            'envoy.extensions.upstreams.http.v3.HttpProtocolOptions': {
              '@type': 'type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions',
              explicit_http_config: { http2_protocol_options: {} },
            },
          },
        }
      : {}),
    load_assignment: {
      cluster_name: name,
      endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: '127.0.0.1', port_value: port } } } }] }],
    },
    ...(o.clusterFields?.[name] ?? {}),
  });
  const doc = {
    ...(o.runtime === undefined ? {} : { layered_runtime: { layers: [{ name: 'test', static_layer: o.runtime }] } }),
    static_resources: {
      listeners: [
        {
          name: 'public',
          address: { socket_address: { address: '127.0.0.1', port_value: 10000 } },
          ...(o.bufferLimit === undefined ? {} : { per_connection_buffer_limit_bytes: o.bufferLimit }),
          filter_chains: [
            {
              filters: [
                {
                  name: 'envoy.filters.network.http_connection_manager',
                  typed_config: {
                    '@type': 'type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager',
                    stat_prefix: 'ingress',
                    ...(o.hcmFields ?? {}),
                    route_config: {
                      name: 'local_route',
                      virtual_hosts: [
                        {
                          name: 'all',
                          domains: ['*'],
                          routes: [
                            { match: { prefix: o.prefix ?? '/' }, route: o.route ?? { cluster_header: 'x-target-cluster', timeout: '0s' } },
                          ],
                        },
                      ],
                    },
                    http_filters: [
                      ...(o.filtersBefore ?? []),
                      {
                        name: 'envoy.filters.http.ext_proc',
                        typed_config: {
                          '@type': 'type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor',
                          grpc_service: { envoy_grpc: { cluster_name: 'ext_proc' } },
                          ...(o.envoyDefaultMessageTimeout === true ? {} : { message_timeout: '5s' }),
                          ...(o.filter ?? {}),
                        },
                      },
                      {
                        name: 'envoy.filters.http.router',
                        typed_config: { '@type': 'type.googleapis.com/envoy.extensions.filters.http.router.v3.Router' },
                      },
                    ],
                  },
                },
              ],
            },
          ],
        },
      ],
      clusters: [staticCluster('ext_proc', 9002, true), ...upstreams.map((u, i) => staticCluster(u, 8001 + i)), ...(o.extraClusters ?? [])],
    },
  };
  return stringify(doc);
}

export async function startScenario(o: ScenarioOptions): Promise<Scenario> {
  const extProc = await startFakeExtProc(o.handler);
  const upstreams: Record<string, FakeUpstream> = {};
  for (const name of o.upstreams ?? ['backend_a', 'backend_b']) upstreams[name] = await startFakeUpstream(name, o.upstreamHandler);
  const clusterEndpoints: Record<string, string[]> = { ext_proc: [extProc.address] };
  for (const [name, u] of Object.entries(upstreams)) clusterEndpoints[name] = [u.address];
  const config = mustLoadEnvoyConfig(scenarioYaml(o), { listenerPorts: { public: 0 }, clusterEndpoints });
  const harness = await startEnvoyHarness(config, o.harness);
  const listener = harness.listeners['public'];
  if (listener === undefined) throw new Error('listener public missing');
  return {
    harness,
    extProc,
    upstreams,
    url: listener.url,
    extProcStat: (name) => harness.stats()[`http.ingress.ext_proc.${name}`] ?? Number.NaN,
    stat: (name) => harness.stats()[name] ?? Number.NaN,
    async close() {
      await harness.close();
      await extProc.close();
      await Promise.all(Object.values(upstreams).map((u) => u.close()));
    },
  };
}

export interface HttpResult {
  readonly status: number;
  readonly headers: http.IncomingHttpHeaders;
  readonly body: string;
  readonly trailers: http.IncomingHttpHeaders;
}

/** One request on a fresh connection; `{ error }` when the stream is reset (Envoy resets after the response started). */
export function request(
  url: string,
  opts: { method?: string; path?: string; headers?: Record<string, string>; body?: string | Buffer; chunked?: boolean } = {},
): Promise<HttpResult | { error: string; partial: string }> {
  return new Promise((resolve) => {
    const u = new URL(opts.path ?? '/', url);
    const headers: Record<string, string> = { ...(opts.headers ?? {}) };
    if (opts.body !== undefined && opts.chunked !== true) headers['content-length'] = String(Buffer.byteLength(opts.body));
    const req = http.request(u, { method: opts.method ?? (opts.body === undefined ? 'GET' : 'POST'), headers, agent: false });
    let partial = '';
    req.on('response', (res) => {
      res.setEncoding('utf8');
      res.on('data', (c: string) => (partial += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: partial, trailers: res.trailers }));
      res.on('error', (e) => resolve({ error: e.message, partial }));
      res.on('aborted', () => resolve({ error: 'aborted', partial }));
    });
    req.on('error', (e) => resolve({ error: e.message, partial }));
    if (opts.body !== undefined) req.write(opts.body);
    req.end();
  });
}

/** Narrows a request result, failing the test with the reset reason if the stream was reset. */
export function ok(r: HttpResult | { error: string }): HttpResult {
  if ('error' in r) throw new Error(`request was reset: ${r.error}`);
  return r;
}

/**
 * A chunked request written in `parts`, `gapMs` apart, so each part reaches the listener as its own read (and Envoy's
 * filters see one data callback per part), with optional trailers. Errors after the response (a local reply sent
 * while parts were still being written) are ignored: the response is the result.
 */
export function chunkedRequest(
  url: string,
  parts: readonly (string | Buffer)[],
  opts: { path?: string; headers?: Record<string, string>; trailers?: Record<string, string>; gapMs?: number } = {},
): Promise<HttpResult | { error: string; partial: string }> {
  return new Promise((resolve) => {
    const t = opts.trailers;
    const headers = { ...(opts.headers ?? {}), 'transfer-encoding': 'chunked', ...(t ? { trailer: Object.keys(t).join(',') } : {}) };
    const req = http.request(new URL(opts.path ?? '/', url), { method: 'POST', headers, agent: false });
    let partial = '';
    let answered = false;
    req.on('response', (res) => {
      answered = true;
      res.setEncoding('utf8');
      res.on('data', (c: string) => (partial += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: partial, trailers: res.trailers }));
      res.on('error', (e) => resolve({ error: e.message, partial }));
    });
    req.on('error', (e) => {
      if (!answered) resolve({ error: e.message, partial });
    });
    void (async () => {
      for (const p of parts) {
        if (answered || req.destroyed) return;
        req.write(p);
        await new Promise((r) => setTimeout(r, opts.gapMs ?? 30));
      }
      if (t) req.addTrailers(t);
      req.end();
    })();
  });
}
