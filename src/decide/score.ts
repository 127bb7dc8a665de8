/**
 * Picking inside one group by what the workers report plus kvgate's own accounting, with prefix affinity scoped to
 * the group (whose id includes the tenant's prefix scope, so affinity never spans tenants).
 *
 * The signals are the ones llm-d's scorers use (llm-d/llm-d-router, pkg/epp/framework/plugins/scheduling/scorer:
 * queue depth `vllm:num_requests_waiting`, KV-cache utilisation `vllm:kv_cache_usage_perc`, running requests),
 * read by each sidecar from its vLLM's /metrics and carried in its status. Reported numbers are as old as the last
 * poll, kvgate's own in-flight count is current; the cost takes the larger of the two views of "requests ahead".
 *
 * cost = max(gate in flight, reported running + waiting + what this gate sent since the report) + KV pressure
 *   - the report covers every gate replica's requests (the local count only this one's); this gate's change since
 *     the report bridges its age;
 *   - KV pressure adds up to 2 above 90 % usage, where vLLM starts preempting running requests.
 * Affinity: the endpoint a rendezvous hash of (group id, prompt prefix) prefers wins if its cost is within
 * AFFINITY_SLACK of the cheapest and nothing waits there; otherwise load wins. Ties break by a hash of (request id,
 * address), so neither array order nor replica matters. One pass over the candidates: O(n).
 */
import type { Candidate } from './pick.js';
import type { EndpointState } from './worker-view.js';
import { fnv1a, mix32 } from './hash32.js';

/** How much extra load a prefix-cache hit is worth (in requests ahead). */
export const AFFINITY_SLACK = 1;

export function costOf(ep: EndpointState): number {
  const l = ep.load;
  if (l === undefined) return ep.inFlight;
  const sinceReport = ep.inFlight - (l.ownInFlightAtReport ?? ep.inFlight);
  const ahead = Math.max(ep.inFlight, l.running + l.waiting + sinceReport);
  const kv =
    l.kvCacheUsage > KV_PRESSURE_FROM ? ((Math.min(l.kvCacheUsage, 1) - KV_PRESSURE_FROM) / (1 - KV_PRESSURE_FROM)) * KV_PRESSURE_MAX : 0;
  return ahead + kv;
}

/** KV use above which vLLM nears preemption, and the most that pressure adds (in requests ahead). */
const KV_PRESSURE_FROM = 0.9;
const KV_PRESSURE_MAX = 2;

export interface Picked {
  readonly candidate: Candidate;
  /** Why it was chosen, for the trace. */
  readonly why: 'least cost' | 'prefix affinity';
}

/** The best candidate; `affinity` is a key of (group id, prompt prefix), or null for no affinity. */
export function pickScored(candidates: readonly Candidate[], requestId: string, affinity: string | null): Picked | undefined {
  const r = fnv1a(`kvgate-pick\n${requestId}`);
  const a = affinity === null ? 0 : fnv1a(affinity);
  let best: Candidate | undefined;
  let bestCost = Infinity;
  let bestTie = Infinity;
  let preferred: Candidate | undefined;
  let preferredRank = -1;
  for (const c of candidates) {
    const h = fnv1a(c.endpoint.address);
    const cost = costOf(c.endpoint);
    const tie = mix32(r ^ h);
    if (cost < bestCost || (cost === bestCost && tie < bestTie)) {
      best = c;
      bestCost = cost;
      bestTie = tie;
    }
    if (affinity !== null) {
      const rank = mix32(a ^ h);
      if (rank > preferredRank) {
        preferred = c;
        preferredRank = rank;
      }
    }
  }
  if (best === undefined) return undefined;
  if (
    preferred !== undefined &&
    preferred !== best &&
    (preferred.endpoint.load?.waiting ?? 0) === 0 &&
    costOf(preferred.endpoint) <= bestCost + AFFINITY_SLACK
  ) {
    return { candidate: preferred, why: 'prefix affinity' };
  }
  return { candidate: best, why: preferred === best ? 'prefix affinity' : 'least cost' };
}

/**
 * Up to `k` more candidates, cheapest first (ties by the request hash): the ordered fallback list of the
 * endpoint-picker protocol. O(n * k).
 */
export function rankAlternates(candidates: readonly Candidate[], chosen: Candidate, requestId: string, k: number): Candidate[] {
  const r = fnv1a(`kvgate-pick\n${requestId}`);
  const top: { c: Candidate; cost: number; tie: number }[] = [];
  for (const c of candidates) {
    if (c === chosen || c.pool.cluster !== chosen.pool.cluster) continue;
    const e = { c, cost: costOf(c.endpoint), tie: mix32(r ^ fnv1a(c.endpoint.address)) };
    let i = top.length;
    while (i > 0 && (top[i - 1]!.cost > e.cost || (top[i - 1]!.cost === e.cost && top[i - 1]!.tie > e.tie))) i--;
    if (i < k) {
      top.splice(i, 0, e);
      if (top.length > k) top.pop();
    }
  }
  return top.map((e) => e.c);
}
