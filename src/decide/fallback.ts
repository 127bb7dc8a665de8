/**
 * The fallback chain, walked when a bound group has no capacity. This version acts on `refuse` (503 with
 * retry-after) and records the other steps (queue, routeVia, recompute) as not yet active, so a trace shows
 * exactly which configured step would have run. Whatever a step does, it stays inside the bound group or refuses.
 */
import type { CompiledRouteTable } from '../policy/compile.js';

/** Retry-after when the chain ends without a `refuse` step (also a warning at policy load). */
export const DEFAULT_RETRY_AFTER_SECONDS = 5;

export interface FallbackOutcome {
  readonly kind: 'refuse';
  readonly retryAfterSeconds: number;
}

/** Walk the chain in order, appending one trace line per step considered. */
export function walkFallback(table: CompiledRouteTable, trace: string[]): FallbackOutcome {
  for (const [i, step] of table.fallback.entries()) {
    const n = i + 1;
    if (step.kind === 'refuse') {
      trace.push(`fallback step ${n} (refuse): refuse with retry-after ${step.retryAfterSeconds} s`);
      return { kind: 'refuse', retryAfterSeconds: step.retryAfterSeconds };
    }
    trace.push(`fallback step ${n} (${step.kind}): skipped, not active in this kvgate version`);
  }
  trace.push(`fallback chain exhausted: refuse with retry-after ${DEFAULT_RETRY_AFTER_SECONDS} s`);
  return { kind: 'refuse', retryAfterSeconds: DEFAULT_RETRY_AFTER_SECONDS };
}

/** The retry-after the chain's first `refuse` step gives, for refusals outside the chain (e.g. an internal hop). */
export function finalRetryAfter(table: CompiledRouteTable): number {
  const step = table.fallback.find((s) => s.kind === 'refuse');
  return step?.kind === 'refuse' ? step.retryAfterSeconds : DEFAULT_RETRY_AFTER_SECONDS;
}
