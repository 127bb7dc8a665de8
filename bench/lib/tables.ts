/**
 * Route tables for benches, built as plain values and validated by the project's own loader, so a bench never
 * measures a table the gate would refuse to load. Shape: `models` served models, each mid-rollout between two
 * revisions (stable `a`, candidate `b` at 10%), each revision with one prefill and one decode pool of
 * `endpointsPerPool` endpoints. Revisions of different models differ in model id; `a`/`b` of one model differ in
 * weights only (the pair vLLM's NIXL handshake accepts and kvgate must keep apart).
 */
import type { CompiledRouteTable } from '../../src/policy/compile.js';
import { formatIssues } from '../../src/config/issues.js';
import { routeTableFromValue } from '../../src/policy/load.js';
import { testDescriptorInput } from '../../src/policy/testing.js';

export interface BenchTableSpec {
  /** Served models (default 1). Model 0 is `llama-3-8b`; the rest `model-<i>`. */
  readonly models?: number;
  /** Endpoints in every pool (default 2). */
  readonly endpointsPerPool?: number;
  /** Per-endpoint in-flight limit; benches raise it so a closed loop never measures capacity refusals. */
  readonly maxInFlightPerEndpoint?: number;
  /** Percent of sessions sent to the candidate revision (default 10). */
  readonly candidateWeight?: number;
}

export const BENCH_TENANTS = ['acme', 'globex'] as const;

/** The name of model `i` in a bench table. */
export function benchModelName(i: number): string {
  return i === 0 ? 'llama-3-8b' : `model-${i}`;
}

/** A unique IPv4 endpoint address for counter `n` (10.0.0.1:9090, 10.0.0.2:9090, ...). */
export function benchAddress(n: number): string {
  const v = n + 1;
  return `10.${(v >> 16) & 255}.${(v >> 8) & 255}.${v & 255}:8000`;
}

export function benchTableValue(spec: BenchTableSpec = {}): Record<string, unknown> {
  const models = spec.models ?? 1;
  const perPool = spec.endpointsPerPool ?? 2;
  const maxInFlight = spec.maxInFlightPerEndpoint ?? 64;
  const revisions: Record<string, unknown> = {};
  const served: Record<string, unknown> = {};
  const pools: unknown[] = [];
  let address = 0;
  for (let m = 0; m < models; m++) {
    const model = benchModelName(m);
    for (const w of ['a', 'b'] as const) {
      const rev = `${model}-${w}`;
      const base = testDescriptorInput({ weights: w });
      const id = m === 0 ? base.model.id : `bench-org/${model}`;
      revisions[rev] = { descriptor: { ...base, model: { ...base.model, id } } };
      for (const role of ['prefill', 'decode'] as const) {
        // No sidecars stand behind the bench's upstreams (echo servers, or none): the explicit opt-in to route without
        // a status URL, as a deployment would have to declare it too.
        const endpoints = Array.from({ length: perPool }, () => ({ address: benchAddress(address++), unverified: true }));
        pools.push({
          name: `${rev}-${role}`,
          cluster: `${rev}_${role}`.replaceAll('-', '_'),
          role,
          revision: rev,
          endpoints,
          maxInFlightPerEndpoint: maxInFlight,
        });
      }
    }
    served[model] = {
      tenants: [...BENCH_TENANTS],
      rollout: { stable: `${model}-a`, candidate: `${model}-b`, weight: spec.candidateWeight ?? 10 },
    };
  }
  return {
    version: 1,
    revisions,
    models: served,
    pools,
    tenancy: { source: { header: 'x-tenant-id' }, required: true, prefixScope: 'tenant' },
    session: { header: 'x-session-id' },
    connectorMode: 'strict',
    contract: { ttlMs: 30000 },
    fallback: [{ refuse: { retryAfterSeconds: 5 } }],
  };
}

/** Validate (schema + semantic checks) and compile, or throw with every issue: a bad bench table is a bench bug. */
export function compileBenchTable(value: Record<string, unknown>): CompiledRouteTable {
  const r = routeTableFromValue(value, { file: 'bench-table.json' });
  if (!r.ok) throw new Error(`bench route table is invalid:\n${formatIssues(r.error)}`);
  return r.value;
}
