/**
 * Picking in large groups: a sample drawn by the request id (src/decide/pick.ts `eligibleFor`), never trusted for
 * safety, falling back to a whole scan before any refusal.
 */
import { describe, expect, it } from 'vitest';
import type { CompiledRouteTable } from '../policy/compile.js';
import { clone, tableFromValue, twoRevisionTableValue } from '../policy/testing.js';
import { decide } from './decide.js';
import { eligibleFor, SAMPLE_SIZE, SCAN_UP_TO } from './pick.js';
import { pickScored } from './score.js';
import { createTestWorkerView, testFacts, testKeys } from './testing.js';
import { TEST_NOW_MS } from '../../test/support/clock.js';
import { createInFlightTracker, createStaticWorkerView } from './worker-view.js';

const N = 1000;
const addr = (pool: number, i: number) => `10.${pool}.${i >> 8}.${i & 255}:8000`;

/** The two-revision table with `n` endpoints in every pool. */
function bigTable(n = N): CompiledRouteTable {
  const v = clone(twoRevisionTableValue()) as Record<string, any>;
  v['pools'].forEach((p: Record<string, unknown>, k: number) => {
    p['endpoints'] = Array.from({ length: n }, (_, i) => ({ address: addr(k + 1, i) }));
  });
  return tableFromValue(v);
}

const table = bigTable();
const decodeA = table.pools.get('a-decode')!;
const fp = decodeA.fingerprint;

describe('large groups are sampled', () => {
  it('a group of up to SCAN_UP_TO routable endpoints is scanned whole; a larger one is sampled', () => {
    const small = bigTable(SCAN_UP_TO);
    const sv = createTestWorkerView(small, {}, { indexed: true });
    expect(eligibleFor([small.pools.get('a-decode')!], sv, fp, 'acme', { requestId: 'r' }).candidates).toHaveLength(SCAN_UP_TO);
    const view = createTestWorkerView(table, {}, { indexed: true });
    const e = eligibleFor([decodeA], view, fp, 'acme', { requestId: 'r' });
    expect(e.sampledFrom).toBe(N);
    expect(e.candidates.length).toBeGreaterThan(0);
    expect(e.candidates.length).toBeLessThanOrEqual(SAMPLE_SIZE);
    expect(new Set(e.candidates.map((c) => c.endpoint.address)).size).toBe(e.candidates.length);
  });

  it('is deterministic per request and spreads requests over the whole pool', () => {
    const view = createTestWorkerView(table, {}, { indexed: true });
    const chosen = new Set<string>();
    for (let i = 0; i < 2000; i++) {
      const pick = (): string =>
        pickScored(eligibleFor([decodeA], view, fp, 'acme', { requestId: `r-${i}` }).candidates, `r-${i}`, null)!.candidate.endpoint
          .address;
      const a = pick();
      expect(pick()).toBe(a);
      chosen.add(a);
    }
    expect(chosen.size).toBeGreaterThan(700); // 2,000 picks over 1,000 idle endpoints: ~865 distinct if uniform
  });

  it('still prefers the less loaded: with half the pool busy, the idle half takes (almost) every request', () => {
    const patches = Object.fromEntries(Array.from({ length: N / 2 }, (_, i) => [addr(2, i * 2), { inFlight: 10 }]));
    const view = createTestWorkerView(table, patches, { indexed: true });
    let idle = 0;
    for (let i = 0; i < 1000; i++) {
      const picked = pickScored(eligibleFor([decodeA], view, fp, 'acme', { requestId: `q-${i}` }).candidates, `q-${i}`, null)!;
      if (picked.candidate.endpoint.inFlight === 0) idle++;
    }
    expect(idle).toBeGreaterThanOrEqual(995); // all 16 samples busy: 2^-16 per request
  });

  it('keeps prefix affinity: one prefix lands on one endpoint whatever the request id', () => {
    const view = createTestWorkerView(table, {}, { indexed: true });
    const at = new Set<string>();
    for (let i = 0; i < 50; i++) {
      const e = eligibleFor([decodeA], view, fp, 'acme', { requestId: `a-${i}`, affinity: 'group|prefix-1' });
      at.add(pickScored(e.candidates, `a-${i}`, 'group|prefix-1')!.candidate.endpoint.address);
    }
    expect(at.size).toBe(1);
  });

  it('never trusts the index: endpoints it lists that are now unverified, draining, foreign or full are not picked', () => {
    const view = createTestWorkerView(table, {}, { indexed: true }); // index built while all were routable
    const good = addr(2, 777);
    for (let i = 0; i < N; i++) {
      const a = addr(2, i);
      if (a === good) continue;
      const kind = i % 4;
      view.set(
        a,
        kind === 0
          ? { verified: false }
          : kind === 1
            ? { draining: true }
            : kind === 2
              ? { fingerprint: 'f'.repeat(64) }
              : { inFlight: 64 },
      );
    }
    for (let i = 0; i < 20; i++) {
      const e = eligibleFor([decodeA], view, fp, 'acme', { requestId: `s-${i}` });
      expect(e.candidates.map((c) => c.endpoint.address)).toEqual([good]); // sample found nothing: whole scan
    }
  });

  it('refuses only after a whole scan, with every reason and the busy count', () => {
    const patches = Object.fromEntries(Array.from({ length: N }, (_, i) => [addr(2, i), { inFlight: 64 }]));
    const view = createTestWorkerView(table, patches, { indexed: true });
    const e = eligibleFor([decodeA], view, fp, 'acme', { requestId: 'full' });
    expect(e.candidates).toEqual([]);
    expect(e.busy).toBe(N);
    expect(e.sampledFrom).toBeUndefined();
    expect(e.reasons.join('; ')).toMatch(/1000 endpoints .* at its in-flight limit of 64/);
  });

  it('the decision over 1,000-endpoint pools stays in the group and names the sample in its trace', () => {
    const view = createStaticWorkerView(table, createInFlightTracker());
    const d = decide(testFacts({ tenant: 'acme', requestId: 'big-1' }), table, view, { nowMs: TEST_NOW_MS, keys: testKeys() });
    if (d.kind !== 'route') throw new Error(JSON.stringify(d));
    const [decodePool, prefillPool] = d.group.revision === 'llama-a' ? ['a-decode', 'a-prefill'] : ['b-decode', 'b-prefill'];
    expect(d.decode.pool).toBe(decodePool);
    expect(table.pools.get(decodePool!)!.endpoints.some((e) => e.address === d.decode.endpoint)).toBe(true);
    expect(d.prefill?.pool).toBe(prefillPool);
    expect(table.pools.get(prefillPool!)!.endpoints.some((e) => e.address === d.prefill?.endpoint)).toBe(true);
    expect(d.trace.join('\n')).toMatch(/sampled from 1000/);
  });
});
