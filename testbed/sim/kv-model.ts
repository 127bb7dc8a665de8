/**
 * What a KV block "means", in a form that makes KV corruption measurable.
 *
 * Real KV is the keys and values a particular model computed for a particular token prefix. The simulator replaces
 * tensors with digests that depend on exactly the same things:
 *
 * - a block's content is sha256(semantic seed, the token chain up to and including the block, the previous block's
 *   content as this worker reads it). The chain through the previous block models attention: KV computed after a
 *   foreign block inherits its error, as real later-layer KV would;
 * - the semantic seed covers what makes KV mean something: model id and weights revision, adapter id and revision
 *   (when the request uses it), model dtype, KV dtype and scale scheme, position scheme;
 * - each block carries a scale tag. Static (checkpoint) and packed scales are the same everywhere; dynamic
 *   per-block scales are computed per instance and do not travel with the blocks (vLLM's NIXL compatibility
 *   matrix), so a dynamic tag includes an instance salt, and a worker reading a block scaled by another instance
 *   misreads it.
 *
 * Prefix-cache keys follow vLLM's block hashing instead (token chain + extra keys: cache_salt on the first block and
 * the LoRA name), because the cache is keyed by what the scheduler knows, not by what the KV means.
 * Pure: hashing only.
 */
import { createHash } from 'node:crypto';
import type { CompatDescriptor } from '../../src/compat/descriptor.js';

/** The bytes of one block as they sit in GPU memory and travel over NIXL. */
export interface KvBlock {
  readonly content: string;
  readonly scaleTag: string;
}

/** How one worker computes and reads KV for one kind of request (base model or adapter). */
export interface KvSemantics {
  readonly seed: string;
  readonly scaleTag: string;
  /** The model that turns KV into the next token. */
  readonly weightsSeed: string;
  readonly blockSize: number;
}

export function sha(...parts: ReadonlyArray<string | number>): string {
  const h = createHash('sha256');
  for (const p of parts) h.update(String(p)).update('\u0000');
  return h.digest('hex');
}

/** `scaleSalt` identifies this instance; only dynamic per-block scales depend on it. */
export function createKvSemantics(d: CompatDescriptor, opts: { withAdapter: boolean; scaleSalt: string }): KvSemantics {
  const adapter = opts.withAdapter && d.adapter ? `${d.adapter.id}@${d.adapter.revision}` : '-';
  const weights = [d.model.id, d.model.revision, adapter, d.modelDtype];
  return {
    seed: sha('kv', ...weights, d.kvCache.dtype, d.kvCache.scaleScheme, JSON.stringify(d.architecture.position)),
    weightsSeed: sha('weights', ...weights),
    scaleTag: scaleTagOf(d.kvCache.scaleScheme, opts.scaleSalt),
    blockSize: d.kvCache.blockSize,
  };
}

function scaleTagOf(scheme: CompatDescriptor['kvCache']['scaleScheme'], salt: string): string {
  switch (scheme) {
    case 'none':
      return 'none';
    case 'static-checkpoint':
      return 'static';
    case 'packed':
      return 'packed';
    case 'dynamic-per-block':
      return `dynamic:${salt}`;
  }
}

export function numBlocks(numTokens: number, blockSize: number): number {
  return Math.ceil(numTokens / blockSize);
}

/** Token-chain hash of every block, the last one possibly partial. */
export function tokenChain(tokens: readonly number[], blockSize: number): string[] {
  const out: string[] = [];
  let prev = 'root';
  for (let i = 0; i < tokens.length; i += blockSize) {
    prev = sha(prev, tokens.slice(i, i + blockSize).join(','));
    out.push(prev);
  }
  return out;
}

/** vLLM-style prefix-cache keys of the FULL blocks only (partial blocks are never cached). */
export function prefixCacheKeys(
  tokens: readonly number[],
  blockSize: number,
  extra: { cacheSalt: string | null; loraName: string | null },
): string[] {
  const out: string[] = [];
  let prev = 'none';
  const full = Math.floor(tokens.length / blockSize);
  for (let i = 0; i < full; i++) {
    const keys = i === 0 ? [extra.loraName ?? '', extra.cacheSalt ?? ''] : [extra.loraName ?? ''];
    prev = sha(prev, tokens.slice(i * blockSize, (i + 1) * blockSize).join(','), ...keys);
    out.push(prev);
  }
  return out;
}

/** The content a worker sees when it reads a block: misread when the block was scaled with other scales. */
export function readBlock(sem: KvSemantics, block: KvBlock): string {
  return block.scaleTag === sem.scaleTag ? block.content : sha('misread', block.content, block.scaleTag, sem.scaleTag);
}

/**
 * Compute blocks `from..` of a token sequence locally, continuing after `prior` (blocks already present: prefix
 * hits or pulled blocks). `chain` is `tokenChain(tokens)`.
 */
export function computeBlocks(sem: KvSemantics, chain: readonly string[], prior: readonly KvBlock[]): KvBlock[] {
  const out: KvBlock[] = [];
  let prev = prior.length > 0 ? readBlock(sem, prior[prior.length - 1]!) : 'root';
  for (let i = prior.length; i < chain.length; i++) {
    const block = { content: sha(sem.seed, chain[i]!, prev), scaleTag: sem.scaleTag };
    out.push(block);
    prev = readBlock(sem, block);
  }
  return out;
}

/** The running digest over every block a decoder holds for a request: the "past" its next token attends to. */
export function kvDigest(sem: KvSemantics, blocks: readonly KvBlock[]): string {
  let d = 'digest';
  for (const b of blocks) d = sha(d, readBlock(sem, b));
  return d;
}

/** Bytes one block occupies (K and V, every layer), as NIXL would move them. */
export function blockBytes(d: CompatDescriptor): number {
  const a = d.architecture;
  return 2 * d.kvCache.blockSize * a.numKvHeads * a.headSize * dtypeBytes(d.kvCache.dtype, d.modelDtype) * a.numLayers;
}

/** Per-layer block length, the quantity `_validate_remote_agent_handshake` compares. */
export function blockLen(d: CompatDescriptor): number {
  const a = d.architecture;
  return d.kvCache.blockSize * a.numKvHeads * a.headSize * dtypeBytes(d.kvCache.dtype, d.modelDtype);
}

export function dtypeBytes(kvDtype: string, modelDtype: string): number {
  const t = (kvDtype === 'auto' ? modelDtype : kvDtype).toLowerCase();
  if (t.includes('fp8') || t.includes('int8') || t.includes('float8')) return 1;
  if (t.includes('32') || t === 'float') return 4;
  return 2;
}
