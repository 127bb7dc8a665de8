/**
 * `envoy.type.v3.StatusCode` names <-> numbers. Proto-loader decodes the enum as its name ("Created") when the
 * number is known and as the bare number otherwise, and YAML may use either; both end up as an HTTP status here.
 * The table is read from the vendored proto so it cannot drift from what Envoy accepts.
 */
import { loadExtProc } from '../../src/envoy/protos.js';

interface EnumDescriptor {
  type: { value: Array<{ name: string; number: number }> };
}

let byName: ReadonlyMap<string, number> | undefined;

function table(): ReadonlyMap<string, number> {
  if (byName === undefined) {
    const root = loadExtProc() as unknown as { envoy: { type: { v3: { StatusCode: EnumDescriptor } } } };
    byName = new Map(root.envoy.type.v3.StatusCode.type.value.map((v) => [v.name, v.number]));
  }
  return byName;
}

/** A decoded or YAML `StatusCode` value to its number; `undefined` for a name the enum does not define. */
export function statusCodeFrom(value: unknown): number | undefined {
  if (typeof value === 'number' && Number.isInteger(value)) return value;
  if (typeof value === 'string') {
    if (/^\d+$/.test(value)) return Number(value);
    return table().get(value);
  }
  return undefined;
}
