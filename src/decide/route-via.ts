/**
 * The `routeVia` fallback step: when the bound revision has no capacity, bind the request instead to another listed
 * revision of the same base model, with prefill AND decode both from that revision. It happens before any prefill,
 * so no KV exists yet: the request simply gets a different whole group, never a mix. Only eligible requests move:
 * by default not those pinned by a session binding (their prefix cache lives on the bound revision) and not those
 * whose bound revision serves an adapter the other revision lacks (it would answer without the adapter). A revision
 * with an adapter the bound revision lacks never takes the request, whatever `eligible` says.
 */
import { groupIdOf } from '../compat/fingerprint.js';
import type { CompiledRevision } from '../policy/compile.js';
import type { FallbackStep } from '../policy/schema.js';
import type { FallbackOutcome, StepInput } from './fallback-step.js';
import { revisionServesTenant, unverifiedReason } from './revision.js';
import { pickTargets } from './targets.js';
import type { BoundGroup } from './types.js';

type RouteViaStep = Extract<FallbackStep, { kind: 'routeVia' }>;

/** Route through the first listed revision that is eligible and has capacity, or pass (undefined). */
export function routeViaStep(step: RouteViaStep, n: number, s: StepInput): FallbackOutcome | undefined {
  const label = `fallback step ${n} (routeVia)`;
  const pass = (why: string): undefined => {
    s.trace?.push(`${label}: passed: ${why}`);
    s.records.push({ step: 'routeVia', outcome: 'passed' });
    return undefined;
  };
  if (s.bound !== undefined) return pass(`the request is queued in group ${s.group.id}, and a queued request stays in its group`);
  if (step.eligible.notPinned && s.pinned) {
    return pass(`the request is pinned to revision ${s.revision.name} by its session's binding (eligible.notPinned)`);
  }
  const skipped: string[] = [];
  for (const name of step.revisions) {
    const r = s.table.revisions.get(name);
    const why = r === undefined ? 'is not declared' : ineligible(r, step, s);
    if (why !== undefined) {
      skipped.push(`${name} ${why}`);
      continue;
    }
    const via = r!;
    const group = groupOf(via, s.group);
    const lines: string[] = [];
    const t = pickTargets(via, group, s.view, s.facts.requestId, lines);
    if (!t.ok) {
      skipped.push(`${name} has no ${t.shortage.missing} capacity (${t.shortage.reasons.join('; ') || 'no pools'})`);
      continue;
    }
    s.trace?.push(
      `${label}: route entirely through revision ${via.name} instead of ${s.revision.name}: new group ${group.id} ` +
        `(fingerprint ${via.fingerprint.slice(0, 12)}…), prefill and decode both of ${via.name}, before any prefill`,
      ...lines,
    );
    s.records.push({ step: 'routeVia', outcome: 'routed' });
    return { kind: 'routeVia', revision: via, group, decode: t.decode, prefill: t.prefill };
  }
  return pass(skipped.length === 0 ? 'no revision listed' : skipped.join('; '));
}

/** Why `r` cannot take this request, or undefined when it can. */
function ineligible(r: CompiledRevision, step: RouteViaStep, s: StepInput): string | undefined {
  const bound = s.revision;
  if (r.name === bound.name) return 'is the bound revision';
  if (r.fingerprint === bound.fingerprint) return 'has the same fingerprint (it is the same group, already without capacity)';
  if (r.descriptor.model.id !== bound.descriptor.model.id) return `serves another model (${r.descriptor.model.id})`;
  // Never eligible, whatever `eligible` says: the request would be bound to an adapter's group it did not ask for,
  // and that group's contract, cache_salt and workers would take its base-model KV for adapter KV.
  if (r.adapter !== null && r.adapter !== bound.adapter) {
    return (
      `serves adapter ${r.adapter}, which the request's revision ${bound.name} does not: it would answer with an adapter ` +
      'the client did not ask for'
    );
  }
  if (step.eligible.noAdapter && bound.adapter !== null && r.adapter !== bound.adapter) {
    return `does not serve adapter ${bound.adapter}, which the request's revision has (eligible.noAdapter)`;
  }
  if (!r.verified) return unverifiedReason(r);
  if (!revisionServesTenant(r, s.group.tenant))
    return `has no pools open to ${s.group.tenant === null ? 'anonymous requests' : `tenant ${s.group.tenant}`}`;
  if (!r.transfer.allowed && r.pools.both.length === 0)
    return `cannot be disaggregated and has no role: both pool (${r.transfer.reasons.join('; ')})`;
  return undefined;
}

/** The whole new group: the other revision's fingerprint, the same tenant scope and model name. */
function groupOf(r: CompiledRevision, from: BoundGroup): BoundGroup {
  return Object.freeze({
    id: groupIdOf(r.fingerprint, from.tenantScope),
    fingerprint: r.fingerprint,
    tenantScope: from.tenantScope,
    tenant: from.tenant,
    model: from.model,
    revision: r.name,
    adapter: r.adapter,
  });
}
