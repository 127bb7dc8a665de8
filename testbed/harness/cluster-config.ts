/**
 * Reads `static_resources.clusters[]`. Mirrors the load-time checks Envoy makes for the cluster types the harness
 * supports (an ORIGINAL_DST cluster must use CLUSTER_PROVIDED and has no load assignment; STATIC needs IP literals),
 * and refuses DNS names it cannot resolve offline.
 */
import { isIP } from 'node:net';
import { readCircuitBreakers } from './circuit-breakers.js';
import { UNSUPPORTED, isPlainObject, type ConfigReader } from './config-reader.js';
import { readTransportSocket } from './transport-socket.js';
import type {
  ClusterConfig,
  ClusterType,
  Endpoint,
  HealthCheckConfig,
  LbPolicy,
  MetadataKey,
  OriginalDstConfig,
  OverrideHostConfig,
  OverrideHostSource,
} from './envoy-config-types.js';

const HTTP_PROTOCOL_OPTIONS = 'envoy.extensions.upstreams.http.v3.HttpProtocolOptions';
const OVERRIDE_HOST_TYPE = 'type.googleapis.com/envoy.extensions.load_balancing_policies.override_host.v3.OverrideHost';
const LB_TYPES: Readonly<Record<string, 'ROUND_ROBIN' | 'LEAST_REQUEST'>> = {
  'type.googleapis.com/envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin': 'ROUND_ROBIN',
  'type.googleapis.com/envoy.extensions.load_balancing_policies.least_request.v3.LeastRequest': 'LEAST_REQUEST',
};

/** Reads one cluster. `undefined` only when the entry is too broken to name. */
export function readCluster(r: ConfigReader, value: unknown, path: string): ClusterConfig | undefined {
  const o = r.obj(value, path, [
    'name',
    'type',
    'lb_policy',
    'connect_timeout',
    'load_assignment',
    'original_dst_lb_config',
    'typed_extension_protocol_options',
    'health_checks',
    'load_balancing_policy',
    'circuit_breakers',
    'transport_socket',
    'dns_lookup_family',
    'dns_refresh_rate',
  ]);
  const name = r.requiredStr(o['name'], `${path}.name`);
  if (name === undefined) return undefined;
  const type = r.enumOf<ClusterType>(o['type'], `${path}.type`, ['STATIC', 'STRICT_DNS', 'ORIGINAL_DST'], 'STATIC');
  const lbPolicy = r.enumOf<LbPolicy>(
    o['lb_policy'],
    `${path}.lb_policy`,
    ['ROUND_ROBIN', 'LEAST_REQUEST', 'CLUSTER_PROVIDED'],
    'ROUND_ROBIN',
  );
  if (type === 'ORIGINAL_DST' && lbPolicy !== 'CLUSTER_PROVIDED') {
    r.issue(`${path}.lb_policy`, `ORIGINAL_DST clusters need CLUSTER_PROVIDED (Envoy refuses ${lbPolicy})`);
  }
  if (type !== 'ORIGINAL_DST' && lbPolicy === 'CLUSTER_PROVIDED') {
    r.issue(`${path}.lb_policy`, `CLUSTER_PROVIDED is only valid for ORIGINAL_DST clusters`);
  }
  if (type === 'ORIGINAL_DST' && o['load_assignment'] !== undefined) {
    r.issue(`${path}.load_assignment`, 'ORIGINAL_DST clusters must have no load assignment configured');
  }
  if (type !== 'ORIGINAL_DST' && o['original_dst_lb_config'] !== undefined) {
    r.issue(`${path}.original_dst_lb_config`, 'only valid on ORIGINAL_DST clusters');
  }
  for (const key of ['dns_lookup_family', 'dns_refresh_rate']) {
    if (o[key] !== undefined && type !== 'STRICT_DNS') r.issue(`${path}.${key}`, 'only valid on STRICT_DNS clusters');
  }
  r.enumOf(o['dns_lookup_family'], `${path}.dns_lookup_family`, ['AUTO', 'V4_ONLY', 'V6_ONLY', 'V4_PREFERRED', 'ALL'], 'AUTO');
  const dnsNames: string[] = [];
  const endpoints = type === 'ORIGINAL_DST' ? [] : readLoadAssignment(r, o['load_assignment'], path, type, dnsNames);
  return {
    // Envoy re-resolves every dns_refresh_rate (default 5 s); the harness has no DNS: a test plays each new answer
    // with EnvoyHarness.setClusterEndpoints.
    dnsRefreshMs: type === 'STRICT_DNS' ? r.durationMs(o['dns_refresh_rate'], `${path}.dns_refresh_rate`, 5000) : undefined,
    dnsNames,
    name,
    type,
    lbPolicy,
    connectTimeoutMs: r.durationMs(o['connect_timeout'], `${path}.connect_timeout`, 5000),
    endpoints,
    ...readProtocolOptions(r, o['typed_extension_protocol_options'], `${path}.typed_extension_protocol_options`),
    originalDst: type === 'ORIGINAL_DST' ? readOriginalDst(r, o['original_dst_lb_config'], path) : undefined,
    overrideHost: readLbPolicy(r, o['load_balancing_policy'], `${path}.load_balancing_policy`),
    circuitBreakers: readCircuitBreakers(r, o['circuit_breakers'], `${path}.circuit_breakers`),
    healthChecks: r.arr(o['health_checks'], `${path}.health_checks`).map((h, i) => readHealthCheck(r, h, `${path}.health_checks[${i}]`)),
    tls: readTransportSocket(r, o['transport_socket'], `${path}.transport_socket`),
  };
}

/** Parses "host:port" as used by the endpoint override hook and by ORIGINAL_DST headers. */
export function parseHostPort(text: string): Endpoint | undefined {
  const m = /^\[([^\]]+)\]:(\d{1,5})$/.exec(text) ?? /^([^:]+):(\d{1,5})$/.exec(text);
  if (!m || m[1] === undefined || m[2] === undefined) return undefined;
  const port = Number(m[2]);
  if (port < 1 || port > 65535) return undefined;
  return { address: m[1], port };
}

/** A STRICT_DNS cluster's DNS names go to `dnsNames`: the harness resolves none, a test gives their hosts (overrides). */
function readLoadAssignment(r: ConfigReader, value: unknown, path: string, type: ClusterType, dnsNames: string[]): Endpoint[] {
  const la = r.obj(value ?? {}, `${path}.load_assignment`, ['cluster_name', 'endpoints']);
  r.str(la['cluster_name'], `${path}.load_assignment.cluster_name`);
  const out: Endpoint[] = [];
  r.arr(la['endpoints'], `${path}.load_assignment.endpoints`).forEach((group, gi) => {
    const gp = `${path}.load_assignment.endpoints[${gi}]`;
    const g = r.obj(group, gp, ['lb_endpoints']);
    r.arr(g['lb_endpoints'], `${gp}.lb_endpoints`).forEach((lbe, li) => {
      const lp = `${gp}.lb_endpoints[${li}]`;
      const ep = r.obj(r.obj(lbe, lp, ['endpoint'])['endpoint'] ?? {}, `${lp}.endpoint`, ['address']);
      const sa = readSocketAddress(r, ep['address'], `${lp}.endpoint.address`);
      if (sa === undefined) return;
      const resolved = resolveLiteral(sa.address, type);
      if (resolved === undefined && type === 'STRICT_DNS') {
        dnsNames.push(`${sa.address}:${sa.port}`);
        return;
      }
      if (resolved === undefined) {
        r.issue(
          `${lp}.endpoint.address.socket_address.address`,
          type === 'STATIC'
            ? `"${sa.address}" is not an IP address (STATIC clusters need IP literals)`
            : `"${sa.address}": the harness resolves only IP literals and localhost`,
        );
        return;
      }
      out.push({ address: resolved, port: sa.port });
    });
  });
  return out;
}

/** `address.socket_address { address, port_value }`, shared with listeners. */
export function readSocketAddress(r: ConfigReader, value: unknown, path: string): Endpoint | undefined {
  const a = r.obj(value ?? {}, path, ['socket_address']);
  const sa = r.obj(a['socket_address'] ?? {}, `${path}.socket_address`, ['address', 'port_value', 'protocol']);
  r.enumOf(sa['protocol'], `${path}.socket_address.protocol`, ['TCP'], 'TCP');
  const address = r.requiredStr(sa['address'], `${path}.socket_address.address`);
  const port = r.uint(sa['port_value'], `${path}.socket_address.port_value`, 0);
  if (port > 65535) r.issue(`${path}.socket_address.port_value`, 'must be at most 65535');
  return address === undefined ? undefined : { address, port };
}

function resolveLiteral(address: string, type: ClusterType): string | undefined {
  if (isIP(address) !== 0) return address;
  if (type === 'STRICT_DNS' && address === 'localhost') return '127.0.0.1';
  return undefined;
}

interface ProtocolOptions {
  readonly http2: boolean;
  readonly maxRequestsPerConnection: number | undefined;
  readonly idleTimeoutMs: number | undefined;
}

function readProtocolOptions(r: ConfigReader, value: unknown, path: string): ProtocolOptions {
  const none = { http2: false, maxRequestsPerConnection: undefined, idleTimeoutMs: undefined };
  if (value === undefined) return none;
  const o = r.obj(value, path, [HTTP_PROTOCOL_OPTIONS]);
  if (o[HTTP_PROTOCOL_OPTIONS] === undefined) return none;
  const p = `${path}.${HTTP_PROTOCOL_OPTIONS}`;
  const hpo = r.typed(o[HTTP_PROTOCOL_OPTIONS], p, `type.googleapis.com/${HTTP_PROTOCOL_OPTIONS}`, [
    'explicit_http_config',
    'common_http_protocol_options',
  ]);
  const common = r.obj(hpo['common_http_protocol_options'] ?? {}, `${p}.common_http_protocol_options`, [
    'max_requests_per_connection',
    'idle_timeout',
  ]);
  // Envoy's default for upstream connections is one hour (api/envoy/config/core/v3/protocol.proto, idle_timeout);
  // the harness models an explicit value only (test runs never idle an hour).
  const idleTimeoutMs =
    common['idle_timeout'] === undefined
      ? undefined
      : r.durationMs(common['idle_timeout'], `${p}.common_http_protocol_options.idle_timeout`, 0);
  const rawMax = common['max_requests_per_connection'];
  const max = rawMax === undefined ? undefined : Number(rawMax);
  if (max !== undefined && !(Number.isInteger(max) && max > 0)) {
    r.issue(`${p}.common_http_protocol_options.max_requests_per_connection`, 'must be a positive integer');
  }
  return { http2: readHttp2(r, hpo, p), maxRequestsPerConnection: max, idleTimeoutMs: idleTimeoutMs || undefined };
}

function readHttp2(r: ConfigReader, hpo: Record<string, unknown>, p: string): boolean {
  const explicit = r.obj(hpo['explicit_http_config'] ?? {}, `${p}.explicit_http_config`, [
    'http2_protocol_options',
    'http_protocol_options',
  ]);
  if (explicit['http2_protocol_options'] !== undefined) {
    r.obj(explicit['http2_protocol_options'], `${p}.explicit_http_config.http2_protocol_options`, []);
    return true;
  }
  if (explicit['http_protocol_options'] !== undefined) {
    r.obj(explicit['http_protocol_options'], `${p}.explicit_http_config.http_protocol_options`, []);
  }
  return false;
}

function readOriginalDst(r: ConfigReader, value: unknown, path: string): OriginalDstConfig {
  const p = `${path}.original_dst_lb_config`;
  const o = r.obj(value ?? {}, p, ['use_http_header', 'http_header_name', 'metadata_key']);
  const useHeader = r.bool(o['use_http_header'], `${p}.use_http_header`, false);
  const headerName = r.str(o['http_header_name'], `${p}.http_header_name`, 'x-envoy-original-dst-host');
  return {
    httpHeaderName: useHeader ? headerName?.toLowerCase() : undefined,
    metadataKey: o['metadata_key'] === undefined ? undefined : readMetadataKey(r, o['metadata_key'], `${p}.metadata_key`),
  };
}

function readMetadataKey(r: ConfigReader, value: unknown, path: string): MetadataKey | undefined {
  const o = r.obj(value, path, ['key', 'path']);
  const key = r.requiredStr(o['key'], `${path}.key`);
  const segments = r.arr(o['path'], `${path}.path`).map((seg, i) => {
    const s = r.obj(seg, `${path}.path[${i}]`, ['key']);
    return r.requiredStr(s['key'], `${path}.path[${i}].key`) ?? '';
  });
  if (segments.length === 0) r.issue(`${path}.path`, 'needs at least one segment');
  return key === undefined ? undefined : { key, path: segments };
}

/** `load_balancing_policy`: override_host (with a round-robin/least-request fallback) or a plain policy. */
function readLbPolicy(r: ConfigReader, value: unknown, path: string): OverrideHostConfig | undefined {
  if (value === undefined) return undefined;
  const policies = r.arr(r.obj(value, path, ['policies'])['policies'], `${path}.policies`);
  if (policies.length !== 1) {
    r.issue(`${path}.policies`, `exactly one policy is supported by the kvgate harness`);
    return undefined;
  }
  const p = `${path}.policies[0].typed_extension_config`;
  const tec = r.obj(r.obj(policies[0], `${path}.policies[0]`, ['typed_extension_config'])['typed_extension_config'] ?? {}, p, [
    'name',
    'typed_config',
  ]);
  r.str(tec['name'], `${p}.name`);
  const tc = tec['typed_config'];
  const typeUrl = typeof tc === 'object' && tc !== null ? (tc as Record<string, unknown>)['@type'] : undefined;
  if (typeUrl !== OVERRIDE_HOST_TYPE) {
    r.issue(`${p}.typed_config.@type`, `"${String(typeUrl)}" ${UNSUPPORTED} (only override_host)`);
    return undefined;
  }
  const oh = r.typed(tc, `${p}.typed_config`, OVERRIDE_HOST_TYPE, ['override_host_sources', 'fallback_policy']);
  const sources: OverrideHostSource[] = [];
  r.arr(oh['override_host_sources'], `${p}.typed_config.override_host_sources`).forEach((s, i) => {
    const sp = `${p}.typed_config.override_host_sources[${i}]`;
    const so = r.obj(s, sp, ['metadata', 'header']);
    if (so['header'] !== undefined) {
      const h = r.requiredStr(so['header'], `${sp}.header`);
      if (h !== undefined) sources.push({ header: h.toLowerCase() });
    } else {
      const m = readMetadataKey(r, so['metadata'] ?? {}, `${sp}.metadata`);
      if (m !== undefined) sources.push({ metadata: m });
    }
  });
  return { sources, fallback: readFallback(r, oh['fallback_policy'], `${p}.typed_config.fallback_policy`) };
}

function readFallback(r: ConfigReader, value: unknown, path: string): 'ROUND_ROBIN' | 'LEAST_REQUEST' {
  const policies = r.arr(r.obj(value ?? {}, path, ['policies'])['policies'], `${path}.policies`);
  if (policies.length !== 1) {
    r.issue(`${path}.policies`, 'exactly one fallback policy (round_robin or least_request) is supported');
    return 'ROUND_ROBIN';
  }
  const p = `${path}.policies[0].typed_extension_config`;
  const tec = r.obj(r.obj(policies[0], `${path}.policies[0]`, ['typed_extension_config'])['typed_extension_config'] ?? {}, p, [
    'name',
    'typed_config',
  ]);
  const tc = r.obj(tec['typed_config'] ?? {}, `${p}.typed_config`, ['@type']);
  const policy = LB_TYPES[String(tc['@type'])];
  if (policy === undefined) {
    r.issue(`${p}.typed_config.@type`, `"${String(tc['@type'])}" ${UNSUPPORTED}`);
    return 'ROUND_ROBIN';
  }
  return policy;
}

function readHealthCheck(r: ConfigReader, value: unknown, path: string): HealthCheckConfig {
  const o = r.obj(value, path, [
    'timeout',
    'interval',
    'unhealthy_threshold',
    'healthy_threshold',
    'no_traffic_interval',
    'no_traffic_healthy_interval',
    'interval_jitter',
    'http_health_check',
    'grpc_health_check',
  ]);
  for (const key of ['timeout', 'interval', 'unhealthy_threshold', 'healthy_threshold']) {
    if (o[key] === undefined) r.issue(`${path}.${key}`, 'required (Envoy refuses a health check without it)');
  }
  // UInt32Value: protobuf JSON writes it as a bare number; `{ value: n }` is accepted too.
  const threshold = (key: string): number => {
    const v = o[key];
    const n = isPlainObject(v) ? r.obj(v, `${path}.${key}`, ['value'])['value'] : v;
    return r.uint(n, `${path}.${key}`, 1);
  };
  let check: HealthCheckConfig['check'] = { http: '/' };
  if (o['grpc_health_check'] !== undefined) {
    const g = r.obj(o['grpc_health_check'], `${path}.grpc_health_check`, ['service_name']);
    check = { grpc: r.str(g['service_name'], `${path}.grpc_health_check.service_name`, '') ?? '' };
  } else if (o['http_health_check'] !== undefined) {
    const h = r.obj(o['http_health_check'], `${path}.http_health_check`, ['path']);
    check = { http: r.requiredStr(h['path'], `${path}.http_health_check.path`) ?? '/' };
  } else {
    r.issue(path, 'needs http_health_check or grpc_health_check (the kinds the harness records)');
  }
  // Envoy's defaults: health_checker_base_impl.cc (envoyproxy/envoy @045a5b1a), `no_traffic_interval_` 60000 ms,
  // `no_traffic_healthy_interval_` = no_traffic_interval, `interval_jitter_` 0.
  const noTrafficIntervalMs = r.durationMs(o['no_traffic_interval'], `${path}.no_traffic_interval`, 60_000);
  return {
    timeoutMs: r.durationMs(o['timeout'], `${path}.timeout`, 1000),
    intervalMs: r.durationMs(o['interval'], `${path}.interval`, 5000),
    noTrafficIntervalMs,
    noTrafficHealthyIntervalMs: r.durationMs(o['no_traffic_healthy_interval'], `${path}.no_traffic_healthy_interval`, noTrafficIntervalMs),
    intervalJitterMs: r.durationMs(o['interval_jitter'], `${path}.interval_jitter`, 0),
    unhealthyThreshold: threshold('unhealthy_threshold'),
    healthyThreshold: threshold('healthy_threshold'),
    check,
  };
}
