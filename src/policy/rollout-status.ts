/**
 * The rollout as the gate applies it, per served model and revision: configured cohort weight, the weight that
 * actually reaches the candidate (0 while its verification is required and not passed), verification evidence and
 * draining pools. One pure function feeds `/status`, the `kvgate_revision_verified` gauge and `kvgate explain`, so
 * all three always agree.
 */
import type { CompiledRouteTable } from './compile.js';

export interface RevisionRolloutState {
  readonly model: string;
  readonly revision: string;
  readonly role: 'stable' | 'candidate';
  readonly fingerprint: string;
  /** False while verification is required and has not passed: a candidate then takes no cohort. */
  readonly verified: boolean;
  readonly verification: { readonly required: boolean; readonly verified: boolean; readonly evidence: string | null };
  /** Percent of new sessions the table assigns (stable: the rest). */
  readonly configuredPercent: number;
  /** Percent of new sessions the gate actually sends (an unverified candidate's share goes to stable). */
  readonly effectivePercent: number;
  /** Pools of this revision marked `draining: true` (they take no new bindings). */
  readonly drainingPools: readonly string[];
  /** `declared-only` when the table routes this revision without recorded canaries (shown loudly on /status). */
  readonly trust: 'recorded' | 'declared-only';
}

/** Every rollout revision of every served model, stable first, models sorted. */
export function rolloutStatus(table: CompiledRouteTable): RevisionRolloutState[] {
  const out: RevisionRolloutState[] = [];
  for (const name of table.servedModels) {
    const m = table.models.get(name)!;
    const candidate = m.candidate === null ? undefined : table.revisions.get(m.candidate);
    const weight = candidate === undefined ? 0 : m.weight;
    const sent = candidate?.verified === false ? 0 : weight;
    out.push(stateOf(table, name, m.stable, 'stable', 100 - weight, 100 - sent));
    if (candidate !== undefined) out.push(stateOf(table, name, candidate.name, 'candidate', weight, sent));
  }
  return out;
}

function stateOf(
  table: CompiledRouteTable,
  model: string,
  revision: string,
  role: 'stable' | 'candidate',
  configuredPercent: number,
  effectivePercent: number,
): RevisionRolloutState {
  const r = table.revisions.get(revision);
  const pools = [...table.pools.values()].filter((p) => p.revision === revision);
  return {
    model,
    revision,
    role,
    fingerprint: r?.fingerprint ?? '',
    verified: r?.verified ?? false,
    verification: r?.verification ?? { required: false, verified: false, evidence: null },
    configuredPercent,
    effectivePercent,
    drainingPools: pools.filter((p) => p.draining).map((p) => p.name),
    trust: r?.trust ?? 'recorded',
  };
}

/** One line per revision, e.g. `llama-3-8b: candidate llama-b 10% (effective 0%: verification required, not passed)`. */
export function formatRolloutStatus(states: readonly RevisionRolloutState[]): string[] {
  return states.map((s) => {
    const v = s.verification;
    const verification = !v.required
      ? 'verification not required'
      : v.verified
        ? `verified${v.evidence === null ? '' : ` (${v.evidence})`}`
        : 'verification required, not passed';
    const pct =
      s.configuredPercent === s.effectivePercent
        ? `${s.configuredPercent}%`
        : `${s.configuredPercent}% configured, ${s.effectivePercent}% effective`;
    const drain = s.drainingPools.length === 0 ? '' : `; draining pools: ${s.drainingPools.join(', ')}`;
    const trust = s.trust === 'declared-only' ? '; TRUST: DECLARED-ONLY (workers are not checked against recorded canaries)' : '';
    return `${s.model}: ${s.role} ${s.revision} ${pct}; ${verification}${drain}${trust}`;
  });
}

/**
 * Per revision with pools, how far the gate trusts its workers: `recorded` (sidecars check them against the recorded
 * canaries) or `declared-only` (taken on the declaration; listed first-class on /status so nobody misses it).
 */
export function trustStatus(table: CompiledRouteTable): {
  revisions: Record<string, 'recorded' | 'declared-only'>;
  declaredOnly: string[];
} {
  const revisions: Record<string, 'recorded' | 'declared-only'> = {};
  for (const r of table.revisions.values()) {
    if (r.pools.prefill.length + r.pools.decode.length + r.pools.both.length > 0) revisions[r.name] = r.trust;
  }
  return { revisions, declaredOnly: Object.keys(revisions).filter((n) => revisions[n] === 'declared-only') };
}
