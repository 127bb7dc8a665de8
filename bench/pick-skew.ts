/**
 * Endpoint picking under skewed load (deterministic simulation, testbed/pick-sim): p50/p99/mean latency and the slow
 * endpoint's share for random, least-in-flight and kvgate's scorer, per seed. `node dist/bench/pick-skew.js` (after `npm run build`).
 */
import { DEFAULT_SKEW, simulateSkew, type Policy } from '../testbed/pick-sim/simulate.js';

const policies: Policy[] = ['random', 'least-in-flight', 'kvgate'];
console.log('seed  policy           p50     p99      mean    slow share');
for (const seed of [1, 2, 3, 7, 42]) {
  for (const p of policies) {
    const r = simulateSkew(p, { ...DEFAULT_SKEW, seed });
    console.log(
      `${String(seed).padEnd(5)} ${p.padEnd(16)} ${r.p50.toFixed(0).padStart(6)} ${r.p99.toFixed(0).padStart(7)} ${r.mean.toFixed(0).padStart(8)}   ${(r.slowShare * 100).toFixed(1)}%`,
    );
  }
}
