import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { cacheSaltDigestOf, checkBodyBinding, promptDigestOf } from './body-binding.js';

const body = { model: 'llama', messages: [{ role: 'user', content: 'hi' }], cache_salt: 'salt-acme', max_tokens: 8 };
const contract = {
  requestId: 'r1',
  model: 'llama',
  adapter: null,
  cacheSaltDigest: cacheSaltDigestOf('salt-acme'),
  promptDigest: promptDigestOf(body),
};
const reason = (b: Record<string, unknown>, adapter: string | null = null) => {
  const r = checkBodyBinding(contract, b, adapter);
  return r.ok ? 'ok' : r.error.reason;
};

describe('checkBodyBinding', () => {
  it('accepts the body the contract was minted for, whatever the key order and the non-prompt fields', () => {
    expect(
      reason({ max_tokens: 1, stream: false, cache_salt: 'salt-acme', messages: [{ content: 'hi', role: 'user' }], model: 'llama' }),
    ).toBe('ok');
  });

  it("refuses another tenant's salt, no salt, another model, adapter or prompt", () => {
    expect(reason({ ...body, cache_salt: 'salt-globex' })).toBe('salt_mismatch');
    const { cache_salt: _s, ...unsalted } = body;
    expect(reason(unsalted)).toBe('salt_missing');
    expect(reason({ ...body, cache_salt: '' })).toBe('salt_missing');
    expect(reason({ ...body, cache_salt: 7 })).toBe('salt_missing');
    expect(reason({ ...body, model: 'llama-lora' })).toBe('model_mismatch');
    expect(reason(body, 'acme-lora')).toBe('adapter_mismatch');
    expect(reason({ ...body, messages: [{ role: 'user', content: 'hi!' }] })).toBe('prompt_mismatch');
    // Fields that change the tokens count as the prompt too.
    expect(reason({ ...body, chat_template: '{{ messages }}' })).toBe('prompt_mismatch');
    expect(reason({ ...body, add_generation_prompt: false })).toBe('prompt_mismatch');
    // vLLM renders `reasoning_effort` into the chat template's kwargs and cuts the prompt's tokens by
    // `truncate_prompt_tokens` (and `truncation_side`): the same messages, other tokens, other KV.
    expect(reason({ ...body, reasoning_effort: 'high' })).toBe('prompt_mismatch');
    expect(reason({ ...body, truncate_prompt_tokens: 1 })).toBe('prompt_mismatch');
    expect(reason({ ...body, truncation_side: 'right' })).toBe('prompt_mismatch');
    // Current vLLM also renders with these (build_chat_params @002032ee; a video's frames are prompt tokens).
    expect(reason({ ...body, media_io_kwargs: { video: { num_frames: 8 } } })).toBe('prompt_mismatch');
    expect(reason({ ...body, tool_choice: 'required' })).toBe('prompt_mismatch');
    expect(reason({ ...body, response_format: { type: 'json_object' } })).toBe('prompt_mismatch');
  });

  it('quotes a client-sent model at most 128 characters', () => {
    const r = checkBodyBinding(contract, { ...body, model: 'm'.repeat(5000) }, null);
    expect(r.ok).toBe(false);
    expect(!r.ok && r.error.message.length).toBeLessThan(400);
  });
});

describe('digests', () => {
  it('are sha256 in hex of the UTF-8 text (FIPS 180-2 test vector; a non-ASCII salt hashes its UTF-8 bytes)', () => {
    expect(cacheSaltDigestOf('abc')).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
    expect(cacheSaltDigestOf('sel-é')).toBe(createHash('sha256').update(Buffer.from('sel-é', 'utf8')).digest('hex'));
  });
});
