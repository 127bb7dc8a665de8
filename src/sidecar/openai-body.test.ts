import { describe, expect, it } from 'vitest';
import {
  checkClientKvParams,
  checkPromptFits,
  checkRequestShape,
  isPrefillKvParams,
  PREFILL_KV_PARAMS,
  toPrefillBody,
  toPromptCount,
} from './openai-body.js';

describe('toPrefillBody', () => {
  it('builds the prefill leg exactly as vLLM proxies do', () => {
    const body = {
      model: 'm',
      prompt: 'hi',
      stream: true,
      stream_options: { include_usage: true },
      max_tokens: 100,
      max_completion_tokens: 100,
      min_tokens: 5,
      min_completion_tokens: 5,
      temperature: 0,
    };
    expect(toPrefillBody(body)).toEqual({
      model: 'm',
      prompt: 'hi',
      stream: false,
      max_tokens: 1,
      max_completion_tokens: 1,
      temperature: 0,
      kv_transfer_params: {
        do_remote_decode: true,
        do_remote_prefill: false,
        remote_engine_id: null,
        remote_block_ids: null,
        remote_host: null,
        remote_port: null,
      },
    });
    expect(body.stream).toBe(true); // the original is untouched: the decode leg needs it
    expect(toPrefillBody({ model: 'm', prompt: 'x' })).not.toHaveProperty('max_completion_tokens');
  });

  it('computes the prompt once: n is 1 on the prefill leg whatever the client asked (vLLM strands n - 1 copies)', () => {
    for (const n of [8, 2, '3', null, 1]) {
      expect(toPrefillBody({ model: 'm', prompt: 'x', n }), JSON.stringify(n)).toMatchObject({ n: 1, max_tokens: 1 });
    }
    expect(toPrefillBody({ model: 'm', prompt: 'x' })).not.toHaveProperty('n');
  });
});

describe('checkClientKvParams', () => {
  it('a decode sidecar accepts no client kv_transfer_params at all', () => {
    expect(checkClientKvParams({ model: 'm' }, 'decode').ok).toBe(true);
    const r = checkClientKvParams({ kv_transfer_params: { ...PREFILL_KV_PARAMS } }, 'decode');
    expect(r.ok ? undefined : r.error.code).toBe('kv_params_forbidden');
  });

  it('a prefill sidecar accepts only the exact prefill shape', () => {
    expect(checkClientKvParams({ kv_transfer_params: { ...PREFILL_KV_PARAMS } }, 'prefill').ok).toBe(true);
    for (const bad of [
      { ...PREFILL_KV_PARAMS, remote_host: '10.0.0.9' },
      { ...PREFILL_KV_PARAMS, do_remote_prefill: true },
      { ...PREFILL_KV_PARAMS, extra: 1 },
      { do_remote_decode: true },
      'yes',
    ]) {
      expect(isPrefillKvParams(bad)).toBe(false);
      expect(checkClientKvParams({ kv_transfer_params: bad }, 'prefill').ok).toBe(false);
    }
  });
});

describe('toPromptCount', () => {
  it('renders chat the way the completion path does (generation prompt on by default, template options kept)', () => {
    const r = toPromptCount('chat', {
      model: 'm',
      messages: [{ role: 'user', content: 'hi' }],
      chat_template_kwargs: { enable_thinking: false },
      temperature: 1,
    });
    expect(r).toEqual({
      ok: true,
      value: {
        kind: 'tokenize',
        body: {
          model: 'm',
          messages: [{ role: 'user', content: 'hi' }],
          add_generation_prompt: true,
          continue_final_message: false,
          add_special_tokens: false,
          chat_template_kwargs: { enable_thinking: false },
        },
      },
    });
    const noGen = toPromptCount('chat', { model: 'm', messages: [{ role: 'user', content: 'hi' }], add_generation_prompt: false });
    expect(noGen.ok && noGen.value.kind === 'tokenize' && noGen.value.body['add_generation_prompt']).toBe(false);
  });

  it('completions: text is tokenised with special tokens, token ids are counted, batches are refused', () => {
    expect(toPromptCount('completions', { model: 'm', prompt: 'hello' })).toEqual({
      ok: true,
      value: { kind: 'tokenize', body: { model: 'm', prompt: 'hello', add_special_tokens: true } },
    });
    expect(toPromptCount('completions', { model: 'm', prompt: ['hello'] }).ok).toBe(true);
    expect(toPromptCount('completions', { model: 'm', prompt: [1, 2, 3] })).toEqual({ ok: true, value: { kind: 'known', ids: [1, 2, 3] } });
    expect(toPromptCount('completions', { model: 'm', prompt: [[1, 2]] })).toEqual({ ok: true, value: { kind: 'known', ids: [1, 2] } });
    const batch = toPromptCount('completions', { model: 'm', prompt: ['a', 'b'] });
    expect(batch.ok ? undefined : batch.error.code).toBe('bad_request');
    expect(toPromptCount('completions', { prompt: 'x' }).ok).toBe(false);
    expect(toPromptCount('chat', { model: 'm', messages: [] }).ok).toBe(false);
  });
});

describe('checkRequestShape and checkPromptFits', () => {
  const maxTokensOf = (endpoint: 'chat' | 'completions', body: Record<string, unknown>, maxLen?: number) => {
    const r = checkRequestShape(
      endpoint,
      { model: 'm', ...(endpoint === 'chat' ? { messages: [{ role: 'user', content: 'hi' }] } : { prompt: 'hi' }), ...body },
      maxLen,
    );
    return r.ok ? r.value.maxTokens : r.error.reason;
  };

  it('reads the completion length as vLLM does: completions default to 16, chat takes max_completion_tokens or max_tokens', () => {
    expect(maxTokensOf('completions', {})).toBe(16);
    // Current vLLM reads a completion's null max_tokens as its default (normalize_null_max_tokens).
    expect(maxTokensOf('completions', { max_tokens: null })).toBe(16);
    expect(maxTokensOf('chat', { max_tokens: null })).toBeUndefined();
    expect(maxTokensOf('chat', {})).toBeUndefined();
    expect(maxTokensOf('chat', { max_tokens: 7 })).toBe(7);
    expect(maxTokensOf('chat', { max_tokens: 7, max_completion_tokens: 9 })).toBe(9);
  });

  it('refuses what the decode worker would refuse in a field the prefill leg rewrites, so no prefill runs for it', () => {
    const refused: ['chat' | 'completions', Record<string, unknown>, RegExp][] = [
      // Current vLLM takes a chat's max_completion_tokens when it is not null, 0 included; older copies fell back.
      ['chat', { max_tokens: 7, max_completion_tokens: 0 }, /^max_completion_tokens must be a positive integer$/],
      ['completions', { max_tokens: '12' }, /^max_tokens must be a positive integer$/],
      ['completions', { max_tokens: 0 }, /^max_tokens must be a positive integer$/],
      ['completions', { max_tokens: 10, min_tokens: 11 }, /^min_tokens \(11\) is above the completion's maximum \(10\)/],
      ['chat', { max_completion_tokens: 5, min_tokens: 6 }, /^min_tokens \(6\) is above/],
      ['completions', { min_tokens: -1 }, /^min_tokens must be a non-negative integer, or absent/],
      ['completions', { min_tokens: 'x' }, /^min_tokens must be a non-negative integer, or absent/],
      ['completions', { stream: 'yes' }, /^stream must be true or false$/],
      ['chat', { stream_options: { include_usage: true } }, /^stream_options are taken only with stream: true/],
      ['chat', { stream: false, stream_options: { include_usage: true } }, /^stream_options are taken only with stream: true/],
    ];
    for (const [endpoint, body, message] of refused) expect(maxTokensOf(endpoint, body), JSON.stringify(body)).toMatch(message);
    expect(maxTokensOf('completions', { max_tokens: 10, min_tokens: 10, stream: true, stream_options: { include_usage: true } })).toBe(10);
    expect(maxTokensOf('chat', { stream_options: {}, max_tokens: null })).toBeUndefined();
    // A completion has no max_completion_tokens: vLLM bounds min_tokens by max_tokens alone.
    expect(maxTokensOf('completions', { max_tokens: 20, max_completion_tokens: 5, min_tokens: 10 })).toBe(20);
    // ... and a value there that a chat would be refused for is not this path's concern.
    expect(maxTokensOf('completions', { max_tokens: 20, max_completion_tokens: 0 })).toBe(20);
  });

  it('refuses a null, a value vLLM cannot parse, or a min_tokens above the default max_tokens in a field the prefill leg drops or rewrites: the prefill worker would run a request the decode worker refuses', () => {
    // Each passed before: the prefill leg drops min_tokens and stream_options and writes n: 1, so the prefill worker
    // computed and held the prompt's KV, and the decode worker's vLLM then refused the request while parsing it
    // (min_tokens: int = 0, a completion's n: int = 1, StreamOptions with bool | None members; @002032ee).
    const refused: ['chat' | 'completions', Record<string, unknown>, RegExp][] = [
      ['completions', { min_tokens: null }, /^min_tokens must be a non-negative integer, or absent \(vLLM refuses a null\)$/],
      ['chat', { min_tokens: null }, /^min_tokens must be a non-negative integer, or absent/],
      ['completions', { n: null }, /^n must be 1 or absent on \/v1\/completions: vLLM refuses a null n there$/],
      // A completion's max_tokens is 16 when absent or null, so a min_tokens above 16 is refused by vLLM there too.
      ['completions', { min_tokens: 17 }, /^min_tokens \(17\) is above the completion's maximum \(16\)/],
      ['completions', { min_tokens: 17, max_tokens: null }, /^min_tokens \(17\) is above the completion's maximum \(16\)/],
      ['chat', { stream_options: [] }, /^stream_options must be an object such as/],
      ['chat', { stream_options: false }, /^stream_options must be an object such as/],
      ['chat', { stream_options: 0 }, /^stream_options must be an object such as/],
      ['chat', { stream_options: '' }, /^stream_options must be an object such as/],
      ['chat', { stream: true, stream_options: 'x' }, /^stream_options must be an object such as/],
      ['completions', { stream: true, stream_options: [1] }, /^stream_options must be an object such as/],
      ['chat', { stream: true, stream_options: { include_usage: 'maybe' } }, /^stream_options.include_usage must be true or false$/],
      ['completions', { stream: true, stream_options: { include_usage: 2 } }, /^stream_options.include_usage must be true or false$/],
      ['completions', { stream: true, stream_options: { continuous_usage_stats: [] } }, /^stream_options.continuous_usage_stats must be/],
    ];
    for (const [endpoint, body, message] of refused) expect(maxTokensOf(endpoint, body), JSON.stringify(body)).toMatch(message);
    expect(maxTokensOf('completions', { min_tokens: 16 })).toBe(16);
    for (const options of [null, {}, { include_usage: null }, { include_usage: false, continuous_usage_stats: true }, { other: 1 }])
      expect(maxTokensOf('chat', { stream: true, stream_options: options, max_tokens: 3 }), JSON.stringify(options)).toBe(3);
  });

  it('refuses a length that leaves no room for a prompt only when max_model_len is known', () => {
    expect(maxTokensOf('completions', { max_tokens: 100 }, 100)).toMatch(/^max_tokens \(100\) leaves no room .* at most 99 minus/);
    expect(maxTokensOf('completions', { max_tokens: 99 }, 100)).toBe(99);
    expect(maxTokensOf('completions', { max_tokens: 1_000_000 })).toBe(1_000_000);
    expect(maxTokensOf('completions', { max_tokens: 1.5 })).toBe('max_tokens must be a positive integer');
  });

  it('refuses parallel samples (n other than 1): vLLM would hand every sample the one prefill transfer', () => {
    for (const n of [2, 64, '2', 0])
      expect(maxTokensOf('completions', { n }), JSON.stringify(n)).toMatch(/^n is .*: a disaggregated request generates one sequence/);
    expect(maxTokensOf('chat', { n: 3 })).toMatch(/Send n separate requests, or n 1$/);
    for (const n of [1, undefined]) expect(maxTokensOf('completions', { n }), JSON.stringify(n)).toBe(16);
    expect(maxTokensOf('chat', { n: null, max_tokens: 5 })).toBe(5);
  });

  it('refuses prompt logprobs, asked or implied by echo as vLLM reads it: the decode worker has the KV, not the logits', () => {
    const refused: ['chat' | 'completions', Record<string, unknown>, string][] = [
      ['completions', { prompt_logprobs: 0 }, 'prompt_logprobs 0'],
      ['chat', { prompt_logprobs: 5 }, 'prompt_logprobs 5'],
      ['completions', { echo: true, logprobs: 0 }, 'echo with logprobs 0'],
      ['completions', { echo: 'yes', logprobs: 2 }, 'echo with logprobs 2'],
      // A chat's top_logprobs defaults to 0, not null: echo alone asks for them.
      ['chat', { echo: true }, 'echo with top_logprobs 0'],
      ['chat', { echo: 1, top_logprobs: 3 }, 'echo with top_logprobs 3'],
    ];
    for (const [endpoint, body, field] of refused) {
      expect(maxTokensOf(endpoint, body), JSON.stringify(body)).toMatch(
        new RegExp(`^${field} asks for prompt logprobs, which a disaggregated request cannot give`),
      );
    }
    const served: ['chat' | 'completions', Record<string, unknown>][] = [
      ['completions', { echo: true }],
      ['completions', { logprobs: 5 }],
      ['completions', { echo: 'false', logprobs: 1, prompt_logprobs: null }],
      ['chat', { echo: true, top_logprobs: null }],
      ['chat', { echo: false, logprobs: true, top_logprobs: 5 }],
    ];
    for (const [endpoint, body] of served) expect(typeof maxTokensOf(endpoint, body), JSON.stringify(body)).not.toBe('string');
  });

  it('checks a prompt of token ids as the worker will count it, after truncation', () => {
    const ids = Array.from({ length: 90 }, (_, i) => i);
    expect(checkRequestShape('completions', { model: 'm', prompt: ids, max_tokens: 20 }, 100).ok).toBe(false);
    expect(checkRequestShape('completions', { model: 'm', prompt: ids, max_tokens: 20, truncate_prompt_tokens: 80 }, 100).ok).toBe(true);
    expect(checkRequestShape('completions', { model: 'm', prompt: ids, max_tokens: 20, truncate_prompt_tokens: 101 }, 100).ok).toBe(false);
  });

  it('a prompt must be shorter than max_model_len and leave room for the completion asked for', () => {
    expect(checkPromptFits(100, undefined, 100).ok).toBe(false);
    expect(checkPromptFits(99, undefined, 100).ok).toBe(true);
    expect(checkPromptFits(90, 10, 100).ok).toBe(true);
    expect(checkPromptFits(90, 11, 100).ok).toBe(false);
    expect(checkPromptFits(1_000_000, 1_000_000, undefined).ok).toBe(true);
  });
});
