/**
 * Deterministic next-token function of the simulated model.
 *
 * The next token depends only on the decoding worker's OWN weights, the KV it holds (a digest over every block,
 * local or pulled) and the position, so identical KV gives identical tokens and KV computed by anything else gives
 * different ones. `temperature`, `top_p` and `seed` do not change it: the simulator always decodes greedily, which
 * is what a token-level comparison against a baseline needs. Tokens are drawn from common English words of the
 * worker's own vocabulary, so wrong KV still produces fluent-looking text, as it does in real life.
 * Pure.
 */
import { sha } from './kv-model.js';

/** One EOS per this many positions on average (when EOS is allowed). */
export const EOS_ODDS = 48;

export interface TokenChoice {
  readonly id: number;
  readonly logprob: number;
}

export interface GeneratedToken extends TokenChoice {
  /** Most likely tokens at this position, best first; the sampled token is first. */
  readonly top: readonly TokenChoice[];
}

export interface GeneratorSetup {
  readonly weightsSeed: string;
  /** Digest of the prompt KV (see `kvDigest`). */
  readonly digest: string;
  /** Number of prompt tokens: the position of the first generated token. */
  readonly position: number;
  readonly wordIds: readonly number[];
  readonly eosId: number;
}

/** A generator walks the sequence: `next()` picks the token at the current position and appends it. */
export interface TokenGenerator {
  next(opts: { allowEos: boolean; topN: number }): GeneratedToken;
  readonly position: number;
}

export function createGenerator(setup: GeneratorSetup): TokenGenerator {
  let digest = setup.digest;
  let position = setup.position;
  const words = setup.wordIds;
  return {
    get position() {
      return position;
    },
    next({ allowEos, topN }) {
      const h = Buffer.from(sha(setup.weightsSeed, digest, position), 'hex');
      const eos = allowEos && h.readUInt32BE(4) % EOS_ODDS === 0;
      const best = eos ? setup.eosId : words[h.readUInt32BE(0) % words.length]!;
      const first = -(0.01 + (h.readUInt16BE(8) % 1000) / 1500);
      const top: TokenChoice[] = [{ id: best, logprob: round(first) }];
      for (let k = 1; top.length < Math.min(topN, words.length); k++) {
        const a = Buffer.from(sha('alt', h.toString('hex'), k), 'hex');
        const id = words[a.readUInt32BE(0) % words.length]!;
        if (top.some((t) => t.id === id)) continue;
        top.push({ id, logprob: round(first - top.length * 0.9 - (a.readUInt16BE(4) % 1000) / 2000) });
      }
      digest = sha(digest, best, position);
      position++;
      return { id: best, logprob: top[0]!.logprob, top };
    },
  };
}

function round(x: number): number {
  return Math.round(x * 1e6) / 1e6;
}
