/**
 * Loads the same Envoy v3 bootstrap YAML a real Envoy would load and turns the subset the harness implements into
 * typed, frozen config. Anything else is refused with its YAML path, never ignored: a harness that silently skipped
 * a field would let a test pass against behaviour Envoy does not have.
 *
 * Shipped YAML has fixed ports, so `overrides` remaps listener ports (usually to 0) and cluster endpoints (to the
 * ports the test's servers actually bound).
 */
import { mapFile } from './transport-socket.js';
import { parse as parseYaml } from 'yaml';
import type { Result } from '../../src/errors.js';
import { parseHostPort, readCluster, readSocketAddress } from './cluster-config.js';
import { ConfigReader, UNSUPPORTED, deepFreeze, isPlainObject } from './config-reader.js';
import type {
  ClusterConfig,
  EnvoyConfig,
  ExtProcFilterConfig,
  HcmConfig,
  ListenerConfig,
  RouteEntry,
  VirtualHost,
} from './envoy-config-types.js';
import { EXT_PROC_FILTER_NAME, readExtProcFilter } from './ext-proc-config.js';
import { readLayeredRuntime } from './runtime-config.js';

export type * from './envoy-config-types.js';

const HCM_NAME = 'envoy.filters.network.http_connection_manager';
const HCM_TYPE = 'type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager';
const BUFFER_NAME = 'envoy.filters.http.buffer';
const BUFFER_TYPE = 'type.googleapis.com/envoy.extensions.filters.http.buffer.v3.Buffer';
const ROUTER_NAME = 'envoy.filters.http.router';
const ROUTER_TYPE = 'type.googleapis.com/envoy.extensions.filters.http.router.v3.Router';
const DEFAULT_BUFFER_LIMIT = 1024 * 1024;
const CLUSTER_NOT_FOUND_CODES = { SERVICE_UNAVAILABLE: 503, NOT_FOUND: 404, INTERNAL_SERVER_ERROR: 500 } as const;

/** Test-time remapping of what the YAML hard-codes. Names that match nothing are refused. */
export interface EnvoyConfigOverrides {
  /** Listener name -> port (0 = any free port). */
  readonly listenerPorts?: Readonly<Record<string, number>>;
  /** Cluster name -> replacement endpoints as "host:port" (not for ORIGINAL_DST clusters). */
  readonly clusterEndpoints?: Readonly<Record<string, readonly string[]>>;
  /** Folder prefix -> local folder for files the config names (TLS certificates), e.g. a test's own PKI. */
  readonly fileRoots?: Readonly<Record<string, string>>;
}

/** Every issue found, each prefixed with its YAML path. */
export interface EnvoyConfigError {
  readonly message: string;
  readonly issues: readonly string[];
}

/** Parses and validates a bootstrap; the error lists every problem, not just the first. */
export function loadEnvoyConfig(yamlText: string, overrides: EnvoyConfigOverrides = {}): Result<EnvoyConfig, EnvoyConfigError> {
  let doc: unknown;
  try {
    doc = parseYaml(yamlText);
  } catch (e) {
    return fail([`(yaml): ${(e as Error).message}`]);
  }
  const r = new ConfigReader();
  const root = r.obj(doc ?? {}, '(root)', ['admin', 'static_resources', 'layered_runtime']);
  const runtime = readLayeredRuntime(r, root['layered_runtime']);
  const sr = r.obj(root['static_resources'] ?? {}, 'static_resources', ['listeners', 'clusters']);
  const clusters: Record<string, ClusterConfig> = {};
  r.arr(sr['clusters'], 'static_resources.clusters').forEach((c, i) => {
    const path = `static_resources.clusters[${i}]`;
    const cluster = readCluster(r, c, path);
    if (cluster === undefined) return;
    if (Object.hasOwn(clusters, cluster.name)) r.issue(`${path}.name`, `duplicate cluster "${cluster.name}"`);
    clusters[cluster.name] = cluster;
  });
  const listeners = r
    .arr(sr['listeners'], 'static_resources.listeners')
    .map((l, i) => readListener(r, l, `static_resources.listeners[${i}]`))
    .filter((l): l is ListenerConfig => l !== undefined);
  const names = new Set<string>();
  listeners.forEach((l, i) => {
    if (names.has(l.name)) r.issue(`static_resources.listeners[${i}].name`, `duplicate listener "${l.name}"`);
    names.add(l.name);
  });
  const config = applyOverrides(r, { listeners, clusters, runtime }, overrides);
  checkReferences(r, config);
  if (r.issues.length > 0) return fail(r.issues);
  return { ok: true, value: deepFreeze(config) };
}

/** For tests and the demo: the loaded config, or an Error listing every issue. */
export function mustLoadEnvoyConfig(yamlText: string, overrides?: EnvoyConfigOverrides): EnvoyConfig {
  const loaded = loadEnvoyConfig(yamlText, overrides);
  if (!loaded.ok) throw new Error(loaded.error.message);
  return loaded.value;
}

function fail(issues: readonly string[]): { ok: false; error: EnvoyConfigError } {
  return { ok: false, error: { message: `envoy config refused:\n  ${issues.join('\n  ')}`, issues } };
}

function readListener(r: ConfigReader, value: unknown, path: string): ListenerConfig | undefined {
  const o = r.obj(value, path, ['name', 'address', 'per_connection_buffer_limit_bytes', 'filter_chains']);
  const name = r.requiredStr(o['name'], `${path}.name`);
  const address = readSocketAddress(r, o['address'], `${path}.address`);
  const chains = r.arr(o['filter_chains'], `${path}.filter_chains`);
  if (chains.length !== 1) r.issue(`${path}.filter_chains`, `exactly one filter chain is supported by the kvgate harness`);
  const chain = r.obj(chains[0] ?? {}, `${path}.filter_chains[0]`, ['filters']);
  const filters = r.arr(chain['filters'], `${path}.filter_chains[0].filters`);
  if (filters.length !== 1) {
    r.issue(`${path}.filter_chains[0].filters`, 'exactly one network filter (the HttpConnectionManager) is supported');
  }
  const hcm = readHcm(r, filters[0] ?? {}, `${path}.filter_chains[0].filters[0]`);
  if (name === undefined || address === undefined || hcm === undefined) return undefined;
  return {
    name,
    address: address.address,
    port: address.port,
    perConnectionBufferLimitBytes: r.uint(
      o['per_connection_buffer_limit_bytes'],
      `${path}.per_connection_buffer_limit_bytes`,
      DEFAULT_BUFFER_LIMIT,
    ),
    hcm,
  };
}

function readHcm(r: ConfigReader, value: unknown, path: string): HcmConfig | undefined {
  const f = r.obj(value, path, ['name', 'typed_config']);
  if (f['name'] !== HCM_NAME) r.issue(`${path}.name`, `"${String(f['name'])}" ${UNSUPPORTED} (only ${HCM_NAME})`);
  const tp = `${path}.typed_config`;
  const o = r.typed(f['typed_config'] ?? {}, tp, HCM_TYPE, [
    'stat_prefix',
    'codec_type',
    'stream_idle_timeout',
    'request_timeout',
    'request_headers_timeout',
    // The harness never rewrites x-request-id (it adds one only when absent), which is what Envoy does with this set
    // to true or for requests it classes as internal; false would mean regenerating it for edge requests.
    'preserve_external_request_id',
    'route_config',
    'http_filters',
  ]);
  if (
    o['preserve_external_request_id'] !== undefined &&
    r.bool(o['preserve_external_request_id'], `${tp}.preserve_external_request_id`, false) !== true
  ) {
    r.issue(`${tp}.preserve_external_request_id`, `false ${UNSUPPORTED} (the harness always preserves x-request-id)`);
  }
  r.enumOf(o['codec_type'], `${tp}.codec_type`, ['AUTO', 'HTTP1'], 'AUTO');
  const statPrefix = r.requiredStr(o['stat_prefix'], `${tp}.stat_prefix`) ?? '';
  const rc = r.obj(r.need(o['route_config'], `${tp}.route_config`), `${tp}.route_config`, ['name', 'virtual_hosts']);
  const virtualHosts = r
    .arr(rc['virtual_hosts'], `${tp}.route_config.virtual_hosts`)
    .map((vh, i) => readVirtualHost(r, vh, `${tp}.route_config.virtual_hosts[${i}]`));
  const { extProc, buffer } = readHttpFilters(r, o['http_filters'], `${tp}.http_filters`);
  return {
    statPrefix,
    streamIdleTimeoutMs: r.durationMs(o['stream_idle_timeout'], `${tp}.stream_idle_timeout`, 300_000),
    requestTimeoutMs: r.durationMs(o['request_timeout'], `${tp}.request_timeout`, 0),
    requestHeadersTimeoutMs: r.durationMs(o['request_headers_timeout'], `${tp}.request_headers_timeout`, 0),
    routeConfigName: r.str(rc['name'], `${tp}.route_config.name`, '') ?? '',
    virtualHosts,
    buffer,
    extProc,
  };
}

/** The chain must be `[buffer?, ext_proc?, router]`: the router last, at most one of each before it, in that order. */
function readHttpFilters(
  r: ConfigReader,
  value: unknown,
  path: string,
): { extProc: ExtProcFilterConfig | undefined; buffer: HcmConfig['buffer'] } {
  const filters = r.arr(value, path);
  let extProc: ExtProcFilterConfig | undefined;
  let buffer: HcmConfig['buffer'];
  filters.forEach((raw, i) => {
    const p = `${path}[${i}]`;
    const f = r.obj(raw, p, ['name', 'typed_config']);
    const isLast = i === filters.length - 1;
    if (f['name'] === ROUTER_NAME) {
      if (!isLast) r.issue(`${p}.name`, 'the router must be the last HTTP filter');
      r.typed(f['typed_config'] ?? {}, `${p}.typed_config`, ROUTER_TYPE, []);
    } else if (f['name'] === BUFFER_NAME) {
      if (buffer !== undefined || extProc !== undefined) r.issue(`${p}.name`, `a buffer filter after another filter is ${UNSUPPORTED}`);
      const b = r.typed(f['typed_config'] ?? {}, `${p}.typed_config`, BUFFER_TYPE, ['max_request_bytes']);
      // UInt32Value: protobuf JSON writes it as a bare number; Envoy refuses the filter without it.
      const max = b['max_request_bytes'];
      if (max === undefined) r.issue(`${p}.typed_config.max_request_bytes`, 'required (Envoy refuses a buffer filter without it)');
      const n = isPlainObject(max) ? r.obj(max, `${p}.typed_config.max_request_bytes`, ['value'])['value'] : max;
      buffer = { maxRequestBytes: r.uint(n, `${p}.typed_config.max_request_bytes`, 1) };
      if (isLast) r.issue(p, 'the router must follow the buffer filter');
    } else if (f['name'] === EXT_PROC_FILTER_NAME) {
      if (extProc !== undefined) r.issue(`${p}.name`, `a second ext_proc filter is ${UNSUPPORTED}`);
      else extProc = readExtProcFilter(r, f['typed_config'] ?? {}, `${p}.typed_config`);
      if (isLast) r.issue(p, 'the router must follow the ext_proc filter');
    } else {
      const typeUrl = (f['typed_config'] as Record<string, unknown> | undefined)?.['@type'];
      r.issue(`${p}.name`, `"${String(f['name'])}" (${String(typeUrl)}) ${UNSUPPORTED}`);
    }
  });
  if (filters.length === 0) r.issue(path, `required: [${BUFFER_NAME}?, ${EXT_PROC_FILTER_NAME}?, ${ROUTER_NAME}]`);
  return { extProc, buffer };
}

function readVirtualHost(r: ConfigReader, value: unknown, path: string): VirtualHost {
  const o = r.obj(value, path, ['name', 'domains', 'routes']);
  const domains = r
    .arr(o['domains'], `${path}.domains`)
    .map((d, i) => r.requiredStr(d, `${path}.domains[${i}]`))
    .filter((d): d is string => d !== undefined);
  if (domains.length === 0) r.issue(`${path}.domains`, 'needs at least one domain');
  return {
    name: r.requiredStr(o['name'], `${path}.name`) ?? '',
    domains,
    routes: r.arr(o['routes'], `${path}.routes`).map((rt, i) => readRoute(r, rt, `${path}.routes[${i}]`)),
  };
}

function readRoute(r: ConfigReader, value: unknown, path: string): RouteEntry {
  const o = r.obj(value, path, ['name', 'match', 'route']);
  const m = r.obj(o['match'] ?? {}, `${path}.match`, ['prefix', 'path']);
  const prefix = r.str(m['prefix'], `${path}.match.prefix`);
  const exact = r.str(m['path'], `${path}.match.path`);
  if ((prefix === undefined) === (exact === undefined)) r.issue(`${path}.match`, 'needs exactly one of prefix or path');
  const ap = `${path}.route`;
  const a = r.obj(r.need(o['route'], ap, 'direct_response and redirect are unsupported'), ap, [
    'cluster',
    'cluster_header',
    'cluster_not_found_response_code',
    'timeout',
    'idle_timeout',
  ]);
  const cluster = r.str(a['cluster'], `${ap}.cluster`);
  const clusterHeader = r.str(a['cluster_header'], `${ap}.cluster_header`)?.toLowerCase();
  if ((cluster === undefined) === (clusterHeader === undefined)) r.issue(ap, 'needs exactly one of cluster or cluster_header');
  const nf = r.enumOf(
    a['cluster_not_found_response_code'],
    `${ap}.cluster_not_found_response_code`,
    Object.keys(CLUSTER_NOT_FOUND_CODES) as Array<keyof typeof CLUSTER_NOT_FOUND_CODES>,
    'SERVICE_UNAVAILABLE',
  );
  return {
    name: r.str(o['name'], `${path}.name`),
    match: exact !== undefined ? { path: exact } : { prefix: prefix ?? '/' },
    action: {
      cluster,
      clusterHeader,
      clusterNotFoundResponseCode: CLUSTER_NOT_FOUND_CODES[nf],
      timeoutMs: r.durationMs(a['timeout'], `${ap}.timeout`, 15_000),
      idleTimeoutMs: a['idle_timeout'] === undefined ? undefined : r.durationMs(a['idle_timeout'], `${ap}.idle_timeout`, 0),
    },
  };
}

function applyOverrides(r: ConfigReader, config: EnvoyConfig, overrides: EnvoyConfigOverrides): EnvoyConfig {
  const ports = overrides.listenerPorts ?? {};
  for (const name of Object.keys(ports)) {
    if (!config.listeners.some((l) => l.name === name)) r.issue(`(overrides).listenerPorts.${name}`, 'no such listener');
  }
  const listeners = config.listeners.map((l) => (Object.hasOwn(ports, l.name) ? { ...l, port: ports[l.name] ?? l.port } : l));
  const clusters: Record<string, ClusterConfig> = { ...config.clusters };
  for (const [name, list] of Object.entries(overrides.clusterEndpoints ?? {})) {
    const path = `(overrides).clusterEndpoints.${name}`;
    const cluster = clusters[name];
    if (cluster === undefined) {
      r.issue(path, 'no such cluster');
      continue;
    }
    if (cluster.type === 'ORIGINAL_DST') {
      r.issue(path, 'ORIGINAL_DST clusters have no endpoints to override');
      continue;
    }
    const endpoints = list.map((text, i) => parseHostPort(text) ?? r.issue(`${path}[${i}]`, `"${text}" is not host:port`));
    clusters[name] = { ...cluster, endpoints: endpoints.filter((e) => e !== undefined), dnsNames: [] };
  }
  for (const [name, c] of Object.entries(clusters)) {
    for (const dns of c.dnsNames ?? []) {
      r.issue(
        `static_resources.clusters.${name}`,
        `"${dns}": the harness resolves only IP literals and localhost; give the hosts its DNS answer holds in clusterEndpoints`,
      );
    }
  }
  const roots = overrides.fileRoots ?? {};
  for (const [name, c] of Object.entries(clusters)) {
    const t = c.tls;
    if (t === undefined) continue;
    const map = (f: string | undefined) => (f === undefined ? undefined : mapFile(f, roots));
    clusters[name] = { ...c, tls: { ...t, certFile: map(t.certFile), keyFile: map(t.keyFile), caFile: map(t.caFile) } };
  }
  return { listeners, clusters, runtime: config.runtime };
}

/** Envoy refuses a static route or ext_proc filter that names a missing cluster; so does the harness. */
function checkReferences(r: ConfigReader, config: EnvoyConfig): void {
  config.listeners.forEach((l, li) => {
    const base = `static_resources.listeners[${li}].filter_chains[0].filters[0].typed_config`;
    l.hcm.virtualHosts.forEach((vh, vi) =>
      vh.routes.forEach((rt, ri) => {
        const c = rt.action.cluster;
        if (c !== undefined && config.clusters[c] === undefined) {
          r.issue(`${base}.route_config.virtual_hosts[${vi}].routes[${ri}].route.cluster`, `unknown cluster "${c}"`);
        }
      }),
    );
    const ep = l.hcm.extProc;
    if (ep === undefined) return;
    const cluster = config.clusters[ep.clusterName];
    const path = `${base}.http_filters (ext_proc).grpc_service.envoy_grpc.cluster_name`;
    if (cluster === undefined) r.issue(path, `unknown cluster "${ep.clusterName}"`);
    else if (!cluster.http2) {
      r.issue(path, `cluster "${ep.clusterName}" must set http2_protocol_options: gRPC needs HTTP/2`);
    } else if (cluster.type === 'ORIGINAL_DST' || cluster.endpoints.length === 0) {
      r.issue(path, `cluster "${ep.clusterName}" needs at least one static endpoint`);
    }
  });
}
