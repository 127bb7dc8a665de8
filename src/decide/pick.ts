/**
 * Choosing an endpoint inside one group. Only endpoints that provably run the group's fingerprint, verified, not
 * draining, below their pool's in-flight limit, in a pool that serves the tenant, are candidates; among them the
 * least loaded wins, ties broken by a stable hash of (request id, address) so neither array order nor replica
 * matters. Every exclusion is kept as a reason, so "no capacity" refusals say exactly why.
 */
import { createHash } from 'node:crypto';
import type { CompiledPool } from '../policy/compile.js';
import { tenantAllowed } from '../policy/schema.js';
import type { EndpointState, RoutableIndex, WorkerView } from './worker-view.js';
import { fnv1a, mix32 } from './hash32.js';

export interface Candidate {
  readonly pool: CompiledPool;
  readonly endpoint: EndpointState;
}

export interface Eligibility {
  readonly candidates: readonly Candidate[];
  /** Why pools or endpoints were left out, one entry per pool, in plain words. */
  readonly reasons: readonly string[];
  /**
   * Endpoints left out only because they are at their in-flight limit: capacity that frees when a request ends.
   * Zero means waiting cannot help until the worker view or the table changes.
   */
  readonly busy: number;
  /** Set when the candidates are a sample of a large group (how many routable endpoints they were drawn from). */
  readonly sampledFrom?: number;
}

/** A number in [0, 1) from a stable hash of `parts`: identical on every replica and every run. */
export function stableUnit(...parts: readonly string[]): number {
  const digest = createHash('sha256').update(parts.join('\n'), 'utf8').digest();
  return digest.readUIntBE(0, 6) / 2 ** 48;
}

/** The candidates among `pools` for a group with `fingerprint`, and the reasons for everything left out. */
export function eligibleEndpoints(
  pools: readonly CompiledPool[],
  view: WorkerView,
  fingerprint: string,
  tenant: string | null,
  exclude?: string | ReadonlySet<string>,
): Eligibility {
  const excluded = (address: string): boolean => (typeof exclude === 'string' ? address === exclude : exclude?.has(address) === true);
  const candidates: Candidate[] = [];
  const reasons: string[] = [];
  let busy = 0;
  for (const pool of pools) {
    if (pool.fingerprint !== fingerprint) {
      reasons.push(`pool ${pool.name} belongs to another group`); // defensive: callers pass one revision's pools
      continue;
    }
    if (pool.draining) {
      reasons.push(`pool ${pool.name} is draining`);
      continue;
    }
    if (!tenantAllowed(pool.tenants, tenant)) {
      reasons.push(`pool ${pool.name} does not serve ${tenant === null ? 'anonymous requests' : `tenant ${tenant}`}`);
      continue;
    }
    // Made on the first endpoint left out: most picks leave none out, and this runs for every pool of every request.
    let causes: Map<string, string[]> | undefined;
    const note = (cause: string, address: string): void => {
      causes ??= new Map();
      const list = causes.get(cause);
      if (list === undefined) causes.set(cause, [address]);
      else list.push(address);
    };
    const states = view.endpoints(pool.name);
    for (const ep of states) {
      if (excluded(ep.address)) {
        note('excluded by the sidecar after a failed attempt', ep.address);
        continue;
      }
      if (ep.fingerprint === null) note('not yet observed', ep.address);
      else if (ep.fingerprint !== fingerprint)
        note(`running another fingerprint (${ep.fingerprint.slice(0, 12)}…), never used for this group`, ep.address);
      else if (!ep.verified) note('not verified', ep.address);
      else if (ep.draining) note('draining', ep.address);
      else if (ep.inFlight >= pool.maxInFlightPerEndpoint) {
        busy++;
        note(`at its in-flight limit of ${pool.maxInFlightPerEndpoint}`, ep.address);
      } else candidates.push({ pool, endpoint: ep });
    }
    if (states.length === 0) reasons.push(`pool ${pool.name} has no endpoints in the worker view`);
    for (const [cause, addresses] of causes ?? []) reasons.push(`pool ${pool.name}: ${describeAddresses(addresses)} ${cause}`);
  }
  return { candidates, reasons, busy };
}

function describeAddresses(addresses: readonly string[]): string {
  if (addresses.length === 1) return `endpoint ${addresses[0]} is`;
  const shown = addresses.slice(0, 3).join(', ');
  return `${addresses.length} endpoints (${shown}${addresses.length > 3 ? ', ...' : ''}) are`;
}

/**
 * Least in flight; ties broken by a hash of (request id, address), so the choice depends on neither array order nor
 * replica. One string hash per request plus a cached one per address: cheap integer mixing per candidate, no
 * allocation, so a decision over 1,000 endpoints stays a single pass.
 */
export function pickLeastLoaded(candidates: readonly Candidate[], requestId: string): Candidate | undefined {
  const r = fnv1a(`kvgate-pick\n${requestId}`);
  let best: Candidate | undefined;
  let bestLoad = Infinity;
  let bestTie = Infinity;
  for (const c of candidates) {
    const load = c.endpoint.inFlight;
    if (load > bestLoad) continue;
    const tie = mix32(r ^ addressHash(c.endpoint.address));
    if (load < bestLoad || tie < bestTie) {
      best = c;
      bestLoad = load;
      bestTie = tie;
    }
  }
  return best;
}

const ADDRESS_HASHES = new Map<string, number>();
const MAX_CACHED_ADDRESSES = 65_536;

function addressHash(address: string): number {
  let h = ADDRESS_HASHES.get(address);
  if (h === undefined) {
    h = fnv1a(address);
    if (ADDRESS_HASHES.size < MAX_CACHED_ADDRESSES) ADDRESS_HASHES.set(address, h);
  }
  return h;
}

/** Groups with at most this many routable endpoints are scanned whole: exact least cost, every exclusion explained. */
export const SCAN_UP_TO = 64;
/** How many endpoints a larger group's pick looks at (plus the prefix-affinity endpoint). */
export const SAMPLE_SIZE = 16;

export interface EligibleOptions {
  readonly requestId: string;
  /** A key of (group id, prompt prefix) whose rendezvous-preferred endpoint joins a sample; null: none. */
  readonly affinity?: string | null;
  readonly exclude?: string | ReadonlySet<string>;
}

/**
 * The candidates for a group: all of them for a group of up to SCAN_UP_TO routable endpoints (or a view without an
 * index); for a larger group, the eligible ones among SAMPLE_SIZE endpoints drawn by a hash of the request id, plus
 * the endpoint prefix affinity prefers. Sampling is how Envoy's own least-request balancer stays O(1) (envoyproxy/envoy
 * v1.36, source/extensions/load_balancing_policies/least_request: `choice_count`, default 2); sixteen choices keep
 * the pick close to the exact least cost. The decision time then does not grow with the pool.
 *
 * Safety does not rest on the index: every sampled endpoint is read again from the view and checked exactly as the
 * scan checks it. When no sampled endpoint is eligible, the whole group is scanned, so a refusal ("no capacity",
 * with every reason) is only ever given after looking at every endpoint.
 */
export function eligibleFor(
  pools: readonly CompiledPool[],
  view: WorkerView,
  fingerprint: string,
  tenant: string | null,
  opts: EligibleOptions,
): Eligibility {
  return sampleEligible(pools, view, fingerprint, tenant, opts) ?? eligibleEndpoints(pools, view, fingerprint, tenant, opts.exclude);
}

function sampleEligible(
  pools: readonly CompiledPool[],
  view: WorkerView,
  fingerprint: string,
  tenant: string | null,
  opts: EligibleOptions,
): Eligibility | undefined {
  if (view.routable === undefined || view.endpoint === undefined) return undefined;
  const parts: { pool: CompiledPool; index: RoutableIndex }[] = [];
  let total = 0;
  for (const pool of pools) {
    if (pool.fingerprint !== fingerprint || pool.draining || !tenantAllowed(pool.tenants, tenant)) continue;
    const index = view.routable(pool.name, fingerprint);
    if (index.addresses.length === 0) continue;
    parts.push({ pool, index });
    total += index.addresses.length;
  }
  if (total <= SCAN_UP_TO) return undefined;
  const picks = new Set<number>();
  const r = fnv1a(`kvgate-sample\n${opts.requestId}`);
  const start = r % total;
  const stride = coprimeStride(mix32(r) % total, total);
  for (let k = 0; k < SAMPLE_SIZE; k++) picks.add((start + k * stride) % total);
  if (opts.affinity != null) picks.add(rendezvous(parts, fnv1a(opts.affinity)));
  const exclude = opts.exclude;
  const candidates: Candidate[] = [];
  for (const at of picks) {
    let i = at;
    let part = parts[0]!;
    for (const p of parts) {
      part = p;
      if (i < p.index.addresses.length) break;
      i -= p.index.addresses.length;
    }
    const address = part.index.addresses[i]!;
    if (typeof exclude === 'string' ? address === exclude : exclude?.has(address) === true) continue;
    const ep = view.endpoint(part.pool.name, address);
    if (ep === undefined || ep.fingerprint !== fingerprint || !ep.verified || ep.draining) continue;
    if (ep.inFlight >= part.pool.maxInFlightPerEndpoint) continue;
    candidates.push({ pool: part.pool, endpoint: ep });
  }
  return candidates.length === 0 ? undefined : { candidates, reasons: [], busy: 0, sampledFrom: total };
}

/** The global position of the endpoint with the highest rendezvous rank for `a` (as src/decide/score.ts ranks). */
function rendezvous(parts: readonly { index: RoutableIndex }[], a: number): number {
  let best = 0;
  let bestRank = -1;
  let offset = 0;
  for (const { index } of parts) {
    const hashes = index.hashes;
    for (let i = 0; i < hashes.length; i++) {
      const rank = mix32(a ^ hashes[i]!);
      if (rank > bestRank) {
        bestRank = rank;
        best = offset + i;
      }
    }
    offset += hashes.length;
  }
  return best;
}

/** A step in [1, n) that shares no factor with n, so SAMPLE_SIZE steps from any start visit distinct positions. */
function coprimeStride(seed: number, n: number): number {
  let s = (seed % (n - 1)) + 1;
  while (gcd(s, n) !== 1) s = (s % (n - 1)) + 1;
  return s;
}

function gcd(a: number, b: number): number {
  while (b !== 0) [a, b] = [b, a % b];
  return a;
}
