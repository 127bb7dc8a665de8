/**
 * One contract, one request: a sidecar remembers the request ids it has admitted until their contracts expire, so
 * a captured contract (and its request id) cannot be replayed to run another prefill or decode outside the gate.
 *
 * Bounded: at most `maxEntries` ids are remembered. Expired entries are dropped as time passes. When an admission
 * finds the guard full of live entries, the one whose contract expires soonest is forgotten (the earliest admitted
 * among equal expiries) and `onEvict` is called: a contract still valid is never forgotten while one expiring
 * sooner is held, whatever the mix of lifetimes (`contract.ttlMs` differs per route table and changes on reload),
 * so the replay window reopened is always the shortest one on offer.
 *
 * Full of live entries, the guard fails OPEN: the new request is admitted and the soonest-expiring entry forgotten.
 * Failing closed would let anyone able to send `maxEntries` valid contracts within one lifetime (a burst of real
 * traffic does) refuse every further legitimate request on this worker until they expire; a forgotten entry at
 * worst lets that one contract, already near its expiry, be replayed once more here, and each such eviction is
 * reported through `onEvict`.
 *
 * Cost: entries live in a binary min-heap by expiry with a map from id to heap slot; `claim` and `release` are
 * O(log n) (amortised for `claim`, which also drops the entries that expired since the last call, each once).
 * A prefill attempt that did not succeed is released, so a retry of the same request may come back to this worker.
 * A released entry is kept (marked), not forgotten: one contract is admitted at most `MAX_CLAIMS` times while it is
 * valid, so a holder that aborts every attempt cannot restart the same prefill on this worker without end.
 */

/**
 * Admissions of one contract per worker while it is valid, releases included: well above what retries need (a decode
 * side tries at most `prefill.maxAttempts` <= 10 prefill legs, each to another endpoint where it can), and a bound on
 * what a captured contract can make this worker start.
 */
export const MAX_CLAIMS = 16;
export interface ReplayGuard {
  /** True when `requestId` was not admitted before (it is now); false for a replay. */
  claim(requestId: string, expiresAtMs: number, nowMs: number): boolean;
  /** An admission whose attempt failed or was refused before any work: the request may be retried here (up to `MAX_CLAIMS`). */
  release(requestId: string): void;
  readonly size: number;
}

interface Entry {
  readonly id: string;
  exp: number;
  /** Admission order, to break ties between equal expiries (the earliest admitted goes first). */
  seq: number;
  /** This entry's slot in the heap. */
  at: number;
  /** Admissions so far (at most MAX_CLAIMS). */
  claims: number;
  /** Released by its last admission: it may be claimed again while `claims` < MAX_CLAIMS. */
  released: boolean;
}

export function createReplayGuard(maxEntries = 200_000, onEvict: () => void = () => undefined): ReplayGuard {
  const byId = new Map<string, Entry>();
  const heap: Entry[] = []; // min-heap by (exp, seq)
  let nextSeq = 0;

  const before = (a: Entry, b: Entry): boolean => a.exp < b.exp || (a.exp === b.exp && a.seq < b.seq);
  const place = (e: Entry, i: number): void => {
    heap[i] = e;
    e.at = i;
  };
  const siftUp = (e: Entry, from: number): void => {
    let i = from;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      const p = heap[parent] as Entry;
      if (!before(e, p)) break;
      place(p, i);
      i = parent;
    }
    place(e, i);
  };
  const siftDown = (e: Entry, from: number): void => {
    let i = from;
    const n = heap.length;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= n) break;
      const r = l + 1;
      const c = r < n && before(heap[r] as Entry, heap[l] as Entry) ? r : l;
      const child = heap[c] as Entry;
      if (!before(child, e)) break;
      place(child, i);
      i = c;
    }
    place(e, i);
  };
  /** Take `e` out of the heap and the map. */
  const remove = (e: Entry): void => {
    byId.delete(e.id);
    const last = heap.pop() as Entry;
    if (last === e) return;
    // Move the last entry into the freed slot and restore the order from there (up or down).
    if (e.at > 0 && before(last, heap[(e.at - 1) >> 1] as Entry)) siftUp(last, e.at);
    else siftDown(last, e.at);
  };

  return {
    claim(requestId, expiresAtMs, nowMs) {
      const held = byId.get(requestId);
      if (held !== undefined && held.exp > nowMs) {
        if (!held.released || held.claims >= MAX_CLAIMS) return false;
        held.released = false;
        held.claims++;
        return true;
      }
      if (held !== undefined) remove(held);
      // Expired admissions leave first: each is popped once, so this is O(log n) amortised per claim.
      for (let top = heap[0]; top !== undefined && top.exp <= nowMs; top = heap[0]) remove(top);
      // Full of live entries: fail open, forgetting the one that expires soonest (see the header comment).
      while (heap.length >= maxEntries && heap.length > 0) {
        remove(heap[0] as Entry);
        onEvict();
      }
      const e: Entry = { id: requestId, exp: expiresAtMs, seq: nextSeq++, at: heap.length, claims: 1, released: false };
      byId.set(requestId, e);
      heap.push(e);
      siftUp(e, e.at);
      return true;
    },
    release(requestId) {
      const e = byId.get(requestId);
      if (e !== undefined) e.released = true;
    },
    get size() {
      return heap.length;
    },
  };
}
