/**
 * The OpenAI-compatible wire format as vLLM serves it: request schemas (unknown fields are accepted and ignored,
 * as vLLM does), response and stream-chunk builders, and vLLM's error body. Pure: no HTTP here.
 */
import { z } from 'zod';
import type { GeneratedToken } from './generator.js';

/** vLLM's ErrorResponse: `{"error": {"message", "type", "param", "code"}}`. */
export interface VllmErrorBody {
  error: { message: string; type: string; param: string | null; code: number };
}

const ERROR_TYPES: Readonly<Record<number, string>> = {
  400: 'BadRequestError',
  401: 'AuthenticationError',
  403: 'PermissionDeniedError',
  404: 'NotFoundError',
  405: 'MethodNotAllowedError',
  408: 'TimeoutError',
  409: 'ConflictError',
  413: 'PayloadTooLargeError',
  422: 'UnprocessableEntityError',
  429: 'RateLimitError',
  500: 'InternalServerError',
  501: 'NotImplementedError',
  503: 'ServiceUnavailableError',
  504: 'GatewayTimeoutError',
};

export function errorTypeFor(status: number): string {
  return ERROR_TYPES[status] ?? (status >= 500 ? 'InternalServerError' : 'BadRequestError');
}

export function vllmError(status: number, message: string, param: string | null = null): VllmErrorBody {
  return { error: { message, type: errorTypeFor(status), param, code: status } };
}

/**
 * A request error as this vLLM version words it (flavour.ts `errorParam`): `param` dropped before PR #30134; from it
 * on `VLLMValidationError(message, parameter=, value=)` also ends the message with ` (parameter=<p>, value=<v>)`
 * (vllm-project/vllm `vllm/exceptions.py` `__str__`, read in main). `value` undefined: the simulator does not know
 * that this check carries a value upstream, so no suffix is written.
 */
export function requestError(
  mode: 'none' | 'param' | 'param-and-value',
  status: number,
  message: string,
  param: string | null,
  value?: string | number,
): VllmErrorBody {
  if (mode === 'none') return vllmError(status, message, null);
  if (mode === 'param-and-value' && param !== null && value !== undefined) {
    return vllmError(status, `${message} (parameter=${param}, value=${value})`, param);
  }
  return vllmError(status, message, param);
}

/**
 * A body that fails request validation (pydantic, or JSON that does not parse): FastAPI raises
 * `RequestValidationError`, whose handler answers 400 with `type` = `HTTPStatus.BAD_REQUEST.phrase` ("Bad Request"),
 * not `BadRequestError` (vllm-project/vllm `vllm/entrypoints/openai/server_utils.py` `validation_exception_handler`
 * @029329a8). The message is the simulator's own summary, not pydantic's text.
 */
export function validationError(type: 'Bad Request' | 'BadRequestError', message: string): VllmErrorBody {
  return { error: { message, type, param: null, code: 400 } };
}

const stop = z.union([z.string(), z.array(z.string())]).nullish();
const streamOptions = z.looseObject({ include_usage: z.boolean().nullish(), continuous_usage_stats: z.boolean().nullish() }).nullish();
const kvParams = z.record(z.string(), z.unknown()).nullish();

/** Fields both generation endpoints share. `temperature`, `top_p` and `seed` are accepted and have no effect. */
const common = {
  model: z.string().nullish(),
  stream: z.boolean().nullish(),
  stream_options: streamOptions,
  // `min_tokens: int = 0` in both request models: a null is refused, not read as absent (vllm-project/vllm
  // `vllm/entrypoints/openai/completion/protocol.py` and `chat_completion/protocol.py` @002032ee).
  min_tokens: z.number().int().min(0).optional(),
  ignore_eos: z.boolean().nullish(),
  temperature: z.number().nullish(),
  top_p: z.number().nullish(),
  // vLLM: `seed: int | None` bounded by torch.long (`ge=_LONG_INFO.min, le=_LONG_INFO.max`), so a 64-bit seed is taken;
  // zod's int() stops at 2^53, which would refuse what vLLM runs.
  seed: z
    .number()
    .refine(Number.isInteger, 'expected an integer')
    .refine((v) => v >= -(2 ** 63) && v <= 2 ** 63 - 1, 'must fit a 64-bit signed integer')
    .nullish(),
  n: z.number().int().min(1).nullish(),
  stop,
  cache_salt: z.string().min(1).nullish(),
  kv_transfer_params: kvParams,
  return_tokens_as_token_ids: z.boolean().nullish(),
  return_token_ids: z.boolean().nullish(),
  echo: z.boolean().nullish(),
};

const tokenIds = z.array(z.number().int().min(0));

export const CompletionRequestSchema = z.looseObject({
  ...common,
  prompt: z.union([z.string(), tokenIds, z.array(z.string()).length(1), z.array(tokenIds).length(1)]),
  n: z.number().int().min(1).optional(), // `CompletionRequest.n: int = 1`: no null (a chat's is `int | None`)
  max_tokens: z.number().int().min(0).nullish(),
  logprobs: z.number().int().min(0).nullish(),
  add_special_tokens: z.boolean().nullish(),
});
const content = z.union([z.string(), z.array(z.looseObject({ type: z.literal('text'), text: z.string() }))]);
export const ChatMessageSchema = z.looseObject({ role: z.string().min(1), content: content.nullish() });

/**
 * vLLM's `check_generation_prompt` model validator (mode "before", so on the raw body), on both
 * `ChatCompletionRequest` and `TokenizeChatRequest`: `data.get("continue_final_message") and
 * data.get("add_generation_prompt")` is refused, so a request that leaves `add_generation_prompt` to its default of
 * true passes (vllm-project/vllm `vllm/entrypoints/openai/protocol.py`, v0.11.0 to 0.13;
 * `vllm/entrypoints/serve/tokenize/protocol.py` @030ea52e). The simulator's templates render no open-ended final
 * message (`continue_final_message` is accepted and has no effect on rendering).
 */
function checkGenerationPrompt(
  r: { continue_final_message?: boolean | null | undefined; add_generation_prompt?: boolean | null | undefined },
  ctx: z.RefinementCtx,
): void {
  if (r.continue_final_message === true && r.add_generation_prompt === true) {
    ctx.addIssue({ code: 'custom', message: 'Cannot set both `continue_final_message` and `add_generation_prompt` to True.' });
  }
}

export const ChatRequestSchema = z
  .looseObject({
    ...common,
    messages: z.array(ChatMessageSchema).min(1),
    max_tokens: z.number().int().min(0).nullish(),
    max_completion_tokens: z.number().int().min(0).nullish(),
    logprobs: z.boolean().nullish(),
    top_logprobs: z.number().int().min(0).nullish(),
    add_generation_prompt: z.boolean().nullish(),
    continue_final_message: z.boolean().nullish(),
    add_special_tokens: z.boolean().nullish(),
  })
  .superRefine(checkGenerationPrompt);
export const TokenizeCompletionSchema = z.looseObject({
  model: z.string().nullish(),
  prompt: z.string(),
  add_special_tokens: z.boolean().nullish(),
});
export const TokenizeChatSchema = z
  .looseObject({
    model: z.string().nullish(),
    messages: z.array(ChatMessageSchema).min(1),
    add_generation_prompt: z.boolean().nullish(),
    continue_final_message: z.boolean().nullish(),
    add_special_tokens: z.boolean().nullish(),
  })
  .superRefine(checkGenerationPrompt);
export const DetokenizeRequestSchema = z.looseObject({ model: z.string().nullish(), tokens: tokenIds });

/** Flatten message content the way vLLM's chat utils do for text parts. */
export function messageText(c: z.infer<typeof content> | null | undefined): string {
  if (c === null || c === undefined) return '';
  return typeof c === 'string' ? c : c.map((p) => p.text).join('\n');
}

/** A readable one-line validation message, like vLLM's 400 for a request that fails pydantic validation. */
export function describeZodError(e: z.ZodError): string {
  return e.issues.map((i) => `${['body', ...i.path.map(String)].join('.')}: ${i.message}`).join('; ');
}

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

export function usageOf(prompt: number, completion: number): Usage {
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
}

/** Renders a token for logprobs: its text, or `token_id:<id>` with `return_tokens_as_token_ids`. */
export type TokenRenderer = (id: number) => string;

export function completionLogprobs(tokens: readonly GeneratedToken[], render: TokenRenderer, offset0: number, topN: number) {
  const text_offset: number[] = [];
  let offset = offset0;
  for (const t of tokens) {
    text_offset.push(offset);
    offset += render(t.id).length;
  }
  return {
    text_offset,
    token_logprobs: tokens.map((t) => t.logprob),
    tokens: tokens.map((t) => render(t.id)),
    top_logprobs: tokens.map((t) => Object.fromEntries(t.top.slice(0, topN + 1).map((c) => [render(c.id), c.logprob]))),
  };
}

export function chatLogprobs(tokens: readonly GeneratedToken[], render: TokenRenderer, topN: number) {
  const entry = (id: number, logprob: number) => {
    const token = render(id);
    return { token, logprob, bytes: [...Buffer.from(token, 'utf8')] };
  };
  return {
    content: tokens.map((t) => ({
      ...entry(t.id, t.logprob),
      top_logprobs: t.top.slice(0, topN).map((c) => entry(c.id, c.logprob)),
    })),
  };
}
