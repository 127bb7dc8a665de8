import { describe, expect, it } from 'vitest';
import { LeaseTable, type Lease } from './leases.js';

describe('LeaseTable', () => {
  const setup = () => {
    let t = 1000;
    const expired: Lease[] = [];
    const leases = new LeaseTable({ now: () => t, leaseMs: 300, onExpire: (l) => expired.push(l) });
    return { leases, expired, advance: (ms: number) => (t += ms) };
  };

  it('expires leases at their deadline, once', () => {
    const { leases, expired, advance } = setup();
    leases.grant('r1', [1, 2], 20);
    advance(299);
    expect(leases.get('r1')?.blockIds).toEqual([1, 2]);
    advance(1);
    expect(leases.get('r1')).toBeUndefined();
    expect(leases.sweep()).toBe(0);
    expect(expired.map((l) => l.requestId)).toEqual(['r1']);
  });

  it('heartbeats extend to max(old, now + 2/3 lease), never shorten', () => {
    const { leases, advance } = setup();
    const l = leases.grant('r1', [1], 10);
    expect(leases.heartbeat(['r1', 'unknown'])).toBe(1);
    expect(l.expiresAt).toBe(1300); // now+200 < 1300
    advance(250);
    leases.heartbeat(['r1']);
    expect(l.expiresAt).toBe(1450);
  });

  it('release hands the blocks back without counting an expiry', () => {
    const { leases, expired } = setup();
    leases.grant('r1', [3], 10);
    expect(leases.release('r1')?.blockIds).toEqual([3]);
    expect(leases.release('r1')).toBeUndefined();
    expect(expired).toEqual([]);
    leases.grant('r2', [4], 10);
    expect(leases.expireAll()).toBe(1);
  });
});
