/**
 * The prefill side's hold on blocks a decode worker has not read yet (vLLM's `kv_lease_duration`, PR #41383).
 *
 * P grants a lease when prefill finishes; D's notification frees the blocks at once; D's heartbeats extend the lease
 * to `max(old, now + 2/3 duration)`; an expired lease frees the blocks and counts in
 * `vllm:nixl_num_kv_expired_reqs`. Expiry is checked lazily on every access and by a periodic sweep the server runs
 * (vLLM sweeps every outstanding lease in `get_finished()`). Clock injected.
 */
export interface Lease {
  readonly requestId: string;
  readonly blockIds: readonly number[];
  readonly numTokens: number;
  /** How long it was granted for (the lease duration, or the abort timeout before leases). */
  readonly durationMs: number;
  expiresAt: number;
}

export interface LeaseTableOptions {
  readonly now: () => number;
  readonly leaseMs: number;
  /** Called once per expired lease, after it left the table (free the blocks, count, log). */
  readonly onExpire: (lease: Lease) => void;
}

export class LeaseTable {
  readonly #leases = new Map<string, Lease>();
  readonly #opts: LeaseTableOptions;

  constructor(opts: LeaseTableOptions) {
    this.#opts = opts;
  }

  get size(): number {
    return this.#leases.size;
  }

  grant(requestId: string, blockIds: readonly number[], numTokens: number, leaseMs = this.#opts.leaseMs): Lease {
    const lease = { requestId, blockIds, numTokens, durationMs: leaseMs, expiresAt: this.#opts.now() + leaseMs };
    this.#leases.set(requestId, lease);
    return lease;
  }

  /** The live lease for a request; an expired one is reaped first and reported missing. */
  get(requestId: string): Lease | undefined {
    this.sweep();
    return this.#leases.get(requestId);
  }

  /** Extend each named live lease; returns how many were extended. */
  heartbeat(requestIds: readonly string[]): number {
    this.sweep();
    const until = this.#opts.now() + Math.floor((this.#opts.leaseMs * 2) / 3);
    let n = 0;
    for (const id of requestIds) {
      const lease = this.#leases.get(id);
      if (!lease) continue;
      lease.expiresAt = Math.max(lease.expiresAt, until);
      n++;
    }
    return n;
  }

  /** D's read-completion notification: end the lease and hand its blocks back. */
  release(requestId: string): Lease | undefined {
    this.sweep();
    const lease = this.#leases.get(requestId);
    if (lease) this.#leases.delete(requestId);
    return lease;
  }

  /** Reap every expired lease (all of them, not only a prefix: deadlines are not ordered). */
  sweep(): number {
    const now = this.#opts.now();
    let n = 0;
    for (const lease of [...this.#leases.values()]) {
      if (lease.expiresAt <= now) {
        this.#leases.delete(lease.requestId);
        this.#opts.onExpire(lease);
        n++;
      }
    }
    return n;
  }

  /** The live leases (expired ones reaped first), for tests that check when P let go of a request's blocks. */
  list(): readonly Lease[] {
    this.sweep();
    return [...this.#leases.values()];
  }

  /** Fault injection: expire every lease now. */
  expireAll(): number {
    for (const lease of this.#leases.values()) lease.expiresAt = -Infinity;
    return this.sweep();
  }
}
