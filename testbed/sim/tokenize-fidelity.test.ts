/**
 * `/tokenize` and chat request checks as vLLM makes them. vLLM's `TokenizeChatRequest` and `ChatCompletionRequest`
 * both carry the `check_generation_prompt` model validator: `data.get("continue_final_message") and
 * data.get("add_generation_prompt")` is refused (a pydantic error, so a 400) — on the RAW body, so a request that
 * leaves `add_generation_prompt` to its default of true passes (vllm-project/vllm
 * `vllm/entrypoints/serve/tokenize/protocol.py` @030ea52e; `vllm/entrypoints/openai/protocol.py` in 0.11/0.13).
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { SimServer } from './server.js';
import { postJson, startTestSim } from './testing.js';

const servers: SimServer[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()));
});
async function sim(flavour?: '0.11' | '0.13' | 'main'): Promise<SimServer> {
  const s = await startTestSim({}, flavour === undefined ? {} : { flavour });
  servers.push(s);
  return s;
}

const messages = [
  { role: 'user', content: 'Name a colour.' },
  { role: 'assistant', content: 'Blue, or maybe' },
];

describe('continue_final_message against add_generation_prompt', () => {
  it.each([undefined, '0.11', '0.13', 'main'] as const)(
    'flavour %s: both true is a 400, continue_final_message alone is fine',
    async (flavour) => {
      const s = await sim(flavour);
      const both = await postJson(`${s.url}/tokenize`, { messages, continue_final_message: true, add_generation_prompt: true });
      expect(both.status).toBe(400);
      expect(both.body.error.message).toContain('Cannot set both `continue_final_message` and `add_generation_prompt` to True.');
      expect((await postJson(`${s.url}/tokenize`, { messages, continue_final_message: true })).status).toBe(200);
      expect((await postJson(`${s.url}/tokenize`, { messages, continue_final_message: true, add_generation_prompt: false })).status).toBe(
        200,
      );
      const chat = await postJson(`${s.url}/v1/chat/completions`, {
        messages,
        max_tokens: 1,
        continue_final_message: true,
        add_generation_prompt: true,
      });
      expect(chat.status).toBe(400);
      const chatOk = await postJson(`${s.url}/v1/chat/completions`, { messages, max_tokens: 1, continue_final_message: true });
      expect(chatOk.status).toBe(200);
    },
  );
});
