/**
 * Choosing the decode and prefill endpoints of one revision for one group. Decode first (it holds the request for
 * its whole life), then prefill. Every candidate is drawn from the revision's own pools and must run the group's
 * fingerprint, so nothing here can leave the group. A shortage says which leg is missing, why, and whether waiting
 * could help (some endpoint is merely busy), which is what the fallback chain needs to choose its step.
 */
import type { CompiledRevision } from '../policy/compile.js';
import { eligibleFor, type Candidate, type Eligibility } from './pick.js';
import { pickScored, rankAlternates } from './score.js';
import type { BoundGroup, Trace } from './types.js';
import type { WorkerView } from './worker-view.js';

/** Why the group cannot be served right now. */
export interface Shortage {
  readonly missing: 'decode' | 'prefill';
  /** Every exclusion, in plain words (for refusals a person can act on). */
  readonly reasons: readonly string[];
  /** Endpoints of the missing leg left out only for being at their in-flight limit (capacity that will free). */
  readonly busy: number;
  /** The decode endpoint already chosen when only prefill capacity is missing: what `recompute` would serve on. */
  readonly decode: Candidate | null;
}

export type Targets =
  | { readonly ok: true; readonly decode: Candidate; readonly prefill: Candidate | null; readonly alternates: readonly Candidate[] }
  | { readonly ok: false; readonly shortage: Shortage };

/** How the decode leg is picked beyond load: prefix affinity and the fallback list. */
export interface PickOptions {
  /** A key of (group id, prompt prefix): the group's id carries the tenant's prefix scope, so affinity never spans
   * tenants. Null: no affinity. */
  readonly affinity?: string | null;
  /** How many more decode endpoints of the same cluster to rank after the pick (the EPP fallback list). */
  readonly alternates?: number;
}

/** The most alternates any caller asks for (the envoy translation trims to its configured count). */
export const MAX_ALTERNATES = 4;

/** Decode first, then prefill, both from `rev`'s pools only; one trace line per leg chosen. */
export function pickTargets(
  rev: CompiledRevision,
  group: Pick<BoundGroup, 'fingerprint' | 'tenant'>,
  view: WorkerView,
  requestId: string,
  trace: Trace,
  opts: PickOptions = {},
): Targets {
  const fp = group.fingerprint;
  const decodePools = rev.transfer.allowed ? [...rev.pools.decode, ...rev.pools.both] : rev.pools.both;
  const de = eligibleFor(decodePools, view, fp, group.tenant, { requestId, affinity: opts.affinity ?? null });
  const picked = pickScored(de.candidates, requestId, opts.affinity ?? null);
  if (picked === undefined) {
    return { ok: false, shortage: { missing: 'decode', reasons: de.reasons, busy: de.busy, decode: null } };
  }
  const decode = picked.candidate;
  const alternates = rankAlternates(de.candidates, decode, requestId, Math.min(MAX_ALTERNATES, opts.alternates ?? MAX_ALTERNATES));
  trace?.push(`decode: ${decode.endpoint.address} (pool ${decode.pool.name}, ${describeLoad(decode)}, ${picked.why} of ${countOf(de)})`);
  if (!rev.transfer.allowed) {
    trace?.push('prefill: none (served without disaggregation by a role: both pool)');
    return { ok: true, decode, prefill: null, alternates };
  }
  const pe = eligibleFor(rev.pools.prefill, view, fp, group.tenant, { requestId });
  const prefill = pickScored(pe.candidates, requestId, null)?.candidate;
  if (prefill !== undefined) {
    trace?.push(`prefill: ${prefill.endpoint.address} (pool ${prefill.pool.name}, ${describeLoad(prefill)}, least cost of ${countOf(pe)})`);
    return { ok: true, decode, prefill, alternates };
  }
  if (decode.pool.role === 'both') {
    trace?.push(
      `prefill: none (no separate prefill capacity${pe.reasons.length > 0 ? `: ${pe.reasons.join('; ')}` : ''}; ${decode.pool.name} serves it whole)`,
    );
    return { ok: true, decode, prefill: null, alternates };
  }
  const be = eligibleFor(rev.pools.both, view, fp, group.tenant, { requestId, exclude: decode.endpoint.address });
  const viaBoth = pickScored(be.candidates, requestId, null)?.candidate;
  if (viaBoth === undefined) {
    return { ok: false, shortage: { missing: 'prefill', reasons: [...pe.reasons, ...be.reasons], busy: pe.busy + be.busy, decode } };
  }
  trace?.push(`prefill: ${viaBoth.endpoint.address} (role: both pool ${viaBoth.pool.name}; no prefill-role capacity)`);
  return { ok: true, decode, prefill: viaBoth, alternates };
}

function describeLoad(c: Candidate): string {
  const l = c.endpoint.load;
  const own = `${c.endpoint.inFlight} in flight`;
  return l === undefined
    ? own
    : `${own}, worker reports ${l.running} running, ${l.waiting} waiting, KV ${Math.round(l.kvCacheUsage * 100)}%`;
}

function countOf(e: Eligibility): string {
  return e.sampledFrom === undefined ? String(e.candidates.length) : `${e.candidates.length} sampled from ${e.sampledFrom}`;
}
