/**
 * The internal hop: a decode sidecar's prefill leg passes the gate again. The gate does not decide anew; it checks
 * that the leg stays inside the group the contract bound, so a retry or a misconfigured sidecar can never send a
 * request's prefill to a worker whose KV would mean something else.
 */
import { verifyContract, type TransferContract } from '../contract/contract.js';
import { groupIdOf } from '../compat/fingerprint.js';
import type { CompiledPool, CompiledRouteTable } from '../policy/compile.js';
import { tenantAllowed } from '../policy/schema.js';
import { finalRetryAfter } from './fallback.js';
import type { DecideContext } from './types.js';
import { eligibleFor, pickLeastLoaded } from './pick.js';
import { refuse } from './refusal.js';
import { type BoundGroup, type Decision, frozenTrace, type HopFacts, type RequestFacts, type Trace } from './types.js';
import type { EndpointState, WorkerView } from './worker-view.js';

/** The bound group as the contract states it: a hop never re-derives the group, it checks against it. */
export function groupOfContract(c: TransferContract): BoundGroup {
  return Object.freeze({
    id: c.groupId,
    fingerprint: c.fingerprint,
    tenantScope: c.tenantScope,
    tenant: c.tenant,
    model: c.model,
    revision: c.revision,
    adapter: c.adapter,
  });
}

/** Check a prefill leg against its contract and the route table; a `hop` decision or a refusal. */
export function decideHop(facts: RequestFacts, hop: HopFacts, table: CompiledRouteTable, view: WorkerView, ctx: DecideContext): Decision {
  const id = facts.requestId;
  const trace: Trace = ctx.trace === false ? undefined : [`request ${id}: internal hop (prefill leg) presenting a transfer contract`];
  const v = verifyContract(hop.contract, ctx.keys, Math.floor(ctx.nowMs), { requestId: id });
  if (!v.ok) {
    return refuse(id, 'contract_invalid', `transfer contract rejected (${v.error.reason}): ${v.error.message}`, trace);
  }
  const c = v.value;
  if (groupIdOf(c.fingerprint, c.tenantScope) !== c.groupId) {
    return refuse(
      id,
      'contract_invalid',
      `transfer contract rejected: group ${c.groupId} does not match its fingerprint and tenant scope; it was minted by a different kvgate version or forged`,
      trace,
    );
  }
  const group = groupOfContract(c);
  trace?.push(
    `contract verified: group ${c.groupId} (model ${c.model}, revision ${c.revision}), expires in ${c.expiresAtMs - Math.floor(ctx.nowMs)} ms`,
  );
  const clusterName = hop.prefillCluster ?? c.prefill?.cluster;
  if (clusterName === undefined) {
    return refuse(
      id,
      'contract_invalid',
      `the contract of request ${id} has no prefill leg (it was served without disaggregation) and the hop names no prefill cluster; a sidecar must not start a prefill leg for it`,
      trace,
      { tenant: c.tenant },
    );
  }
  const cluster = table.clusters.get(clusterName);
  const hint = ` (prefill clusters of this group: ${prefillClusters(table, c.fingerprint) || 'none'})`;
  if (cluster === undefined || cluster.fingerprint !== c.fingerprint) {
    const what = cluster === undefined ? 'is not in the route table' : `serves revision ${cluster.revision}, another compatibility group`;
    trace?.push(`prefill cluster ${clusterName} ${what}`);
    return refuse(
      id,
      'mixed_revision',
      `prefill cluster ${clusterName} ${what}, but request ${id} is bound to group ${c.groupId} (model ${c.model}, revision ${c.revision}); ` +
        `KV from it would be fed to a decode worker of another revision. Send the prefill leg to a prefill cluster of the bound group${hint}`,
      trace,
      { tenant: c.tenant },
    );
  }
  // Inside the group, but the gate bound this request without a prefill leg: none may run for it.
  if (c.prefill === null) {
    return refuse(
      id,
      'contract_invalid',
      `the contract of request ${id} has no prefill leg (the gate bound it to be served without disaggregation); a prefill leg for it is refused`,
      trace,
      { tenant: c.tenant },
    );
  }
  const revision = table.revisions.get(c.revision);
  if (revision !== undefined && !revision.transfer.allowed) {
    return refuse(
      id,
      'incompatible_transfer',
      `revision ${c.revision} cannot move KV between workers (${revision.transfer.reasons.join('; ')}); it is served without disaggregation only`,
      trace,
      { tenant: c.tenant },
    );
  }
  const prefillPools = cluster.pools.filter((p) => p.role !== 'decode');
  if (prefillPools.length === 0) {
    return refuse(
      id,
      'bad_request',
      `cluster ${clusterName} has only decode pools; send the prefill leg to a prefill (or both) cluster of group ${c.groupId}${hint}`,
      trace,
      { tenant: c.tenant },
    );
  }
  const pools = prefillPools.filter((p) => tenantAllowed(p.tenants, c.tenant));
  if (pools.length === 0) {
    return refuse(
      id,
      'tenant_scope_denied',
      `prefill cluster ${clusterName} does not serve ${c.tenant === null ? 'anonymous requests' : `tenant ${c.tenant}`}; send the prefill leg to a cluster that does${hint}`,
      trace,
      { tenant: c.tenant },
    );
  }
  const exclude = new Set(hop.retryExclude ?? []);
  if (exclude.size > 0) trace?.push(`retry: excluding prefill endpoints that already failed (${[...exclude].join(', ')})`);
  return hopTarget({ id, table, view, c, group, contract: hop.contract, trace }, pools, clusterName, hop.prefillEndpoint, exclude);
}

/** What every step after contract verification needs. */
interface HopScope {
  readonly id: string;
  readonly table: CompiledRouteTable;
  readonly view: WorkerView;
  readonly c: TransferContract;
  readonly group: BoundGroup;
  readonly contract: string;
  readonly trace: Trace;
}

/** The endpoint the sidecar named, else the one the contract planned while it is usable, else the least loaded. */
function hopTarget(
  h: HopScope,
  pools: readonly CompiledPool[],
  clusterName: string,
  named: string | undefined,
  exclude: ReadonlySet<string>,
): Decision {
  const planned = h.c.prefill?.cluster === clusterName ? h.c.prefill.endpoint : null;
  // A named endpoint is checked as a member of the cluster; the contract's own planned endpoint, named but no longer
  // listed (its pod is being deleted), is what the planned path below handles.
  if (named !== undefined && !exclude.has(named) && (named !== planned || findIn(pools, listed(h), named) !== undefined)) {
    return checkHopEndpoint(h, pools, named, exclude);
  }
  if (planned !== null && !exclude.has(planned)) {
    // A pod deleted since the decision still serves until its grace period ends (that is what the period is for):
    // the leg of a request decided before may go there, never a new one.
    const state = findIn(pools, listed(h), planned) ?? findIn(pools, leaving(h), planned);
    if (state !== undefined && state.e.fingerprint === h.c.fingerprint && state.e.verified) {
      const target = { pool: state.p.name, cluster: state.p.cluster, endpoint: planned };
      if (!state.e.draining) {
        h.trace?.push(`prefill endpoint ${planned} (pool ${state.p.name}), as the contract planned`);
        return hopDecision(h, target);
      }
      h.trace?.push(`the contract's prefill endpoint ${planned} is draining; picking another in cluster ${clusterName}`);
      return pickHopEndpoint(h, pools, new Set([...exclude, planned]), target);
    }
    h.trace?.push(`the contract's prefill endpoint ${planned} is no longer usable; picking another in cluster ${clusterName}`);
  }
  return pickHopEndpoint(h, pools, new Set([...exclude, ...(planned === null ? [] : [planned])]));
}

/** A pool's endpoints as some part of the worker view lists them. */
type Lister = (pool: string) => readonly EndpointState[];
/** The endpoints that may take work. */
const listed =
  (h: HopScope): Lister =>
  (pool) =>
    h.view.endpoints(pool);
/** Pods being deleted that still serve: only a leg planned there before may go (`WorkerView.terminating`). */
const leaving =
  (h: HopScope): Lister =>
  (pool) =>
    h.view.terminating?.(pool) ?? [];

/** `address` in the first of `pools` whose `list` has it, with its state. */
function findIn(pools: readonly CompiledPool[], list: Lister, address: string): { p: CompiledPool; e: EndpointState } | undefined {
  for (const p of pools) {
    const e = list(p.name).find((x) => x.address === address);
    if (e !== undefined) return { p, e };
  }
  return undefined;
}

function prefillClusters(table: CompiledRouteTable, fingerprint: string): string {
  return [...table.clusters.values()]
    .filter((k) => k.fingerprint === fingerprint && k.pools.some((p) => p.role !== 'decode'))
    .map((k) => k.cluster)
    .join(', ');
}

function checkHopEndpoint(h: HopScope, pools: readonly CompiledPool[], address: string, exclude: ReadonlySet<string>): Decision {
  const { id, c, trace } = h;
  for (const pool of pools) {
    const ep = h.view.endpoints(pool.name).find((e) => e.address === address);
    if (ep === undefined) continue;
    if (ep.fingerprint !== c.fingerprint) {
      return refuse(
        id,
        'mixed_revision',
        `prefill endpoint ${address} of pool ${pool.name} runs fingerprint ${ep.fingerprint?.slice(0, 12) ?? '(unobserved)'}…, not group ${c.groupId}'s; it will not prefill for this request. Retry the prefill leg on another endpoint of cluster ${pool.cluster}`,
        trace,
        { tenant: c.tenant },
      );
    }
    if (!ep.verified) {
      return refuse(
        id,
        'worker_unverified',
        `prefill endpoint ${address} of pool ${pool.name} is not verified; retry the prefill leg on another endpoint of cluster ${pool.cluster}`,
        trace,
        { tenant: c.tenant },
      );
    }
    // The same capacity rules as an endpoint the gate picks: a named endpoint is no way around a drain or a limit.
    if (pool.draining || ep.draining || ep.inFlight >= pool.maxInFlightPerEndpoint) {
      trace?.push(
        `the named prefill endpoint ${address} is ${pool.draining || ep.draining ? 'draining' : `at its in-flight limit of ${pool.maxInFlightPerEndpoint}`}; picking another in cluster ${pool.cluster}`,
      );
      // Its replacement honours the retry's exclusions too: never an endpoint that already failed this request. Only
      // a sidecar's own drain leaves it as the last resort (see `pickHopEndpoint`); a table drain or a limit does not.
      const drainingOnly = ep.draining && !pool.draining && ep.inFlight < pool.maxInFlightPerEndpoint;
      return pickHopEndpoint(
        h,
        pools,
        new Set([...exclude, address]),
        drainingOnly ? { pool: pool.name, cluster: pool.cluster, endpoint: address } : undefined,
      );
    }
    trace?.push(`prefill endpoint ${address} (pool ${pool.name}) is in the group`);
    return hopDecision(h, { pool: pool.name, cluster: pool.cluster, endpoint: address });
  }
  // Not listed, but a pod of the cluster being deleted (Ready inside its grace period): a member, not for new work.
  if (findIn(pools, leaving(h), address) !== undefined) {
    trace?.push(`the named prefill endpoint ${address} is being deleted; picking another in cluster ${pools[0]!.cluster}`);
    return pickHopEndpoint(h, pools, new Set([...exclude, address]));
  }
  return refuse(
    id,
    'mixed_revision',
    `prefill endpoint ${address} is not a member of cluster ${pools[0]!.cluster}, so it cannot be shown to belong to group ${c.groupId}; let the gate pick the endpoint (omit x-kvgate-prefill-endpoint)`,
    trace,
    { tenant: c.tenant },
  );
}

/**
 * The least loaded eligible prefill endpoint of the group, else `lastResort`: the endpoint this request's leg was
 * planned on (or named for), in the group and verified, whose sidecar announced a drain after the request was
 * decided. A draining sidecar still admits for `drainAnnounceMs` exactly so that requests routed before the gate saw
 * the drain are served (docs/operator-guide.md §6); refusing the leg there when no other endpoint can take it would
 * turn a worker drain into a client-visible refusal. If the window has passed, the sidecar answers 503 `draining` and
 * the decode sidecar's retry excludes it.
 */
function pickHopEndpoint(
  h: HopScope,
  pools: readonly CompiledPool[],
  exclude: ReadonlySet<string>,
  lastResort?: { pool: string; cluster: string; endpoint: string },
): Decision {
  const { id, c, trace } = h;
  const e = eligibleFor(pools, h.view, c.fingerprint, c.tenant, { requestId: id, exclude });
  const picked = pickLeastLoaded(e.candidates, id);
  if (picked === undefined && lastResort !== undefined) {
    trace?.push(
      `no other prefill endpoint of group ${c.groupId} is available (${e.reasons.join('; ')}); the leg stays on ${lastResort.endpoint}, whose sidecar still admits requests routed before its drain`,
    );
    return hopDecision(h, lastResort);
  }
  if (picked === undefined) {
    const retryAfterSeconds = finalRetryAfter(h.table);
    return refuse(
      id,
      'no_compatible_capacity',
      `no prefill endpoint of group ${c.groupId} is available in cluster ${pools[0]!.cluster}: ${e.reasons.join('; ')}; retry after ${retryAfterSeconds} s`,
      trace,
      { tenant: c.tenant, retryAfterSeconds },
    );
  }
  trace?.push(`prefill endpoint ${picked.endpoint.address} (pool ${picked.pool.name}, ${picked.endpoint.inFlight} in flight)`);
  return hopDecision(h, { pool: picked.pool.name, cluster: picked.pool.cluster, endpoint: picked.endpoint.address });
}

function hopDecision(h: HopScope, prefill: { pool: string; cluster: string; endpoint: string }): Decision {
  return Object.freeze({
    kind: 'hop' as const,
    requestId: h.id,
    group: h.group,
    prefill: Object.freeze(prefill),
    contract: h.contract,
    trace: frozenTrace(h.trace),
  });
}
