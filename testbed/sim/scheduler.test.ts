import { describe, expect, it } from 'vitest';
import { Scheduler } from './scheduler.js';

describe('Scheduler', () => {
  it('runs at most maxNumSeqs and queues the rest in order', async () => {
    const counts: Array<[number, number]> = [];
    const s = new Scheduler(1, (r, w) => counts.push([r, w]));
    const a = await s.admit(() => true);
    const order: string[] = [];
    const pb = s.admit(() => true).then((x) => (order.push('b'), x));
    const pc = s.admit(() => true).then((x) => (order.push('c'), x));
    expect([s.running, s.waiting]).toEqual([1, 2]);
    a.release();
    a.release(); // idempotent
    (await pb).release();
    (await pc).release();
    expect(order).toEqual(['b', 'c']);
    expect([s.running, s.waiting]).toEqual([0, 0]);
    expect(counts).toContainEqual([1, 2]);
  });

  it('waits for resources and lets an aborted waiter go', async () => {
    const s = new Scheduler(4);
    let free = false;
    const ac = new AbortController();
    const gone = s.admit(() => false, ac.signal);
    const pending = s.admit(() => free);
    ac.abort(new Error('bye'));
    await expect(gone).rejects.toThrow('bye');
    free = true;
    s.poke();
    (await pending).release();
    expect(s.waiting).toBe(0);
  });
});
