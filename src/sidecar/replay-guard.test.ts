import { describe, expect, it } from 'vitest';
import { createReplayGuard } from './replay-guard.js';

describe('replay guard', () => {
  it('admits a request id once while its contract is valid, again after it expired', () => {
    const g = createReplayGuard();
    expect(g.claim('r1', 1_000, 0)).toBe(true);
    expect(g.claim('r1', 1_000, 500)).toBe(false);
    expect(g.claim('r2', 1_000, 500)).toBe(true);
    // After expiry the contract itself is refused by verification; the guard need not remember it.
    expect(g.claim('r1', 3_000, 1_001)).toBe(true);
  });

  it('forgets a released (failed) attempt so it may be retried', () => {
    const g = createReplayGuard();
    expect(g.claim('r1', 1_000, 0)).toBe(true);
    g.release('r1');
    expect(g.claim('r1', 1_000, 10)).toBe(true);
  });

  it('stays bounded, evicting the oldest admissions first and counting it', () => {
    let evicted = 0;
    const g = createReplayGuard(3, () => evicted++);
    for (let i = 0; i < 5; i++) expect(g.claim(`r${i}`, 10_000, i)).toBe(true);
    expect(g.size).toBeLessThanOrEqual(3);
    expect(evicted).toBe(2);
    expect(g.claim('r4', 10_000, 6)).toBe(false); // recent ones are still remembered
  });
});

describe('replay guard ordering', () => {
  it('a re-admitted id moves to the back, so expired entries behind it are swept and it is not evicted first', () => {
    let evicted = 0;
    const g = createReplayGuard(3, () => evicted++);
    expect(g.claim('a', 100, 0)).toBe(true);
    expect(g.claim('a', 10_000, 200)).toBe(true); // a expired, re-admitted
    g.claim('b', 300, 250);
    g.claim('c', 300, 250);
    // At t=400 b and c have expired: claiming d sweeps them, it does not evict the live a.
    expect(g.claim('d', 10_000, 400)).toBe(true);
    expect(evicted).toBe(0);
    expect(g.claim('a', 10_000, 500)).toBe(false);
  });
});
