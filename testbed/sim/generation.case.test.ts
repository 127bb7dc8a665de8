/**
 * One contract, two paths: streamed and non-streamed generation must give the same token ids, text, finish
 * reason and logprobs for the same request (a shared suite: the two paths must agree).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SimServer } from './server.js';
import { postJson, postSse, startTestSim } from './testing.js';

let s: SimServer;
beforeAll(async () => {
  s = await startTestSim();
});
afterAll(async () => {
  await s.close();
});

const PROMPT = 'A compatibility group binds a request to one revision before prefill.';
const CASES: Array<{ name: string; path: '/v1/completions' | '/v1/chat/completions'; body: Record<string, unknown>; finish?: string }> = [
  { name: 'completion', path: '/v1/completions', body: { prompt: PROMPT, max_tokens: 24 } },
  {
    name: 'completion, token-id prompt, logprobs',
    path: '/v1/completions',
    body: { prompt: [10, 20, 30, 40, 50], max_tokens: 10, logprobs: 3, ignore_eos: true },
  },
  {
    name: 'completion, stop string',
    path: '/v1/completions',
    body: { prompt: PROMPT, max_tokens: 30, ignore_eos: true, stop: [' the', '.'] },
    finish: 'stop',
  },
  { name: 'chat', path: '/v1/chat/completions', body: { messages: [{ role: 'user', content: PROMPT }], max_tokens: 24 } },
  {
    name: 'chat, logprobs as token ids',
    path: '/v1/chat/completions',
    body: {
      messages: [{ role: 'user', content: 'Hi' }],
      max_tokens: 9,
      ignore_eos: true,
      logprobs: true,
      top_logprobs: 2,
      return_tokens_as_token_ids: true,
    },
  },
];

interface Outcome {
  ids: number[];
  text: string;
  finish: string;
  logprobs: unknown[];
  promptIds: number[];
}

async function nonStreamed(path: string, body: Record<string, unknown>): Promise<Outcome> {
  const c = (await postJson(`${s.url}${path}`, { ...body, return_token_ids: true })).body.choices[0];
  const lp =
    c.logprobs === null
      ? []
      : path.includes('chat')
        ? c.logprobs.content
        : c.logprobs.tokens.map((t: string, i: number) => [t, c.logprobs.token_logprobs[i], c.logprobs.top_logprobs[i]]);
  return {
    ids: c.token_ids,
    text: c.text ?? c.message.content,
    finish: c.finish_reason,
    logprobs: lp,
    promptIds: c.prompt_token_ids ?? [],
  };
}

async function streamed(path: string, body: Record<string, unknown>): Promise<Outcome> {
  const { status, events } = await postSse(`${s.url}${path}`, { ...body, stream: true, return_token_ids: true });
  expect(status).toBe(200);
  expect(events[events.length - 1]).toBe('[DONE]');
  const out: Outcome = { ids: [], text: '', finish: '', logprobs: [], promptIds: [] };
  for (const e of events.slice(0, -1)) {
    if (e.prompt_token_ids) out.promptIds = e.prompt_token_ids;
    const c = e.choices[0];
    if (!c) continue;
    if (c.prompt_token_ids) out.promptIds = c.prompt_token_ids;
    out.ids.push(...(c.token_ids ?? []));
    out.text += c.text ?? c.delta?.content ?? '';
    if (c.finish_reason) out.finish = c.finish_reason;
    if (c.logprobs) {
      if (path.includes('chat')) out.logprobs.push(...c.logprobs.content);
      else
        c.logprobs.tokens.forEach((t: string, i: number) =>
          out.logprobs.push([t, c.logprobs.token_logprobs[i], c.logprobs.top_logprobs[i]]),
        );
    }
  }
  return out;
}

describe('streaming and non-streaming agree', () => {
  for (const c of CASES) {
    it(c.name, async () => {
      const a = await nonStreamed(c.path, c.body);
      const b = await streamed(c.path, c.body);
      expect(a.ids.length).toBeGreaterThan(0);
      if (c.finish) expect(a.finish).toBe(c.finish);
      expect(b).toEqual({ ...a, promptIds: b.promptIds });
      if (c.path.includes('completions') && !c.path.includes('chat')) expect(b.promptIds).toEqual(a.promptIds);
    });
  }

  it('a chat stream opens with the assistant role and closes with one finish chunk', async () => {
    const { events } = await postSse(`${s.url}/v1/chat/completions`, {
      messages: [{ role: 'user', content: 'Hi' }],
      max_tokens: 3,
      ignore_eos: true,
      stream: true,
    });
    expect(events[0].choices[0].delta).toEqual({ role: 'assistant', content: '' });
    expect(events[0].object).toBe('chat.completion.chunk');
    const finishes = events.slice(0, -1).filter((e) => e.choices[0]?.finish_reason);
    expect(finishes).toHaveLength(1);
    expect(finishes[0].choices[0].finish_reason).toBe('length');
  });
});
