import { describe, expect, it } from 'vitest';
import { promptTokenDigestOf } from '../contract/attestation.js';
import { attestableDigest, clientWantsTokenIds, promptTokenIdsOf, withoutTokenIds, withTokenIdsRequested } from './prompt-ids.js';

const completion = {
  id: 'cmpl-1',
  object: 'text_completion',
  choices: [{ index: 0, text: ' Paris', finish_reason: 'length', token_ids: [6342], prompt_token_ids: [50256, 464, 3139] }],
  usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 },
  kv_transfer_params: { do_remote_prefill: true },
};
const chat = {
  id: 'chatcmpl-1',
  object: 'chat.completion',
  choices: [{ index: 0, message: { role: 'assistant', content: 'Hi' }, finish_reason: 'length', token_ids: [17250] }],
  usage: { prompt_tokens: 2, completion_tokens: 1, total_tokens: 3 },
  prompt_logprobs: null,
  prompt_token_ids: [100264, 882],
  kv_transfer_params: null,
};

describe('prompt token ids of a worker answer', () => {
  it('reads chat ids at the top level and completion ids in the first choice', () => {
    expect(promptTokenIdsOf(chat)).toEqual([100264, 882]);
    expect(promptTokenIdsOf(completion)).toEqual([50256, 464, 3139]);
  });

  it('finds none where a worker does not return them (vLLM without return_token_ids), or returns junk', () => {
    expect(promptTokenIdsOf({ ...chat, prompt_token_ids: null })).toBeUndefined();
    expect(promptTokenIdsOf({ choices: [{ index: 0, text: 'x' }] })).toBeUndefined();
    expect(promptTokenIdsOf({ choices: [{ prompt_token_ids: [1, 'two', 3] }] })).toBeUndefined();
    expect(promptTokenIdsOf({ choices: [{ prompt_token_ids: [1, -2] }] })).toBeUndefined();
    expect(promptTokenIdsOf({ choices: [] })).toBeUndefined();
  });

  it('attests a digest only when the ids agree with the reported count', () => {
    expect(attestableDigest(completion, 3)).toEqual({ digest: promptTokenDigestOf([50256, 464, 3139]) });
    expect(attestableDigest(completion, 4)).toEqual({ inconsistent: 3 });
    expect(attestableDigest({ ...chat, prompt_token_ids: null }, 2)).toEqual({});
  });
});

describe('asking for ids without changing the answer', () => {
  it('requests return_token_ids and knows when the client asked for them itself', () => {
    expect(withTokenIdsRequested({ model: 'm', prompt: 'x' })).toEqual({ model: 'm', prompt: 'x', return_token_ids: true });
    expect(clientWantsTokenIds({ return_token_ids: true })).toBe(true);
    expect(clientWantsTokenIds({ return_token_ids: false })).toBe(false);
    expect(clientWantsTokenIds({})).toBe(false);
  });

  it('sets the id fields back to null as vLLM writes them when not asked, leaving everything else alone', () => {
    expect(withoutTokenIds(completion)).toEqual({
      ...completion,
      choices: [{ ...completion.choices[0], token_ids: null, prompt_token_ids: null }],
    });
    expect(withoutTokenIds(chat)).toEqual({ ...chat, prompt_token_ids: null, choices: [{ ...chat.choices[0], token_ids: null }] });
    // Fields the worker did not write stay absent; the input is not modified.
    expect(withoutTokenIds({ choices: [{ text: 'x' }] })).toEqual({ choices: [{ text: 'x' }] });
    expect(completion.choices[0]!.prompt_token_ids).toEqual([50256, 464, 3139]);
  });
});
