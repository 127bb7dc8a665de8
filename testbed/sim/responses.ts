/**
 * Response bodies and stream chunks for a prepared generation request, field for field as vLLM's OpenAI layer
 * writes them (`CompletionResponse`, `ChatCompletionResponse` and their stream chunks). Pure.
 */
import type { SamplingParams } from './engine.js';
import type { GeneratedToken } from './generator.js';
import { chatLogprobs, completionLogprobs, usageOf, type TokenRenderer } from './protocol.js';

/** A validated generation request, ready for the engine and for rendering its answer. */
export interface PreparedRequest {
  readonly kind: 'completion' | 'chat';
  readonly id: string;
  readonly model: string;
  readonly useAdapter: boolean;
  readonly promptTokens: number[];
  readonly sampling: SamplingParams;
  readonly stream: boolean;
  readonly includeUsage: boolean;
  readonly continuousUsage: boolean;
  readonly logprobs: boolean;
  readonly render: TokenRenderer;
  readonly returnTokenIds: boolean;
  readonly cacheSalt: string | null;
  readonly kvTransferParams: unknown;
  /** Chat with a reasoning model: how many leading generated tokens are reasoning, not content. */
  readonly reasoningTokens: number;
  /** The delta/message fields reasoning travels in, per vLLM version (flavour.ts). */
  readonly reasoningFields: readonly ('reasoning' | 'reasoning_content')[];
}

export interface Finish {
  readonly reason: string;
  readonly stopReason: string | null;
  readonly kvTransferParams: Record<string, unknown> | null;
}

/** The non-streamed answer. */
export function finalBody(
  p: PreparedRequest,
  created: number,
  tokens: readonly GeneratedToken[],
  text: string,
  f: Finish,
  reasoning = '',
): unknown {
  const usage = usageOf(p.promptTokens.length, tokens.length);
  const ids = p.returnTokenIds ? { token_ids: tokens.map((t) => t.id) } : {};
  const end = { finish_reason: f.reason, stop_reason: f.stopReason };
  const tail = { service_tier: null, system_fingerprint: null, usage };
  if (p.kind === 'completion') {
    const logprobs = p.logprobs ? completionLogprobs(tokens, p.render, 0, p.sampling.topN - 1) : null;
    const prompt = p.returnTokenIds ? { prompt_token_ids: p.promptTokens } : {};
    const choice = { index: 0, text, logprobs, ...end, ...ids, prompt_logprobs: null, ...prompt };
    return {
      id: p.id,
      object: 'text_completion',
      created,
      model: p.model,
      choices: [choice],
      ...tail,
      kv_transfer_params: f.kvTransferParams,
    };
  }
  const message = {
    role: 'assistant',
    content: text,
    refusal: null,
    annotations: null,
    audio: null,
    function_call: null,
    tool_calls: [],
    ...reasoningFieldsOf(p, reasoning === '' ? null : reasoning),
  };
  const logprobs = p.logprobs ? chatLogprobs(tokens, p.render, p.sampling.topN) : null;
  return {
    id: p.id,
    object: 'chat.completion',
    created,
    model: p.model,
    choices: [{ index: 0, message, logprobs, ...end, ...ids }],
    ...tail,
    prompt_logprobs: null,
    prompt_token_ids: p.returnTokenIds ? p.promptTokens : null,
    kv_transfer_params: f.kvTransferParams,
  };
}

/** `{reasoning: text}`, `{reasoning_content: text}` or both, as the version writes them (null: no reasoning). */
function reasoningFieldsOf(p: PreparedRequest, text: string | null): Record<string, string | null> {
  return Object.fromEntries(p.reasoningFields.map((f) => [f, text]));
}

/** Builds the stream chunks of one request, keeping the running counts chunks refer to. */
export class ChunkBuilder {
  readonly #p: PreparedRequest;
  readonly #head: { id: string; object: string; created: number; model: string };
  #tokens = 0;
  #offset = 0;

  constructor(p: PreparedRequest, created: number) {
    this.#p = p;
    this.#head = { id: p.id, object: p.kind === 'chat' ? 'chat.completion.chunk' : 'text_completion', created, model: p.model };
  }

  get tokensSent(): number {
    return this.#tokens;
  }

  /** Chat streams open with an empty assistant delta (with continuous usage: completion_tokens 0). */
  role(): unknown {
    const usage = this.#p.continuousUsage ? { usage: usageOf(this.#p.promptTokens.length, 0) } : {};
    return {
      ...this.#head,
      choices: [{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }],
      ...usage,
    };
  }

  /** A chunk with at most one token; `finish` makes it the last one. */
  chunk(token: GeneratedToken | null, text: string, finish: { reason: string; stopReason: string | null } | null): unknown {
    const p = this.#p;
    const toks = token ? [token] : [];
    const ids = p.returnTokenIds ? { token_ids: toks.map((t) => t.id) } : {};
    const first = this.#tokens === 0 && p.returnTokenIds ? { prompt_token_ids: p.promptTokens } : {};
    this.#tokens += toks.length;
    const usage = p.continuousUsage ? { usage: usageOf(p.promptTokens.length, this.#tokens) } : {};
    const end = { finish_reason: finish?.reason ?? null, stop_reason: finish?.stopReason ?? null };
    if (p.kind === 'completion') {
      const logprobs = p.logprobs ? completionLogprobs(toks, p.render, this.#offset, p.sampling.topN - 1) : null;
      this.#offset += toks.reduce((n, t) => n + p.render(t.id).length, 0);
      return { ...this.#head, choices: [{ index: 0, text, logprobs, ...end, ...ids, ...first }], ...usage };
    }
    const logprobs = p.logprobs ? chatLogprobs(toks, p.render, p.sampling.topN) : null;
    // A reasoning model's first tokens stream as reasoning deltas (`delta.reasoning` and/or `reasoning_content`).
    const thinking = toks.length > 0 && this.#tokens - toks.length < p.reasoningTokens;
    const delta = thinking ? reasoningFieldsOf(p, text) : { content: text };
    return { ...this.#head, ...first, choices: [{ index: 0, delta, logprobs, ...end, ...ids }], ...usage };
  }

  /** `stream_options.include_usage`: the trailing chunk with no choices. */
  usage(): unknown {
    return { ...this.#head, choices: [], usage: usageOf(this.#p.promptTokens.length, this.#tokens) };
  }
}
