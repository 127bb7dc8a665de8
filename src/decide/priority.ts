/**
 * The scheduling priority a routed request carries: its tenant's from the route table's `priorities` (else their
 * `default`), in vLLM's order (lower first), and only where every pool the request may run on declares
 * `schedulingPolicy: priority`. A vLLM started without `--scheduling-policy priority` refuses any priority but 0
 * (`CompletionRequest.priority` in vllm-project/vllm `vllm/entrypoints/openai/completion/protocol.py` @002032ee), so
 * a request routed to one such pool runs at 0 rather than be refused there. The priority orders the request within
 * the pools its group already bound: it never picks a pool, a group or a cache. Pure.
 */
import type { CompiledPool, TenantPriorities } from '../policy/compile.js';

export interface StampedPriority {
  /** What the contract carries (0: left out). */
  readonly priority: number;
  /** The tenant's priority the table sets, whether or not it was stamped. */
  readonly wanted: number;
  /** Pools of this route that do not declare `schedulingPolicy: priority` (why a wanted priority was not stamped). */
  readonly without: readonly string[];
}

/** No priority: what a table without `priorities` gives every request. */
export const NO_PRIORITY: StampedPriority = Object.freeze({ priority: 0, wanted: 0, without: Object.freeze([]) });

/** The priority for `tenant` routed to `pools` (its decode, prefill and alternate decode pools). */
export function stampedPriority(
  priorities: TenantPriorities | null,
  tenant: string | null,
  pools: readonly CompiledPool[],
): StampedPriority {
  if (priorities === null) return NO_PRIORITY;
  const wanted = (tenant === null ? undefined : priorities.tenants.get(tenant)) ?? priorities.default;
  if (wanted === 0) return NO_PRIORITY;
  const without = [...new Set(pools.filter((p) => p.priorityScheduling !== true).map((p) => p.name))];
  return { priority: without.length === 0 ? wanted : 0, wanted, without };
}
