/**
 * Metrics of the rollout and the fallback chain, on a registry the caller passes in (no global registry):
 *
 * - `kvgate_fallback_total{step, outcome}`: every fallback step walked and what it did (`passed`, `waiting`,
 *   `queue_full`, `routed`, `recomputed`, `refused`), plus how queued requests left the queue (`step="queue"`,
 *   outcome `served`, `deadline_exceeded`, `cancelled`, `dropped`).
 * - `kvgate_queue_skipped_total{reason}`: queue steps that passed without holding the request, and why.
 * - `kvgate_queue_depth{group}`: requests waiting per group. A group's series is removed when its queue empties,
 *   so the label set is bounded by the groups waiting at once, not by every group ever seen.
 * - `kvgate_queue_wait_seconds{outcome}`: time spent queued, by how the wait ended.
 * - `kvgate_revision_verified{model, revision}`: 1 when a rollout revision may take traffic (verification passed or
 *   not required), 0 when its verification is required and has not passed.
 * - `kvgate_revision_trust{revision, trust}`: 1 per revision with pools; `trust="declared-only"` marks a revision
 *   routed on its declaration alone (no recorded canaries), so an alert can fire on it.
 */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { CompiledRouteTable } from '../policy/compile.js';
import { rolloutStatus } from '../policy/rollout-status.js';

export interface RolloutMetrics {
  readonly fallback: Counter<'step' | 'outcome'>;
  /** `kvgate_queue_skipped_total{reason}`: a queue step passed, and why (FallbackRecord.skipped). */
  readonly queueSkipped: Counter<'reason'>;
  readonly queueDepth: Gauge<'group'>;
  readonly queueWait: Histogram<'outcome'>;
  readonly revisionVerified: Gauge<'model' | 'revision'>;
  readonly revisionTrust: Gauge<'revision' | 'trust'>;
  /** Set `kvgate_revision_verified` from the table in use (call at start and after every swap). */
  updateVerification(table: CompiledRouteTable): void;
  /** Set or clear one group's `kvgate_queue_depth` series. */
  setQueueDepth(groupId: string, depth: number): void;
}

export function createRolloutMetrics(registry: Registry): RolloutMetrics {
  const registers = [registry];
  const revisionVerified = new Gauge({
    name: 'kvgate_revision_verified',
    help: 'Whether a rollout revision may take traffic: 1 verified or not required, 0 verification required and not passed.',
    labelNames: ['model', 'revision'] as const,
    registers,
  });
  const revisionTrust = new Gauge({
    name: 'kvgate_revision_trust',
    help: 'Revisions with pools by trust: recorded (workers checked against recorded canaries) or declared-only (not checked).',
    labelNames: ['revision', 'trust'] as const,
    registers,
  });
  const queueDepth = new Gauge({
    name: 'kvgate_queue_depth',
    help: 'Requests waiting in the fallback queue, per compatibility group (series removed when the queue empties).',
    labelNames: ['group'] as const,
    registers,
  });
  return {
    fallback: new Counter({
      name: 'kvgate_fallback_total',
      help: 'Fallback chain steps walked when a bound group had no capacity, by step and outcome.',
      labelNames: ['step', 'outcome'] as const,
      registers,
    }),
    queueSkipped: new Counter({
      name: 'kvgate_queue_skipped_total',
      help: 'Fallback queue steps that could not hold a request, by reason (cannot_hold, nothing_to_wait_for, no_time_left).',
      labelNames: ['reason'] as const,
      registers,
    }),
    queueDepth,
    queueWait: new Histogram({
      name: 'kvgate_queue_wait_seconds',
      help: 'Time requests spent in the fallback queue, by how the wait ended.',
      labelNames: ['outcome'] as const,
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
      registers,
    }),
    revisionVerified,
    revisionTrust,
    updateVerification(table) {
      revisionVerified.reset();
      for (const r of rolloutStatus(table)) revisionVerified.set({ model: r.model, revision: r.revision }, r.verified ? 1 : 0);
      revisionTrust.reset();
      for (const r of table.revisions.values()) {
        if (r.pools.prefill.length + r.pools.decode.length + r.pools.both.length > 0)
          revisionTrust.set({ revision: r.name, trust: r.trust }, 1);
      }
    },
    setQueueDepth(groupId, depth) {
      if (depth > 0) queueDepth.set({ group: groupId }, depth);
      else queueDepth.remove({ group: groupId });
    },
  };
}
