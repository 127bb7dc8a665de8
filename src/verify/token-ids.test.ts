import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { fromGenerationResponse, NO_TOKEN_IDS, toGenerationRequest } from './token-ids.js';

const completion = (choice: Record<string, unknown>) => ({
  object: 'text_completion',
  choices: [{ index: 0, text: 'hello there', finish_reason: 'length', ...choice }],
});
const chat = (choice: Record<string, unknown>) => ({
  object: 'chat.completion',
  choices: [{ index: 0, message: { role: 'assistant', content: 'hi!' }, finish_reason: 'stop', ...choice }],
});

describe('toGenerationRequest', () => {
  it('asks a completion for greedy output with ids both ways', () => {
    expect(toGenerationRequest({ id: 'p1', kind: 'completion', prompt: 'Hello' }, { model: 'm', maxTokens: 8 })).toEqual({
      path: '/v1/completions',
      body: {
        model: 'm',
        prompt: 'Hello',
        max_tokens: 8,
        temperature: 0,
        stream: false,
        return_token_ids: true,
        return_tokens_as_token_ids: true,
        logprobs: 0,
      },
    });
  });

  it('asks chat with logprobs: true and lets the prompt override max_tokens; extra fields are added', () => {
    const r = toGenerationRequest(
      { id: 'c', kind: 'chat', messages: [{ role: 'user', content: 'Hi' }], maxTokens: 3 },
      { model: 'm', maxTokens: 8, extra: { cache_salt: 's' } },
    );
    expect(r.path).toBe('/v1/chat/completions');
    expect(r.body).toMatchObject({
      messages: [{ role: 'user', content: 'Hi' }],
      max_tokens: 3,
      logprobs: true,
      top_logprobs: 0,
      cache_salt: 's',
      temperature: 0,
    });
    expect(r.body).not.toHaveProperty('prompt');
  });
});

describe('fromGenerationResponse', () => {
  it('prefers choices[0].token_ids and keeps text and finish reason', () => {
    expect(fromGenerationResponse('completion', completion({ token_ids: [5, 6, 7] }))).toEqual({
      ok: true,
      value: { ids: [5, 6, 7], source: 'token_ids', text: 'hello there', finishReason: 'length' },
    });
  });

  it('falls back to completion logprobs rendered as token_id:<id>', () => {
    const r = fromGenerationResponse('completion', completion({ logprobs: { tokens: ['token_id:1', 'token_id:22', 'token_id:333'] } }));
    expect(r).toEqual({ ok: true, value: { ids: [1, 22, 333], source: 'logprobs', text: 'hello there', finishReason: 'length' } });
  });

  it('falls back to chat logprobs content tokens', () => {
    const r = fromGenerationResponse(
      'chat',
      chat({
        logprobs: {
          content: [
            { token: 'token_id:9', logprob: 0 },
            { token: 'token_id:10', logprob: -1 },
          ],
        },
      }),
    );
    expect(r).toEqual({ ok: true, value: { ids: [9, 10], source: 'logprobs', text: 'hi!', finishReason: 'stop' } });
  });

  it('round-trips any id sequence through the token_id:<id> rendering', () => {
    fc.assert(
      fc.property(fc.array(fc.nat(), { maxLength: 40 }), (ids) => {
        const r = fromGenerationResponse('completion', completion({ logprobs: { tokens: ids.map((i) => `token_id:${i}`) } }));
        expect(r.ok && r.value.ids).toEqual(ids);
      }),
    );
  });

  it('refuses text alone: no ids, or logprobs as plain token text, is an error, never a pass', () => {
    for (const body of [
      completion({}),
      completion({ token_ids: null, logprobs: null }),
      completion({ logprobs: { tokens: ['hello', ' there'] } }),
      chat({ logprobs: { content: [{ token: 'hi', logprob: 0 }] } }),
    ]) {
      const kind = 'message' in (body.choices[0] as object) ? 'chat' : 'completion';
      expect(fromGenerationResponse(kind, body)).toEqual({ ok: false, error: NO_TOKEN_IDS });
    }
    expect(NO_TOKEN_IDS).toMatch(/^cannot verify from text alone: the endpoint must return token ids/);
  });

  it('refuses a response whose two id sources disagree', () => {
    const r = fromGenerationResponse(
      'completion',
      completion({ token_ids: [1, 2, 3], logprobs: { tokens: ['token_id:1', 'token_id:9', 'token_id:3'] } }),
    );
    expect(r).toEqual({ ok: false, error: expect.stringMatching(/token_ids and logprobs disagree at position 1/) });
    const short = fromGenerationResponse('completion', completion({ token_ids: [1, 2], logprobs: { tokens: ['token_id:1'] } }));
    expect(short).toEqual({ ok: false, error: expect.stringMatching(/disagree at position 1/) });
    const agree = fromGenerationResponse(
      'completion',
      completion({ token_ids: [1, 2], logprobs: { tokens: ['token_id:1', 'token_id:2'] } }),
    );
    expect(agree.ok && agree.value.source).toBe('token_ids');
  });

  it('refuses malformed bodies with a reason', () => {
    expect(fromGenerationResponse('completion', { error: { message: 'x' } })).toEqual({
      ok: false,
      error: expect.stringMatching(/no choices\[0\]/),
    });
    expect(fromGenerationResponse('completion', completion({ token_ids: [1, -2] }))).toEqual({
      ok: false,
      error: expect.stringMatching(/not a list of non-negative integers/),
    });
    expect(fromGenerationResponse('completion', completion({ token_ids: 'abc' }))).toEqual({
      ok: false,
      error: expect.stringMatching(/token_ids/),
    });
  });
});
