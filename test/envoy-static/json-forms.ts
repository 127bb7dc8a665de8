/**
 * The proto3 JSON forms Envoy accepts for scalars and for the well-known types with a special JSON mapping.
 * Envoy turns YAML into JSON and parses it with protobuf's JSON parser, so a value that parser rejects (a number
 * where a string is required, `timeout: 5` instead of `5s`) stops Envoy at startup. Pure functions: each returns
 * undefined when the value is acceptable, or a message saying what is expected.
 */

/** Well-known message types whose JSON form is not an object of their fields. */
export const WRAPPER_SCALAR: Readonly<Record<string, string>> = {
  'google.protobuf.DoubleValue': 'double',
  'google.protobuf.FloatValue': 'float',
  'google.protobuf.Int64Value': 'int64',
  'google.protobuf.UInt64Value': 'uint64',
  'google.protobuf.Int32Value': 'int32',
  'google.protobuf.UInt32Value': 'uint32',
  'google.protobuf.BoolValue': 'bool',
  'google.protobuf.StringValue': 'string',
  'google.protobuf.BytesValue': 'bytes',
};

/** Types with a special JSON form handled here (the walker must not descend into their fields). */
export const SPECIAL_JSON_TYPES: ReadonlySet<string> = new Set([
  ...Object.keys(WRAPPER_SCALAR),
  'google.protobuf.Duration',
  'google.protobuf.Timestamp',
  'google.protobuf.FieldMask',
  'google.protobuf.Struct',
  'google.protobuf.Value',
  'google.protobuf.ListValue',
]);

const INT_RANGES: Readonly<Record<string, readonly [bigint, bigint]>> = {
  int32: [-(2n ** 31n), 2n ** 31n - 1n],
  sint32: [-(2n ** 31n), 2n ** 31n - 1n],
  sfixed32: [-(2n ** 31n), 2n ** 31n - 1n],
  uint32: [0n, 2n ** 32n - 1n],
  fixed32: [0n, 2n ** 32n - 1n],
  int64: [-(2n ** 63n), 2n ** 63n - 1n],
  sint64: [-(2n ** 63n), 2n ** 63n - 1n],
  sfixed64: [-(2n ** 63n), 2n ** 63n - 1n],
  uint64: [0n, 2n ** 64n - 1n],
  fixed64: [0n, 2n ** 64n - 1n],
};

/** Whether `type` is one of the integer scalar types. */
export function isIntegerType(type: string): boolean {
  return type in INT_RANGES;
}

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'a list';
  if (typeof value === 'object') return 'a mapping';
  if (typeof value === 'string') return `the string ${JSON.stringify(value)}`;
  return `${typeof value} ${String(value)}`;
}

/**
 * Checks a scalar field value. Integers may be numbers or decimal strings (protobuf's JSON parser takes both, and
 * 64-bit values are usually quoted); floats may also be "NaN"/"Infinity"; bools must be true/false; strings must be
 * strings (YAML `name: 123` is a number, which Envoy rejects); bytes must be base64.
 */
export function checkScalar(type: string, value: unknown): string | undefined {
  const range = INT_RANGES[type];
  if (range) return checkInteger(type, range, value);
  switch (type) {
    case 'double':
    case 'float':
      if (typeof value === 'number') return undefined;
      if (typeof value === 'string' && /^(NaN|-?Infinity)$/.test(value)) return undefined;
      if (typeof value === 'string' && value.trim() !== '' && Number.isFinite(Number(value))) return undefined;
      return `expected a number (${type}), got ${describe(value)}`;
    case 'bool':
      return typeof value === 'boolean' ? undefined : `expected true or false, got ${describe(value)}`;
    case 'string':
      return typeof value === 'string' ? undefined : `expected a string, got ${describe(value)}; quote it`;
    case 'bytes':
      if (typeof value !== 'string') return `expected a base64 string (bytes), got ${describe(value)}`;
      return isBase64(value) ? undefined : `expected base64 (bytes), got ${describe(value)}`;
    default:
      return `unsupported scalar type ${type}`;
  }
}

function checkInteger(type: string, [min, max]: readonly [bigint, bigint], value: unknown): string | undefined {
  let n: bigint;
  if (typeof value === 'number') {
    if (!Number.isInteger(value)) return `expected an integer (${type}), got ${describe(value)}`;
    n = BigInt(value);
  } else if (typeof value === 'string' && /^-?\d+$/.test(value)) {
    n = BigInt(value);
  } else {
    return `expected an integer (${type}), got ${describe(value)}`;
  }
  if (n < min || n > max) return `${String(n)} is out of range for ${type} (${String(min)}..${String(max)})`;
  return undefined;
}

/** Standard or URL-safe base64, padding optional (what protobuf's JSON parser accepts). */
export function isBase64(value: string): boolean {
  return /^[A-Za-z0-9+/_-]*={0,2}$/.test(value) && value.replace(/=+$/, '').length % 4 !== 1;
}

/** Decoded length of a base64 string (for bytes length rules). */
export function base64Length(value: string): number {
  return Buffer.from(value.replace(/-/g, '+').replace(/_/g, '/'), 'base64').length;
}

const MAX_DURATION_SECONDS = 315_576_000_000n;

/**
 * Parses the JSON form of google.protobuf.Duration ("1.5s", "0s", "-2s", at most nine fractional digits) into
 * nanoseconds, or returns the reason it is not one. `timeout: 5` (a number) is rejected: Envoy needs "5s".
 */
export function parseDuration(value: unknown): { ok: true; nanos: bigint } | { ok: false; message: string } {
  const hint = 'a duration is a string of seconds ending in "s", e.g. "0.25s", "2s", "300s"';
  if (typeof value !== 'string') return { ok: false, message: `expected a duration string, got ${describe(value)}; ${hint}` };
  const m = /^(-)?(\d+)(?:\.(\d{1,9}))?s$/.exec(value);
  if (!m) return { ok: false, message: `${JSON.stringify(value)} is not a duration; ${hint}` };
  const seconds = BigInt(m[2] ?? '0');
  if (seconds > MAX_DURATION_SECONDS) return { ok: false, message: `${JSON.stringify(value)} is out of range for a duration` };
  const nanos = seconds * 1_000_000_000n + BigInt((m[3] ?? '').padEnd(9, '0'));
  return { ok: true, nanos: m[1] ? -nanos : nanos };
}

/** Checks the RFC 3339 JSON form of google.protobuf.Timestamp ("2024-01-02T03:04:05Z"). */
export function checkTimestamp(value: unknown): string | undefined {
  const re = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$/;
  if (typeof value === 'string' && re.test(value) && !Number.isNaN(Date.parse(value))) return undefined;
  return `expected an RFC 3339 timestamp string such as "2024-01-02T03:04:05Z", got ${describe(value)}`;
}

/**
 * Checks a value of a well-known type with a special JSON form (see SPECIAL_JSON_TYPES). Wrappers take the plain
 * scalar; Struct takes any mapping, ListValue any list, Value anything; FieldMask a comma-separated string.
 */
export function checkSpecialJson(typeName: string, value: unknown): string | undefined {
  const scalar = WRAPPER_SCALAR[typeName];
  if (scalar) return checkScalar(scalar, value);
  switch (typeName) {
    case 'google.protobuf.Duration': {
      const d = parseDuration(value);
      return d.ok ? undefined : d.message;
    }
    case 'google.protobuf.Timestamp':
      return checkTimestamp(value);
    case 'google.protobuf.FieldMask':
      return typeof value === 'string' ? undefined : `expected a comma-separated field mask string, got ${describe(value)}`;
    case 'google.protobuf.Struct':
      return isPlainObject(value) ? undefined : `expected a mapping (google.protobuf.Struct), got ${describe(value)}`;
    case 'google.protobuf.ListValue':
      return Array.isArray(value) ? undefined : `expected a list (google.protobuf.ListValue), got ${describe(value)}`;
    case 'google.protobuf.Value':
      return undefined;
    default:
      return `no JSON form known for ${typeName}`;
  }
}

/** A YAML mapping after parsing (not null, not a list). */
export function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Human description of a YAML value, for messages ("the string \"abc\"", "a list"). */
export const describeValue = describe;
