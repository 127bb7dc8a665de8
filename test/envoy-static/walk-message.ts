/**
 * The walk of a parsed YAML value down an Envoy message type, the way protobuf's JSON parser (which Envoy uses
 * on its YAML) and then protoc-gen-validate would see it. Every problem becomes a finding at its YAML path;
 * nothing throws, so one run reports every mistake in a file.
 */
import type { Enum, Field, MapField, Root, Type } from 'protobufjs';
import { closestMatch as didYouMean } from '../../src/config/issues.js';
import { checkScalar, checkSpecialJson, describeValue, isPlainObject, SPECIAL_JSON_TYPES } from './json-forms.js';
import { checkAbsentRules, checkSizeRules, checkValueRules, elementRules, parsedOptionsOf, rulesOf } from './pgv-rules.js';
import type { Rules } from './pgv-rules.js';
import type { Findings } from './report.js';
import * as idx from './type-index.js';
import type { PathSegment } from './yaml-source.js';

/** The type URL prefix Envoy configs use for `@type`. */
export const TYPE_URL_PREFIX = 'type.googleapis.com/';

/** What a walk needs besides the value: the Root (for `@type`), the findings, and whether the value is partial. */
export interface WalkContext {
  readonly root: Root;
  readonly findings: Findings;
  /** A partial message merged into an existing one: present fields are checked, none are required. */
  readonly partial: boolean;
}

const ticks = (names: readonly string[]): string => names.map((n) => `\`${n}\``).join(' and ');

/** Checks `value` as a `type` message at `path`. */
export function walkMessage(ctx: WalkContext, type: Type, value: unknown, path: PathSegment[]): void {
  const name = idx.typeNameOf(type);
  if (name === 'google.protobuf.Any') return walkAny(ctx, value, path);
  if (SPECIAL_JSON_TYPES.has(name)) {
    const problem = checkSpecialJson(name, value);
    if (problem) ctx.findings.error(path, problem);
    return;
  }
  if (!isPlainObject(value)) return ctx.findings.error(path, `expected a mapping (${name}), got ${describeValue(value)}`);
  const set = new Map<Field, string>();
  const index = idx.fieldIndex(type);
  for (const [key, v] of Object.entries(value)) {
    const field = index.get(key);
    const other = field ? set.get(field) : undefined;
    if (!field) ctx.findings.error([...path, key], unknownFieldMessage(type, key));
    else if (other !== undefined) ctx.findings.error([...path, key], `${ticks([key, other])} are the same field of ${name}; keep one`);
    else if (v !== null || field.type === 'google.protobuf.Value') {
      // JSON null means "not set", except for a Value, where it is the null value.
      set.set(field, key);
      noteFieldStatus(ctx, type, field, [...path, key]);
      walkField(ctx, field, v, [...path, key]);
    }
  }
  checkOneofs(ctx, type, set, path);
  if (!ctx.partial && parsedOptionsOf(type)['(validate.disabled)'] !== true) checkAbsentFields(ctx, type, set, path);
}

function unknownFieldMessage(type: Type, key: string): string {
  const name = idx.typeNameOf(type);
  if (idx.isReservedName(type, key)) return `\`${key}\` was removed from ${name} (reserved); delete it`;
  if (key === '@type') return `\`@type\` belongs only in a google.protobuf.Any field (typed_config and the like), not in ${name}`;
  const snake = type.fieldsArray.map((f) => f.name);
  const suggestion = didYouMean(key, [...snake, ...type.fieldsArray.map(idx.jsonNameOf)]);
  if (suggestion) return `unknown field \`${key}\` in ${name}; did you mean \`${suggestion}\`?`;
  return `unknown field \`${key}\` in ${name}; its fields are: ${snake.join(', ')}`;
}

function noteFieldStatus(ctx: WalkContext, type: Type, field: Field, path: PathSegment[]): void {
  const where = `\`${field.name}\` of ${idx.typeNameOf(type)}`;
  const deprecated = idx.deprecationOf(field);
  if (deprecated) ctx.findings.warn(path, `${where} is ${deprecated}; see its documentation for the replacement`);
  if (idx.isWorkInProgress(field)) ctx.findings.warn(path, `${where} is work in progress; its behaviour may change`);
}

function walkField(ctx: WalkContext, field: Field, value: unknown, path: PathSegment[]): void {
  const rules = rulesOf(field);
  if (field.map) {
    const keyType = (field as unknown as MapField).keyType;
    if (!isPlainObject(value)) {
      return ctx.findings.error(path, `expected a mapping (map<${keyType}, ${field.type}>), got ${describeValue(value)}`);
    }
    const keyRules = elementRules(rules, 'keys');
    for (const [k, v] of Object.entries(value)) {
      const keyProblem = checkMapKey(keyType, k) ?? (keyRules ? checkValueRules(keyRules, 'string', k)[0] : undefined);
      if (keyProblem) ctx.findings.error([...path, k], `map key: ${keyProblem}`);
      walkElement(ctx, field, v, [...path, k], elementRules(rules, 'values'));
    }
    if (rules) ctx.findings.errorAll(path, checkSizeRules(rules, field, Object.keys(value).length));
    return;
  }
  if (field.repeated) {
    if (!Array.isArray(value)) return ctx.findings.error(path, `expected a list of ${field.type}, got ${describeValue(value)}`);
    value.forEach((item, i) => walkElement(ctx, field, item, [...path, i], elementRules(rules, 'items')));
    if (rules) ctx.findings.errorAll(path, checkSizeRules(rules, field, value.length));
    return;
  }
  walkElement(ctx, field, value, path, rules);
}

function checkMapKey(keyType: string, key: string): string | undefined {
  if (keyType === 'string') return undefined;
  if (keyType === 'bool') return key === 'true' || key === 'false' ? undefined : `expected true or false, got ${JSON.stringify(key)}`;
  return checkScalar(keyType, key);
}

/** One value of a field (the field itself, a list item or a map value), checked against its type and rules. */
function walkElement(ctx: WalkContext, field: Field, value: unknown, path: PathSegment[], rules: Rules | undefined): void {
  const resolved = field.resolvedType;
  if (value === null && field.type !== 'google.protobuf.Value' && field.type !== 'google.protobuf.NullValue') {
    return ctx.findings.error(path, `null is not allowed here (${field.type}); remove the entry`);
  }
  if (idx.isMessageType(resolved)) {
    const before = ctx.findings.errors.length;
    walkMessage(ctx, resolved, value, path);
    const shapeOk = ctx.findings.errors.length === before;
    if (rules && shapeOk) ctx.findings.errorAll(path, checkValueRules(rules, idx.typeNameOf(resolved), value));
    return;
  }
  if (idx.isEnumType(resolved)) return walkEnum(ctx, resolved, value, path, rules);
  const problem = checkScalar(field.type, value);
  if (problem) ctx.findings.error(path, problem);
  else if (rules) ctx.findings.errorAll(path, checkValueRules(rules, field.type, value));
}

function walkEnum(ctx: WalkContext, e: Enum, value: unknown, path: PathSegment[], rules: Rules | undefined): void {
  if (idx.typeNameOf(e) === 'google.protobuf.NullValue' && value === null) return;
  const names = Object.keys(e.values);
  const allowed = `${e.name} (${names.join(', ')})`;
  if (typeof value === 'string') {
    if (!(value in e.values)) {
      const suggestion = didYouMean(value, names);
      const hint = suggestion ? `; did you mean \`${suggestion}\`?` : '';
      return ctx.findings.error(path, `\`${value}\` is not a value of ${allowed}${hint}`);
    }
    const deprecated = idx.enumValueDeprecationOf(e, value);
    if (deprecated) ctx.findings.warn(path, `${e.name}.${value} is ${deprecated}`);
  } else if (typeof value === 'number' && Number.isInteger(value)) {
    // proto3 enums are open: protobuf keeps an unknown number, so only defined_only (a rule) makes it an error.
    if (!Object.values(e.values).includes(value) && !rules) {
      ctx.findings.warn(path, `${String(value)} is not a defined value of ${allowed}; prefer a name`);
    }
  } else {
    return ctx.findings.error(path, `expected a value of ${allowed}, got ${describeValue(value)}`);
  }
  if (rules) ctx.findings.errorAll(path, checkValueRules(rules, e.name, value, e));
}

/** google.protobuf.Any: `@type` names the message, and the rest of the mapping is checked as that message. */
function walkAny(ctx: WalkContext, value: unknown, path: PathSegment[]): void {
  const example = `"@type": ${TYPE_URL_PREFIX}<message name>`;
  if (!isPlainObject(value)) return ctx.findings.error(path, `expected a mapping with ${example}, got ${describeValue(value)}`);
  const typeUrl = value['@type'];
  const atPath = [...path, '@type'];
  if (typeUrl === undefined) return ctx.findings.error(path, `\`@type\` is required in a google.protobuf.Any: add ${example}`);
  if (typeof typeUrl !== 'string' || !typeUrl.startsWith(TYPE_URL_PREFIX)) {
    return ctx.findings.error(atPath, `\`@type\` must be "${TYPE_URL_PREFIX}<message name>", got ${describeValue(typeUrl)}`);
  }
  const typeName = typeUrl.slice(TYPE_URL_PREFIX.length);
  const type = idx.findMessageType(ctx.root, typeName);
  if (!type) {
    const suggestion = didYouMean(typeName, idx.messageTypeNames(ctx.root));
    const hint = suggestion
      ? `did you mean ${TYPE_URL_PREFIX}${suggestion}?`
      : 'if it is a real Envoy type, it is newer than (or outside) the vendored protos: see protos/UPSTREAM.md';
    return ctx.findings.error(atPath, `unknown @type \`${typeName}\`: no such message in the vendored Envoy protos; ${hint}`);
  }
  const rest: Record<string, unknown> = { ...value };
  delete rest['@type'];
  if (!SPECIAL_JSON_TYPES.has(typeName)) return walkMessage(ctx, type, rest, path);
  // A well-known type with its own JSON form sits under "value": {"@type": ".../google.protobuf.Duration", "value": "1s"}.
  for (const k of Object.keys(rest)) {
    if (k !== 'value') ctx.findings.error([...path, k], `an Any holding ${typeName} takes only "@type" and "value"`);
  }
  if ('value' in rest) walkMessage(ctx, type, rest['value'], [...path, 'value']);
}

function checkOneofs(ctx: WalkContext, type: Type, set: ReadonlyMap<Field, string>, path: PathSegment[]): void {
  const name = idx.typeNameOf(type);
  for (const oneof of type.oneofsArray) {
    const members = oneof.fieldsArray;
    if (members.length === 1 && members[0]?.options?.['proto3_optional'] === true) continue;
    const present = [...set].filter(([f]) => f.partOf === oneof).map(([, key]) => key); // YAML order
    const memberList = members.map((f) => f.name).join(', ');
    if (present.length > 1) {
      const later = present[present.length - 1] ?? '';
      ctx.findings.error(
        [...path, later],
        `${ticks(present)} are both set, but ${name} allows only one of oneof \`${oneof.name}\` (${memberList})`,
      );
    } else if (present.length === 0 && !ctx.partial && parsedOptionsOf(oneof)['(validate.required)'] === true) {
      ctx.findings.error(
        path,
        `${name} needs one of ${members.map((f) => `\`${f.name}\``).join(', ')} (oneof \`${oneof.name}\` is required)`,
      );
    }
  }
  const groups = new Map<string, string[]>();
  for (const [f, key] of set) {
    const group = idx.oneofPromotionOf(f);
    if (group) groups.set(group, [...(groups.get(group) ?? []), key]);
  }
  for (const [group, keys] of groups) {
    if (keys.length < 2) continue;
    ctx.findings.warn(
      path,
      `${ticks(keys)} are both set; ${name} marks them as one future oneof (\`${group}\`): Envoy uses or accepts only one`,
    );
  }
}

function checkAbsentFields(ctx: WalkContext, type: Type, set: ReadonlyMap<Field, string>, path: PathSegment[]): void {
  for (const field of type.fieldsArray) {
    // Oneof members (and proto3 `optional` fields) have presence: their rules apply only when they are set.
    if (set.has(field) || field.partOf) continue;
    const rules = rulesOf(field);
    if (rules) ctx.findings.errorAll([...path, field.name], checkAbsentRules(rules, field));
  }
}
