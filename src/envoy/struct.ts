/**
 * google.protobuf.Struct <-> plain JSON. protobufjs predefines Struct/Value, so their fields stay camelCase
 * (`structValue`, `stringValue`) even with keepCase (docs/envoy-ext-proc.md §12).
 */
import type { WireStruct, WireValue } from './wire.js';

/**
 * Sets `out[key]` as an own data property whatever the key. A plain assignment of `__proto__` would replace the
 * object's prototype instead, and everything under it (say a JWT claim named `__proto__` that jwt_authn copied
 * into the metadata) would then be read as inherited fields of the object, a `tenant` among them.
 */
function setOwn(out: Record<string, unknown>, key: string, value: unknown): void {
  if (key === '__proto__') Object.defineProperty(out, key, { value, enumerable: true, writable: true, configurable: true });
  else out[key] = value;
}

export function fromStruct(s: WireStruct | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(s?.fields ?? {})) setOwn(out, k, fromValue(v));
  return out;
}

export function fromValue(v: WireValue | undefined): unknown {
  if (v === undefined) return null;
  if (v.structValue !== undefined) return fromStruct(v.structValue);
  if (v.listValue !== undefined) return (v.listValue.values ?? []).map(fromValue);
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.numberValue !== undefined) return v.numberValue;
  if (v.boolValue !== undefined) return v.boolValue;
  return null;
}

export function toStruct(obj: Readonly<Record<string, unknown>>): WireStruct {
  const fields: Record<string, WireValue> = {};
  for (const [k, v] of Object.entries(obj)) fields[k] = toValue(v);
  return { fields };
}

export function toValue(v: unknown): WireValue {
  if (v === null || v === undefined) return { nullValue: 'NULL_VALUE' };
  if (typeof v === 'string') return { stringValue: v };
  if (typeof v === 'number') return { numberValue: v };
  if (typeof v === 'boolean') return { boolValue: v };
  if (Array.isArray(v)) return { listValue: { values: v.map(toValue) } };
  if (typeof v === 'object') return { structValue: toStruct(v as Record<string, unknown>) };
  return { stringValue: String(v) };
}

/** Envoy's `metadata_context.filter_metadata` as namespace -> plain object. */
export function fromFilterMetadata(md: Record<string, WireStruct> | undefined): Record<string, Record<string, unknown>> {
  const out: Record<string, Record<string, unknown>> = {};
  for (const [ns, s] of Object.entries(md ?? {})) setOwn(out, ns, fromStruct(s));
  return out;
}
