/**
 * A string-keyed memo with a hard size bound, for values that are pure functions of their key and repeat across
 * requests (group ids, derived cache salts, encoded header values). Once full it starts over empty: no per-hit
 * bookkeeping, memory never grows past `limit` entries, and a key set larger than the bound only costs the
 * recomputation the cache was saving.
 */
export class BoundedCache<V> {
  readonly #limit: number;
  #map = new Map<string, V>();

  constructor(limit: number) {
    if (!Number.isInteger(limit) || limit < 1) throw new RangeError(`BoundedCache limit must be a positive integer, got ${limit}`);
    this.#limit = limit;
  }

  /** The cached value for `key`, computing and keeping it on a miss. */
  get(key: string, compute: (key: string) => V): V {
    const hit = this.#map.get(key);
    if (hit !== undefined) return hit;
    const value = compute(key);
    if (this.#map.size >= this.#limit) this.#map = new Map();
    this.#map.set(key, value);
    return value;
  }

  /** The cached value for `key`, or undefined; computes nothing. */
  peek(key: string): V | undefined {
    return this.#map.get(key);
  }

  /** Keep `value` for `key` (replacing any), under the same bound as `get`. */
  set(key: string, value: V): void {
    if (this.#map.size >= this.#limit && !this.#map.has(key)) this.#map = new Map();
    this.#map.set(key, value);
  }

  get size(): number {
    return this.#map.size;
  }
}
