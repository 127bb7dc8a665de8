import { afterEach, describe, expect, it } from 'vitest';
import { createWaitQueue, type QueueEntry, type WaitQueue } from './wait-queue.js';

interface TestEntry extends QueueEntry {
  readonly calls: string[];
  ready: boolean;
}

function entry(
  requestId: string,
  opts: Partial<Pick<QueueEntry, 'groupId' | 'order' | 'enqueuedAtMs' | 'deadlineAtMs'>> = {},
  log: string[] = [],
): TestEntry {
  const e: TestEntry = {
    requestId,
    groupId: opts.groupId ?? 'g1',
    fingerprint: 'fp',
    leg: 'decode',
    order: opts.order ?? 'fifo',
    enqueuedAtMs: opts.enqueuedAtMs ?? 0,
    deadlineAtMs: opts.deadlineAtMs ?? Date.now() + 60_000,
    calls: [],
    ready: false,
    attempt(reason) {
      e.calls.push(reason);
      log.push(`${requestId}:${reason}`);
      return reason === 'deadline' || e.ready ? 'done' : 'wait';
    },
    abandon() {
      e.calls.push('abandon');
    },
  };
  return e;
}

describe('wait queue', () => {
  let q: WaitQueue | undefined;
  afterEach(() => q?.close());

  it('bounds each group by maxDepth and reports depth per group', () => {
    const depths: [string, number][] = [];
    q = createWaitQueue({ now: Date.now, onDepth: (g, d) => depths.push([g, d]) });
    expect(q.park(entry('a'), 2)).toBeDefined();
    expect(q.park(entry('b'), 2)).toBeDefined();
    expect(q.park(entry('c'), 2)).toBeUndefined();
    expect(q.park(entry('d', { groupId: 'g2' }), 2)).toBeDefined();
    expect([q.depth('g1'), q.depth('g2'), q.size()]).toEqual([2, 1, 3]);
    expect(depths).toEqual([
      ['g1', 1],
      ['g1', 2],
      ['g2', 1],
    ]);
  });

  it('wakes fifo in arrival order and stops at the first entry that must keep waiting', () => {
    const log: string[] = [];
    q = createWaitQueue({ now: Date.now, recheckMs: 0 });
    const [a, b, c] = [entry('a', {}, log), entry('b', {}, log), entry('c', {}, log)];
    for (const e of [a, b, c]) q.park(e, 10);
    a.ready = true;
    q.wake();
    expect(log).toEqual(['a:wake', 'b:wake']);
    expect(q.depth('g1')).toBe(2);
    b.ready = true;
    c.ready = true;
    q.wake();
    expect(log).toEqual(['a:wake', 'b:wake', 'b:wake', 'c:wake']);
    expect(q.size()).toBe(0);
  });

  it('orders edf entries by deadline, and groups by their head', () => {
    const log: string[] = [];
    q = createWaitQueue({ now: Date.now, recheckMs: 0 });
    const now = Date.now();
    const late = entry('late', { order: 'edf', deadlineAtMs: now + 50_000 }, log);
    const soon = entry('soon', { order: 'edf', deadlineAtMs: now + 10_000 }, log);
    const other = entry('other', { groupId: 'g2', order: 'edf', deadlineAtMs: now + 20_000 }, log);
    q.park(late, 10);
    q.park(other, 10);
    q.park(soon, 10);
    q.wake();
    expect(log).toEqual(['soon:wake', 'other:wake']);
  });

  it('answers an entry at its deadline, and a left entry never again', async () => {
    q = createWaitQueue({ now: Date.now, recheckMs: 0 });
    const e = entry('a', { deadlineAtMs: Date.now() + 20 });
    const gone = entry('b', { deadlineAtMs: Date.now() + 20 });
    q.park(e, 10);
    q.park(gone, 10)!.leave();
    expect(q.depth('g1')).toBe(1);
    await new Promise((r) => setTimeout(r, 60));
    expect(e.calls).toEqual(['deadline']);
    expect(gone.calls).toEqual([]);
    expect(q.size()).toBe(0);
  });

  it('re-checks waiting entries periodically, so unannounced capacity is noticed', async () => {
    q = createWaitQueue({ now: Date.now, recheckMs: 10 });
    const e = entry('a');
    q.park(e, 10);
    e.ready = true;
    await new Promise((r) => setTimeout(r, 60));
    expect(e.calls[0]).toBe('wake');
    expect(q.size()).toBe(0);
  });

  it('close abandons every waiting entry and clears the depth series', () => {
    const depths: [string, number][] = [];
    q = createWaitQueue({ now: Date.now, onDepth: (g, d) => depths.push([g, d]) });
    const [a, b] = [entry('a'), entry('b', { groupId: 'g2' })];
    q.park(a, 10);
    q.park(b, 10);
    q.close();
    expect([a.calls, b.calls]).toEqual([['abandon'], ['abandon']]);
    expect(depths.slice(-2)).toEqual([
      ['g1', 0],
      ['g2', 0],
    ]);
    expect(q.size()).toBe(0);
  });
});
