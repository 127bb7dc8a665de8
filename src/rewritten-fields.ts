/**
 * Request fields a prefill leg rewrites, and what vLLM refuses in them: the gate (src/decide/request-facts.ts) and both
 * sidecars (src/sidecar/openai-body.ts `checkRequestShape`) refuse those values before any prefill runs. The gate's
 * check matters where no decode-side check precedes the prefill: llm-d's P/D sidecar runs the prefill leg itself,
 * from a body it rewrote the same way (`max_tokens`, `max_completion_tokens` and `min_tokens` 1, `stream` false, no
 * `stream_options`; docs/llm-d.md), so neither of kvgate's sidecars sees these fields as the client sent them before
 * the prefill worker has computed and pinned the prompt's KV. Pure.
 */

/** The OpenAI paths kvgate serves. */
type Endpoint = 'completions' | 'chat';

/**
 * vLLM's `max_completion_tokens or max_tokens` (chat) or `max_tokens` with its default of 16 (completions), a null
 * included: current vLLM's `CompletionRequest.normalize_null_max_tokens` turns a null into the default before it
 * checks the length (vllm-project/vllm `vllm/entrypoints/openai/completion/protocol.py` @002032ee), where older copies
 * took it as the room the prompt leaves. Reading it as 16 holds for both (fail closed on the older ones).
 */
export function requestedMaxTokens(endpoint: Endpoint, body: Readonly<Record<string, unknown>>): unknown {
  if (endpoint === 'chat') return body['max_completion_tokens'] || body['max_tokens'];
  return body['max_tokens'] ?? 16;
}

/**
 * Why a field the prefill leg rewrites (src/sidecar/openai-body.ts `toPrefillBody`: `max_tokens`,
 * `max_completion_tokens`, `min_tokens`, `stream`, `stream_options`, `n`) holds a value the decode worker's vLLM
 * refuses, or undefined. The prefill worker never sees these as the client sent them, so it runs the prefill and
 * holds its KV for a decode that then answers 400: that KV stays pinned until the prefill worker's abort timeout
 * (480 s), unless the decode worker's vLLM frees it (current copies do, `_with_kv_transfer_rejection_cleanup`, but
 * only for refusals after the request parsed). What vLLM refuses (vllm-project/vllm @002032ee): `SamplingParams`
 * a `max_tokens` below 1 and a `min_tokens` below 0 or above `max_tokens`; the request models a `stream_options`
 * without `stream` (`validate_stream_options`) and a `stream` that is not a boolean; and current vLLM takes a chat's
 * `max_completion_tokens` whenever it is not null, 0 included (`chat_completion/serving.py` @006c49d4), where older
 * copies fell back to `max_tokens`. Values pydantic would coerce (`"12"`) are refused too: send numbers.
 *
 * A null is not always absent to vLLM: its request models declare `min_tokens: int = 0` (both paths) and a
 * completion's `n: int = 1` without `| None`, so pydantic refuses a null there, while the prefill leg drops
 * `min_tokens` and writes `n: 1`; and `stream_options` must be a `StreamOptions` object whose `include_usage` and
 * `continuous_usage_stats` are `bool | None`, while the prefill leg drops it (vllm-project/vllm
 * `vllm/entrypoints/openai/completion/protocol.py` and `chat_completion/protocol.py` @002032ee,
 * `vllm/entrypoints/generate/base/protocol.py` `StreamOptions` @022e555d). Each of those once passed here, so the
 * prefill worker computed and held the prompt's KV for a decode its vLLM then refused while parsing the request.
 * (kvgate accepts only JSON booleans in `stream_options`, where pydantic also takes `"yes"` or 1: fail closed.)
 */
export function rewrittenFieldError(
  endpoint: Endpoint,
  body: Readonly<Record<string, unknown>>,
  opts: { readonly echoOnly?: boolean } = {},
): string | undefined {
  // `echoOnly` (the gate, before it knows whether the route has a prefill leg): a completion's `echo: true` with
  // `max_tokens: 0` is vLLM's echo-only request (the prompt back, no generation; `echo_without_generation` in
  // `CompletionRequest.to_sampling_params` @002032ee), which a route without a prefill leg serves; a sidecar, on a
  // disaggregated request, still refuses it.
  const echoOnly = opts.echoOnly === true && endpoint === 'completions' && body['echo'] === true && body['max_tokens'] === 0;
  // A completion has no max_completion_tokens (vLLM's completions path ignores the field), so only a chat's is judged.
  for (const k of endpoint === 'chat' ? (['max_tokens', 'max_completion_tokens'] as const) : (['max_tokens'] as const)) {
    const v = body[k];
    if (v !== undefined && v !== null && !(Number.isInteger(v) && (v as number) >= 1) && !echoOnly)
      return `${k} must be a positive integer`;
  }
  // A completion's `n: null` is refused by vLLM (`n: int = 1`); a chat's `n` is `int | None`.
  if (endpoint === 'completions' && body['n'] === null) return 'n must be 1 or absent on /v1/completions: vLLM refuses a null n there';
  const min = body['min_tokens'];
  if (min !== undefined) {
    if (!Number.isInteger(min) || (min as number) < 0) return 'min_tokens must be a non-negative integer, or absent (vLLM refuses a null)';
    // The maximum vLLM builds its SamplingParams with: a chat's max_completion_tokens when not null, else max_tokens
    // (completions have no max_completion_tokens, and their max_tokens is 16 when absent or null: requestedMaxTokens).
    const max = endpoint === 'chat' ? (body['max_completion_tokens'] ?? body['max_tokens']) : requestedMaxTokens(endpoint, body);
    if (typeof max === 'number' && (min as number) > max)
      return `min_tokens (${min as number}) is above the completion's maximum (${max}); vLLM refuses it`;
  }
  const stream = body['stream'];
  if (stream !== undefined && stream !== null && typeof stream !== 'boolean') return 'stream must be true or false';
  if (pythonTruthy(body['stream_options']) && stream !== true) return 'stream_options are taken only with stream: true, as vLLM does';
  return streamOptionsError(body['stream_options']);
}

/** Why `stream_options` is not what vLLM's `StreamOptions` parses, or undefined (absent and null are no options). */
function streamOptionsError(options: unknown): string | undefined {
  if (options === undefined || options === null) return undefined;
  if (typeof options !== 'object' || Array.isArray(options))
    return 'stream_options must be an object such as {"include_usage": true}, or absent';
  for (const k of ['include_usage', 'continuous_usage_stats'] as const) {
    const v = (options as Record<string, unknown>)[k];
    if (v !== undefined && v !== null && typeof v !== 'boolean') return `stream_options.${k} must be true or false`;
  }
  return undefined;
}

/** Python's truth value of a JSON value (`bool(x)`): false for null, false, 0, "", [] and {}. */
export function pythonTruthy(v: unknown): boolean {
  if (v === undefined || v === null || v === false || v === 0 || v === '') return false;
  if (Array.isArray(v)) return v.length > 0;
  return typeof v !== 'object' || Object.keys(v).length > 0;
}
