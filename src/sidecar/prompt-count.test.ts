import { describe, expect, it } from 'vitest';
import { promptTokenDigestOf } from '../contract/attestation.js';
import { toPromptCount, truncateIds, truncationOf } from './openai-body.js';
import { tokenizedPrompt } from './prompt-count.js';
import { postJson, startTestSim } from '../../testbed/sim/testing.js';

describe('tokenizedPrompt', () => {
  it('counts and digests the ids /tokenize lists', () => {
    expect(tokenizedPrompt({ count: 3, max_model_len: 4096, tokens: [1, 2, 3], token_strs: null }, undefined)).toEqual({
      count: 3,
      digest: promptTokenDigestOf([1, 2, 3]),
    });
    expect(tokenizedPrompt({ tokens: [4, 5] }, undefined)).toEqual({ count: 2, digest: promptTokenDigestOf([4, 5]) });
  });

  it('falls back to the count alone when the ids are missing or contradict it', () => {
    expect(tokenizedPrompt({ count: 7 }, undefined)).toEqual({ count: 7 });
    expect(tokenizedPrompt({ count: 7, tokens: [1, 2] }, undefined)).toEqual({ count: 7 });
    expect(tokenizedPrompt({ tokens: ['a', 'b'] }, undefined)).toEqual({ count: 2 });
    expect(tokenizedPrompt({ max_model_len: 1 }, undefined)).toBeUndefined();
  });

  it('cuts the ids as vLLM truncate_prompt_tokens does: the last k (left), the first k (right), -1 = max_model_len', () => {
    const answer = { count: 6, max_model_len: 4, tokens: [1, 2, 3, 4, 5, 6] };
    expect(tokenizedPrompt(answer, { tokens: 3, side: 'left' })).toEqual({ count: 3, digest: promptTokenDigestOf([4, 5, 6]) });
    expect(tokenizedPrompt(answer, { tokens: 3, side: 'right' })).toEqual({ count: 3, digest: promptTokenDigestOf([1, 2, 3]) });
    expect(tokenizedPrompt(answer, { tokens: -1, side: 'left' })).toEqual({ count: 4, digest: promptTokenDigestOf([3, 4, 5, 6]) });
    expect(tokenizedPrompt(answer, { tokens: 10, side: 'left' })).toEqual({ count: 6, digest: promptTokenDigestOf([1, 2, 3, 4, 5, 6]) });
    expect(tokenizedPrompt({ count: 6 }, { tokens: 2, side: 'left' })).toEqual({ count: 2 });
    // A real tokenizer difference survives the cut: other ids, other digest.
    expect(tokenizedPrompt({ tokens: [1, 2, 3, 9, 9, 9] }, { tokens: 3, side: 'left' })!.digest).not.toBe(promptTokenDigestOf([4, 5, 6]));
  });
});

describe('truncation of the request', () => {
  it('reads truncate_prompt_tokens and truncation_side, refusing values vLLM refuses', () => {
    expect(truncationOf({})).toEqual({ ok: true, value: undefined });
    expect(truncationOf({ truncate_prompt_tokens: null })).toEqual({ ok: true, value: undefined });
    expect(truncationOf({ truncate_prompt_tokens: 8 })).toEqual({ ok: true, value: { tokens: 8, side: 'left' } });
    expect(truncationOf({ truncate_prompt_tokens: -1, truncation_side: 'right' })).toEqual({
      ok: true,
      value: { tokens: -1, side: 'right' },
    });
    expect(truncationOf({ truncate_prompt_tokens: 0 }).ok).toBe(false);
    expect(truncationOf({ truncate_prompt_tokens: 2.5 }).ok).toBe(false);
    expect(truncationOf({ truncate_prompt_tokens: 4, truncation_side: 'middle' }).ok).toBe(false);
    expect(truncateIds([1, 2, 3], { tokens: -1, side: 'left' }, undefined)).toEqual([1, 2, 3]);
  });

  it('carries the truncation with the /tokenize body and with token-id prompts', () => {
    const text = toPromptCount('completions', { model: 'm', prompt: 'hello world', truncate_prompt_tokens: 2 });
    expect(text).toEqual({
      ok: true,
      value: {
        kind: 'tokenize',
        body: { model: 'm', prompt: 'hello world', add_special_tokens: true },
        truncation: { tokens: 2, side: 'left' },
      },
    });
    const ids = toPromptCount('completions', { model: 'm', prompt: [5, 6, 7], truncate_prompt_tokens: 2 });
    expect(ids).toEqual({ ok: true, value: { kind: 'known', ids: [5, 6, 7], truncation: { tokens: 2, side: 'left' } } });
    expect(toPromptCount('completions', { model: 'm', prompt: 'x', truncate_prompt_tokens: -7 }).ok).toBe(false);
  });

  it('renders chat documents through chat_template_kwargs, which /tokenize takes and lets override them', () => {
    const docs = [{ title: 'a', text: 'b' }];
    const r = toPromptCount('chat', { model: 'm', messages: [{ role: 'user', content: 'q' }], documents: docs });
    expect(r.ok && r.value.kind === 'tokenize' && r.value.body).toMatchObject({ chat_template_kwargs: { documents: docs } });
    expect(r.ok && r.value.kind === 'tokenize' && r.value.body['documents']).toBeUndefined();
    const own = toPromptCount('chat', {
      model: 'm',
      messages: [{ role: 'user', content: 'q' }],
      documents: docs,
      chat_template_kwargs: { documents: [], x: 1 },
    });
    expect(own.ok && own.value.kind === 'tokenize' && own.value.body['chat_template_kwargs']).toEqual({ documents: [], x: 1 });
  });
});

describe('chat continued from a final assistant message', () => {
  // vLLM refuses `continue_final_message` and `add_generation_prompt` both true on /tokenize as on chat completions
  // (`check_generation_prompt`, on the raw body: vllm-project/vllm `vllm/entrypoints/serve/tokenize/protocol.py`
  // @030ea52e, `vllm/entrypoints/openai/protocol.py` in 0.11/0.13). A client that sends only
  // `continue_final_message: true` is accepted by the chat endpoint (the default true is not in the raw body), so the
  // /tokenize body must not spell the default out either, or the decode side's count is a 400 the completion is not.
  it('leaves add_generation_prompt to its default, as the client did, and the worker tokenizes it', async () => {
    const messages = [
      { role: 'user', content: 'Name a colour.' },
      { role: 'assistant', content: 'Blue, or' },
    ];
    const how = toPromptCount('chat', { model: 'm', messages, continue_final_message: true });
    expect(how.ok && how.value.kind === 'tokenize').toBe(true);
    if (!how.ok || how.value.kind !== 'tokenize') return;
    expect(how.value.body['continue_final_message']).toBe(true);
    expect(how.value.body['add_generation_prompt']).toBeUndefined();
    const s = await startTestSim({}, { flavour: 'main', servedModelName: 'm' });
    try {
      const r = await postJson(`${s.url}/tokenize`, how.value.body);
      expect(r.status).toBe(200);
      // What the client asked for explicitly still travels as sent (and a contradiction is the worker's 400).
      const both = toPromptCount('chat', { model: 'm', messages, continue_final_message: true, add_generation_prompt: true });
      expect(both.ok && both.value.kind === 'tokenize' && (await postJson(`${s.url}/tokenize`, both.value.body)).status).toBe(400);
    } finally {
      await s.close();
    }
  });
});

describe('continue_final_message as vLLM reads it: truthy in Python, before pydantic coerces it', () => {
  // check_generation_prompt tests the raw body's values (`data.get(...) and data.get(...)`), and pydantic then reads
  // "true", "yes", 1 (and "false": a non-empty string is truthy to the validator) as booleans. A /tokenize body that
  // spelled add_generation_prompt out next to any of them would be refused while the completion path (no such field in
  // the raw body) runs: the decode side refused the request after its prefill leg ran and left the prompt's KV pinned
  // on the prefill worker until its abort timeout.
  it('does not spell the default add_generation_prompt out next to a truthy continue_final_message of any type', () => {
    const messages = [{ role: 'user', content: 'hi' }];
    for (const cont of [true, 'true', 'yes', 1, 'false', '0']) {
      const how = toPromptCount('chat', { model: 'm', messages, continue_final_message: cont });
      expect(how.ok && how.value.kind === 'tokenize' && how.value.body, JSON.stringify(cont)).toMatchObject({
        continue_final_message: cont,
      });
      expect(how.ok && how.value.kind === 'tokenize' && 'add_generation_prompt' in how.value.body, JSON.stringify(cont)).toBe(false);
    }
    for (const cont of [false, 0, '', null, undefined]) {
      const how = toPromptCount('chat', { model: 'm', messages, ...(cont === undefined ? {} : { continue_final_message: cont }) });
      expect(how.ok && how.value.kind === 'tokenize' && how.value.body['add_generation_prompt'], JSON.stringify(cont)).toBe(true);
    }
  });
});

describe('template kwargs on current vLLM (0.22 on): reasoning_effort and enable_thinking', () => {
  // build_chat_params merges documents, reasoning_effort and (unless the client's kwargs name it) enable_thinking over
  // the client's chat_template_kwargs (vllm/entrypoints/openai/chat_completion/protocol.py @002032ee); /tokenize takes
  // neither field, so the decode side must send the merged kwargs or its count differs from the prefill's.
  const asks: Record<string, unknown>[] = [
    { reasoning_effort: 'none' },
    { reasoning_effort: 'high' },
    { reasoning_effort: 'high', chat_template_kwargs: { enable_thinking: false } },
    { chat_template_kwargs: { reasoning_effort: 'low' } },
    { reasoning_effort: 'auto', chat_template_kwargs: { reasoning_effort: 'low' } },
    {},
  ];
  const messages = [{ role: 'user', content: 'Think about which colour the sky is.' }];

  it('counts what the chat completion renders, for each way of asking', async () => {
    const s = await startTestSim({}, { flavour: 'main', servedModelName: 'm' });
    try {
      const counts = new Set<number>();
      for (const ask of asks) {
        const req = { model: 'm', messages, max_tokens: 1, ...ask };
        const completion = await postJson(`${s.url}/v1/chat/completions`, req);
        expect(completion.status, JSON.stringify(ask)).toBe(200);
        const rendered = (completion.body as { usage: { prompt_tokens: number } }).usage.prompt_tokens;
        counts.add(rendered);
        const how = toPromptCount('chat', req, '0.22.0');
        if (!how.ok || how.value.kind !== 'tokenize') throw new Error('expected a /tokenize body');
        const tok = await postJson(`${s.url}/tokenize`, how.value.body);
        expect((tok.body as { count: number }).count, JSON.stringify(ask)).toBe(rendered);
      }
      expect(counts.size).toBeGreaterThan(1); // the asks really render differently
    } finally {
      await s.close();
    }
  });

  it("renders as the worker's version does: the same request counted the 0.11 way would not match a current worker", async () => {
    const s = await startTestSim({}, { flavour: 'main', servedModelName: 'm' });
    try {
      const req = { model: 'm', messages, max_tokens: 1, reasoning_effort: 'none' };
      const rendered = ((await postJson(`${s.url}/v1/chat/completions`, req)).body as { usage: { prompt_tokens: number } }).usage
        .prompt_tokens;
      const old = toPromptCount('chat', req, '0.11.0');
      if (!old.ok || old.value.kind !== 'tokenize') throw new Error('expected a /tokenize body');
      expect(old.value.body['chat_template_kwargs']).toBeUndefined();
      expect(((await postJson(`${s.url}/tokenize`, old.value.body)).body as { count: number }).count).not.toBe(rendered);
    } finally {
      await s.close();
    }
  });
});

describe('template kwargs before 0.22', () => {
  it('a 0.13 worker does not render reasoning_effort, and the 0.13 count leaves it out too', async () => {
    const s = await startTestSim({}, { flavour: '0.13', servedModelName: 'm' });
    try {
      const messages = [{ role: 'user', content: 'Think about which colour the sky is.' }];
      const plain = { model: 'm', messages, max_tokens: 1 };
      const withEffort = { ...plain, reasoning_effort: 'none' };
      const count = async (b: Record<string, unknown>) =>
        ((await postJson(`${s.url}/v1/chat/completions`, b)).body as { usage: { prompt_tokens: number } }).usage.prompt_tokens;
      expect(await count(withEffort)).toBe(await count(plain));
      const how = toPromptCount('chat', withEffort, '0.13.0');
      if (!how.ok || how.value.kind !== 'tokenize') throw new Error('expected a /tokenize body');
      expect(((await postJson(`${s.url}/tokenize`, how.value.body)).body as { count: number }).count).toBe(await count(plain));
    } finally {
      await s.close();
    }
  });
});
