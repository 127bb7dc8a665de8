/**
 * The decision core: request facts + compiled route table + worker view -> one Decision. Pure (no I/O, no clock
 * or randomness of its own); the same facts, table, view and time always give the same decision on every replica.
 *
 * Order: internal hop -> tenant -> model -> revision -> group -> connector rules -> decode and prefill targets ->
 * fallback -> contract, binding and cache salt. The group is fixed before any target is chosen, and every target is
 * drawn from endpoints that run exactly the group's fingerprint; no branch can leave the group.
 */
import { deriveCacheSalt } from '../contract/cache-salt.js';
import { mintBinding } from '../contract/binding.js';
import { mintContract } from '../contract/contract.js';
import type { KeyRing } from '../contract/keys.js';
import { groupIdOf } from '../compat/fingerprint.js';
import type { CompiledModel, CompiledRevision, CompiledRouteTable } from '../policy/compile.js';
import { tenantAllowed } from '../policy/schema.js';
import { walkFallback } from './fallback.js';
import { decideHop } from './hop.js';
import { eligibleEndpoints, pickLeastLoaded, type Candidate } from './pick.js';
import { refuse } from './refusal.js';
import { sessionOf, tenantOf, tenantScopeOf, userOf } from './request-facts.js';
import { chooseRevision, servingRevisions } from './revision.js';
import type { BoundGroup, Decision, OpenAiRequest, Refusal, RequestFacts, RouteDecision, Target } from './types.js';
import type { WorkerView } from './worker-view.js';

export interface DecideContext {
  /** Milliseconds since the epoch (floored); contracts and bindings are issued at this time. */
  readonly nowMs: number;
  readonly keys: KeyRing;
  /**
   * Injected randomness. Unused by this version's decisions, which are deliberately deterministic (cohorts and
   * tie-breaks hash the request); reserved for fallback steps that need jitter (queue retry spacing).
   */
  readonly random?: () => number;
}

/**
 * Decide one request: a hop check for a sidecar's prefill leg, else a route bound to one group, else a refusal
 * with a reason a person can act on. Never throws for bad input; a throw is a kvgate bug.
 */
export function decide(facts: RequestFacts, table: CompiledRouteTable, view: WorkerView, ctx: DecideContext): Decision {
  const hop = facts.hop ?? (facts.contract === undefined ? undefined : { contract: facts.contract });
  if (hop !== undefined) return decideHop(facts, hop, table, view, ctx);
  return decideRoute(facts, table, view, ctx);
}

interface Identity {
  readonly body: OpenAiRequest;
  readonly tenant: string | null;
  readonly model: CompiledModel;
  readonly serving: readonly CompiledRevision[];
  readonly tenantScope: string;
  readonly session: string | null;
}

const isRefusal = (x: unknown): x is Refusal => (x as { kind?: unknown }).kind === 'refuse';

function decideRoute(facts: RequestFacts, table: CompiledRouteTable, view: WorkerView, ctx: DecideContext): Decision {
  const id = facts.requestId;
  const now = Math.floor(ctx.nowMs);
  const trace: string[] = [`request ${id}: ${facts.method} ${facts.path}`];
  const who = identify(facts, table, trace);
  if (isRefusal(who)) return who;
  const choice = chooseRevision(
    { table, model: who.model, serving: who.serving, tenantScope: who.tenantScope, session: who.session, requestId: id, keys: ctx.keys, nowMs: now, ...(facts.binding === undefined ? {} : { binding: facts.binding }) },
    trace,
  );
  const rev = choice.revision;
  const group: BoundGroup = Object.freeze({
    id: groupIdOf(rev.fingerprint, who.tenantScope),
    fingerprint: rev.fingerprint,
    tenantScope: who.tenantScope,
    tenant: who.tenant,
    model: who.model.name,
    revision: rev.name,
    adapter: rev.adapter,
  });
  trace.push(`group: ${group.id} (fingerprint ${rev.fingerprint.slice(0, 12)}…, scope ${group.tenantScope})`);
  if (!rev.transfer.allowed) {
    if (rev.pools.both.length === 0) {
      return refuse(id, 'incompatible_transfer', `model ${group.model} (revision ${rev.name}) cannot be served with disaggregated prefill/decode: ${rev.transfer.reasons.join('; ')}. It needs a role: both pool; ask the operator to add one`, trace, { tenant: who.tenant });
    }
    trace.push(`connector rules: revision ${rev.name} is not transferable (${rev.transfer.reasons.join('; ')}); only role: both pools may serve it`);
  } else {
    trace.push(`connector rules: revision ${rev.name} may be disaggregated`);
  }
  const targets = pickTargets(rev, group, view, id, trace);
  if ('missing' in targets) {
    const outcome = walkFallback(table, trace);
    const s = outcome.retryAfterSeconds;
    return refuse(
      id,
      'no_compatible_capacity',
      `no ${targets.missing} endpoint of group ${group.id} (model ${group.model}, revision ${rev.name}) is available: ${targets.reasons.join('; ') || 'no pools'}; retry after ${s} s or ask the operator to add capacity`,
      trace,
      { tenant: who.tenant, retryAfterSeconds: s },
    );
  }
  return bindRoute(facts, table, ctx.keys, now, who, group, targets, trace);
}

/** Tenant, model and prefix scope, or the refusal that stops the request before any revision is chosen. */
function identify(facts: RequestFacts, table: CompiledRouteTable, trace: string[]): Identity | Refusal {
  const id = facts.requestId;
  const body = facts.body;
  if (body === undefined) {
    return refuse(id, 'bad_request', 'kvgate routes POST /v1/completions and /v1/chat/completions with a JSON body; this request has none', trace);
  }
  const tenancy = table.tenancy;
  const found = tenantOf(facts, tenancy);
  let tenant: string | null;
  if (found.kind === 'found') {
    tenant = found.tenant;
    trace.push(`tenant: ${tenant} (from ${found.from})`);
  } else if (found.kind === 'ambiguous') {
    return refuse(id, 'tenant_required', `the tenant identity (${found.from}) is unusable: ${found.detail}; exactly one tenant id is required`, trace);
  } else if (tenancy.required) {
    return refuse(id, 'tenant_required', `this gateway requires a tenant identity (${found.from}) and the request has none; authenticate through the gateway so it is set`, trace);
  } else {
    tenant = tenancy.default ?? null;
    trace.push(tenant === null ? `tenant: none (${found.from} absent; anonymous)` : `tenant: ${tenant} (default; ${found.from} absent)`);
  }
  const model = table.models.get(body.model);
  if (model === undefined) return refuse(id, 'unknown_model', unknownModelMessage(body.model, table, tenant), trace, { tenant });
  if (!tenantAllowed(model.tenants, tenant)) {
    return tenant === null
      ? refuse(id, 'tenant_required', `model ${model.name} is restricted to named tenants and the request has no tenant identity; authenticate through the gateway`, trace, { tenant })
      : refuse(id, 'tenant_scope_denied', `tenant ${tenant} may not use model ${model.name}; ask the gateway operator for access`, trace, { tenant });
  }
  const serving = servingRevisions(table, model, tenant);
  if (serving.length === 0) {
    return refuse(id, 'tenant_scope_denied', `no pool serving model ${model.name} is open to ${tenant === null ? 'anonymous requests' : `tenant ${tenant}`}; ask the gateway operator for access`, trace, { tenant });
  }
  const tenantScope = tenantScopeOf(tenancy.prefixScope, tenant, userOf(facts, tenancy));
  const session = sessionOf(facts, table.session);
  trace.push(`model: ${model.name} (rollout: stable ${model.stable}${model.candidate === null ? '' : `, candidate ${model.candidate} at ${model.weight}%`})`);
  return { body, tenant, model, serving, tenantScope, session };
}

function unknownModelMessage(name: string, table: CompiledRouteTable, tenant: string | null): string {
  const shown = JSON.stringify(name.slice(0, 128));
  if (table.tenantRestricted) {
    return `model ${shown} is not served by this gateway. Check the name; models are not listed here because access is per tenant: ask the gateway operator which models ${tenant === null ? 'you' : `tenant ${tenant}`} may use`;
  }
  const all = table.servedModels;
  const list = all.length > 20 ? `${all.slice(0, 20).join(', ')}, ...` : all.join(', ');
  return `model ${shown} is not served by this gateway; served models: ${list}`;
}

type Targets = { decode: Candidate; prefill: Candidate | null } | { missing: 'decode' | 'prefill'; reasons: string[] };

/** Decode first, then prefill, both from the bound revision's pools only. */
function pickTargets(rev: CompiledRevision, group: BoundGroup, view: WorkerView, requestId: string, trace: string[]): Targets {
  const fp = group.fingerprint;
  const decodePools = rev.transfer.allowed ? [...rev.pools.decode, ...rev.pools.both] : rev.pools.both;
  const de = eligibleEndpoints(decodePools, view, fp, group.tenant);
  const decode = pickLeastLoaded(de.candidates, requestId);
  if (decode === undefined) return { missing: 'decode', reasons: [...de.reasons] };
  trace.push(`decode: ${decode.endpoint.address} (pool ${decode.pool.name}, ${decode.endpoint.inFlight} in flight, least of ${de.candidates.length})`);
  if (!rev.transfer.allowed) {
    trace.push('prefill: none (served without disaggregation by a role: both pool)');
    return { decode, prefill: null };
  }
  const pe = eligibleEndpoints(rev.pools.prefill, view, fp, group.tenant);
  const prefill = pickLeastLoaded(pe.candidates, requestId);
  if (prefill !== undefined) {
    trace.push(`prefill: ${prefill.endpoint.address} (pool ${prefill.pool.name}, ${prefill.endpoint.inFlight} in flight, least of ${pe.candidates.length})`);
    return { decode, prefill };
  }
  if (decode.pool.role === 'both') {
    trace.push(`prefill: none (no separate prefill capacity${pe.reasons.length > 0 ? `: ${pe.reasons.join('; ')}` : ''}; ${decode.pool.name} serves it whole)`);
    return { decode, prefill: null };
  }
  const be = eligibleEndpoints(rev.pools.both, view, fp, group.tenant, decode.endpoint.address);
  const viaBoth = pickLeastLoaded(be.candidates, requestId);
  if (viaBoth === undefined) return { missing: 'prefill', reasons: [...pe.reasons, ...be.reasons] };
  trace.push(`prefill: ${viaBoth.endpoint.address} (role: both pool ${viaBoth.pool.name}; no prefill-role capacity)`);
  return { decode, prefill: viaBoth };
}

const targetOf = (c: Candidate): Target => Object.freeze({ pool: c.pool.name, cluster: c.pool.cluster, endpoint: c.endpoint.address });

function bindRoute(
  facts: RequestFacts,
  table: CompiledRouteTable,
  keys: KeyRing,
  now: number,
  who: Identity,
  group: BoundGroup,
  targets: { decode: Candidate; prefill: Candidate | null },
  trace: string[],
): RouteDecision {
  const decode = targetOf(targets.decode);
  const prefill = targets.prefill === null ? null : targetOf(targets.prefill);
  for (const c of [targets.decode, targets.prefill]) {
    // The invariant every branch above maintains; a violation is a bug, never a route.
    if (c !== null && (c.endpoint.fingerprint !== group.fingerprint || c.pool.fingerprint !== group.fingerprint)) {
      throw new Error(`kvgate bug: endpoint ${c.endpoint.address} is outside group ${group.id}`);
    }
  }
  const contract = mintContract(
    {
      requestId: facts.requestId,
      groupId: group.id,
      fingerprint: group.fingerprint,
      tenantScope: group.tenantScope,
      tenant: group.tenant,
      model: group.model,
      revision: group.revision,
      adapter: group.adapter,
      issuedAtMs: now,
      expiresAtMs: now + table.contractTtlMs,
      decode: { cluster: decode.cluster, endpoint: decode.endpoint },
      prefill: prefill === null ? null : { cluster: prefill.cluster, endpoint: prefill.endpoint },
    },
    keys,
  );
  const binding = mintBinding(
    { model: group.model, revision: group.revision, fingerprint: group.fingerprint, tenantScope: group.tenantScope, session: who.session, issuedAtMs: now, expiresAtMs: now + table.session.bindingTtlMs },
    keys,
  );
  const cacheSalt = deriveCacheSalt(keys, group.id, group.tenantScope, who.body.cacheSalt);
  trace.push(`contract minted (expires in ${table.contractTtlMs} ms); cache_salt derived${who.body.cacheSalt === undefined ? '' : " (client's salt folded in)"}`);
  return Object.freeze({ kind: 'route' as const, requestId: facts.requestId, group, decode, prefill, cacheSalt, contract, binding, trace: Object.freeze([...trace]) });
}
