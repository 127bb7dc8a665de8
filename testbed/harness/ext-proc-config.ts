/**
 * Reads the `envoy.filters.http.ext_proc` filter config (`ExternalProcessor`) with Envoy's defaults
 * (docs/envoy-ext-proc.md §4): headers SEND, bodies NONE, trailers SKIP, message_timeout 200 ms,
 * fail closed, status_on_error 500.
 */
import { UNSUPPORTED, type ConfigReader } from './config-reader.js';
import {
  BODY_SEND_MODES,
  HEADER_SEND_MODES,
  SUPPORTED_BODY_MODES,
  type BodySendMode,
  type ExtProcFilterConfig,
  type HeaderSendMode,
  type MutationRulesConfig,
  type ProcessingMode,
  type RouteCacheAction,
} from './envoy-config-types.js';
import { statusCodeFrom } from './http-status.js';

export const EXT_PROC_TYPE_URL = 'type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor';
export const EXT_PROC_FILTER_NAME = 'envoy.filters.http.ext_proc';

/** Envoy attribute names the harness can evaluate for `request_attributes`. */
export const SUPPORTED_REQUEST_ATTRIBUTES: readonly string[] = [
  'request.path',
  'request.url_path',
  'request.host',
  'request.scheme',
  'request.method',
  'request.headers',
  'request.referer',
  'request.useragent',
  'request.id',
  'request.protocol',
  'source.address',
  'source.port',
  'destination.address',
  'destination.port',
];

export const DEFAULT_PROCESSING_MODE: ProcessingMode = Object.freeze({
  request_header_mode: 'SEND',
  response_header_mode: 'SEND',
  request_body_mode: 'NONE',
  response_body_mode: 'NONE',
  request_trailer_mode: 'SKIP',
  response_trailer_mode: 'SKIP',
});

const ONE_HOUR_MS = 3_600_000;

const FIELDS = [
  'grpc_service',
  'failure_mode_allow',
  'processing_mode',
  'message_timeout',
  'max_message_timeout',
  'mutation_rules',
  'route_cache_action',
  'disable_clear_route_cache',
  'metadata_options',
  'request_attributes',
  'allow_mode_override',
  'disable_immediate_response',
  'observability_mode',
  'status_on_error',
  'stat_prefix',
] as const;

/** Parses one ext_proc filter's `typed_config` (already known to carry the ExternalProcessor `@type`). */
export function readExtProcFilter(r: ConfigReader, value: unknown, path: string): ExtProcFilterConfig {
  const o = r.typed(value, path, EXT_PROC_TYPE_URL, FIELDS);
  const gp = `${path}.grpc_service`;
  const grpc = r.obj(r.need(o['grpc_service'], gp), gp, ['envoy_grpc', 'timeout', 'initial_metadata']);
  const envoyGrpc = r.obj(
    r.need(grpc['envoy_grpc'], `${path}.grpc_service.envoy_grpc`, 'google_grpc is unsupported'),
    `${path}.grpc_service.envoy_grpc`,
    ['cluster_name', 'authority'],
  );
  const clusterName = r.requiredStr(envoyGrpc['cluster_name'], `${path}.grpc_service.envoy_grpc.cluster_name`) ?? '';

  if (r.bool(o['observability_mode'], `${path}.observability_mode`, false)) {
    r.issue(`${path}.observability_mode`, `true is ${UNSUPPORTED}`);
  }
  const disableClear = r.bool(o['disable_clear_route_cache'], `${path}.disable_clear_route_cache`, false);
  let routeCacheAction = r.enumOf<RouteCacheAction>(
    o['route_cache_action'],
    `${path}.route_cache_action`,
    ['DEFAULT', 'CLEAR', 'RETAIN'],
    'DEFAULT',
  );
  if (disableClear && routeCacheAction !== 'DEFAULT') {
    r.issue(path, 'disable_clear_route_cache and route_cache_action can not be set to none-default at the same time');
  }
  if (disableClear) routeCacheAction = 'RETAIN';

  const meta = r.obj(o['metadata_options'] ?? {}, `${path}.metadata_options`, ['forwarding_namespaces', 'receiving_namespaces']);
  const statusOnError = readStatusOnError(r, o['status_on_error'], `${path}.status_on_error`);
  const processingMode = readProcessingMode(r, o['processing_mode'], `${path}.processing_mode`);
  const failureModeAllow = r.bool(o['failure_mode_allow'], `${path}.failure_mode_allow`, false);
  verifyDuplex(r, processingMode, path);

  return {
    clusterName,
    authority: r.str(envoyGrpc['authority'], `${path}.grpc_service.envoy_grpc.authority`) ?? clusterName,
    initialMetadata: readInitialMetadata(r, grpc['initial_metadata'], `${gp}.initial_metadata`),
    grpcTimeoutMs: grpc['timeout'] === undefined ? undefined : r.durationMs(grpc['timeout'], `${gp}.timeout`, 0),
    failureModeAllow,
    messageTimeoutMs: r.durationMs(o['message_timeout'], `${path}.message_timeout`, 200, ONE_HOUR_MS),
    maxMessageTimeoutMs: r.durationMs(o['max_message_timeout'], `${path}.max_message_timeout`, 0, ONE_HOUR_MS),
    processingMode,
    mutationRules: readMutationRules(r, o['mutation_rules'], `${path}.mutation_rules`),
    routeCacheAction,
    receivingNamespaces: readNamespaces(r, meta['receiving_namespaces'], `${path}.metadata_options.receiving_namespaces`),
    forwardingNamespaces: readNamespaces(r, meta['forwarding_namespaces'], `${path}.metadata_options.forwarding_namespaces`),
    requestAttributes: readAttributes(r, o['request_attributes'], `${path}.request_attributes`),
    allowModeOverride: r.bool(o['allow_mode_override'], `${path}.allow_mode_override`, false),
    disableImmediateResponse: r.bool(o['disable_immediate_response'], `${path}.disable_immediate_response`, false),
    statusOnError,
    statPrefix: r.str(o['stat_prefix'], `${path}.stat_prefix`, '') ?? '',
  };
}

/**
 * Envoy's load-time checks for FULL_DUPLEX_STREAMED (source/extensions/filters/http/ext_proc/config.cc
 * `verifyProcessingModeConfig`): the direction's trailer mode must be SEND (the processor learns where a body with
 * trailers ends from the trailers message). `failure_mode_allow: true` is accepted: the check that refused it
 * (#39740) was reverted before 1.36 (#40503, changelogs/1.36.0.yaml), and the filter fails open only until the first
 * body chunk reaches it (#41276, `Filter::failureModeAllow()`; ext-proc-filter.ts).
 */
function verifyDuplex(r: ConfigReader, mode: ProcessingMode, path: string): void {
  for (const dir of ['request', 'response'] as const) {
    if (mode[`${dir}_body_mode`] === 'FULL_DUPLEX_STREAMED' && mode[`${dir}_trailer_mode`] !== 'SEND') {
      r.issue(
        `${path}.processing_mode.${dir}_trailer_mode`,
        `If the ext_proc filter has the ${dir}_body_mode set to FULL_DUPLEX_STREAMED, then the ${dir}_trailer_mode has to be set to SEND`,
      );
    }
  }
}

/** Reads a `ProcessingMode`, refusing body modes the harness does not implement. */
export function readProcessingMode(r: ConfigReader, value: unknown, path: string): ProcessingMode {
  const o = r.obj(value ?? {}, path, Object.keys(DEFAULT_PROCESSING_MODE));
  const header = (key: keyof ProcessingMode, fallback: HeaderSendMode): HeaderSendMode =>
    r.enumOf(o[key], `${path}.${key}`, HEADER_SEND_MODES, fallback);
  const body = (key: keyof ProcessingMode): BodySendMode => {
    const mode = r.enumOf(o[key], `${path}.${key}`, BODY_SEND_MODES, 'NONE');
    if (!SUPPORTED_BODY_MODES.includes(mode)) {
      r.issue(`${path}.${key}`, `${mode} ${UNSUPPORTED} (supported: ${SUPPORTED_BODY_MODES.join(', ')})`);
      return 'NONE';
    }
    return mode;
  };
  return {
    request_header_mode: header('request_header_mode', 'SEND'),
    response_header_mode: header('response_header_mode', 'SEND'),
    request_body_mode: body('request_body_mode'),
    response_body_mode: body('response_body_mode'),
    request_trailer_mode: header('request_trailer_mode', 'SKIP'),
    response_trailer_mode: header('response_trailer_mode', 'SKIP'),
  };
}

function readMutationRules(r: ConfigReader, value: unknown, path: string): MutationRulesConfig {
  const o = r.obj(value ?? {}, path, [
    'allow_all_routing',
    'allow_envoy',
    'disallow_system',
    'disallow_all',
    'disallow_is_error',
    'allow_expression',
    'disallow_expression',
  ]);
  return {
    allowAllRouting: r.bool(o['allow_all_routing'], `${path}.allow_all_routing`, false),
    allowEnvoy: r.bool(o['allow_envoy'], `${path}.allow_envoy`, false),
    disallowSystem: r.bool(o['disallow_system'], `${path}.disallow_system`, false),
    disallowAll: r.bool(o['disallow_all'], `${path}.disallow_all`, false),
    disallowIsError: r.bool(o['disallow_is_error'], `${path}.disallow_is_error`, false),
    allowExpression: readRegex(r, o['allow_expression'], `${path}.allow_expression`),
    disallowExpression: readRegex(r, o['disallow_expression'], `${path}.disallow_expression`),
  };
}

/** `type.matcher.v3.RegexMatcher`: `{ regex, google_re2? }`; checked to compile as a JS RegExp. */
function readRegex(r: ConfigReader, value: unknown, path: string): string | undefined {
  if (value === undefined) return undefined;
  const o = r.obj(value, path, ['regex', 'google_re2']);
  if (o['google_re2'] !== undefined) r.obj(o['google_re2'], `${path}.google_re2`, []);
  const source = r.requiredStr(o['regex'], `${path}.regex`);
  if (source === undefined) return undefined;
  try {
    new RegExp(source);
  } catch (e) {
    return r.issue(`${path}.regex`, `does not compile: ${(e as Error).message}`);
  }
  return source;
}

/** `HeaderValue { key, value }` list; gRPC metadata keys are lower-case ASCII. */
function readInitialMetadata(r: ConfigReader, value: unknown, path: string): Array<readonly [string, string]> {
  return r
    .arr(value, path)
    .map((h, i) => {
      const o = r.obj(h, `${path}[${i}]`, ['key', 'value']);
      const key = r.requiredStr(o['key'], `${path}[${i}].key`);
      const v = r.str(o['value'], `${path}[${i}].value`, '') ?? '';
      if (key !== undefined && !/^[a-z0-9._-]+$/.test(key))
        return r.issue(`${path}[${i}].key`, `"${key}" is not a valid gRPC metadata key`);
      return key === undefined ? undefined : ([key, v] as const);
    })
    .filter((e): e is readonly [string, string] => e !== undefined);
}

function readNamespaces(r: ConfigReader, value: unknown, path: string): string[] {
  if (value === undefined) return [];
  const o = r.obj(value, path, ['untyped']);
  return r
    .arr(o['untyped'], `${path}.untyped`)
    .map((v, i) => r.requiredStr(v, `${path}.untyped[${i}]`))
    .filter((v): v is string => v !== undefined);
}

function readAttributes(r: ConfigReader, value: unknown, path: string): string[] {
  return r
    .arr(value, path)
    .map((v, i) => {
      const name = r.requiredStr(v, `${path}[${i}]`);
      if (name !== undefined && !SUPPORTED_REQUEST_ATTRIBUTES.includes(name)) {
        return r.issue(`${path}[${i}]`, `attribute "${name}" ${UNSUPPORTED}`);
      }
      return name;
    })
    .filter((v): v is string => v !== undefined);
}

function readStatusOnError(r: ConfigReader, value: unknown, path: string): number {
  if (value === undefined) return 500;
  const o = r.obj(value, path, ['code']);
  const code = statusCodeFrom(o['code']);
  if (code === undefined || code < 100 || code > 599) {
    r.issue(`${path}.code`, `expected an HTTP status code (number or envoy.type.v3.StatusCode name)`);
    return 500;
  }
  return code;
}
