/**
 * One contract, one request: a sidecar remembers the request ids it has admitted until their contracts expire, so
 * a captured contract (and its request id) cannot be replayed to run another prefill or decode outside the gate.
 *
 * Bounded: at most `maxEntries` ids are remembered; past that the ones expiring soonest are forgotten first (and
 * counted), which reopens a replay window only for contracts about to expire anyway. A prefill attempt that did not
 * succeed is released, so a retry of the same request may come back to this worker.
 */
export interface ReplayGuard {
  /** True when `requestId` was not admitted before (it is now); false for a replay. */
  claim(requestId: string, expiresAtMs: number, nowMs: number): boolean;
  /** Forget an admission whose attempt failed, so the request may be retried here. */
  release(requestId: string): void;
  readonly size: number;
}

export function createReplayGuard(maxEntries = 200_000, onEvict: () => void = () => undefined): ReplayGuard {
  const seen = new Map<string, number>(); // request id -> contract expiry (ms); insertion order ~ admission order
  const sweep = (nowMs: number): void => {
    // Cheap and constant on average: expired admissions at the front (the oldest) go first.
    for (const [id, exp] of seen) {
      if (exp > nowMs) break;
      seen.delete(id);
    }
    if (seen.size < maxEntries) return;
    // Full: drop every expired entry, then the oldest live ones down to 90% (amortised: a full pass per ~10% of
    // the capacity in new admissions).
    for (const [id, exp] of seen) if (exp <= nowMs) seen.delete(id);
    const target = Math.floor(maxEntries * 0.9);
    for (const id of seen.keys()) {
      if (seen.size <= target) break;
      seen.delete(id);
      onEvict();
    }
  };
  return {
    claim(requestId, expiresAtMs, nowMs) {
      const exp = seen.get(requestId);
      if (exp !== undefined && exp > nowMs) return false;
      seen.delete(requestId); // re-insert at the back: insertion order is what the sweep and eviction rely on
      sweep(nowMs);
      seen.set(requestId, expiresAtMs);
      return true;
    },
    release(requestId) {
      seen.delete(requestId);
    },
    get size() {
      return seen.size;
    },
  };
}
