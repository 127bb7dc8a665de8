import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { loadEnvoyRoot } from './proto-root.js';
import { validateEnvoyValue, validateEnvoyYaml } from './validate-envoy-yaml.js';
import type { EnvoyIssue } from './validate-envoy-yaml.js';

const root = loadEnvoyRoot();
const FIXTURE = readFileSync(new URL('./fixtures/ext-proc-bootstrap.yaml', import.meta.url), 'utf8');

const HCM = 'static_resources.listeners[0].filter_chains[0].filters[0].typed_config';
const ROUTE = `${HCM}.route_config.virtual_hosts[0].routes[0].route`;
const EXT_PROC = `${HCM}.http_filters[0].typed_config`;
const GATE = 'static_resources.clusters[0]';
const GATE_PORT = `${GATE}.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address.port_value`;

/** The fixture with one edit; throws if the text to replace is not there, so no test passes vacuously. */
function seed(from: string, to: string): string {
  const i = FIXTURE.indexOf(from);
  if (i < 0) throw new Error(`seed: ${JSON.stringify(from)} is not in the fixture`);
  return FIXTURE.slice(0, i) + to + FIXTURE.slice(i + from.length);
}

function lineContaining(text: string, needle: string): number {
  return text.split('\n').findIndex((l) => l.includes(needle)) + 1;
}

/** Exactly one error, at `path`, whose message contains every fragment. */
function expectOneError(errors: readonly EnvoyIssue[], path: string, ...fragments: string[]): EnvoyIssue {
  expect(errors.map((e) => `${e.path}: ${e.message}`)).toHaveLength(1);
  const [only] = errors;
  expect(only?.path).toBe(path);
  for (const f of fragments) expect(only?.message).toContain(f);
  return only!;
}

describe('the test copy of the shipped bootstrap', () => {
  it('is valid as written, so each seeded error below is the seed alone', () => {
    expect(validateEnvoyYaml(root, FIXTURE)).toEqual({ errors: [], warnings: [] });
  });
});

describe('seeded typos fail with the offending path', () => {
  it('an unknown field names the message and suggests the field meant', () => {
    const text = seed('              processing_mode:', '              procesing_mode:');
    const e = expectOneError(validateEnvoyYaml(root, text).errors, `${EXT_PROC}.procesing_mode`);
    expect(e.message).toBe(
      'unknown field `procesing_mode` in envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor; did you mean `processing_mode`?',
    );
    expect(e.line).toBe(lineContaining(text, 'procesing_mode:'));
  });

  it('an unknown field with no near match lists the fields of the message', () => {
    const text = seed('    connect_timeout: 1s\n    typed_extension', '    connect_timeout: 1s\n    frobnicate: 3\n    typed_extension');
    expectOneError(
      validateEnvoyYaml(root, text).errors,
      `${GATE}.frobnicate`,
      'in envoy.config.cluster.v3.Cluster; its fields are:',
      'connect_timeout',
    );
  });

  it('a wrong enum value lists the allowed values and suggests one', () => {
    const e = expectOneError(
      validateEnvoyYaml(root, seed('request_body_mode: BUFFERED', 'request_body_mode: BUFFERD')).errors,
      `${EXT_PROC}.processing_mode.request_body_mode`,
    );
    expect(e.message).toBe(
      '`BUFFERD` is not a value of BodySendMode (NONE, STREAMED, BUFFERED, BUFFERED_PARTIAL, FULL_DUPLEX_STREAMED, GRPC); did you mean `BUFFERED`?',
    );
  });

  it('a misspelt @type is an unknown type, with the type meant', () => {
    const text = seed('ext_proc.v3.ExternalProcessor\n', 'ext_proc.v3.ExternalProcesor\n');
    expectOneError(
      validateEnvoyYaml(root, text).errors,
      `${EXT_PROC}["@type"]`,
      'unknown @type `envoy.extensions.filters.http.ext_proc.v3.ExternalProcesor`',
      'did you mean type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor?',
    );
  });

  it('an @type without the type.googleapis.com/ prefix is refused', () => {
    const text = seed(
      '"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router',
      '"@type": envoy.extensions.filters.http.router.v3.Router',
    );
    expectOneError(
      validateEnvoyYaml(root, text).errors,
      `${HCM}.http_filters[1].typed_config["@type"]`,
      'must be "type.googleapis.com/<message name>"',
    );
  });

  it('a real but wrong @type checks the fields against the wrong message, so they are unknown', () => {
    const text = seed(
      'type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor',
      'type.googleapis.com/envoy.extensions.filters.http.router.v3.Router',
    );
    const errors = validateEnvoyYaml(root, text).errors;
    expect(errors.map((e) => e.path)).toContain(`${EXT_PROC}.grpc_service`);
    expect(errors.every((e) => e.message.includes('in envoy.extensions.filters.http.router.v3.Router'))).toBe(true);
  });

  it('a string where a number is required', () => {
    const text = seed('port_value: 9002', 'port_value: ninety');
    expectOneError(validateEnvoyYaml(root, text).errors, GATE_PORT, 'expected an integer (uint32), got the string "ninety"');
  });

  it('a number where a string is required, and a quoted bool', () => {
    expectOneError(
      validateEnvoyYaml(root, seed('stat_prefix: kvgate_public', 'stat_prefix: 12')).errors,
      `${HCM}.stat_prefix`,
      'expected a string, got number 12',
    );
    expectOneError(
      validateEnvoyYaml(root, seed('failure_mode_allow: false', 'failure_mode_allow: "false"')).errors,
      `${EXT_PROC}.failure_mode_allow`,
      'expected true or false',
    );
  });

  it('two members of one oneof', () => {
    const text = seed(
      'cluster_header: x-kvgate-decode-cluster',
      'cluster_header: x-kvgate-decode-cluster\n                  cluster: a_decode',
    );
    expectOneError(
      validateEnvoyYaml(root, text).errors,
      `${ROUTE}.cluster`,
      '`cluster_header` and `cluster` are both set',
      'oneof `cluster_specifier`',
    );
  });

  it('a missing required message (ext_proc without grpc_service)', () => {
    const block =
      '              grpc_service:\n                envoy_grpc: { cluster_name: kvgate_gate }\n                timeout: 35s\n                initial_metadata:\n                - { key: x-kvgate-listener, value: public }\n';
    expectOneError(
      validateEnvoyYaml(root, seed(block, '')).errors,
      `${EXT_PROC}.grpc_service`,
      '`grpc_service` is required ((validate.rules).message.required)',
    );
  });

  it('bad durations: a unit other than s, a bare number, and one over the protoc-gen-validate bound', () => {
    expectOneError(
      validateEnvoyYaml(root, seed('message_timeout: 2s', 'message_timeout: 2sec')).errors,
      `${EXT_PROC}.message_timeout`,
      '"2sec" is not a duration',
    );
    expectOneError(
      validateEnvoyYaml(root, seed('message_timeout: 2s', 'message_timeout: 2')).errors,
      `${EXT_PROC}.message_timeout`,
      'expected a duration string, got number 2',
    );
    expectOneError(
      validateEnvoyYaml(root, seed('message_timeout: 2s', 'message_timeout: 7200s')).errors,
      `${EXT_PROC}.message_timeout`,
      '7200s breaks (validate.rules).duration: must be >= 0s and <= 3600s',
    );
  });
});

describe('protoc-gen-validate rules', () => {
  it('string.min_len applies to an empty value and to an absent one (its default "")', () => {
    expectOneError(
      validateEnvoyYaml(root, seed('stat_prefix: kvgate_public', 'stat_prefix: ""')).errors,
      `${HCM}.stat_prefix`,
      '(validate.rules).string.min_len = 1',
    );
    expectOneError(
      validateEnvoyYaml(root, seed('          stat_prefix: kvgate_public\n', '')).errors,
      `${HCM}.stat_prefix`,
      '`stat_prefix` is not set, and its default',
      'min_len',
    );
  });

  it('string.well_known_regex: a header name with a newline', () => {
    const text = seed('cluster_header: x-kvgate-decode-cluster', 'cluster_header: "x-kvgate-decode-cluster\\n"');
    expectOneError(validateEnvoyYaml(root, text).errors, `${ROUTE}.cluster_header`, 'is not a valid header name');
  });

  it('repeated.min_items', () => {
    expectOneError(
      validateEnvoyYaml(root, seed('domains: ["*"]', 'domains: []')).errors,
      `${HCM}.route_config.virtual_hosts[0].domains`,
      '(validate.rules).repeated.min_items = 1',
    );
  });

  it('a required oneof that is unset', () => {
    const { errors } = validateEnvoyValue(root, 'envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager', {
      stat_prefix: 'x',
    });
    expectOneError(errors, '', 'needs one of `rds`, `route_config`, `scoped_routes`', 'oneof `route_specifier` is required');
  });

  it('enum.defined_only refuses an undefined number but takes a defined one', () => {
    expect(validateEnvoyYaml(root, seed('request_body_mode: BUFFERED', 'request_body_mode: 2')).errors).toEqual([]);
    expectOneError(
      validateEnvoyYaml(root, seed('request_body_mode: BUFFERED', 'request_body_mode: 9')).errors,
      `${EXT_PROC}.processing_mode.request_body_mode`,
      '9 is not a defined value of BodySendMode ((validate.rules).enum.defined_only)',
    );
  });

  it('numeric bounds on a 64-bit wrapper, given as a quoted number', () => {
    const cluster = (size: unknown): unknown => ({ name: 'c', lb_policy: 'RING_HASH', ring_hash_lb_config: { minimum_ring_size: size } });
    expect(validateEnvoyValue(root, 'envoy.config.cluster.v3.Cluster', cluster('1024')).errors).toEqual([]);
    expectOneError(
      validateEnvoyValue(root, 'envoy.config.cluster.v3.Cluster', cluster('9999999999')).errors,
      'ring_hash_lb_config.minimum_ring_size',
      '(validate.rules).uint64: must be <= 8388608',
    );
    expectOneError(
      validateEnvoyValue(root, 'envoy.config.cluster.v3.Cluster', cluster('lots')).errors,
      'ring_hash_lb_config.minimum_ring_size',
      'expected an integer (uint64)',
    );
  });

  it('a partial (merge) value needs nothing present, a whole one does', () => {
    const type = 'envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter';
    expect(validateEnvoyValue(root, type, {}, { partial: true }).errors).toEqual([]);
    expectOneError(validateEnvoyValue(root, type, {}).errors, 'name', '`name` is not set', 'min_len');
  });
});

describe('the JSON forms Envoy accepts', () => {
  it('takes the lowerCamelCase JSON names as well as snake_case, but not both for one field', () => {
    expect(validateEnvoyYaml(root, seed('stat_prefix: kvgate_public', 'statPrefix: kvgate_public')).errors).toEqual([]);
    const both = seed('stat_prefix: kvgate_public', 'stat_prefix: kvgate_public\n          statPrefix: again');
    expectOneError(validateEnvoyYaml(root, both).errors, `${HCM}.statPrefix`, '`statPrefix` and `stat_prefix` are the same field');
  });

  it('takes wrappers as plain scalars (quoted numbers too), not as {value: ...}', () => {
    expect(
      validateEnvoyYaml(root, seed('per_connection_buffer_limit_bytes: 1048576', 'per_connection_buffer_limit_bytes: "1048576"')).errors,
    ).toEqual([]);
    const wrapped = seed('per_connection_buffer_limit_bytes: 1048576', 'per_connection_buffer_limit_bytes: { value: 1048576 }');
    expectOneError(
      validateEnvoyYaml(root, wrapped).errors,
      'static_resources.listeners[0].per_connection_buffer_limit_bytes',
      'expected an integer (uint32), got a mapping',
    );
  });

  it('takes any JSON in a Struct', () => {
    const text = seed(
      'failure_mode_allow: false',
      'failure_mode_allow: false\n              filter_metadata: { owner: kvgate, tags: [1, "two", { three: null }] }',
    );
    expect(validateEnvoyYaml(root, text).errors).toEqual([]);
  });

  it('requires @type in an Any', () => {
    const text = seed('"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router', 'start_child_span: true');
    expectOneError(
      validateEnvoyYaml(root, text).errors,
      `${HCM}.http_filters[1].typed_config`,
      '`@type` is required in a google.protobuf.Any',
    );
  });

  it('treats null as unset, and refuses a field removed from the proto', () => {
    expect(validateEnvoyYaml(root, seed('max_message_timeout: 30s', 'max_message_timeout: ~')).errors).toEqual([]);
    expectOneError(
      validateEnvoyYaml(root, seed('failure_mode_allow: false', 'async_mode: true')).errors,
      `${EXT_PROC}.async_mode`,
      'was removed from envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor (reserved)',
    );
  });

  it('reports YAML syntax errors such as a duplicate key, with the line', () => {
    const text = seed('failure_mode_allow: false', 'failure_mode_allow: false\n              failure_mode_allow: true');
    const { errors } = validateEnvoyYaml(root, text);
    expect(errors).toHaveLength(1);
    expect(errors[0]?.message).toMatch(/^YAML: .*[Mm]ap keys must be unique/);
    expect(errors[0]?.line).toBe(lineContaining(text, 'failure_mode_allow: true'));
  });
});

describe('warnings, not errors', () => {
  it('a deprecated field', () => {
    const report = validateEnvoyYaml(
      root,
      seed('    connect_timeout: 1s\n    typed_extension', '    connect_timeout: 1s\n    http2_protocol_options: {}\n    typed_extension'),
    );
    expect(report.errors).toEqual([]);
    expect(report.warnings).toEqual([
      expect.objectContaining({ path: `${GATE}.http2_protocol_options`, message: expect.stringContaining('is deprecated since API 3.0') }),
    ]);
  });

  it('a deprecated enum value', () => {
    const report = validateEnvoyValue(root, 'envoy.config.core.v3.ApiConfigSource', {
      api_type: 'GRPC',
      transport_api_version: 'V2',
      grpc_services: [{ envoy_grpc: { cluster_name: 'xds' } }],
    });
    expect(report.errors).toEqual([]);
    expect(report.warnings).toEqual([
      expect.objectContaining({ path: 'transport_api_version', message: 'ApiVersion.V2 is deprecated since API 3.0' }),
    ]);
  });

  it('both halves of a future oneof (HeaderValue value and raw_value)', () => {
    const text = seed('{ key: x-kvgate-listener, value: public }', '{ key: x-kvgate-listener, value: public, raw_value: cHVibGlj }');
    const report = validateEnvoyYaml(root, text);
    expect(report.errors).toEqual([]);
    expect(report.warnings).toEqual([
      expect.objectContaining({
        path: `${EXT_PROC}.grpc_service.initial_metadata[0]`,
        message: expect.stringContaining('`value` and `raw_value` are both set'),
      }),
    ]);
  });
});
