/**
 * What `kvgate verify` asks an OpenAI-compatible vLLM endpoint for, and how it reads the token ids back. Pure.
 *
 * One request asks for ids both ways, so a single generation answers on old and new vLLM alike (vLLM ignores
 * request fields it does not know): `return_token_ids: true` (newer vLLM: `choices[0].token_ids`) and logprobs
 * rendered with `return_tokens_as_token_ids` (`token_id:<id>` strings). `token_ids` wins when present; when both
 * are present they must agree. A response with neither is an error, never a pass: text is not evidence.
 */
import type { VerifyPrompt } from './prompts.js';

export const NO_TOKEN_IDS =
  'cannot verify from text alone: the endpoint must return token ids (vLLM: "return_token_ids": true, or "logprobs" with "return_tokens_as_token_ids": true)';

export interface GenerationRequest {
  /** Path under the endpoint's base URL. */
  readonly path: '/v1/completions' | '/v1/chat/completions';
  readonly body: Record<string, unknown>;
}

/** A greedy request for one prefix; `extra` adds fields (e.g. a baseline `cache_salt`). */
export function toGenerationRequest(
  prompt: VerifyPrompt,
  opts: { readonly model: string; readonly maxTokens: number; readonly extra?: Readonly<Record<string, unknown>> },
): GenerationRequest {
  const common = {
    model: opts.model,
    max_tokens: prompt.maxTokens ?? opts.maxTokens,
    temperature: 0,
    stream: false,
    return_token_ids: true,
    return_tokens_as_token_ids: true,
    ...opts.extra,
  };
  if (prompt.kind === 'completion') {
    return { path: '/v1/completions', body: { ...common, prompt: prompt.prompt, logprobs: 0 } };
  }
  return { path: '/v1/chat/completions', body: { ...common, messages: prompt.messages, logprobs: true, top_logprobs: 0 } };
}

/** What a response told us: the generated ids and where they came from, plus the text for context. */
export interface Generated {
  readonly ids: readonly number[];
  readonly source: 'token_ids' | 'logprobs';
  readonly text: string;
  readonly finishReason: string | null;
}

export type Extracted = { ok: true; value: Generated } | { ok: false; error: string };

/** Read the generated token ids out of a completions or chat response body. */
export function fromGenerationResponse(kind: VerifyPrompt['kind'], body: unknown): Extracted {
  const choice = firstChoice(body);
  if (choice === undefined) return { ok: false, error: 'response has no choices[0]: not an OpenAI-style completion' };
  const text = kind === 'completion' ? asString(choice['text']) : asString(asRecord(choice['message'])?.['content']);
  const finishReason = typeof choice['finish_reason'] === 'string' ? choice['finish_reason'] : null;
  const direct = readTokenIds(choice['token_ids']);
  if (typeof direct === 'string') return { ok: false, error: direct };
  const fromLogprobs = readLogprobIds(kind, choice['logprobs']);
  if (typeof fromLogprobs === 'string') return { ok: false, error: fromLogprobs };
  if (direct !== undefined && fromLogprobs !== undefined) {
    const at = direct.findIndex((id, i) => id !== fromLogprobs[i]);
    if (at >= 0 || direct.length !== fromLogprobs.length) {
      const pos = at >= 0 ? at : Math.min(direct.length, fromLogprobs.length);
      return { ok: false, error: `the endpoint's token_ids and logprobs disagree at position ${pos}: the response cannot be trusted` };
    }
  }
  if (direct !== undefined) return { ok: true, value: { ids: direct, source: 'token_ids', text, finishReason } };
  if (fromLogprobs !== undefined) return { ok: true, value: { ids: fromLogprobs, source: 'logprobs', text, finishReason } };
  return { ok: false, error: NO_TOKEN_IDS };
}

/** `choices[0].token_ids`: undefined when absent or null, an error message when malformed. */
function readTokenIds(v: unknown): number[] | undefined | string {
  if (v === undefined || v === null) return undefined;
  if (!Array.isArray(v) || !v.every(isTokenId)) return 'choices[0].token_ids is not a list of non-negative integers';
  return v as number[];
}

const TOKEN_ID = /^token_id:(\d+)$/;

/** Ids from logprobs rendered as `token_id:<id>`; undefined when there are no logprobs or they are plain text. */
function readLogprobIds(kind: VerifyPrompt['kind'], v: unknown): number[] | undefined | string {
  const lp = asRecord(v);
  if (lp === undefined) return undefined;
  const tokens: unknown =
    kind === 'completion' ? lp['tokens'] : (lp['content'] as unknown[] | undefined)?.map?.((e) => asRecord(e)?.['token']);
  if (!Array.isArray(tokens)) return undefined;
  const ids: number[] = [];
  for (const t of tokens) {
    const m = typeof t === 'string' ? TOKEN_ID.exec(t) : null;
    // Plain token text: the endpoint ignored return_tokens_as_token_ids. Text cannot be turned back into ids.
    if (m === null) return undefined;
    ids.push(Number(m[1]));
  }
  return ids;
}

function firstChoice(body: unknown): Record<string, unknown> | undefined {
  const choices = asRecord(body)?.['choices'];
  return Array.isArray(choices) ? asRecord(choices[0]) : undefined;
}

function asRecord(v: unknown): Record<string, unknown> | undefined {
  return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
}

function asString(v: unknown): string {
  return typeof v === 'string' ? v : '';
}

function isTokenId(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v >= 0;
}
