/**
 * Real BPE tokenization for the simulated worker, chosen by the worker's tokenizer identity and revision.
 *
 * A tokenizer change must change token ids (and usually counts) exactly where a real one would, because the KV a
 * prefill worker computes describes ITS token ids: a decode worker with another tokenizer reads KV for a prompt it
 * never saw. The simulator uses the real encodings shipped by `gpt-tokenizer` and picks one per (id, revision):
 *
 * 1. `PINNED_TOKENIZERS`: exact (id, revision) pairs with a fixed encoding, canonical ids, BOS and EOS.
 * 2. Anything else (the normal case: revisions are commit shas): the encoding is chosen by
 *    sha256(`id@revision`) among r50k_base, cl100k_base and o200k_base, and token ids are renumbered by an affine
 *    bijection derived from the same hash (a retrained vocabulary: same text pieces, other ids). Two different
 *    revisions therefore get different ids (with overwhelming probability) and, two times out of three, different
 *    counts. BOS/EOS follow the family guessed from the id (llama, mistral, qwen, else gpt-2 style).
 *
 * Special tokens (chat-template markers, BOS, EOS) are added tokens with ids just above the base vocabulary; as in
 * Hugging Face tokenizers they are recognised anywhere in the text.
 */
import { createHash } from 'node:crypto';

export const ENCODINGS = ['r50k_base', 'p50k_base', 'cl100k_base', 'o200k_base'] as const;
export type EncodingName = (typeof ENCODINGS)[number];
/** Encodings whose counts clearly differ on prose (p50k_base tokenizes prose like r50k_base). */
const FALLBACK_ENCODINGS: readonly EncodingName[] = ['r50k_base', 'cl100k_base', 'o200k_base'];

/** Added tokens every simulated tokenizer knows, in id order after the base vocabulary. */
export const SPECIAL_TOKENS = [
  '<|endoftext|>',
  '<|begin_of_text|>',
  '<|end_of_text|>',
  '<|im_start|>',
  '<|im_end|>',
  '<|start_header_id|>',
  '<|end_header_id|>',
  '<|eot_id|>',
  '<s>',
  '</s>',
  '[INST]',
  '[/INST]',
] as const;
export type SpecialToken = (typeof SPECIAL_TOKENS)[number];

export interface TokenizerProfile {
  readonly encoding: EncodingName;
  /** `id' = (a*id + b) mod V` over the base vocabulary; null keeps the encoding's own ids. */
  readonly permutation: { readonly a: number; readonly b: number } | null;
  readonly bos: SpecialToken | null;
  readonly eos: SpecialToken;
  readonly source: 'pinned' | 'derived';
}

interface Family {
  readonly bos: SpecialToken | null;
  readonly eos: SpecialToken;
}
const FAMILIES: ReadonlyArray<{ test: RegExp; family: Family }> = [
  { test: /llama/i, family: { bos: '<|begin_of_text|>', eos: '<|eot_id|>' } },
  { test: /mistral|mixtral/i, family: { bos: '<s>', eos: '</s>' } },
  { test: /qwen/i, family: { bos: null, eos: '<|im_end|>' } },
];
const GPT2_FAMILY: Family = { bos: null, eos: '<|endoftext|>' };

/** Documented table of tokenizers whose encoding is fixed (see README "Tokenizers"). */
export const PINNED_TOKENIZERS: ReadonlyArray<{ id: string; revision: string; encoding: EncodingName } & Family> = [
  { id: 'openai-community/gpt2', revision: 'main', encoding: 'r50k_base', ...GPT2_FAMILY },
  { id: 'gpt2', revision: 'main', encoding: 'r50k_base', ...GPT2_FAMILY },
  { id: 'openai/gpt-oss-20b', revision: 'main', encoding: 'o200k_base', ...GPT2_FAMILY },
  { id: 'openai/gpt-oss-120b', revision: 'main', encoding: 'o200k_base', ...GPT2_FAMILY },
  { id: 'meta-llama/Llama-3.1-8B-Instruct', revision: 'main', encoding: 'cl100k_base', bos: '<|begin_of_text|>', eos: '<|eot_id|>' },
  { id: 'meta-llama/Meta-Llama-3-8B-Instruct', revision: 'main', encoding: 'cl100k_base', bos: '<|begin_of_text|>', eos: '<|eot_id|>' },
  { id: 'Qwen/Qwen2.5-7B-Instruct', revision: 'main', encoding: 'cl100k_base', bos: null, eos: '<|im_end|>' },
  { id: 'mistralai/Mistral-7B-Instruct-v0.3', revision: 'main', encoding: 'p50k_base', bos: '<s>', eos: '</s>' },
];

/** Pure: which encoding, numbering and BOS/EOS a tokenizer identity gets. */
export function resolveTokenizerProfile(tok: { id: string; revision: string }): TokenizerProfile {
  const pinned = PINNED_TOKENIZERS.find((p) => p.id === tok.id && p.revision === tok.revision);
  if (pinned) return { encoding: pinned.encoding, permutation: null, bos: pinned.bos, eos: pinned.eos, source: 'pinned' };
  const h = createHash('sha256').update(`${tok.id}@${tok.revision}`).digest();
  const family = FAMILIES.find((f) => f.test.test(tok.id))?.family ?? GPT2_FAMILY;
  return {
    encoding: FALLBACK_ENCODINGS[h.readUInt32BE(0) % FALLBACK_ENCODINGS.length]!,
    permutation: { a: h.readUInt32BE(4), b: h.readUInt32BE(8) },
    bos: family.bos,
    eos: family.eos,
    source: 'derived',
  };
}

/** The subset of a gpt-tokenizer encoding module the simulator uses. */
export interface BaseEncoding {
  encode(text: string, options?: { disallowedSpecial?: Set<string> }): number[];
  decode(ids: Iterable<number>): string;
  readonly vocabularySize: number;
}

const encodingCache = new Map<EncodingName, Promise<BaseEncoding>>();

/** Encodings are megabytes of ranks: load each on first use, once per process. */
export function loadEncoding(name: EncodingName): Promise<BaseEncoding> {
  let p = encodingCache.get(name);
  if (!p) {
    p = importEncoding(name);
    encodingCache.set(name, p);
  }
  return p;
}

async function importEncoding(name: EncodingName): Promise<BaseEncoding> {
  switch (name) {
    case 'r50k_base':
      return (await import('gpt-tokenizer/encoding/r50k_base')).default;
    case 'p50k_base':
      return (await import('gpt-tokenizer/encoding/p50k_base')).default;
    case 'cl100k_base':
      return (await import('gpt-tokenizer/encoding/cl100k_base')).default;
    case 'o200k_base':
      return (await import('gpt-tokenizer/encoding/o200k_base')).default;
  }
}

/** Common English word pieces the generator draws from, so generated text reads like (odd) prose. */
const WORDS = (
  ' the of and to in is that for it as was with be by on not he this are or his from at which but have an they' +
  ' you were their one all we can her has there been if more when will would who so no out up into time only' +
  ' new some could these two may first then do any like my now over such our man me even most made after also' +
  ' did many before must through back years where much your way well down should because each just those people' +
  ' how too little state good very make world still own see men work long get here between both life being under' +
  ' never day same another know while last might us great old year off come since against go came right used take' +
  ' three house river light water city music story market garden morning window letter table road field voice' +
  ' model cache system data paper answer question number small large early late open clear quiet simple'
)
  .split(' ')
  .filter((w) => w !== '')
  .map((w) => ` ${w}`);
const PUNCTUATION = ['.', ','];

const NO_SPECIALS = new Set<string>();

/** A worker's tokenizer: encode/decode with its own ids, special tokens, and the word ids generation uses. */
export class SimTokenizer {
  readonly profile: TokenizerProfile;
  /** Base vocabulary size (ids below it are BPE pieces). */
  readonly baseVocabSize: number;
  readonly vocabSize: number;
  readonly eosId: number;
  readonly bosId: number | null;
  /** Single-token common words (in this tokenizer's ids), for plausible generated text. */
  readonly wordIds: readonly number[];
  readonly #base: BaseEncoding;
  /** Normalised to the base vocabulary: `a` coprime with it, `b` below it. */
  readonly #perm: { readonly a: number; readonly b: number; readonly aInv: number } | null;
  readonly #specialIds: ReadonlyMap<string, number>;
  readonly #specialPattern: RegExp;

  constructor(profile: TokenizerProfile, base: BaseEncoding) {
    this.profile = profile;
    this.#base = base;
    this.baseVocabSize = base.vocabularySize;
    this.vocabSize = this.baseVocabSize + SPECIAL_TOKENS.length;
    const perm = profile.permutation;
    if (perm) {
      const a = coprimeMultiplier(perm.a, this.baseVocabSize);
      this.#perm = { a, b: perm.b % this.baseVocabSize, aInv: modInverse(a, this.baseVocabSize) };
    } else this.#perm = null;
    this.#specialIds = new Map(SPECIAL_TOKENS.map((s, i) => [s, this.baseVocabSize + i]));
    this.#specialPattern = new RegExp(SPECIAL_TOKENS.map(escapeRegExp).join('|'), 'g');
    this.eosId = this.#specialIds.get(profile.eos)!;
    this.bosId = profile.bos === null ? null : this.#specialIds.get(profile.bos)!;
    this.wordIds = [...WORDS, ...PUNCTUATION]
      .map((w) => base.encode(w, { disallowedSpecial: NO_SPECIALS }))
      .filter((ids) => ids.length === 1)
      .map((ids) => this.#toOwn(ids[0]!));
  }

  /** `add_special_tokens`: prepend BOS when the tokenizer has one (vLLM's default for completions). */
  encode(text: string, opts: { addSpecialTokens: boolean }): number[] {
    const out: number[] = [];
    if (opts.addSpecialTokens && this.bosId !== null) out.push(this.bosId);
    let last = 0;
    for (const m of text.matchAll(this.#specialPattern)) {
      this.#encodePlain(text.slice(last, m.index), out);
      out.push(this.#specialIds.get(m[0])!);
      last = m.index + m[0].length;
    }
    this.#encodePlain(text.slice(last), out);
    return out;
  }

  /** Throws RangeError on ids outside the vocabulary (vLLM answers 400). */
  decode(ids: readonly number[], opts: { skipSpecialTokens: boolean } = { skipSpecialTokens: true }): string {
    let out = '';
    let run: number[] = [];
    const flush = (): void => {
      if (run.length > 0) out += this.#base.decode(run);
      run = [];
    };
    for (const id of ids) {
      if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize) throw new RangeError(`token id ${id} is out of vocabulary`);
      if (id >= this.baseVocabSize) {
        flush();
        if (!opts.skipSpecialTokens) out += SPECIAL_TOKENS[id - this.baseVocabSize]!;
      } else run.push(this.#fromOwn(id));
    }
    flush();
    return out;
  }

  /** The text of one token as vLLM renders it in logprobs (special tokens included). */
  tokenText(id: number): string {
    return this.decode([id], { skipSpecialTokens: false });
  }

  isSpecial(id: number): boolean {
    return id >= this.baseVocabSize;
  }

  #encodePlain(text: string, out: number[]): void {
    if (text === '') return;
    for (const id of this.#base.encode(text, { disallowedSpecial: NO_SPECIALS })) out.push(this.#toOwn(id));
  }

  #toOwn(id: number): number {
    const p = this.#perm;
    return p ? (p.a * id + p.b) % this.baseVocabSize : id;
  }

  #fromOwn(id: number): number {
    const p = this.#perm;
    if (!p) return id;
    const v = this.baseVocabSize;
    return (p.aInv * (((id - p.b) % v) + v)) % v;
  }
}

const tokenizerCache = new Map<string, Promise<SimTokenizer>>();

/** Load (once per identity) the tokenizer a worker with this tokenizer id and revision uses. */
export function loadSimTokenizer(tok: { id: string; revision: string }): Promise<SimTokenizer> {
  const key = `${tok.id}@${tok.revision}`;
  let p = tokenizerCache.get(key);
  if (!p) {
    const profile = resolveTokenizerProfile(tok);
    p = loadEncoding(profile.encoding).then((base) => new SimTokenizer(profile, base));
    tokenizerCache.set(key, p);
  }
  return p;
}

function gcd(a: number, b: number): number {
  while (b !== 0) [a, b] = [b, a % b];
  return a;
}

function coprimeMultiplier(seed: number, v: number): number {
  let a = (seed % (v - 2)) + 2;
  while (gcd(a, v) !== 1) a++;
  return a;
}

/** Modular inverse by the extended Euclidean algorithm; products stay below 2^53 for vocabularies < 2^26. */
function modInverse(a: number, m: number): number {
  let [oldR, r] = [a, m];
  let [oldS, s] = [1, 0];
  while (r !== 0) {
    const q = Math.floor(oldR / r);
    [oldR, r] = [r, oldR - q * r];
    [oldS, s] = [s, oldS - q * s];
  }
  return ((oldS % m) + m) % m;
}

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
