/**
 * The canaries: fixed probes whose answers identify a worker's tokenizer, chat template and weights by behaviour.
 *
 * No vLLM endpoint reports a tokenizer or template revision, and `/v1/models` reports only the model *string*. But a
 * tokenizer is a function from text to token ids, a template is a function from messages to text, and greedy decoding
 * is a function of the weights: a known-good worker's answers to fixed inputs, digested, are a fingerprint of those
 * functions. `kvgate fingerprint --worker URL` records the digests into the descriptor's `canaries`; the sidecar
 * compares every live worker against them.
 *
 * The inputs are chosen to exercise what differs between tokenizer revisions (whitespace runs, digits, code,
 * non-ASCII, emoji, a special-token lookalike) and templates (system, multi-turn, generation prompt). Changing any
 * canary input changes every recorded digest, so they are versioned (`CANARY_SCHEME`).
 */
import { createHash } from 'node:crypto';

/** Part of every digest: a new canary set can never collide with digests recorded for an older one. */
export const CANARY_SCHEME = 'kvgate.canary.v1';

/** `/tokenize` of this text (with special tokens) identifies the tokenizer. */
export const TOKENIZER_CANARY_TEXT =
  'kvgate canary v1: The quick brown fox jumps over the lazy dog.\n' +
  '    indented\tline with  double  spaces, 1234567890 and 3.14159e-10;\n' +
  'def f(x):\n    return {"k": [x, None, True]}  # code\n' +
  'Grüße, naïve café, 東京, Привет, 🙂🚀, <|endoftext|> <s></s> [INST]';

export interface CanaryMessage {
  readonly role: 'system' | 'user' | 'assistant';
  readonly content: string;
}

/** `/tokenize` of this chat (with the generation prompt, as a chat completion renders it) identifies the template. */
export const CHAT_TEMPLATE_CANARY_MESSAGES: readonly CanaryMessage[] = Object.freeze([
  { role: 'system', content: 'You are the kvgate canary. Answer briefly.' },
  { role: 'user', content: 'Name a colour.' },
  { role: 'assistant', content: 'Blue.' },
  { role: 'user', content: 'And a number?' },
]);

/** A greedy completion of this prompt (token ids) identifies the weights (and adapter) revision. */
export const GENERATION_CANARY_PROMPT = 'kvgate canary v1. Count: one, two, three,';

/** Tokens generated for the generation canary: enough to separate revisions, cheap enough to run every probe. */
export const GENERATION_CANARY_MAX_TOKENS = 8;

/** The digests of one worker's answers; undefined where that canary was not measured. */
export interface CanaryDigests {
  tokenizer?: string;
  chatTemplate?: string;
  generation?: string;
}

export type CanaryKind = keyof CanaryDigests;

/** The digest of a canary answer: sha256 over the scheme, the canary kind and the token ids in order. */
export function digestTokenIds(kind: CanaryKind, ids: readonly number[]): string {
  return createHash('sha256')
    .update(`${CANARY_SCHEME}\n${kind}\n${ids.join(',')}`, 'utf8')
    .digest('hex');
}

/** The `/tokenize` body for the tokenizer canary (vLLM's completion-style tokenize request). */
export function tokenizerCanaryRequest(model: string): Record<string, unknown> {
  return { model, prompt: TOKENIZER_CANARY_TEXT, add_special_tokens: true };
}

/** The `/tokenize` body for the chat-template canary, rendered the way vLLM's chat completion path renders it. */
export function chatTemplateCanaryRequest(model: string): Record<string, unknown> {
  return {
    model,
    messages: CHAT_TEMPLATE_CANARY_MESSAGES.map((m) => ({ ...m })),
    add_generation_prompt: true,
    add_special_tokens: false,
  };
}

/**
 * The `/v1/completions` body for the generation canary: greedy, fixed seed, and asking for token ids both ways vLLM
 * offers them (`return_token_ids` on newer versions, `logprobs` with `return_tokens_as_token_ids` on older ones).
 */
export function generationCanaryRequest(model: string): Record<string, unknown> {
  return {
    model,
    prompt: GENERATION_CANARY_PROMPT,
    max_tokens: GENERATION_CANARY_MAX_TOKENS,
    temperature: 0,
    top_p: 1,
    seed: 0,
    ignore_eos: true,
    stream: false,
    logprobs: 0,
    return_tokens_as_token_ids: true,
    return_token_ids: true,
  };
}

/**
 * The generated token ids from a vLLM completion response: `choices[0].token_ids` when present, else the
 * `token_id:N` strings of `logprobs.tokens`. Undefined when the response carries neither.
 */
export function generatedTokenIds(response: unknown): number[] | undefined {
  const choice = firstChoice(response);
  if (choice === undefined) return undefined;
  const direct = choice['token_ids'];
  if (Array.isArray(direct) && direct.every((n) => Number.isInteger(n))) return direct as number[];
  const logprobs = choice['logprobs'];
  if (logprobs === null || typeof logprobs !== 'object') return undefined;
  const tokens = (logprobs as Record<string, unknown>)['tokens'];
  if (!Array.isArray(tokens)) return undefined;
  const ids: number[] = [];
  for (const t of tokens) {
    const m = typeof t === 'string' ? /^token_id:(\d+)$/.exec(t) : null;
    if (m === null) return undefined;
    ids.push(Number(m[1]));
  }
  return ids;
}

function firstChoice(response: unknown): Record<string, unknown> | undefined {
  if (response === null || typeof response !== 'object') return undefined;
  const choices = (response as Record<string, unknown>)['choices'];
  if (!Array.isArray(choices)) return undefined;
  const c = choices[0] as unknown;
  return c !== null && typeof c === 'object' ? (c as Record<string, unknown>) : undefined;
}
