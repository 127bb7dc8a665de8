/**
 * Choosing the decode and prefill endpoints of one revision for one group. Decode first (it holds the request for
 * its whole life), then prefill. Every candidate is drawn from the revision's own pools and must run the group's
 * fingerprint, so nothing here can leave the group. A shortage says which leg is missing, why, and whether waiting
 * could help (some endpoint is merely busy), which is what the fallback chain needs to choose its step.
 */
import type { CompiledRevision } from '../policy/compile.js';
import { eligibleEndpoints, pickLeastLoaded, type Candidate } from './pick.js';
import type { BoundGroup } from './types.js';
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
  | { readonly ok: true; readonly decode: Candidate; readonly prefill: Candidate | null }
  | { readonly ok: false; readonly shortage: Shortage };

/** Decode first, then prefill, both from `rev`'s pools only; one trace line per leg chosen. */
export function pickTargets(
  rev: CompiledRevision,
  group: Pick<BoundGroup, 'fingerprint' | 'tenant'>,
  view: WorkerView,
  requestId: string,
  trace: string[],
): Targets {
  const fp = group.fingerprint;
  const decodePools = rev.transfer.allowed ? [...rev.pools.decode, ...rev.pools.both] : rev.pools.both;
  const de = eligibleEndpoints(decodePools, view, fp, group.tenant);
  const decode = pickLeastLoaded(de.candidates, requestId);
  if (decode === undefined) {
    return { ok: false, shortage: { missing: 'decode', reasons: de.reasons, busy: de.busy, decode: null } };
  }
  trace.push(`decode: ${decode.endpoint.address} (pool ${decode.pool.name}, ${decode.endpoint.inFlight} in flight, least of ${de.candidates.length})`);
  if (!rev.transfer.allowed) {
    trace.push('prefill: none (served without disaggregation by a role: both pool)');
    return { ok: true, decode, prefill: null };
  }
  const pe = eligibleEndpoints(rev.pools.prefill, view, fp, group.tenant);
  const prefill = pickLeastLoaded(pe.candidates, requestId);
  if (prefill !== undefined) {
    trace.push(`prefill: ${prefill.endpoint.address} (pool ${prefill.pool.name}, ${prefill.endpoint.inFlight} in flight, least of ${pe.candidates.length})`);
    return { ok: true, decode, prefill };
  }
  if (decode.pool.role === 'both') {
    trace.push(`prefill: none (no separate prefill capacity${pe.reasons.length > 0 ? `: ${pe.reasons.join('; ')}` : ''}; ${decode.pool.name} serves it whole)`);
    return { ok: true, decode, prefill: null };
  }
  const be = eligibleEndpoints(rev.pools.both, view, fp, group.tenant, decode.endpoint.address);
  const viaBoth = pickLeastLoaded(be.candidates, requestId);
  if (viaBoth === undefined) {
    return { ok: false, shortage: { missing: 'prefill', reasons: [...pe.reasons, ...be.reasons], busy: pe.busy + be.busy, decode } };
  }
  trace.push(`prefill: ${viaBoth.endpoint.address} (role: both pool ${viaBoth.pool.name}; no prefill-role capacity)`);
  return { ok: true, decode, prefill: viaBoth };
}
