/**
 * Picking under skewed load, deterministically simulated (testbed/pick-sim): 8 endpoints, one 5x slower, two gate
 * replicas, worker reports one poll old. kvgate's cost (worker-reported running + waiting, bridged by its own count
 * since the report, plus KV pressure) against least-in-flight (each replica's own count) and random. The numbers
 * per seed are printed by `node dist/bench/pick-skew.js` (after `npm run build`).
 */
import { describe, expect, it } from 'vitest';
import { DEFAULT_SKEW, simulateSkew, type Policy } from '../../testbed/pick-sim/simulate.js';

const SEEDS = [1, 2, 3, 7, 42];
const p99 = (policy: Policy, seed: number): number => simulateSkew(policy, { ...DEFAULT_SKEW, seed }).p99;

describe('picking with a slow endpoint (simulated, deterministic)', () => {
  it('kvgate p99 is no worse than least-in-flight over the seeds, and far better than random', () => {
    const kv = SEEDS.map((s) => p99('kvgate', s));
    const lif = SEEDS.map((s) => p99('least-in-flight', s));
    const rnd = SEEDS.map((s) => p99('random', s));
    const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
    expect(sum(kv)).toBeLessThanOrEqual(sum(lif));
    // Per seed within 2 % of least-in-flight (stale reports can cost a little on an unlucky seed).
    kv.forEach((k, i) => expect(k).toBeLessThanOrEqual(lif[i]! * 1.02));
    kv.forEach((k, i) => expect(k * 5).toBeLessThan(rnd[i]!));
  });

  it('sends the slow endpoint less than its even share', () => {
    const r = simulateSkew('kvgate', DEFAULT_SKEW);
    expect(r.slowShare).toBeLessThan(1 / DEFAULT_SKEW.endpoints / 2);
  });
});
