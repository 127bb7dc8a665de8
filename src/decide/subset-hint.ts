/**
 * The endpoint-picker protocol's subset hint: the data plane may restrict, per request, which endpoints the picker
 * may choose (kubernetes-sigs/gateway-api-inference-extension @84436a96, docs/proposals/004-endpoint-picker-protocol,
 * "Endpoint Subset"; namespace and key names from pkg/lwepp/metadata/consts.go, parsing as pkg/lwepp/handlers/
 * request.go does it: a list of strings or one comma-separated string, each `ip:port` or a bare IP meaning any port).
 *
 * If the key is set, ONLY listed endpoints may be picked; none eligible, or an empty list, is a 503. kvgate applies
 * the hint to the pools that serve the client's request (decode and role-both pools); a prefill leg is a hop of its
 * own and is not part of the InferencePool the gateway called us for.
 */
import type { CompiledRouteTable } from '../policy/compile.js';
import type { WorkerView } from './worker-view.js';

export const SUBSET_NAMESPACE = 'envoy.lb.subset_hint';
export const SUBSET_KEY = 'x-gateway-destination-endpoint-subset';

/** The hint as sent: exact `ip:port`s and bare IPs (any port). */
export interface SubsetHint {
  readonly endpoints: ReadonlySet<string>;
  readonly anyPort: ReadonlySet<string>;
  /** How many entries the data plane listed (0 = an explicit empty list). */
  readonly size: number;
}

/** The hint in the request's filter metadata, or null when the data plane set none. */
export function readSubsetHint(metadata: Readonly<Record<string, Readonly<Record<string, unknown>>>>): SubsetHint | null {
  const ns = metadata[SUBSET_NAMESPACE];
  if (ns === undefined || !Object.hasOwn(ns, SUBSET_KEY)) return null;
  const raw = ns[SUBSET_KEY];
  const items = (Array.isArray(raw) ? raw : [raw]).filter((x): x is string => typeof x === 'string').flatMap((s) => s.split(','));
  const endpoints = new Set<string>();
  const anyPort = new Set<string>();
  for (const item of items.map((s) => s.trim()).filter((s) => s.length > 0)) {
    if (/^\[.*\]:\d+$/.test(item) || /^[^:]+:\d+$/.test(item)) endpoints.add(item);
    else anyPort.add(item.replace(/^\[|\]$/g, ''));
  }
  return { endpoints, anyPort, size: endpoints.size + anyPort.size };
}

function hostOf(address: string): string {
  const i = address.lastIndexOf(':');
  return address.slice(0, i).replace(/^\[|\]$/g, '');
}

/** True when `address` is allowed by the hint. */
export function inSubset(hint: SubsetHint, address: string): boolean {
  return hint.endpoints.has(address) || (hint.anyPort.size > 0 && hint.anyPort.has(hostOf(address)));
}

/** The worker view with every serving pool (decode, both) narrowed to the hint; prefill pools as they are. */
export function restrictToSubset(view: WorkerView, table: CompiledRouteTable, hint: SubsetHint): WorkerView {
  return {
    endpoints(pool) {
      const all = view.endpoints(pool);
      const role = table.pools.get(pool)?.role;
      return role === 'prefill' ? all : all.filter((e) => inSubset(hint, e.address));
    },
    ...(view.ageMs === undefined ? {} : { ageMs: view.ageMs }),
  };
}
