/**
 * The compiled route table: frozen lookups precomputed once per load, so the per-request decision never hashes a
 * descriptor, scans the pool list or re-runs a connector rule. Only the loader calls it, with a table that passed
 * `checkRouteTable` and the fingerprints that check computed (so every pool's revision is known).
 */
import type { CompatVerdict } from '../compat/connector-rules.js';
import { deepFreeze, type CompatDescriptor } from '../compat/descriptor.js';
import { fingerprintOf } from '../compat/fingerprint.js';
import { predictNixlHash } from '../compat/nixl-hash.js';
import { issue, type ConfigIssue } from '../config/issues.js';
import type { MediaPolicy } from '../media-url.js';
import {
  isVerified,
  type ConnectorMode,
  type FallbackStep,
  type Limits,
  type PoolDiscovery,
  type PoolRole,
  type RevisionTrust,
  type RevisionVerification,
  type RouteTable,
  type SessionConfig,
  type Tenancy,
  type TenantList,
} from './schema.js';

/** An endpoint as declared; `fingerprint` is its own declared descriptor's, else its pool's. */
export interface CompiledEndpoint {
  readonly address: string;
  readonly status: string | null;
  /** Declared `unverified: true`: routed without a status URL, on the table's word (only ever by opt-in). */
  readonly unverified?: true;
  readonly fingerprint: string;
  /** The Kubernetes pod behind a discovered endpoint (its UID): a reused IP is another endpoint. */
  readonly podUid?: string;
  /** vLLM's predicted NIXL handshake hash of an endpoint with its own descriptor; absent: the revision's. */
  readonly nixlHash?: string;
}

export interface CompiledPool {
  readonly name: string;
  readonly cluster: string;
  readonly role: PoolRole;
  readonly revision: string;
  /** The group fingerprint every endpoint of this pool must run. */
  readonly fingerprint: string;
  /** The static endpoints; empty for a pool found by `discovery` (its endpoints come from src/discovery). */
  readonly endpoints: readonly CompiledEndpoint[];
  readonly discovery: PoolDiscovery | null;
  readonly tenants: TenantList;
  readonly maxInFlightPerEndpoint: number;
  readonly draining: boolean;
  /** Present when the pool declares `schedulingPolicy: priority`: its workers honour a request's priority. */
  readonly priorityScheduling?: true;
}

export interface CompiledRevision {
  readonly name: string;
  readonly descriptor: CompatDescriptor;
  readonly fingerprint: string;
  /** vLLM's predicted NIXL handshake hash, for status pages and the sidecar's cross-check. */
  readonly nixlHash: string;
  /** The LoRA adapter id this revision serves, or null for base weights. */
  readonly adapter: string | null;
  /** Whether its KV may be moved from a prefill pool to a decode pool (connector rules, in the table's mode). */
  readonly transfer: { readonly allowed: boolean; readonly reasons: readonly string[]; readonly warnings: readonly string[] };
  readonly pools: {
    readonly prefill: readonly CompiledPool[];
    readonly decode: readonly CompiledPool[];
    readonly both: readonly CompiledPool[];
  };
  /** The table's verification record for this revision (`kvgate verify` evidence). */
  readonly verification: RevisionVerification;
  /** False when verification is required and has not passed: then it takes no cohort, fallback or bound traffic. */
  readonly verified: boolean;
  /** `declared-only` when the table routes this revision on its declaration alone (no recorded canaries). */
  readonly trust: RevisionTrust;
}

export interface CompiledModel {
  readonly name: string;
  readonly tenants: TenantList;
  readonly stable: string;
  readonly candidate: string | null;
  /** Percent (0-100) of cohorts sent to the candidate; 0 without a candidate. */
  readonly weight: number;
}

/** What an Envoy cluster is: one revision, one fingerprint (a cluster never spans groups). */
export interface CompiledCluster {
  readonly cluster: string;
  readonly revision: string;
  readonly fingerprint: string;
  readonly pools: readonly CompiledPool[];
}

/** A tenant's priority is its entry in `tenants`, else `default` (anonymous requests included). */
export interface TenantPriorities {
  readonly tenants: ReadonlyMap<string, number>;
  readonly default: number;
}

export interface CompiledRouteTable {
  readonly table: RouteTable;
  readonly revisions: ReadonlyMap<string, CompiledRevision>;
  readonly models: ReadonlyMap<string, CompiledModel>;
  readonly pools: ReadonlyMap<string, CompiledPool>;
  readonly clusters: ReadonlyMap<string, CompiledCluster>;
  /** Served model names, sorted. */
  readonly servedModels: readonly string[];
  /** True when any model or pool is restricted to named tenants (then model lists are never shown to clients). */
  readonly tenantRestricted: boolean;
  readonly tenancy: Tenancy;
  readonly session: SessionConfig;
  readonly connectorMode: ConnectorMode;
  readonly contractTtlMs: number;
  readonly fallback: readonly FallbackStep[];
  readonly limits: Limits;
  /** The origins a worker may fetch client media from (none by default; src/media-url.ts). */
  readonly media: MediaPolicy;
  /** The route table's `priorities`, or null without them (every request runs at vLLM's default priority, 0). */
  readonly priorities: TenantPriorities | null;
  /** Non-blocking findings of the load, reported alongside a table that loaded. */
  readonly warnings: readonly ConfigIssue[];
}

/** What `checkRouteTable` computed per revision, handed on so compiling recomputes nothing. */
export interface CheckedRevisions {
  readonly fingerprints: ReadonlyMap<string, string>;
  readonly connector: ReadonlyMap<string, CompatVerdict>;
}

/** Precompute the hot-path lookups of a checked table from what its check computed. */
export function compileRouteTable(table: RouteTable, checked: CheckedRevisions): CompiledRouteTable {
  const checkedOf = <T>(map: ReadonlyMap<string, T>, name: string): T => {
    const v = map.get(name);
    // The check reports an unknown revision or an unfingerprintable descriptor as an error, so this is a bug.
    if (v === undefined) throw new Error(`compileRouteTable: revision "${name}" was not checked`);
    return v;
  };
  const fingerprintOfRevision = (name: string): string => checkedOf(checked.fingerprints, name);
  const pools = new Map<string, CompiledPool>();
  for (const p of table.pools) {
    const fingerprint = fingerprintOfRevision(p.revision);
    const endpoints = p.endpoints.map((e) => ({
      address: e.address,
      status: e.status ?? null,
      ...(e.unverified === true ? { unverified: true as const } : {}),
      fingerprint: e.descriptor === undefined ? fingerprint : fingerprintOf(e.descriptor as CompatDescriptor),
      ...(e.descriptor === undefined ? {} : { nixlHash: predictNixlHash(e.descriptor as CompatDescriptor).hash }),
    }));
    const { name, cluster, role, revision, tenants, maxInFlightPerEndpoint, draining } = p;
    const discovery = p.discovery ?? null;
    pools.set(name, {
      name,
      cluster,
      role,
      revision,
      fingerprint,
      endpoints,
      discovery,
      tenants,
      maxInFlightPerEndpoint,
      draining,
      ...(p.schedulingPolicy === 'priority' ? { priorityScheduling: true as const } : {}),
    });
  }
  const revisions = new Map<string, CompiledRevision>();
  for (const [name, rev] of Object.entries(table.revisions)) {
    const mine = [...pools.values()].filter((p) => p.revision === name);
    const v = checkedOf(checked.connector, name);
    revisions.set(name, {
      name,
      descriptor: rev.descriptor,
      fingerprint: fingerprintOfRevision(name),
      nixlHash: predictNixlHash(rev.descriptor).hash,
      adapter: rev.descriptor.adapter?.id ?? null,
      transfer: { allowed: v.verdict !== 'refuse', reasons: v.reasons, warnings: v.warnings },
      pools: {
        prefill: mine.filter((p) => p.role === 'prefill'),
        decode: mine.filter((p) => p.role === 'decode'),
        both: mine.filter((p) => p.role === 'both'),
      },
      verification: rev.verification,
      verified: isVerified(rev.verification),
      trust: rev.trust ?? 'recorded',
    });
  }
  const models = new Map<string, CompiledModel>();
  for (const [name, m] of Object.entries(table.models)) {
    const candidate = m.rollout.candidate ?? null;
    models.set(name, {
      name,
      tenants: m.tenants,
      stable: m.rollout.stable,
      candidate,
      weight: candidate === null ? 0 : (m.rollout.weight ?? 0),
    });
  }
  const clusters = new Map<string, CompiledCluster>();
  for (const p of pools.values()) {
    const c = clusters.get(p.cluster);
    if (c === undefined) clusters.set(p.cluster, { cluster: p.cluster, revision: p.revision, fingerprint: p.fingerprint, pools: [p] });
    else (c.pools as CompiledPool[]).push(p);
  }
  const restricted = (l: TenantList): boolean => !l.includes('*');
  // Maps are not reached by deepFreeze; freeze what they hold (the ReadonlyMap types forbid `set`).
  for (const v of [...pools.values(), ...revisions.values(), ...models.values(), ...clusters.values()]) deepFreeze(v);
  return Object.freeze({
    table,
    revisions,
    models,
    pools,
    clusters,
    servedModels: [...models.keys()].sort(),
    tenantRestricted: [...models.values()].some((m) => restricted(m.tenants)) || table.pools.some((p) => restricted(p.tenants)),
    tenancy: table.tenancy,
    session: table.session,
    connectorMode: table.connectorMode,
    contractTtlMs: table.contract.ttlMs,
    fallback: table.fallback,
    limits: table.limits,
    media: table.media,
    priorities:
      table.priorities === undefined
        ? null
        : Object.freeze({ tenants: new Map(Object.entries(table.priorities.tenants)), default: table.priorities.default }),
    warnings: table.warnings,
  });
}

/** An endpoint as a live worker view sees it (structural, so policy does not depend on `decide`). */
export interface ObservedEndpoint {
  readonly address: string;
  readonly fingerprint: string | null;
}

/**
 * Live evidence that a pool mixes groups: endpoints whose observed fingerprint differs from the pool's. The gate
 * never routes to them (see `decide`); these issues are for `kvgate policy check --live` and operator alerts.
 */
export function checkObservedEndpoints(
  compiled: CompiledRouteTable,
  observed: (pool: string) => readonly ObservedEndpoint[],
): ConfigIssue[] {
  const out: ConfigIssue[] = [];
  compiled.table.pools.forEach((p, i) => {
    const pool = compiled.pools.get(p.name);
    if (pool === undefined) return;
    for (const ep of observed(p.name)) {
      if (ep.fingerprint === null || ep.fingerprint === pool.fingerprint) continue;
      out.push(
        issue(
          compiled.table.source,
          ['pools', i, 'endpoints'],
          `endpoint ${ep.address} of pool "${pool.name}" reports fingerprint ${ep.fingerprint.slice(0, 12)}…, but revision ` +
            `"${pool.revision}" is ${pool.fingerprint.slice(0, 12)}…; the pool mixes two compatibility groups and kvgate will not route to that endpoint`,
          `redeploy ${ep.address} with revision "${pool.revision}"'s configuration, or move it to a pool of the revision it runs`,
        ),
      );
    }
  });
  return out;
}
