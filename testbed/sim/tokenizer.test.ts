import { describe, expect, it } from 'vitest';
import r50k from 'gpt-tokenizer/encoding/r50k_base';
import { PINNED_TOKENIZERS, SPECIAL_TOKENS, loadSimTokenizer, resolveTokenizerProfile } from './tokenizer.js';

const TEXT = 'Disaggregated serving moves the KV cache from a prefill worker to a decode worker.';

describe('tokenizer table', () => {
  it('pins known tokenizers to their real encoding and ids', async () => {
    const gpt2 = await loadSimTokenizer({ id: 'openai-community/gpt2', revision: 'main' });
    expect(gpt2.profile.source).toBe('pinned');
    expect(gpt2.encode(TEXT, { addSpecialTokens: true })).toEqual(r50k.encode(TEXT));
    expect(PINNED_TOKENIZERS.every((p) => resolveTokenizerProfile(p).source === 'pinned')).toBe(true);
  });

  it('derives a deterministic profile for unknown revisions', () => {
    const a = resolveTokenizerProfile({ id: 'acme/x', revision: 'r1' });
    expect(resolveTokenizerProfile({ id: 'acme/x', revision: 'r1' })).toEqual(a);
    expect(a.source).toBe('derived');
    expect(a.permutation).not.toBeNull();
  });

  it('a tokenizer revision change changes ids and (for these revisions) counts', async () => {
    const a = await loadSimTokenizer({ id: 'acme/llama-3-8b-instruct', revision: 'tok-a' });
    const b = await loadSimTokenizer({ id: 'acme/llama-3-8b-instruct', revision: 'tok-b' });
    expect(a.profile.encoding).not.toBe(b.profile.encoding);
    const ia = a.encode(TEXT, { addSpecialTokens: false });
    const ib = b.encode(TEXT, { addSpecialTokens: false });
    expect(ia.length).not.toBe(ib.length);
    expect(ia).not.toEqual(ib.slice(0, ia.length));
  });

  it('two revisions on the same encoding still number tokens differently', async () => {
    const a = await loadSimTokenizer({ id: 'acme/llama-3-8b-instruct', revision: 'tok-a' });
    const c = await loadSimTokenizer({ id: 'acme/llama-3-8b-instruct', revision: 'tok-c' });
    expect(a.profile.encoding).toBe(c.profile.encoding);
    const ia = a.encode(TEXT, { addSpecialTokens: false });
    const ic = c.encode(TEXT, { addSpecialTokens: false });
    expect(ia.length).toBe(ic.length);
    expect(ia).not.toEqual(ic);
  });
});

describe('SimTokenizer', () => {
  it('round-trips text through a renumbered vocabulary', async () => {
    for (const revision of ['tok-a', 'tok-b', 'tok-e']) {
      const t = await loadSimTokenizer({ id: 'acme/llama-3-8b-instruct', revision });
      const ids = t.encode(TEXT, { addSpecialTokens: false });
      expect(ids.every((id) => id >= 0 && id < t.baseVocabSize)).toBe(true);
      expect(t.decode(ids)).toBe(TEXT);
    }
  });

  it('adds BOS only with add_special_tokens, and recognises special tokens in text', async () => {
    const t = await loadSimTokenizer({ id: 'acme/llama-3-8b-instruct', revision: 'tok-a' });
    expect(t.profile.bos).toBe('<|begin_of_text|>');
    const withBos = t.encode('hi', { addSpecialTokens: true });
    expect(withBos[0]).toBe(t.bosId);
    expect(withBos.slice(1)).toEqual(t.encode('hi', { addSpecialTokens: false }));
    const ids = t.encode('a<|eot_id|>b', { addSpecialTokens: false });
    expect(ids).toContain(t.baseVocabSize + SPECIAL_TOKENS.indexOf('<|eot_id|>'));
    expect(t.eosId).toBe(t.baseVocabSize + SPECIAL_TOKENS.indexOf('<|eot_id|>'));
    expect(t.decode(ids)).toBe('ab');
    expect(t.decode(ids, { skipSpecialTokens: false })).toBe('a<|eot_id|>b');
  });

  it('offers single-token words for generation and rejects out-of-vocabulary ids', async () => {
    const t = await loadSimTokenizer({ id: 'acme/qwen', revision: 'r' });
    expect(t.profile.eos).toBe('<|im_end|>');
    expect(t.wordIds.length).toBeGreaterThan(100);
    expect(t.decode([t.wordIds[0]!])).toMatch(/^ ?[a-z.,]+$/);
    expect(() => t.decode([t.vocabSize])).toThrow(/out of vocabulary/);
  });
});
