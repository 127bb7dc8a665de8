/**
 * google.protobuf.Struct <-> plain JSON. protobufjs predefines Struct/Value, so their fields stay camelCase
 * (`structValue`, `stringValue`) even with keepCase (docs/envoy-ext-proc.md §12).
 */
import type { WireStruct, WireValue } from './wire.js';

export function fromStruct(s: WireStruct | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(s?.fields ?? {})) out[k] = fromValue(v);
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
  for (const [ns, s] of Object.entries(md ?? {})) out[ns] = fromStruct(s);
  return out;
}
