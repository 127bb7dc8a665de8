import { describe, expect, it } from 'vitest';
import type { CompiledPool } from '../policy/compile.js';
import type { Candidate } from './pick.js';
import { costOf, pickScored, rankAlternates } from './score.js';
import type { EndpointLoad } from './worker-view.js';

const pool = (cluster = 'c') => ({ name: cluster, cluster, role: 'decode' }) as unknown as CompiledPool;
const cand = (i: number, inFlight: number, load?: EndpointLoad, cluster = 'c'): Candidate => ({
  pool: pool(cluster),
  endpoint: {
    address: `10.0.0.${i}:8000`,
    fingerprint: 'f',
    verified: true,
    draining: false,
    inFlight,
    observedAtMs: 0,
    ...(load ? { load } : {}),
  },
});

describe('scoring endpoints inside a group', () => {
  it('cost: the larger of the own count and the report bridged by what this gate sent since, plus KV pressure', () => {
    expect(costOf(cand(1, 3).endpoint)).toBe(3);
    // Other replicas' requests show in the report: 6 there, 1 of them ours, and we sent 2 more since.
    expect(costOf(cand(1, 3, { running: 4, waiting: 2, kvCacheUsage: 0.5, ownInFlightAtReport: 1 }).endpoint)).toBe(8);
    expect(costOf(cand(1, 3, { running: 0, waiting: 0, kvCacheUsage: 1, ownInFlightAtReport: 3 }).endpoint)).toBe(5);
  });

  it('prefix affinity keeps a prefix on one endpoint while its load is close, and yields when it is not', () => {
    const even = [1, 2, 3, 4].map((i) => cand(i, 2));
    const first = pickScored(even, 'r1', 'group-a\nsystem prompt')!.candidate;
    for (let r = 0; r < 20; r++) expect(pickScored(even, `r${r}`, 'group-a\nsystem prompt')!.candidate).toBe(first);
    const i = even.indexOf(first);
    const busy = even.map((c, k) => (k === i ? cand(k + 1, 4) : c));
    expect(pickScored(busy, 'r1', 'group-a\nsystem prompt')!.candidate.endpoint.address).not.toBe(first.endpoint.address);
    const queued = even.map((c, k) =>
      k === i ? cand(k + 1, 2, { running: 2, waiting: 1, kvCacheUsage: 0.2, ownInFlightAtReport: 2 }) : c,
    );
    expect(pickScored(queued, 'r1', 'group-a\nsystem prompt')!.candidate.endpoint.address).not.toBe(first.endpoint.address);
  });

  it('without affinity the least cost wins; ties break by request, not by order', () => {
    const cs = [cand(1, 5), cand(2, 1), cand(3, 1)];
    const a = pickScored(cs, 'x', null)!.candidate;
    expect(a.endpoint.inFlight).toBe(1);
    expect(pickScored([...cs].reverse(), 'x', null)!.candidate.endpoint.address).toBe(a.endpoint.address);
  });

  it('alternates: cheapest first, same cluster only, at most k', () => {
    const cs = [cand(1, 0), cand(2, 3), cand(3, 1), cand(4, 2), cand(5, 0, undefined, 'other')];
    expect(rankAlternates(cs, cs[0]!, 'r', 2).map((c) => c.endpoint.address)).toEqual(['10.0.0.3:8000', '10.0.0.4:8000']);
  });
});
