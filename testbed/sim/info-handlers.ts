/**
 * The endpoints a sidecar probes to identify a worker: `/v1/models`, `/tokenize`, `/detokenize`. They answer from
 * what the worker really runs (its `behaviour` descriptor), so a mislabelled worker is caught exactly as a real one
 * would be. Pure functions of the worker context and the request body.
 */
import { renderChat } from './chat-template.js';
import { modelNotFound, resolveModel, type WorkerContext } from './generate-handler.js';
import {
  DetokenizeRequestSchema,
  TokenizeChatSchema,
  TokenizeCompletionSchema,
  describeZodError,
  messageText,
  validationError,
  vllmError,
} from './protocol.js';

export interface Reply {
  readonly status: number;
  readonly body: unknown;
}

function permission(ctx: WorkerContext, created: number) {
  return {
    id: `modelperm-${ctx.randomHex()}`,
    object: 'model_permission',
    created,
    allow_create_engine: false,
    allow_sampling: true,
    allow_logprobs: true,
    allow_search_indices: false,
    allow_view: true,
    allow_fine_tuning: false,
    organization: '*',
    group: null,
    is_blocking: false,
  };
}

/** vLLM's `show_available_models`: the base model card, then one card per LoRA adapter (parent = base). */
export function handleModels(ctx: WorkerContext) {
  const d = ctx.config.behaviour;
  const created = Math.floor(ctx.now() / 1000);
  const data: unknown[] = [
    {
      id: ctx.servedModelName,
      object: 'model',
      created,
      owned_by: 'vllm',
      root: d.model.path ?? d.model.id,
      parent: null,
      max_model_len: ctx.config.sim.maxModelLen,
      permission: [permission(ctx, created)],
    },
  ];
  if (d.adapter) {
    data.push({
      id: d.adapter.id,
      object: 'model',
      created,
      owned_by: 'vllm',
      root: d.adapter.id,
      parent: ctx.servedModelName,
      max_model_len: null,
      permission: [permission(ctx, created)],
    });
  }
  return { object: 'list', data };
}

function kwargsOf(v: unknown): Readonly<Record<string, unknown>> | undefined {
  return v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
}

/** `{model, prompt, add_special_tokens}` or `{model, messages, add_generation_prompt}` -> `{count, max_model_len, tokens}`. */
export function handleTokenize(ctx: WorkerContext, body: unknown): Reply {
  const isChat = body !== null && typeof body === 'object' && 'messages' in body;
  let tokens: number[];
  let model: string | null | undefined;
  if (isChat) {
    const parsed = TokenizeChatSchema.safeParse(body);
    if (!parsed.success) return { status: 400, body: validationError(ctx.traits.validationErrorType, describeZodError(parsed.error)) };
    const r = parsed.data;
    model = r.model;
    const text = renderChat(
      ctx.template,
      r.messages.map((m) => ({ role: m.role, content: messageText(m.content) })),
      // TokenizeChatRequest renders the client's chat_template_kwargs alone (it has no documents or reasoning_effort).
      { addGenerationPrompt: r.add_generation_prompt !== false, kwargs: kwargsOf(r['chat_template_kwargs']) },
    );
    tokens = ctx.tokenizer.encode(text, { addSpecialTokens: r.add_special_tokens === true });
  } else {
    const parsed = TokenizeCompletionSchema.safeParse(body);
    if (!parsed.success) return { status: 400, body: validationError(ctx.traits.validationErrorType, describeZodError(parsed.error)) };
    model = parsed.data.model;
    tokens = ctx.tokenizer.encode(parsed.data.prompt, { addSpecialTokens: parsed.data.add_special_tokens !== false });
  }
  if (!resolveModel(ctx, model)) return { status: 404, body: modelNotFound(ctx, String(model)) };
  return { status: 200, body: { count: tokens.length, max_model_len: ctx.config.sim.maxModelLen, tokens, token_strs: null } };
}

export function handleDetokenize(ctx: WorkerContext, body: unknown): Reply {
  const parsed = DetokenizeRequestSchema.safeParse(body);
  if (!parsed.success) return { status: 400, body: validationError(ctx.traits.validationErrorType, describeZodError(parsed.error)) };
  if (!resolveModel(ctx, parsed.data.model)) return { status: 404, body: modelNotFound(ctx, String(parsed.data.model)) };
  try {
    return { status: 200, body: { prompt: ctx.tokenizer.decode(parsed.data.tokens) } };
  } catch (e) {
    return { status: 400, body: vllmError(400, (e as Error).message) };
  }
}
