/**
 * Lookups over a loaded protobufjs Root that the YAML walker needs on every mapping: which YAML key names which
 * field (Envoy accepts the proto's snake_case name and the lowerCamelCase JSON name), every message type name
 * (for `@type` and its did-you-mean), and the annotations that make a field deprecated or work in progress.
 * Cached per Type/Root, so walking a large bootstrap stays cheap.
 */
import type { Enum, Field, Namespace, ReflectionObject, Root, Type } from 'protobufjs';
import { parsedOptionsOf } from './pgv-rules.js';

/** A message type's name without protobufjs's leading dot, e.g. `envoy.config.cluster.v3.Cluster`. */
export function typeNameOf(obj: ReflectionObject): string {
  return obj.fullName.startsWith('.') ? obj.fullName.slice(1) : obj.fullName;
}

/** Whether a resolved field type is a message (as opposed to an enum). */
export function isMessageType(obj: ReflectionObject | null): obj is Type {
  return obj !== null && 'fieldsArray' in obj;
}

/** Whether a resolved field type is an enum. */
export function isEnumType(obj: ReflectionObject | null): obj is Enum {
  return obj !== null && 'values' in obj && !('fieldsArray' in obj);
}

/** protoc's JSON name: underscores dropped, the letter after each one upper-cased (`stat_prefix` -> `statPrefix`). */
export function jsonNameOf(field: Field): string {
  const explicit = field.options?.['json_name'];
  if (typeof explicit === 'string') return explicit;
  let out = '';
  let upper = false;
  for (const ch of field.name) {
    if (ch === '_') upper = true;
    else {
      out += upper ? ch.toUpperCase() : ch;
      upper = false;
    }
  }
  return out;
}

const fieldIndexCache = new WeakMap<Type, ReadonlyMap<string, Field>>();

/** YAML key -> field, for both the snake_case and JSON spellings. */
export function fieldIndex(type: Type): ReadonlyMap<string, Field> {
  let index = fieldIndexCache.get(type);
  if (!index) {
    const m = new Map<string, Field>();
    for (const f of type.fieldsArray) {
      m.set(f.name, f);
      m.set(jsonNameOf(f), f);
    }
    index = m;
    fieldIndexCache.set(type, index);
  }
  return index;
}

/** Whether `name` is listed in the message's `reserved` statements (a field Envoy removed). */
export function isReservedName(type: Type, name: string): boolean {
  return (type.reserved ?? []).some((r) => r === name);
}

const typeNamesCache = new WeakMap<Root, readonly string[]>();

/** Every message type name in the Root (for did-you-mean on an unknown `@type`). */
export function messageTypeNames(root: Root): readonly string[] {
  let names = typeNamesCache.get(root);
  if (!names) {
    const out: string[] = [];
    const visit = (ns: ReflectionObject): void => {
      if (isMessageType(ns)) out.push(typeNameOf(ns));
      const nested = (ns as Namespace).nestedArray;
      if (Array.isArray(nested)) for (const child of nested) visit(child);
    };
    visit(root);
    names = out.sort();
    typeNamesCache.set(root, names);
  }
  return names;
}

/** The message type called `name`, or undefined (unlike `lookupType`, never throws). */
export function findMessageType(root: Root, name: string): Type | undefined {
  const found = root.lookup(name);
  return isMessageType(found) ? found : undefined;
}

/** Why a field is deprecated ("since API 3.0"), or undefined if it is not. */
export function deprecationOf(field: Field): string | undefined {
  const opts = parsedOptionsOf(field);
  const since = opts['(envoy.annotations.deprecated_at_minor_version)'];
  if (typeof since === 'string') return `deprecated since API ${since}`;
  return opts['deprecated'] === true || field.options?.['deprecated'] === true ? 'deprecated' : undefined;
}

/** Why an enum value is deprecated, or undefined if it is not. */
export function enumValueDeprecationOf(e: Enum, valueName: string): string | undefined {
  const opts = e.valuesOptions?.[valueName];
  if (!opts) return undefined;
  const since = opts['(envoy.annotations.deprecated_at_minor_version_enum)'];
  if (typeof since === 'string') return `deprecated since API ${since}`;
  return opts['deprecated'] === true ? 'deprecated' : undefined;
}

/** Whether the field is marked work in progress (Envoy warns: its behaviour may still change). */
export function isWorkInProgress(field: Field): boolean {
  const status = parsedOptionsOf(field)['(xds.annotations.v3.field_status)'];
  return typeof status === 'object' && status !== null && (status as Record<string, unknown>)['work_in_progress'] === true;
}

/** The `(udpa.annotations.field_migrate).oneof_promotion` group of a field: fields Envoy says to set only one of. */
export function oneofPromotionOf(field: Field): string | undefined {
  const migrate = parsedOptionsOf(field)['(udpa.annotations.field_migrate)'];
  const group = typeof migrate === 'object' && migrate !== null ? (migrate as Record<string, unknown>)['oneof_promotion'] : undefined;
  return typeof group === 'string' ? group : undefined;
}
