/**
 * The worker's GPU KV blocks: a fixed number of block ids, reference counted, with a prefix cache over full
 * blocks and LRU eviction of unreferenced cached blocks, like vLLM v1's block pool.
 *
 * Block ids are what `remote_block_ids` names, so the pool is also what a prefill worker's side channel serves.
 * Usage counts referenced blocks only (vLLM's `kv_cache_usage_perc`: cached, unreferenced blocks are free).
 */
import type { KvBlock } from './kv-model.js';

interface Slot {
  block: KvBlock;
  refs: number;
  cacheKey: string | null;
}

const EMPTY: KvBlock = Object.freeze({ content: '', scaleTag: '' });

export class BlockPool {
  readonly total: number;
  readonly #slots = new Map<number, Slot>();
  readonly #free: number[] = [];
  /** Unreferenced cached blocks in LRU order (oldest first). */
  readonly #evictable = new Map<number, true>();
  readonly #cache = new Map<string, number>();

  constructor(numBlocks: number) {
    this.total = numBlocks;
    for (let id = numBlocks - 1; id >= 0; id--) this.#free.push(id);
  }

  /** Blocks that can be allocated now (free or evictable). */
  get available(): number {
    return this.#free.length + this.#evictable.size;
  }

  get used(): number {
    return this.total - this.available;
  }

  get usage(): number {
    return this.used / this.total;
  }

  /** Allocate one block (refs = 1), evicting the least recently used cached block when none is free. */
  allocate(block: KvBlock = EMPTY): number | null {
    let id = this.#free.pop();
    if (id === undefined) {
      const lru = this.#evictable.keys().next();
      if (lru.done) return null;
      id = lru.value;
      this.#evictable.delete(id);
      const old = this.#slots.get(id);
      if (old?.cacheKey) this.#cache.delete(old.cacheKey);
    }
    this.#slots.set(id, { block, refs: 1, cacheKey: null });
    return id;
  }

  /** Allocate `n` blocks or none. */
  allocateMany(n: number): number[] | null {
    if (n > this.available) return null;
    const ids: number[] = [];
    for (let i = 0; i < n; i++) ids.push(this.allocate()!);
    return ids;
  }

  get(id: number): KvBlock | undefined {
    const s = this.#slots.get(id);
    return s && s.refs > 0 ? s.block : undefined;
  }

  set(id: number, block: KvBlock): void {
    const s = this.#slots.get(id);
    if (!s || s.refs === 0) throw new Error(`block ${id} is not allocated`);
    s.block = block;
  }

  /** The cached block for a prefix-cache key, if any (not referenced yet). */
  lookup(cacheKey: string): number | undefined {
    return this.#cache.get(cacheKey);
  }

  ref(id: number): void {
    const s = this.#slots.get(id);
    if (!s) throw new Error(`block ${id} is not allocated`);
    if (s.refs === 0) this.#evictable.delete(id);
    s.refs++;
  }

  unref(id: number): void {
    const s = this.#slots.get(id);
    if (!s || s.refs === 0) throw new Error(`block ${id} released twice`);
    s.refs--;
    if (s.refs > 0) return;
    if (s.cacheKey) this.#evictable.set(id, true);
    else {
      this.#slots.delete(id);
      this.#free.push(id);
    }
  }

  /** Register a full block under its prefix-cache key (no-op when the key is already cached). */
  cache(id: number, cacheKey: string): void {
    const s = this.#slots.get(id);
    if (!s || this.#cache.has(cacheKey) || s.cacheKey) return;
    s.cacheKey = cacheKey;
    this.#cache.set(cacheKey, id);
  }

  /** Drop every cached block (tests, and "reset prefix cache"). Referenced blocks stay allocated. */
  resetCache(): void {
    for (const [key, id] of this.#cache) {
      const s = this.#slots.get(id)!;
      s.cacheKey = null;
      this.#cache.delete(key);
      if (s.refs === 0) {
        this.#evictable.delete(id);
        this.#slots.delete(id);
        this.#free.push(id);
      }
    }
  }
}
