/**
 * The retry-after a refusal for lack of capacity carries: the chain's `refuse` step says it, else a default (a
 * chain without `refuse` is a warning at policy load).
 */
import type { CompiledRouteTable } from '../policy/compile.js';

/** Retry-after when the chain ends without a `refuse` step. */
export const DEFAULT_RETRY_AFTER_SECONDS = 5;

/** The retry-after the chain's first `refuse` step gives, for refusals outside the chain (e.g. an internal hop). */
export function finalRetryAfter(table: CompiledRouteTable): number {
  const step = table.fallback.find((s) => s.kind === 'refuse');
  return step?.kind === 'refuse' ? step.retryAfterSeconds : DEFAULT_RETRY_AFTER_SECONDS;
}
