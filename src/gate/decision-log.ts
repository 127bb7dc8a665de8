/**
 * The decision line: one structured log line per routed request (and per prefill hop), for operators who want to
 * see every routing choice without turning on debug. Off by default (`log.decisions: true` in the gate config turns
 * it on, at info level, on a child logger tagged `log: "decisions"` so it can be filtered or shipped apart). A
 * refusal never needs it: refusals always write their audit line.
 *
 * Fields are routing facts only (ids, names, addresses, timings); never prompt text, contracts or keys.
 */
import type { HopDecision, RouteDecision, Target } from '../decide/types.js';

/** The pino tag of the decision lines (`{"log":"decisions",...}`). */
export const DECISION_LOG_TAG = 'decisions';

export interface DecisionLine {
  readonly event: 'decision';
  readonly outcome: 'route' | 'hop';
  readonly request_id: string;
  readonly tenant: string | null;
  readonly model: string;
  readonly group: string;
  readonly revision: string;
  readonly decode: TargetFields | null;
  readonly prefill: TargetFields | null;
  /** Fallback steps walked, `step:outcome`, in order; empty when the bound group had capacity. */
  readonly fallback: readonly string[];
  readonly decision_ms: number;
  /** Present, as `declared-only`, when the revision is routed without recorded canaries. */
  readonly trust?: 'declared-only';
}

interface TargetFields {
  readonly pool: string;
  readonly cluster: string;
  readonly endpoint: string | null;
}

const target = (t: Target): TargetFields => ({ pool: t.pool, cluster: t.cluster, endpoint: t.endpoint });

/** The line for one decision that took `seconds` (from the last message needed to the answer, queue wait included). */
export function decisionLine(d: RouteDecision | HopDecision, seconds: number): DecisionLine {
  return {
    event: 'decision',
    outcome: d.kind,
    request_id: d.requestId,
    tenant: d.group.tenant,
    model: d.group.model,
    group: d.group.id,
    revision: d.group.revision,
    decode: d.kind === 'route' ? target(d.decode) : null,
    prefill: d.prefill === null ? null : target(d.prefill),
    fallback: d.kind === 'route' ? (d.fallback ?? []).map((f) => `${f.step}:${f.outcome}`) : [],
    decision_ms: Math.round(seconds * 1e6) / 1e3,
    ...(d.kind === 'route' && d.trust !== undefined ? { trust: d.trust } : {}),
  };
}
