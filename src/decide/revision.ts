/**
 * Which revision a request runs on: a valid binding keeps its session on the revision it started on (while that
 * revision still serves the model and is verified); otherwise the session (or, without one, the request) falls in a
 * deterministic cohort: `stableUnit(model, key) * 100 < weight` goes to the candidate. The same key lands in the
 * same cohort on every replica and after every restart, and raising the weight only ever moves sessions
 * stable -> candidate (the cohort is a prefix [0, weight) of one fixed hash line). A candidate whose verification
 * is required and has not passed takes no cohort: its cohort goes to stable, and the trace says why.
 */
import type { KeyRing } from '../contract/keys.js';
import { verifyBinding } from '../contract/binding.js';
import type { CompiledModel, CompiledRevision, CompiledRouteTable } from '../policy/compile.js';
import { tenantAllowed } from '../policy/schema.js';
import { BoundedCache } from '../bounded-cache.js';
import { stableUnit } from './pick.js';
import type { QueuedRequest, Trace } from './types.js';

export interface RevisionChoice {
  readonly revision: CompiledRevision;
  /** True when a client binding decided it (the request is pinned to its session's revision). */
  readonly pinned: boolean;
}

/** No revision may take the request (the only one open to the tenant is an unverified candidate). */
export interface NoRevision {
  readonly refuse: string;
}

/** Revisions of the model's rollout whose pools can serve this tenant end to end. */
export function servingRevisions(table: CompiledRouteTable, model: CompiledModel, tenant: string | null): CompiledRevision[] {
  const names = model.candidate === null ? [model.stable] : [model.stable, model.candidate];
  return names.map((n) => table.revisions.get(n)).filter((r): r is CompiledRevision => r !== undefined && revisionServesTenant(r, tenant));
}

/** Whether `r` has pools open to `tenant` for both halves of a request (or a `both` pool). */
export function revisionServesTenant(r: CompiledRevision, tenant: string | null): boolean {
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
export function chooseRevision(input: ChooseInput, trace: Trace): RevisionChoice | NoRevision {
  const { model, serving } = input;
  const bound = fromBinding(input, trace);
  if (bound !== undefined) return { revision: bound, pinned: true };
  const stable = serving.find((r) => r.name === model.stable);
  const offered = serving.find((r) => r.name === model.candidate);
  const candidate = offered?.verified === false ? undefined : offered;
  if (offered !== undefined && candidate === undefined) {
    trace?.push(`candidate ${offered.name} takes no cohort: ${unverifiedReason(offered)}`);
  }
  if (candidate === undefined || model.weight <= 0) {
    const r = stable ?? (offered === undefined ? serving[0]! : undefined);
    if (r === undefined) {
      const closed =
        candidate === undefined
          ? `which ${unverifiedReason(offered!)}`
          : `whose rollout weight is 0 (it takes no sessions); raise the weight or open stable ${model.stable} to this tenant`;
      return { refuse: `model ${model.name}'s only revision open to this tenant is candidate ${offered!.name}, ${closed}` };
    }
    const why =
      offered === undefined
        ? 'no candidate serves this tenant'
        : candidate === undefined
          ? `candidate ${offered.name} is not verified`
          : 'candidate weight is 0';
    trace?.push(`revision: ${r.name} (${why})`);
    return { revision: r, pinned: false };
  }
  if (stable === undefined) {
    trace?.push(`revision: ${candidate.name} (the candidate; stable ${model.stable} has no pool for this tenant)`);
    return { revision: candidate, pinned: false };
  }
  const key = input.session ?? input.requestId;
  const point = cohortUnit(model.name, key, input.session !== null) * 100;
  const inCohort = point < model.weight;
  const keyName = input.session === null ? 'request id' : 'session';
  trace?.push(
    `revision: ${inCohort ? candidate.name : stable.name} (${keyName} hashes to ${point.toFixed(2)} of 100; ` +
      `candidate ${candidate.name} takes the first ${model.weight})`,
  );
  return { revision: inCohort ? candidate : stable, pinned: false };
}

/**
 * The session's cohort point: `stableUnit`, kept per (model, session) because a session's requests repeat it (one
 * sha256 less per request). Keyed by the very string stableUnit hashes, so a cached value is always the one it
 * would compute. Request ids never repeat and are not kept.
 */
function cohortUnit(model: string, key: string, isSession: boolean): number {
  if (!isSession) return stableUnit('kvgate-cohort', model, key);
  return cohortPoints.get(`kvgate-cohort\n${model}\n${key}`, () => stableUnit('kvgate-cohort', model, key));
}

const cohortPoints = new BoundedCache<number>(4096);

function fromBinding(input: ChooseInput, trace: Trace): CompiledRevision | undefined {
  if (input.binding === undefined) return undefined;
  const expect = { model: input.model.name, tenantScope: input.tenantScope, ...(input.session === null ? {} : { session: input.session }) };
  const v = verifyBinding(input.binding, input.keys, input.nowMs, expect);
  if (!v.ok) {
    trace?.push(`binding ignored: ${v.error.message}`);
    return undefined;
  }
  const b = v.value;
  // The token's own expiry is the TTL of the table that signed it; a lowered session.bindingTtlMs applies to the
  // bindings already out there too, so an author can let pinned sessions go sooner.
  const ttlMs = input.table.session.bindingTtlMs;
  if (input.nowMs - b.issuedAtMs > ttlMs) {
    trace?.push(
      `binding to revision ${b.revision} ignored: it was issued ${input.nowMs - b.issuedAtMs} ms ago, longer than ` +
        `session.bindingTtlMs (${ttlMs} ms) of the route table in use`,
    );
    return undefined;
  }
  const r = input.serving.find((s) => s.name === b.revision);
  if (r === undefined) {
    trace?.push(`binding to revision ${b.revision} ignored: it no longer serves model ${input.model.name} for this tenant`);
    return undefined;
  }
  if (r.fingerprint !== b.fingerprint) {
    trace?.push(`binding to revision ${b.revision} ignored: the revision was redeclared with another fingerprint`);
    return undefined;
  }
  if (!r.verified) {
    trace?.push(`binding to revision ${b.revision} ignored: it ${unverifiedReason(r)}`);
    return undefined;
  }
  trace?.push(`revision: ${r.name} (kept by the session's binding, issued ${input.nowMs - b.issuedAtMs} ms ago)`);
  return r;
}

/** Why an unverified revision takes no traffic, with the fix, for traces and refusals. */
export function unverifiedReason(r: CompiledRevision): string {
  return `is not verified (revisions.${r.name}.verification requires it; set verified: true once kvgate verify passes)`;
}

/**
 * The revision a queued request keeps: the one of its bound group, if the table in use still serves that group for
 * this tenant. Otherwise the reason it no longer does (the request is then refused, never moved to another group).
 */
export function keepQueuedRevision(bound: QueuedRequest, serving: readonly CompiledRevision[]): CompiledRevision | NoRevision {
  const g = bound.group;
  const r = serving.find((s) => s.name === g.revision);
  if (r === undefined) return { refuse: `revision ${g.revision} no longer serves model ${g.model} for this tenant` };
  if (r.fingerprint !== g.fingerprint) return { refuse: `revision ${g.revision} was redeclared with another fingerprint` };
  if (!r.verified) return { refuse: `revision ${g.revision} ${unverifiedReason(r)}` };
  return r;
}
