/**
 * Which revision a request runs on: a valid binding keeps its session on the revision it started on (while that
 * revision still serves the model); otherwise the session (or, without one, the request) falls in a deterministic
 * cohort: `stableUnit(model, key) * 100 < weight` goes to the candidate. The same key lands in the same cohort on
 * every replica and after every restart, and raising the weight only ever moves sessions stable -> candidate.
 */
import type { KeyRing } from '../contract/keys.js';
import { verifyBinding } from '../contract/binding.js';
import type { CompiledModel, CompiledRevision, CompiledRouteTable } from '../policy/compile.js';
import { tenantAllowed } from '../policy/schema.js';
import { stableUnit } from './pick.js';

export interface RevisionChoice {
  readonly revision: CompiledRevision;
  /** True when a client binding decided it (the request is pinned to its session's revision). */
  readonly pinned: boolean;
}

/** Revisions of the model's rollout whose pools can serve this tenant end to end. */
export function servingRevisions(table: CompiledRouteTable, model: CompiledModel, tenant: string | null): CompiledRevision[] {
  const names = model.candidate === null ? [model.stable] : [model.stable, model.candidate];
  return names
    .map((n) => table.revisions.get(n))
    .filter((r): r is CompiledRevision => r !== undefined && revisionServesTenant(r, tenant));
}

function revisionServesTenant(r: CompiledRevision, tenant: string | null): boolean {
  const ok = (pools: CompiledRevision['pools']['both']) => pools.some((p) => tenantAllowed(p.tenants, tenant));
  return ok(r.pools.both) || (ok(r.pools.decode) && ok(r.pools.prefill));
}

export interface ChooseInput {
  readonly table: CompiledRouteTable;
  readonly model: CompiledModel;
  readonly serving: readonly CompiledRevision[];
  readonly tenantScope: string;
  readonly session: string | null;
  readonly requestId: string;
  readonly binding?: string;
  readonly keys: KeyRing;
  readonly nowMs: number;
}

/** Pick the revision, appending each consideration to `trace`. `serving` must be non-empty. */
export function chooseRevision(input: ChooseInput, trace: string[]): RevisionChoice {
  const { model, serving } = input;
  const bound = fromBinding(input, trace);
  if (bound !== undefined) return { revision: bound, pinned: true };
  const stable = serving.find((r) => r.name === model.stable);
  const candidate = serving.find((r) => r.name === model.candidate);
  if (candidate === undefined || model.weight <= 0) {
    const r = stable ?? serving[0]!;
    trace.push(`revision: ${r.name} (${candidate === undefined ? 'no candidate serves this tenant' : 'candidate weight is 0'})`);
    return { revision: r, pinned: false };
  }
  if (stable === undefined) {
    trace.push(`revision: ${candidate.name} (the candidate; stable ${model.stable} has no pool for this tenant)`);
    return { revision: candidate, pinned: false };
  }
  const key = input.session ?? input.requestId;
  const point = stableUnit('kvgate-cohort', model.name, key) * 100;
  const inCohort = point < model.weight;
  const keyName = input.session === null ? 'request id' : 'session';
  trace.push(
    `revision: ${inCohort ? candidate.name : stable.name} (${keyName} hashes to ${point.toFixed(2)} of 100; ` +
      `candidate ${candidate.name} takes the first ${model.weight})`,
  );
  return { revision: inCohort ? candidate : stable, pinned: false };
}

function fromBinding(input: ChooseInput, trace: string[]): CompiledRevision | undefined {
  if (input.binding === undefined) return undefined;
  const expect = { model: input.model.name, tenantScope: input.tenantScope, ...(input.session === null ? {} : { session: input.session }) };
  const v = verifyBinding(input.binding, input.keys, input.nowMs, expect);
  if (!v.ok) {
    trace.push(`binding ignored: ${v.error.message}`);
    return undefined;
  }
  const b = v.value;
  const r = input.serving.find((s) => s.name === b.revision);
  if (r === undefined) {
    trace.push(`binding to revision ${b.revision} ignored: it no longer serves model ${input.model.name} for this tenant`);
    return undefined;
  }
  if (r.fingerprint !== b.fingerprint) {
    trace.push(`binding to revision ${b.revision} ignored: the revision was redeclared with another fingerprint`);
    return undefined;
  }
  trace.push(`revision: ${r.name} (kept by the session's binding, issued ${input.nowMs - b.issuedAtMs} ms ago)`);
  return r;
}
