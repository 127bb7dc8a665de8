/**
 * The gate's bounded per-group queues for the `queue` fallback step. The decision to queue, to refuse or to serve
 * is the pure core's; this module only holds entries, orders them (fifo by arrival, edf by deadline), and calls
 * them back when capacity may have freed (a request ended, the table or the worker view changed, a periodic
 * recheck) or when their deadline arrives. Timers are I/O, so they live here and not in src/decide.
 *
 * It keeps no traffic history: the pure core reads only each group's depth, so whether a request waits never
 * depends on how sparse or busy traffic was (an estimate from the gaps between endings once refused requests that
 * `kvgate explain` said would wait).
 */
import type { Leg, QueueOrder, QueueView } from '../decide/types.js';

/** A parked request, as the queue sees it. */
export interface QueueEntry {
  readonly requestId: string;
  readonly groupId: string;
  /** The group's fingerprint and the leg it waits for: whose capacity frees for it (the service-rate key). */
  readonly fingerprint: string;
  readonly leg: Leg;
  readonly order: QueueOrder;
  readonly enqueuedAtMs: number;
  readonly deadlineAtMs: number;
  /** Decide again; 'done' when the request left the queue (answered), 'wait' to stay. At 'deadline' it must leave. */
  attempt(reason: 'wake' | 'deadline'): 'wait' | 'done';
  /** The queue is closing (the gate shuts down): answer now, without deciding again. */
  abandon(): void;
}

/** Handle of a parked entry: leave the queue without an answer (the client went away). */
export interface Parked {
  leave(): void;
}

export interface GroupQueueState {
  readonly groupId: string;
  readonly depth: number;
  readonly oldestWaitMs: number;
}

export interface WaitQueue extends QueueView {
  /** Park an entry; undefined when its group already holds `maxDepth` entries. */
  park(entry: QueueEntry, maxDepth: number): Parked | undefined;
  /** Capacity may have freed: let the head of every group try again, in deadline or arrival order. */
  wake(): void;
  size(): number;
  groups(): GroupQueueState[];
  /** Stop every timer and abandon every entry still waiting (each answers itself). */
  close(): void;
}

export interface WaitQueueOptions {
  readonly now: () => number;
  /** Re-try heads this often while anything waits, so worker-view changes nobody announced are noticed. */
  readonly recheckMs?: number;
  /** Called whenever a group's depth changes (for `kvgate_queue_depth`). */
  readonly onDepth?: (groupId: string, depth: number) => void;
}

interface Slot {
  readonly entry: QueueEntry;
  readonly seq: number;
  timer: NodeJS.Timeout | undefined;
}

const keyOf = (s: Slot): number => (s.entry.order === 'edf' ? s.entry.deadlineAtMs : s.entry.enqueuedAtMs);
const before = (a: Slot, b: Slot): boolean => keyOf(a) < keyOf(b) || (keyOf(a) === keyOf(b) && a.seq < b.seq);

/** Queues keyed by group id; one instance per gate. */
export function createWaitQueue(opts: WaitQueueOptions): WaitQueue {
  const groups = new Map<string, Slot[]>();
  let seq = 0;
  let recheck: NodeJS.Timeout | undefined;
  let waking = false;
  let again = false;

  const depth = (groupId: string): number => groups.get(groupId)?.length ?? 0;
  const changed = (groupId: string): void => {
    opts.onDepth?.(groupId, depth(groupId));
    const total = [...groups.values()].reduce((n, g) => n + g.length, 0);
    if (total > 0 && recheck === undefined && (opts.recheckMs ?? 250) > 0) {
      recheck = setInterval(wake, opts.recheckMs ?? 250);
      recheck.unref();
    } else if (total === 0 && recheck !== undefined) {
      clearInterval(recheck);
      recheck = undefined;
    }
  };
  const remove = (slot: Slot): void => {
    clearTimeout(slot.timer);
    const g = groups.get(slot.entry.groupId);
    const i = g?.indexOf(slot) ?? -1;
    if (g === undefined || i < 0) return;
    g.splice(i, 1);
    if (g.length === 0) groups.delete(slot.entry.groupId);
    changed(slot.entry.groupId);
  };
  const expire = (slot: Slot): void => {
    slot.timer = undefined;
    if (!groups.get(slot.entry.groupId)?.includes(slot)) return;
    if (slot.entry.attempt('deadline') === 'done') remove(slot);
    else slot.timer = arm(slot); // the entry insisted on staying: try again shortly, never spin
  };
  const arm = (slot: Slot): NodeJS.Timeout => {
    const t = setTimeout(() => expire(slot), Math.max(1, slot.entry.deadlineAtMs - opts.now()));
    t.unref();
    return t;
  };

  function wake(): void {
    if (waking) {
      again = true;
      return;
    }
    waking = true;
    try {
      do {
        again = false;
        const heads = [...groups.values()].map((g) => g[0]!).sort((a, b) => (before(a, b) ? -1 : 1));
        for (const head of heads) drainGroup(head.entry.groupId);
      } while (again);
    } finally {
      waking = false;
    }
  }

  /** Serve the group's head while it can be served; the first that must wait blocks the rest (same capacity). */
  function drainGroup(groupId: string): void {
    for (let g = groups.get(groupId); g !== undefined && g.length > 0; g = groups.get(groupId)) {
      const head = g[0]!;
      if (head.entry.attempt('wake') !== 'done') return;
      remove(head);
    }
  }

  return {
    depth,
    park(entry, maxDepth) {
      const g = groups.get(entry.groupId) ?? [];
      if (g.length >= maxDepth) return undefined;
      const slot: Slot = { entry, seq: seq++, timer: undefined };
      const at = g.findIndex((s) => before(slot, s));
      g.splice(at < 0 ? g.length : at, 0, slot);
      groups.set(entry.groupId, g);
      slot.timer = arm(slot);
      changed(entry.groupId);
      return { leave: () => remove(slot) };
    },
    wake,
    size: () => [...groups.values()].reduce((n, g) => n + g.length, 0),
    groups() {
      const now = opts.now();
      return [...groups.entries()].map(([groupId, g]) => ({
        groupId,
        depth: g.length,
        oldestWaitMs: Math.max(0, now - Math.min(...g.map((s) => s.entry.enqueuedAtMs))),
      }));
    },
    close() {
      const all = [...groups.values()].flat();
      for (const s of all) clearTimeout(s.timer);
      const ids = [...groups.keys()];
      groups.clear();
      for (const id of ids) opts.onDepth?.(id, 0);
      clearInterval(recheck);
      recheck = undefined;
      for (const s of all) s.entry.abandon();
    },
  };
}
