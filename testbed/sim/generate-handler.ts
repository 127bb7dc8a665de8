/**
 * `POST /v1/completions` and `POST /v1/chat/completions` as vLLM serves them: validation and errors in vLLM's
 * words, prompt rendering with the worker's own template and tokenizer, the engine run, and the response (JSON, or
 * SSE chunks ending with `data: [DONE]`). Writes through a `ResponseSink`, so it never touches a socket itself.
 */
import type { Logger } from 'pino';
import { completionChatKwargs, renderChat, type ChatTemplateProfile } from './chat-template.js';
import type { SimConfig } from './config.js';
import type { SimEngine, EngineEvent } from './engine.js';
import type { FaultState, RequestFaults } from './faults.js';
import type { FlavourTraits } from './flavour.js';
import type { GeneratedToken } from './generator.js';
import { parseKvTransferParams } from './pd.js';
import {
  ChatRequestSchema,
  CompletionRequestSchema,
  describeZodError,
  messageText,
  requestError,
  validationError,
  vllmError,
} from './protocol.js';
import { ChunkBuilder, finalBody, type PreparedRequest } from './responses.js';
import type { SimTokenizer } from './tokenizer.js';

/** Where a handler writes its answer; the HTTP server implements it over a ServerResponse. */
export interface ResponseSink {
  json(status: number, body: unknown): void;
  /** Start a 200 `text/event-stream` response. */
  sse(): void;
  /** One `data: ...` event (`'[DONE]'` is written raw). */
  event(data: unknown): void;
  /** Cut the connection without finishing the response (fault injection). */
  drop(): void;
}

export interface WorkerContext {
  readonly config: SimConfig;
  readonly servedModelName: string;
  readonly tokenizer: SimTokenizer;
  readonly template: ChatTemplateProfile;
  readonly engine: SimEngine;
  readonly faults: () => FaultState;
  readonly random: () => number;
  readonly now: () => number;
  readonly randomHex: () => string;
  readonly logger: Logger;
  readonly sleep: (ms: number) => Promise<void>;
  /** What this vLLM version answers (flavour.ts). */
  readonly traits: FlavourTraits;
}

const MAX_LOGPROBS = 20;

type Kind = 'completion' | 'chat';

/** Resolve `model` to the base model or the adapter; null when this worker does not serve it. */
export function resolveModel(ctx: WorkerContext, requested: string | null | undefined): { model: string; useAdapter: boolean } | null {
  if (requested === null || requested === undefined || requested === ctx.servedModelName) {
    return { model: ctx.servedModelName, useAdapter: false };
  }
  const adapter = ctx.config.behaviour.adapter;
  if (adapter && requested === adapter.id) return { model: adapter.id, useAdapter: true };
  return null;
}

/** `_check_model`'s 404 (`param: "model"` from PR #30134 on; null before, flavour.ts `errorParam`). */
export function modelNotFound(ctx: WorkerContext, model: string) {
  return requestError(ctx.traits.errorParam, 404, `The model \`${model}\` does not exist.`, 'model');
}

/** Validate and render a request, or return the vLLM error (status, body) it gets. */
export function prepareGeneration(
  ctx: WorkerContext,
  kind: Kind,
  body: unknown,
  requestId: string,
): { ok: true; value: PreparedRequest } | { ok: false; status: number; body: unknown; kvTransferParams?: unknown } {
  // Set once the body parsed: a refusal from then on happens inside the OpenAI handler, where vLLM's rejection
  // cleanup sees the request's kv_transfer_params (flavour.ts `rejectionNotifies`).
  let kv: { kvTransferParams?: unknown } = {};
  const fail = (status: number, message: string, param: string | null = null, value?: string | number) => ({
    ok: false as const,
    status,
    body: requestError(ctx.traits.errorParam, status, message, param, value),
    ...kv,
  });
  const parsed = kind === 'chat' ? ChatRequestSchema.safeParse(body) : CompletionRequestSchema.safeParse(body);
  if (!parsed.success) {
    return { ok: false, status: 400, body: validationError(ctx.traits.validationErrorType, describeZodError(parsed.error)) };
  }
  const r = parsed.data;
  kv = { kvTransferParams: r.kv_transfer_params };
  const model = resolveModel(ctx, r.model);
  if (!model) return { ok: false, status: 404, body: modelNotFound(ctx, String(r.model)), ...kv };
  const priority = (r as { priority?: unknown }).priority;
  if (priority !== undefined && priority !== null && priority !== 0 && ctx.config.sim.schedulingPolicy !== 'priority')
    return fail(400, `Got priority ${String(priority)} but Priority scheduling is not enabled.`, 'priority');
  if ((r.n ?? 1) !== 1) return fail(400, 'n > 1 is not supported by the kvgate simulator (it decodes greedily)', 'n');
  if (r.echo) return fail(400, 'echo is not supported by the kvgate simulator', 'echo');
  const reused = kind === 'chat' && ctx.traits.reusesPromptTokenIds ? reusedPromptTokenIds(r.kv_transfer_params) : undefined;
  const full = reused === undefined ? promptTokens(ctx, kind, r) : knownIds(ctx, reused.ids);
  if (!full.ok) return fail(400, full.error);
  const tokens = truncatePrompt(ctx, r, full.value);
  if (!tokens.ok) return fail(400, tokens.error, 'truncate_prompt_tokens');
  const max = maxTokensFor(kind, r, tokens.value.length, ctx.config.sim.maxModelLen);
  if (typeof max !== 'number') return fail(400, max.message, max.param, max.value);
  const maxTokens = max;
  const lp = logprobSettings(kind, r);
  if (Array.isArray(lp)) return fail(400, lp[0], 'logprobs', lp[1]);
  const asIds = r.return_tokens_as_token_ids === true;
  return {
    ok: true,
    value: {
      kind,
      id: `${kind === 'chat' ? 'chatcmpl' : 'cmpl'}-${requestId}`,
      model: model.model,
      useAdapter: model.useAdapter,
      promptTokens: tokens.value,
      sampling: {
        maxTokens,
        minTokens: r.min_tokens ?? 0,
        ignoreEos: r.ignore_eos ?? false,
        stop: typeof r.stop === 'string' ? [r.stop] : (r.stop ?? []),
        topN: lp.topN,
      },
      stream: r.stream === true,
      includeUsage: r.stream_options?.include_usage === true,
      // `should_include_usage`: continuous stats only with include_usage (vllm-project/vllm
      // vllm/entrypoints/serve/utils/api_utils.py @00a5fdd2; vllm/entrypoints/openai/serving_chat.py @003fe593).
      continuousUsage: r.stream_options?.include_usage === true && r.stream_options?.continuous_usage_stats === true,
      logprobs: lp.enabled,
      render: (id) => (asIds ? `token_id:${id}` : ctx.tokenizer.tokenText(id)),
      returnTokenIds: r.return_token_ids === true,
      cacheSalt: r.cache_salt ?? null,
      kvTransferParams: reused === undefined ? r.kv_transfer_params : reused.rest,
      reasoningTokens: kind === 'chat' ? ctx.config.sim.reasoningTokens : 0,
      reasoningFields: ctx.traits.reasoningFields,
    },
  };
}

/**
 * vLLM's `truncate_prompt_tokens`: keep the last k prompt tokens (`-1`: `max_model_len`); the generate tokenizer
 * truncates on the left (`vllm/transformers_utils/tokenizer.py`), token-id prompts are cut `[-k:]`. Versions with the
 * newer `truncation_side` field keep the first k for `"right"`. A k above `max_model_len` is a 400, as in vLLM.
 */
function truncatePrompt(
  ctx: WorkerContext,
  r: Record<string, unknown>,
  ids: number[],
): { ok: true; value: number[] } | { ok: false; error: string } {
  const t = r['truncate_prompt_tokens'];
  if (t === undefined || t === null) return { ok: true, value: ids };
  const maxLen = ctx.config.sim.maxModelLen;
  if (!Number.isInteger(t) || (t as number) < -1) return { ok: false, error: 'truncate_prompt_tokens must be an integer >= -1' };
  const k = t === -1 ? maxLen : (t as number);
  if (k > maxLen) {
    return {
      ok: false,
      error: `truncate_prompt_tokens value (${k}) is greater than max_model_len (${maxLen}). Please, select a smaller truncation size.`,
    };
  }
  if (ids.length <= k) return { ok: true, value: ids };
  const right = ctx.traits.truncationSide && r['truncation_side'] === 'right';
  return { ok: true, value: right ? ids.slice(0, k) : ids.slice(ids.length - k) };
}

/** vLLM's length checks (`_validate_input`), then the effective max_tokens (default: what still fits). */
function maxTokensFor(
  kind: Kind,
  r: Record<string, unknown>,
  len: number,
  maxLen: number,
): number | { message: string; param: string; value?: number } {
  if (len === 0) return { message: 'The prompt cannot be empty.', param: 'prompt' };
  if (len >= maxLen) {
    return {
      message: `This model's maximum context length is ${maxLen} tokens. However, your request has ${len} input tokens. Please reduce the length of the input messages.`,
      param: 'input_tokens',
    };
  }
  const asked = kind === 'chat' ? (r['max_completion_tokens'] ?? r['max_tokens']) : r['max_tokens'] === undefined ? 16 : r['max_tokens'];
  const requested = asked as number | null | undefined;
  if (requested !== null && requested !== undefined && len + requested > maxLen) {
    return {
      message:
        `'max_tokens' or 'max_completion_tokens' is too large: ${requested}. This model's maximum context length is ${maxLen} ` +
        `tokens and your request has ${len} input tokens (${requested} > ${maxLen} - ${len}).`,
      param: 'max_tokens',
      // Newer vLLM: "... (16384 > 65536 - 52189). (parameter=max_tokens, value=16384)" (VLLMValidationError).
      value: requested,
    };
  }
  const n = requested ?? maxLen - len;
  return n < 1 ? { message: `max_tokens must be at least 1, got ${n}.`, param: 'max_tokens' } : n;
}

/**
 * vLLM main's decode-side reuse of the prefill's prompt ids (flavour.ts `reusesPromptTokenIds`): a non-empty
 * `kv_transfer_params.prompt_token_ids` is popped (`kv.pop("prompt_token_ids", None) or None`) and becomes the prompt.
 */
function reusedPromptTokenIds(params: unknown): { ids: unknown[]; rest: Record<string, unknown> } | undefined {
  if (params === null || typeof params !== 'object' || Array.isArray(params)) return undefined;
  const { prompt_token_ids: ids, ...rest } = params as Record<string, unknown>;
  return Array.isArray(ids) && ids.length > 0 ? { ids, rest } : undefined;
}

function knownIds(ctx: WorkerContext, ids: readonly unknown[]): { ok: true; value: number[] } | { ok: false; error: string } {
  const bad = ids.find((id) => !Number.isInteger(id) || (id as number) < 0 || (id as number) >= ctx.tokenizer.vocabSize);
  if (bad !== undefined) return { ok: false, error: `Token id ${String(bad)} is out of vocabulary` };
  return { ok: true, value: ids as number[] };
}

function promptTokens(
  ctx: WorkerContext,
  kind: Kind,
  r: Record<string, unknown>,
): { ok: true; value: number[] } | { ok: false; error: string } {
  const tok = ctx.tokenizer;
  if (kind === 'chat') {
    const messages = (r['messages'] as Array<{ role: string; content?: unknown }>).map((m) => ({
      role: m.role,
      content: messageText(m.content as Parameters<typeof messageText>[0]),
    }));
    const text = renderChat(ctx.template, messages, {
      addGenerationPrompt: r['add_generation_prompt'] !== false,
      kwargs: completionChatKwargs(ctx.traits.chatKwargs, r),
    });
    return { ok: true, value: tok.encode(text, { addSpecialTokens: r['add_special_tokens'] === true }) };
  }
  let prompt = r['prompt'] as string | number[] | string[] | number[][];
  if (Array.isArray(prompt) && prompt.length === 1 && (typeof prompt[0] === 'string' || Array.isArray(prompt[0]))) {
    prompt = prompt[0] as string | number[];
  }
  if (typeof prompt === 'string') return { ok: true, value: tok.encode(prompt, { addSpecialTokens: r['add_special_tokens'] !== false }) };
  const ids = prompt as number[];
  const bad = ids.find((id) => id >= tok.vocabSize);
  if (bad !== undefined) return { ok: false, error: `Token id ${bad} is out of vocabulary` };
  return { ok: true, value: [...ids] };
}

/**
 * Logprob settings, or the error as `[message, value]` (value: what newer vLLM appends as `value=`; PR #31870 shows
 * "Requested sample logprobs of 25, which is greater than max allowed: 20 (parameter=logprobs, value=25)").
 */
function logprobSettings(kind: Kind, r: Record<string, unknown>): { enabled: boolean; topN: number } | [string, number | undefined] {
  if (kind === 'completion') {
    const n = r['logprobs'] as number | null | undefined;
    if (n === null || n === undefined) return { enabled: false, topN: 0 };
    if (n > MAX_LOGPROBS) return [`Requested sample logprobs of ${n}, which is greater than max allowed: ${MAX_LOGPROBS}`, n];
    return { enabled: true, topN: n + 1 };
  }
  const top = (r['top_logprobs'] as number | null | undefined) ?? 0;
  if (top > MAX_LOGPROBS) return [`Requested sample logprobs of ${top}, which is greater than max allowed: ${MAX_LOGPROBS}`, top];
  if (r['logprobs'] !== true) {
    return top > 0 ? ['when using `top_logprobs`, `logprobs` must be set to true.', undefined] : { enabled: false, topN: 0 };
  }
  return { enabled: true, topN: top };
}

/** Serve one generation request end to end. */
export async function handleGeneration(
  ctx: WorkerContext,
  kind: Kind,
  body: unknown,
  headerRequestId: string | undefined,
  faults: RequestFaults,
  sink: ResponseSink,
  signal: AbortSignal,
): Promise<void> {
  const global = ctx.faults();
  const slow = (faults.slowMs ?? 0) + global.slowMs;
  if (slow > 0) await ctx.sleep(slow);
  if (faults.error !== undefined)
    return sink.json(faults.error, vllmError(faults.error, `Injected fault: HTTP ${faults.error} (x-sim-fault)`));
  if (global.errorRate > 0 && ctx.random() < global.errorRate) {
    return sink.json(global.errorStatus, vllmError(global.errorStatus, `Injected fault: HTTP ${global.errorStatus} (errorRate)`));
  }
  const prep = prepareGeneration(ctx, kind, body, headerRequestId ?? ctx.randomHex());
  if (!prep.ok) {
    await rejectionCleanup(ctx, prep.kvTransferParams, headerRequestId);
    return sink.json(prep.status, prep.body);
  }
  const p = prep.value;
  // Before unique ids (0.11) P and D ran under the same internal id, which D then read by.
  const internal = p.kind === 'completion' ? `${p.id}-0` : p.id;
  const requestId = ctx.traits.uniqueRequestIds ? `${internal}-${ctx.randomHex().slice(0, 8)}` : internal;
  const events = ctx.engine.run({
    requestId,
    promptTokens: p.promptTokens,
    sampling: p.sampling,
    useAdapter: p.useAdapter,
    cacheSalt: p.cacheSalt,
    kvTransfer: parseKvTransferParams(p.kvTransferParams, ctx.traits.remoteRequestId ? undefined : requestId),
    faults,
    signal,
    streaming: p.stream,
  });
  const dropAfter = faults.dropAfterTokens ?? global.dropAfterTokens ?? null;
  if (p.stream) await streamResponse(ctx, p, events, sink, dropAfter, signal);
  else await jsonResponse(ctx, p, events, sink, dropAfter);
}

/**
 * `_with_kv_transfer_rejection_cleanup` (vllm-project/vllm `vllm/entrypoints/generate/base/serving.py` @015d1c9b, PR
 * #41269): a refused request whose `kv_transfer_params` ask for a remote prefill still frees P's blocks, without a
 * read (flavour.ts `rejectionNotifies`). vLLM awaits the notice before answering and the engine sends the notification
 * a step later; the simulator sends it before answering, so a caller that has the answer can look at P at once.
 */
async function rejectionCleanup(ctx: WorkerContext, params: unknown, headerRequestId: string | undefined): Promise<void> {
  if (!ctx.traits.rejectionNotifies || params === undefined) return;
  const ownId = headerRequestId ?? ctx.randomHex();
  const role = parseKvTransferParams(params, ctx.traits.remoteRequestId ? undefined : ownId);
  if (role.kind === 'consumer') await ctx.engine.notifyRejected(ownId, role.remote);
}

async function jsonResponse(
  ctx: WorkerContext,
  p: PreparedRequest,
  events: AsyncIterable<EngineEvent>,
  sink: ResponseSink,
  dropAfter: number | null,
): Promise<void> {
  const tokens: GeneratedToken[] = [];
  let text = '';
  let reasoning = '';
  for await (const ev of events) {
    if (ev.type === 'error') return sink.json(500, vllmError(500, 'Internal server error'));
    if (ev.type === 'token' && tokens.length < p.reasoningTokens) reasoning += ev.text;
    else text += ev.text;
    if (ev.type === 'finish') return sink.json(200, finalBody(p, Math.floor(ctx.now() / 1000), tokens, text, ev, reasoning));
    tokens.push(ev.token);
    if (dropAfter !== null && tokens.length >= dropAfter) return sink.drop();
  }
  // The engine stopped without finishing: the client went away.
}

/**
 * SSE like vLLM: one chunk per engine output, the last token sharing its chunk with the finish reason; an engine
 * error becomes an error event; always `data: [DONE]` last (unless a drop fault cuts the connection).
 */
async function streamResponse(
  ctx: WorkerContext,
  p: PreparedRequest,
  events: AsyncIterable<EngineEvent>,
  sink: ResponseSink,
  dropAfter: number | null,
  signal: AbortSignal,
): Promise<void> {
  const chunks = new ChunkBuilder(p, Math.floor(ctx.now() / 1000));
  sink.sse();
  if (dropAfter === 0) return sink.drop();
  let pending: { token: GeneratedToken; text: string } | null = null;
  const flush = (): boolean => {
    if (!pending) return true;
    sink.event(chunks.chunk(pending.token, pending.text, null));
    pending = null;
    if (dropAfter !== null && chunks.tokensSent >= dropAfter) {
      sink.drop();
      return false;
    }
    return true;
  };
  // vLLM's chat stream sends the role chunk on the engine's first output, whatever it is (an error too).
  let opened = false;
  for await (const ev of events) {
    if (!opened) {
      opened = true;
      if (p.kind === 'chat') sink.event(chunks.role());
    }
    if (ev.type === 'finish') {
      const last: { token: GeneratedToken; text: string } | null = pending;
      sink.event(chunks.chunk(last?.token ?? null, (last?.text ?? '') + ev.text, ev));
      if (p.includeUsage) sink.event(chunks.usage());
      break;
    }
    if (!flush()) return;
    await holdWhileAsked(ctx, chunks.tokensSent, signal);
    if (ev.type === 'error') {
      // The engine only fails before the first token (a KV load). Versions whose empty-chunk filter runs first drop
      // the error and end the stream as if nothing happened (flavour.ts `errorBeforeOutput`).
      if (chunks.tokensSent > 0 || ctx.traits.errorBeforeOutput[p.kind] === 'event') sink.event(vllmError(500, 'Internal server error'));
      else if (p.includeUsage) sink.event(chunks.usage());
      break;
    }
    pending = { token: ev.token, text: ev.text };
  }
  sink.event('[DONE]');
}

/** The `holdStreamAfterTokens` fault: wait (polling, bounded by the client) while it asks to hold at `sent` tokens. */
async function holdWhileAsked(ctx: WorkerContext, sent: number, signal: AbortSignal): Promise<void> {
  for (;;) {
    const hold = ctx.faults().holdStreamAfterTokens;
    if (hold === null || sent < hold || signal.aborted) return;
    await new Promise((r) => setTimeout(r, 5));
  }
}
