/**
 * The protoc-gen-validate (`validate.rules`) annotations that commonly stop Envoy at startup: required messages,
 * string lengths and header-safe characters, list sizes, numeric and duration bounds, defined enum values.
 * Envoy runs these checks on every config it loads, so a config that has the right proto shape but breaks one of
 * them still fails `envoy -c`. Only the rules here are checked; `pattern`, `unique` and the well-known formats
 * other than header names and values (hostname, ip, uri, ...) are not.
 */
import type { Enum, Field, ReflectionObject } from 'protobufjs';
import { base64Length, isIntegerType, parseDuration } from './json-forms.js';

/** The merged `(validate.rules)` object of a field, e.g. `{ string: { min_len: 1 } }`. */
export type Rules = Readonly<Record<string, unknown>>;

type Bound = bigint | number;

function record(value: unknown): Record<string, unknown> | undefined {
  return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : undefined;
}

function deepMerge(a: Record<string, unknown>, b: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = { ...a };
  for (const [k, v] of Object.entries(b)) {
    const left = record(out[k]);
    const right = record(v);
    out[k] = left && right ? deepMerge(left, right) : v;
  }
  return out;
}

/** All parsed options of a protobufjs object, merged into one object keyed like `(validate.rules)` or `deprecated`. */
export function parsedOptionsOf(obj: ReflectionObject | { parsedOptions?: unknown }): Record<string, unknown> {
  const list = (obj as { parsedOptions?: unknown }).parsedOptions;
  let out: Record<string, unknown> = {};
  if (Array.isArray(list)) for (const entry of list) out = deepMerge(out, record(entry) ?? {});
  return out;
}

/** The `(validate.rules)` of a field, or undefined if it has none. */
export function rulesOf(field: Field): Rules | undefined {
  return record(parsedOptionsOf(field)['(validate.rules)']);
}

function asList(value: unknown): unknown[] {
  return Array.isArray(value) ? value : value === undefined ? [] : [value];
}

function num(value: unknown): number | undefined {
  if (typeof value === 'number') return value;
  if (typeof value === 'string' && value.trim() !== '' && Number.isFinite(Number(value))) return Number(value);
  if (typeof value === 'object' && value !== null && 'toNumber' in value) {
    return (value as { toNumber(): number }).toNumber();
  }
  return undefined;
}

/** gt/gte/lt/lte/const/in/not_in, shared by numbers, enums and durations. */
function checkBounds(
  kind: string,
  r: Record<string, unknown>,
  v: Bound,
  show: (x: Bound) => string,
  conv: (x: unknown) => Bound | undefined,
): string[] {
  const at = (name: string): Bound | undefined => (r[name] === undefined ? undefined : conv(r[name]));
  const [gt, gte, lt, lte, exact] = [at('gt'), at('gte'), at('lt'), at('lte'), at('const')];
  const lower = gt !== undefined ? v > gt : gte !== undefined ? v >= gte : true;
  const upper = lt !== undefined ? v < lt : lte !== undefined ? v <= lte : true;
  const lo = gt ?? gte;
  const hi = lt ?? lte;
  // protoc-gen-validate: when the lower bound exceeds the upper one, the range is exclusive (value outside it).
  const inRange = lo !== undefined && hi !== undefined && lo > hi ? lower || upper : lower && upper;
  const rule = `(validate.rules).${kind}`;
  const out: string[] = [];
  if (!inRange) {
    const parts: [Bound | undefined, string][] = [
      [gt, '>'],
      [gte, '>='],
      [lt, '<'],
      [lte, '<='],
    ];
    const wanted = parts.flatMap(([b, op]) => (b === undefined ? [] : [`${op} ${show(b)}`]));
    out.push(`${show(v)} breaks ${rule}: must be ${wanted.join(' and ')}`);
  }
  if (exact !== undefined && v !== exact) out.push(`${show(v)} breaks ${rule}.const: must be ${show(exact)}`);
  const allowed = asList(r['in']).map(conv);
  if (allowed.length > 0 && !allowed.includes(v)) {
    out.push(`${show(v)} breaks ${rule}.in: must be one of ${allowed.map((x) => show(x ?? 0)).join(', ')}`);
  }
  if (asList(r['not_in']).map(conv).includes(v)) out.push(`${show(v)} breaks ${rule}.not_in`);
  return out;
}

function durationNanos(x: unknown): bigint | undefined {
  const r = record(x);
  if (!r) return undefined;
  return BigInt(Math.trunc(num(r['seconds']) ?? 0)) * 1_000_000_000n + BigInt(Math.trunc(num(r['nanos']) ?? 0));
}

function showDuration(x: Bound): string {
  return `${String(Number(x) / 1e9)}s`;
}

const HEADER_NAME_STRICT = /^:?[0-9a-zA-Z!#$%&'*+\-.^_|~`]+$/;
const HEADER_VALUE_STRICT = /^[^\u0000-\u0008\u000A-\u001F\u007F]*$/;
const NO_NUL_CR_LF = /^[^\u0000\u000A\u000D]*$/;

function checkString(r: Record<string, unknown>, s: string): string[] {
  if (r['ignore_empty'] === true && s === '') return [];
  const out: string[] = [];
  const q = JSON.stringify(s);
  const fail = (name: string, detail: string): void => void out.push(`${q} breaks (validate.rules).string.${name}${detail}`);
  const chars = [...s].length;
  const bytes = Buffer.byteLength(s, 'utf8');
  const limits: [string, number, (limit: number, actual: number) => boolean, string][] = [
    ['min_len', chars, (l, a) => a < l, num(r['min_len']) === 1 ? 'must not be empty' : 'too few characters'],
    ['max_len', chars, (l, a) => a > l, 'too many characters'],
    ['len', chars, (l, a) => a !== l, 'wrong number of characters'],
    ['min_bytes', bytes, (l, a) => a < l, 'too few bytes'],
    ['max_bytes', bytes, (l, a) => a > l, 'too many bytes'],
  ];
  for (const [name, actual, bad, what] of limits) {
    const limit = num(r[name]);
    if (limit !== undefined && bad(limit, actual)) fail(name, ` = ${String(limit)} (${what}, it has ${String(actual)})`);
  }
  const text = (name: string): string | undefined => (typeof r[name] === 'string' ? r[name] : undefined);
  const [prefix, suffix, contains, exact] = [text('prefix'), text('suffix'), text('contains'), text('const')];
  if (prefix !== undefined && !s.startsWith(prefix)) fail('prefix', `: must start with ${JSON.stringify(prefix)}`);
  if (suffix !== undefined && !s.endsWith(suffix)) fail('suffix', `: must end with ${JSON.stringify(suffix)}`);
  if (contains !== undefined && !s.includes(contains)) fail('contains', `: must contain ${JSON.stringify(contains)}`);
  if (exact !== undefined && s !== exact) fail('const', `: must be ${JSON.stringify(exact)}`);
  const allowed = asList(r['in']);
  if (allowed.length > 0 && !allowed.includes(s)) fail('in', `: must be one of ${allowed.map((x) => JSON.stringify(x)).join(', ')}`);
  if (asList(r['not_in']).includes(s)) fail('not_in', '');
  const header = checkHeaderRegex(r, s);
  if (header) out.push(`${q} ${header}`);
  return out;
}

/** `well_known_regex: HTTP_HEADER_NAME | HTTP_HEADER_VALUE`, strict (RFC 7230) or not (only no NUL, CR, LF). */
function checkHeaderRegex(r: Record<string, unknown>, s: string): string | undefined {
  const wk = r['well_known_regex'];
  if (wk !== 'HTTP_HEADER_NAME' && wk !== 'HTTP_HEADER_VALUE') return undefined;
  const name = wk === 'HTTP_HEADER_NAME';
  const strict = r['strict'] !== false;
  const re = !strict ? NO_NUL_CR_LF : name ? HEADER_NAME_STRICT : HEADER_VALUE_STRICT;
  if (re.test(s) && !(name && s === '')) return undefined;
  return `is not a valid ${name ? 'header name' : 'header value'} ((validate.rules).string.well_known_regex = ${wk})`;
}

function checkBytes(r: Record<string, unknown>, value: string): string[] {
  const len = base64Length(value);
  const [min, max] = [num(r['min_len']), num(r['max_len'])];
  const out: string[] = [];
  if (min !== undefined && len < min) out.push(`${String(len)} bytes breaks (validate.rules).bytes.min_len = ${String(min)}`);
  if (max !== undefined && len > max) out.push(`${String(len)} bytes breaks (validate.rules).bytes.max_len = ${String(max)}`);
  return out;
}

function checkEnum(r: Record<string, unknown>, e: Enum, value: unknown): string[] {
  const v = typeof value === 'number' ? value : typeof value === 'string' ? e.values[value] : undefined;
  if (v === undefined) return [];
  const out: string[] = [];
  if (r['defined_only'] === true && !Object.values(e.values).includes(v)) {
    out.push(`${String(value)} is not a defined value of ${e.name} ((validate.rules).enum.defined_only)`);
  }
  return [...out, ...checkBounds('enum', { const: r['const'], in: r['in'], not_in: r['not_in'] }, v, String, num)];
}

const NUMERIC_KINDS = [
  'double',
  'float',
  'int32',
  'int64',
  'uint32',
  'uint64',
  'sint32',
  'sint64',
  'fixed32',
  'fixed64',
  'sfixed32',
  'sfixed64',
];

/**
 * Checks the rules of one present value (a scalar, a wrapper's scalar, an enum value, a duration string) whose
 * JSON form has already been accepted. `type` is the protobufjs field type; `enumType` is set for enum fields.
 */
export function checkValueRules(rules: Rules, type: string, value: unknown, enumType?: Enum): string[] {
  const str = record(rules['string']);
  if (str && typeof value === 'string') return checkString(str, value);
  const bytes = record(rules['bytes']);
  if (bytes && typeof value === 'string') return checkBytes(bytes, value);
  const en = record(rules['enum']);
  if (en && enumType) return checkEnum(en, enumType, value);
  const bool = record(rules['bool']);
  if (bool && typeof value === 'boolean' && typeof bool['const'] === 'boolean' && value !== bool['const']) {
    return [`${String(value)} breaks (validate.rules).bool.const: must be ${String(bool['const'])}`];
  }
  const dur = record(rules['duration']);
  if (dur && type === 'google.protobuf.Duration') {
    const d = parseDuration(value);
    return d.ok ? checkBounds('duration', dur, d.nanos, showDuration, durationNanos) : [];
  }
  for (const kind of NUMERIC_KINDS) {
    const r = record(rules[kind]);
    const v = num(value);
    if (r && v !== undefined) return checkBounds(kind, r, v, String, num);
  }
  return [];
}

/** Checks the rules that apply to a field that is absent: required messages, and scalars judged at their default. */
export function checkAbsentRules(rules: Rules, field: Field): string[] {
  for (const kind of ['message', 'duration', 'any', 'timestamp']) {
    if (record(rules[kind])?.['required'] === true) return [`\`${field.name}\` is required ((validate.rules).${kind}.required)`];
  }
  const size = record(rules['repeated']) ?? record(rules['map']);
  const min = num(size?.['min_items'] ?? size?.['min_pairs']);
  if (min !== undefined && min > 0) {
    const rule = rules['map'] ? 'map.min_pairs' : 'repeated.min_items';
    return [`\`${field.name}\` needs at least ${String(min)} ${min === 1 ? 'entry' : 'entries'} ((validate.rules).${rule})`];
  }
  if (field.repeated || field.map || (field.resolvedType !== null && 'fields' in field.resolvedType)) return [];
  // A proto3 scalar that is not set has its default value, and protoc-gen-validate checks that value too.
  const type = field.type;
  const enumType = field.resolvedType && 'values' in field.resolvedType ? (field.resolvedType as Enum) : undefined;
  const numeric = isIntegerType(type) || type === 'double' || type === 'float' || enumType !== undefined;
  const dflt = type === 'string' ? '' : type === 'bool' ? false : numeric ? 0 : undefined;
  if (dflt === undefined) return [];
  return checkValueRules(rules, type, dflt, enumType).map((m) => `\`${field.name}\` is not set, and its default ${m}`);
}

/** Size rules of a repeated or map field that is present (`repeated.min_items`, `map.max_pairs`, ...). */
export function checkSizeRules(rules: Rules, field: Field, size: number): string[] {
  const r = record(rules['repeated']) ?? record(rules['map']);
  if (!r) return [];
  const kind = rules['map'] ? 'map' : 'repeated';
  const [minKey, maxKey] = kind === 'map' ? ['min_pairs', 'max_pairs'] : ['min_items', 'max_items'];
  const [min, max] = [num(r[minKey]), num(r[maxKey])];
  const out: string[] = [];
  const has = `\`${field.name}\` has ${String(size)} ${size === 1 ? 'entry' : 'entries'}`;
  if (min !== undefined && size < min) out.push(`${has}; (validate.rules).${kind}.${minKey} = ${String(min)}`);
  if (max !== undefined && size > max) out.push(`${has}; (validate.rules).${kind}.${maxKey} = ${String(max)}`);
  return out;
}

/** The rules that apply to each element of a repeated field, or to each key/value of a map. */
export function elementRules(rules: Rules | undefined, which: 'items' | 'keys' | 'values'): Rules | undefined {
  if (!rules) return undefined;
  return record(record(rules['repeated'])?.[which]) ?? record(record(rules['map'])?.[which]);
}
