/**
 * A cheap, tokenizer-free estimate of a request's prompt length, for the `recompute` fallback's cost model
 * (prompt tokens x prefillMsPerToken vs. the expected queue wait, and the `maxPromptTokens` bound).
 *
 * Token ids are counted exactly. Text counts as ceil(characters / 4), the usual rule of thumb for English with
 * BPE tokenizers of the Llama and GPT families, plus 4 tokens per chat message for the role markers a chat template
 * adds. Text is everything the template renders: message content, tool calls, tool results, and the request's
 * `tools`, `functions` and `documents` (a 20 KB tool schema with a two-word question is a long prompt). It errs low
 * for code and non-Latin scripts; policy authors should leave headroom in `maxPromptTokens`. The estimate is
 * deliberately not the revision's tokenizer: loading one per revision on the hot path costs more than the decision
 * it informs, and the decode sidecar counts exactly before it serves anyway.
 */
import type { OpenAiRequest } from './types.js';

/** Tokens a chat template typically adds around each message (role header and separators). */
export const CHAT_MESSAGE_OVERHEAD_TOKENS = 4;

/** Characters per token for text: the documented approximation above. */
export const CHARS_PER_TOKEN = 4;

const textTokens = (chars: number): number => Math.ceil(chars / CHARS_PER_TOKEN);

/** A prompt's estimated length, or why it has none (content whose size is not in its text). */
export type PromptEstimate = { readonly tokens: number } | { readonly unknown: string };

/**
 * Estimated prompt tokens of a parsed OpenAI body (see the module comment for the method). Everything a chat template
 * renders into the prompt counts: message text, tool calls and their arguments, and the `tools`, `functions` and
 * `documents` the template writes out (as their JSON). A prompt with an image, audio, video, file or embeddings has no
 * estimate: its cost is not in its characters.
 */
export function estimatePrompt(body: OpenAiRequest): PromptEstimate {
  const json = body.json;
  if (body.endpoint !== 'chat') {
    if (json['prompt_embeds'] !== undefined && json['prompt_embeds'] !== null) return { unknown: 'prompt_embeds' };
    return { tokens: promptTokens(json['prompt']) };
  }
  const messages = json['messages'];
  if (!Array.isArray(messages)) return { tokens: 0 };
  let chars = 0;
  for (const m of messages) {
    if (m === null || typeof m !== 'object') continue;
    for (const [key, value] of Object.entries(m as Record<string, unknown>)) {
      if (key === 'role') continue;
      if (key === 'content') {
        const c = contentChars(value);
        if (typeof c === 'string') return { unknown: c };
        chars += c;
      } else chars += jsonChars(value);
    }
  }
  for (const key of RENDERED_FIELDS) chars += jsonChars(json[key]);
  return { tokens: textTokens(chars) + CHAT_MESSAGE_OVERHEAD_TOKENS * messages.length };
}

/** Request fields a chat template writes into the prompt besides the messages. */
const RENDERED_FIELDS = ['tools', 'functions', 'documents'] as const;

/** A string's length; anything else (tool calls, tool schemas) as the length of its JSON; nothing for null. */
function jsonChars(v: unknown): number {
  if (v === undefined || v === null) return 0;
  return typeof v === 'string' ? v.length : (JSON.stringify(v)?.length ?? 0);
}

/** A message's content: a string, or a list of text parts; the name of a part that is not text. */
function contentChars(content: unknown): number | string {
  if (typeof content === 'string') return content.length;
  if (!Array.isArray(content)) return 0;
  let chars = 0;
  for (const part of content) {
    const p = (part ?? {}) as { type?: unknown; text?: unknown };
    if ((p.type === undefined || p.type === 'text') && typeof p.text === 'string') chars += p.text.length;
    else return `content part ${typeof p.type === 'string' ? p.type.slice(0, 32) : 'without text'}`;
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
