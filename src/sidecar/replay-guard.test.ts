import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createReplayGuard, MAX_CLAIMS } from './replay-guard.js';

describe('replay guard', () => {
  it('admits a request id once while its contract is valid, again after it expired', () => {
    const g = createReplayGuard();
    expect(g.claim('r1', 1_000, 0)).toBe(true);
    expect(g.claim('r1', 1_000, 500)).toBe(false);
    expect(g.claim('r2', 1_000, 500)).toBe(true);
    // After expiry the contract itself is refused by verification; the guard need not remember it.
    expect(g.claim('r1', 3_000, 1_001)).toBe(true);
  });

  it('re-admits a released (failed) attempt so it may be retried', () => {
    const g = createReplayGuard();
    expect(g.claim('r1', 1_000, 0)).toBe(true);
    g.release('r1');
    expect(g.claim('r1', 1_000, 10)).toBe(true);
  });

  it('admits one contract at most MAX_CLAIMS times while it is valid, released or not (a caller that aborts each attempt)', () => {
    const g = createReplayGuard();
    for (let i = 0; i < MAX_CLAIMS; i++) {
      expect(g.claim('r1', 1_000, i), `claim ${i + 1}`).toBe(true);
      g.release('r1');
    }
    expect(g.claim('r1', 1_000, 100)).toBe(false);
    expect(g.claim('r2', 1_000, 100)).toBe(true); // other contracts are not affected
    expect(g.claim('r1', 3_000, 1_001)).toBe(true); // once expired it is forgotten (verification refuses it anyway)
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

describe('replay guard eviction by expiry', () => {
  it('a long-lived contract admitted before a flood of short-lived ones is not the one forgotten', () => {
    let evicted = 0;
    const g = createReplayGuard(1_000, () => evicted++);
    expect(g.claim('long', 600_000, 0)).toBe(true); // a 10-minute contract
    for (let i = 0; i < 5_000; i++) expect(g.claim(`short${i}`, 30_000 + i, i)).toBe(true); // 30-second ones, all live
    expect(g.size).toBe(1_000);
    expect(evicted).toBe(4_001);
    expect(g.claim('long', 600_000, 5_000)).toBe(false); // still remembered: it is not replayed
    expect(g.claim('short4999', 35_000, 5_000)).toBe(false);
    expect(g.claim('short0', 30_000, 5_000)).toBe(true); // the soonest-expiring were the ones forgotten
  });

  it('when full of live contracts it still admits (fail-open), forgetting the one expiring soonest, and counts it', () => {
    let evicted = 0;
    const g = createReplayGuard(3, () => evicted++);
    expect(g.claim('a', 5_000, 0)).toBe(true);
    expect(g.claim('b', 1_000, 0)).toBe(true);
    expect(g.claim('c', 9_000, 0)).toBe(true);
    expect(g.claim('d', 2_000, 10)).toBe(true);
    expect(evicted).toBe(1);
    expect(g.size).toBe(3);
    expect(g.claim('a', 5_000, 20)).toBe(false);
    expect(g.claim('c', 9_000, 20)).toBe(false);
    expect(g.claim('d', 2_000, 20)).toBe(false);
    expect(g.claim('b', 1_000, 20)).toBe(true); // b (expiring first) was forgotten
  });

  it('a released entry is kept until it expires or is evicted, in its place in the order', () => {
    const g = createReplayGuard(3);
    g.claim('a', 3_000, 0);
    g.claim('b', 1_000, 0);
    g.claim('c', 2_000, 0);
    g.release('b');
    g.release('b'); // already released: no-op
    g.release('x'); // unknown id: no-op
    expect(g.size).toBe(3);
    g.claim('d', 4_000, 0);
    g.claim('e', 5_000, 0); // full: c (2 000) is forgotten, not a
    expect(g.claim('a', 3_000, 1)).toBe(false);
    expect(g.claim('c', 2_000, 1)).toBe(true);
  });

  /**
   * The specification, naively: remember every admitted id until its expiry; when a new admission finds the guard
   * full of live entries, forget the one expiring soonest (the earliest admitted among equals).
   */
  function naiveGuard(maxEntries: number) {
    const seen = new Map<string, { exp: number; seq: number; claims?: number; released?: boolean }>();
    let seq = 0;
    let evicted = 0;
    return {
      claim(id: string, exp: number, now: number): boolean {
        const e = seen.get(id);
        if (e !== undefined && e.exp > now) {
          // A released admission may be taken again, MAX_CLAIMS times in all while it is valid.
          if (e.released !== true || (e.claims ?? 1) >= MAX_CLAIMS) return false;
          e.released = false;
          e.claims = (e.claims ?? 1) + 1;
          return true;
        }
        seen.delete(id);
        for (const [k, v] of seen) if (v.exp <= now) seen.delete(k);
        while (seen.size >= maxEntries) {
          let victim: [string, { exp: number; seq: number }] | undefined;
          for (const kv of seen) {
            if (victim === undefined || kv[1].exp < victim[1].exp || (kv[1].exp === victim[1].exp && kv[1].seq < victim[1].seq))
              victim = kv;
          }
          if (victim === undefined) break;
          seen.delete(victim[0]);
          evicted++;
        }
        seen.set(id, { exp, seq: seq++ });
        return true;
      },
      release(id: string) {
        const e = seen.get(id);
        if (e !== undefined) e.released = true;
      },
      /** Live admissions not released: a claim of any of them is refused. */
      live(now: number) {
        return [...seen].filter(([, v]) => v.exp > now && v.released !== true);
      },
      get size() {
        return seen.size;
      },
      get evicted() {
        return evicted;
      },
    };
  }

  it('matches the specification for mixed lifetimes, releases and re-admissions (MAX_CLAIMS included)', () => {
    const op = fc.oneof(
      {
        weight: 5,
        arbitrary: fc.record({
          kind: fc.constant('claim' as const),
          id: fc.integer({ min: 0, max: 30 }),
          ttl: fc.constantFrom(1, 50, 300, 30_000, 600_000),
          jitter: fc.integer({ min: 0, max: 3 }),
          dt: fc.integer({ min: 0, max: 40 }),
        }),
      },
      { weight: 1, arbitrary: fc.record({ kind: fc.constant('release' as const), id: fc.integer({ min: 0, max: 30 }) }) },
    );
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 8 }), fc.array(op, { maxLength: 200 }), (cap, ops) => {
        let evicted = 0;
        const g = createReplayGuard(cap, () => evicted++);
        const model = naiveGuard(cap);
        let now = 0;
        for (const o of ops) {
          if (o.kind === 'release') {
            g.release(`r${o.id}`);
            model.release(`r${o.id}`);
            continue;
          }
          now += o.dt;
          const exp = now + o.ttl + o.jitter;
          expect(g.claim(`r${o.id}`, exp, now)).toBe(model.claim(`r${o.id}`, exp, now));
          expect(g.size).toBeLessThanOrEqual(cap);
          expect(evicted).toBe(model.evicted);
          // Every live entry the specification holds is still refused by the guard (probed without mutating it:
          // a refused claim changes nothing).
          for (const [id, v] of model.live(now)) expect(g.claim(id, v.exp, now)).toBe(false);
        }
      }),
      { numRuns: 300 },
    );
  });
});
