/**
 * A cheap, tokenizer-free estimate of a request's prompt length, for the `recompute` fallback's cost model
 * (prompt tokens x prefillMsPerToken vs. the expected queue wait, and the `maxPromptTokens` bound).
 *
 * Token ids are counted exactly. Text counts as ceil(characters / 4), the usual rule of thumb for English with
 * BPE tokenizers of the Llama and GPT families, plus 4 tokens per chat message for the role markers a chat template
 * adds. It errs low for code and non-Latin scripts; policy authors should leave headroom in `maxPromptTokens`. The
 * estimate is deliberately not the revision's tokenizer: loading one per revision on the hot path costs more than
 * the decision it informs, and the decode sidecar counts exactly before it serves anyway.
 */
import type { OpenAiRequest } from './types.js';

/** Tokens a chat template typically adds around each message (role header and separators). */
export const CHAT_MESSAGE_OVERHEAD_TOKENS = 4;

/** Characters per token for text: the documented approximation above. */
export const CHARS_PER_TOKEN = 4;

const textTokens = (chars: number): number => Math.ceil(chars / CHARS_PER_TOKEN);

/** Estimated prompt tokens of a parsed OpenAI body (see the module comment for the method). */
export function estimatePromptTokens(body: OpenAiRequest): number {
  return body.endpoint === 'chat' ? chatTokens(body.json['messages']) : promptTokens(body.json['prompt']);
}

function chatTokens(messages: unknown): number {
  if (!Array.isArray(messages)) return 0;
  let chars = 0;
  for (const m of messages) {
    const content = (m as { content?: unknown } | null)?.content;
    chars += contentChars(content);
  }
  return textTokens(chars) + CHAT_MESSAGE_OVERHEAD_TOKENS * messages.length;
}

/** A message's content: a string, or a list of parts of which only text parts count. */
function contentChars(content: unknown): number {
  if (typeof content === 'string') return content.length;
  if (!Array.isArray(content)) return 0;
  let chars = 0;
  for (const part of content) {
    const text = (part as { text?: unknown } | null)?.text;
    if (typeof text === 'string') chars += text.length;
  }
  return chars;
}

/** A completion prompt: a string, strings, token ids, or lists of token ids (several prompts count together). */
function promptTokens(prompt: unknown): number {
  if (typeof prompt === 'string') return textTokens(prompt.length);
  if (!Array.isArray(prompt)) return 0;
  let tokens = 0;
  for (const p of prompt) {
    if (typeof p === 'string') tokens += textTokens(p.length);
    else if (Array.isArray(p)) tokens += p.length;
    else if (typeof p === 'number') tokens += 1;
  }
  return tokens;
}
