/**
 * Pure rewrites of OpenAI request bodies for the prefill and decode legs, matching what vLLM's own disaggregation
 * proxies send (docs/vllm-disaggregation.md §7.2-7.4), and the `/tokenize` request that counts a prompt the way the
 * worker's completion path will.
 */
import { vllmAtLeast } from '../compat/vllm-defaults.js';
import { err, KvgateError, ok, type Result } from '../errors.js';
import { findTransferParams } from '../json-limits.js';
import { pythonTruthy, requestedMaxTokens, rewrittenFieldError } from '../rewritten-fields.js';

export type Endpoint = 'completions' | 'chat';

/** The OpenAI paths the sidecar serves, and the endpoint kind each is. */
export const ENDPOINT_PATHS: Readonly<Record<string, Endpoint>> = { '/v1/completions': 'completions', '/v1/chat/completions': 'chat' };

/** `kv_transfer_params` of a prefill request, exactly as vLLM's toy proxy and llm-d's sidecar send it. */
export const PREFILL_KV_PARAMS: Readonly<Record<string, boolean | null>> = Object.freeze({
  do_remote_decode: true,
  do_remote_prefill: false,
  remote_engine_id: null,
  remote_block_ids: null,
  remote_host: null,
  remote_port: null,
});

/** The key under which the prefill sidecar's attestation rides inside the returned `kv_transfer_params`. */
export const ATTESTATION_KEY = 'kvgate';

/**
 * The prefill leg's body: the client's request with `kv_transfer_params` set to the prefill shape, no streaming,
 * one output token (`max_tokens`, and `max_completion_tokens` when present), `stream_options` dropped and
 * `min_tokens`/`min_completion_tokens` popped ("not supported for P"), and one sequence (`n: 1` when present): vLLM
 * fans `n` into n child requests (vllm-project/vllm `vllm/v1/engine/parallel_sampling.py`, PR #10980), each computing
 * the prompt's KV and holding it for a remote decode, which pulls one copy; the other n - 1 stay pinned on the prefill
 * worker until its abort timeout (480 s; vllm-project/vllm#43509, open as of 2026-05), so one client asking a large
 * `n` would fill the KV cache of a prefill pool every tenant shares. smg-project/smg#1622 (`proto_wrapper.rs`) sends
 * its prefill leg with n = 1 too. Both sidecars refuse a request asking n other than 1 (`checkRequestShape`) before
 * they build this body, so here `n` is only normalized (a null becomes 1); the rewrite stays so that this function
 * never yields a prefill body of several samples, whoever calls it.
 */
export function toPrefillBody(body: Readonly<Record<string, unknown>>): Record<string, unknown> {
  const out: Record<string, unknown> = { ...body, kv_transfer_params: { ...PREFILL_KV_PARAMS }, stream: false, max_tokens: 1 };
  if ('max_completion_tokens' in out) out['max_completion_tokens'] = 1;
  if ('n' in out) out['n'] = 1;
  delete out['stream_options'];
  delete out['min_tokens'];
  delete out['min_completion_tokens'];
  return out;
}

/**
 * The body for this sidecar's own worker with the contract's `priority` written in: the tenant's priority the route
 * table set (vLLM's `priority` request field: under `--scheduling-policy priority` its waiting queue goes lowest
 * first, `CompletionRequest.priority` in vllm-project/vllm `vllm/entrypoints/openai/completion/protocol.py`
 * @002032ee). The client's own priority was refused before this (src/client-request-fields.ts); without a contract
 * priority the body is returned as it came, so requests of tenants without one reach the worker as before.
 */
export function withContractPriority(body: Record<string, unknown>, priority: number | undefined): Record<string, unknown> {
  return priority === undefined ? body : { ...body, priority };
}

/**
 * The body a decode sidecar sends on the prefill leg (to another sidecar, through the gate's internal listener):
 * without the `priority` `withContractPriority` wrote, which that sidecar refuses from any sender and writes itself
 * from the same contract.
 */
export function toPrefillLegBody(body: Readonly<Record<string, unknown>>, priority: number | undefined): Record<string, unknown> {
  if (priority === undefined) return toPrefillBody(body);
  const { priority: _own, ...rest } = body;
  return toPrefillBody(rest);
}

/** True when `value` is exactly the prefill request shape (what a decode sidecar sends on the prefill leg). */
export function isPrefillKvParams(value: unknown): boolean {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return false;
  const v = value as Record<string, unknown>;
  const keys = Object.keys(v);
  return (
    keys.length === Object.keys(PREFILL_KV_PARAMS).length &&
    keys.every((k) => Object.hasOwn(PREFILL_KV_PARAMS, k) && v[k] === PREFILL_KV_PARAMS[k])
  );
}

/**
 * Client-sent `kv_transfer_params` are forged routing: they would make a worker pull KV from wherever they point.
 * A decode sidecar accepts none (it builds them itself from an attested prefill); a prefill sidecar accepts only the
 * prefill shape, which asks the worker to keep its own KV for a remote decode and points nowhere.
 */
export function checkClientKvParams(body: Readonly<Record<string, unknown>>, role: 'prefill' | 'decode'): Result<void, KvgateError> {
  const params = body['kv_transfer_params'];
  // Anywhere else vLLM would read them (under vllm_xargs, nested, another spelling) they are refused in either role,
  // and so is `ec_transfer_params` anywhere: the encoder-cache sibling, which kvgate never sets (json-limits.ts).
  const elsewhere = findTransferParams(body, true);
  if (elsewhere !== undefined) {
    const at = JSON.stringify(elsewhere.path);
    return err(
      new KvgateError(
        'kv_params_forbidden',
        elsewhere.field === 'kv_transfer_params'
          ? `kv_transfer_params are set by kvgate at the top level only; found at ${at}, remove it`
          : `ec_transfer_params would make the worker load encoder outputs from wherever they point, and kvgate sets none; found at ${at}, remove it`,
      ),
    );
  }
  if (params === undefined || params === null) return ok(undefined);
  if (role === 'prefill' && isPrefillKvParams(params)) return ok(undefined);
  return err(
    new KvgateError(
      'kv_params_forbidden',
      role === 'prefill'
        ? 'kv_transfer_params other than the prefill request shape are refused: only a decode sidecar sets them, to {do_remote_decode: true, do_remote_prefill: false, remote_*: null}'
        : 'kv_transfer_params are set by kvgate, never by a client; remove the field',
    ),
  );
}

/**
 * vLLM's `truncate_prompt_tokens`: keep only the last `tokens` prompt tokens (`-1`: at most `max_model_len`), or the
 * first ones with `truncation_side: "right"` (a newer request field). vLLM's generate tokenizer truncates on the
 * left (`truncation_side="left"` in vllm-project/vllm `vllm/transformers_utils/tokenizer.py` get_tokenizer, v0.11.0
 * on; token-id prompts are cut as `prompt_ids[-k:]`). `/tokenize` takes no truncation field, so the decode side
 * tokenizes the whole prompt and cuts the ids the same way (`truncateIds`).
 */
export interface Truncation {
  /** Tokens to keep; -1 means `max_model_len`. */
  readonly tokens: number;
  readonly side: 'left' | 'right';
}

/** How to count a request's prompt tokens on a worker: already known (the client sent token ids), or a `/tokenize` body. */
export type PromptCount =
  | { readonly kind: 'known'; readonly ids: readonly number[]; readonly truncation?: Truncation }
  | { readonly kind: 'tokenize'; readonly body: Record<string, unknown>; readonly truncation?: Truncation };

/**
 * Fields of vLLM's `TokenizeChatRequest` besides messages (vllm-project/vllm `vllm/entrypoints/openai/protocol.py`,
 * v0.11.0 to main; `media_io_kwargs` in vllm/entrypoints/serve/tokenize/protocol.py @030ea52e): sent as the client sent
 * them so `/tokenize` renders exactly what the completion renders. (`chat_template_kwargs` is rebuilt:
 * `chatTemplateKwargs`.)
 */
const CHAT_TOKENIZE_FIELDS = ['chat_template', 'chat_template_kwargs', 'tools', 'mm_processor_kwargs', 'media_io_kwargs'] as const;

/** The request's truncation, or an error for a value vLLM would refuse; undefined when it asks for none. */
export function truncationOf(body: Readonly<Record<string, unknown>>): Result<Truncation | undefined, KvgateError> {
  const t = body['truncate_prompt_tokens'];
  if (t === undefined || t === null) return ok(undefined);
  if (!Number.isInteger(t) || ((t as number) < 1 && t !== -1)) {
    return err(
      new KvgateError('bad_request', "truncate_prompt_tokens must be a positive integer or -1 (truncate to the model's max_model_len)"),
    );
  }
  const side = body['truncation_side'] ?? 'left';
  if (side !== 'left' && side !== 'right') return err(new KvgateError('bad_request', 'truncation_side must be "left" or "right"'));
  return ok({ tokens: t as number, side });
}

/** Cut token ids as vLLM does for `truncate_prompt_tokens` (`maxModelLen` resolves -1; unknown: no cut for -1). */
export function truncateIds(ids: readonly number[], t: Truncation | undefined, maxModelLen: number | undefined): readonly number[] {
  if (t === undefined) return ids;
  const keep = t.tokens === -1 ? maxModelLen : t.tokens;
  if (keep === undefined || ids.length <= keep) return ids;
  return t.side === 'left' ? ids.slice(ids.length - keep) : ids.slice(0, keep);
}

/** vLLM's `merge_kwargs` (vllm/renderers/params.py @017638d7): an override of None or "auto" leaves the default. */
function mergeKwargs(defaults: Readonly<Record<string, unknown>>, overrides: Readonly<Record<string, unknown>>): Record<string, unknown> {
  const out: Record<string, unknown> = { ...defaults };
  for (const [k, v] of Object.entries(overrides)) if (v !== undefined && v !== null && v !== 'auto') out[k] = v;
  return out;
}

/**
 * The chat template kwargs the worker's chat completion path renders with, as `/tokenize` must receive them (it takes
 * neither `documents` nor `reasoning_effort` itself). Two generations of vLLM (vllm-project/vllm):
 * - from 0.22 (the first release after PR #43401, merged 2026-05-22; read from the merge date, not from a release
 *   tag, as `vllmAtLeast` in src/compat/vllm-defaults.ts does for PR #41847): `ChatCompletionRequest.build_chat_params`
 *   merges `documents`, `reasoning_effort` and, when `reasoning_effort` is set and the client's kwargs do not name
 *   it, `enable_thinking` (false for "none") OVER the client's `chat_template_kwargs`
 *   (vllm/entrypoints/openai/chat_completion/protocol.py @002032ee; `merge_kwargs`: None and "auto" do not override);
 * - before: `_preprocess_chat` put `documents` under the client's kwargs, which win
 *   (`_chat_template_kwargs.update(chat_template_kwargs)`, vllm/entrypoints/openai/serving_engine.py), and the
 *   template never saw `reasoning_effort`. Releases between the renderer refactor and 0.22 that passed
 *   `reasoning_effort` without `enable_thinking` are not modelled: a request naming it may be refused there as a
 *   prompt mismatch (fail closed), never served mixed.
 */
export function chatTemplateKwargs(
  body: Readonly<Record<string, unknown>>,
  vllmVersion: string | undefined,
): Record<string, unknown> | undefined {
  const client = body['chat_template_kwargs'];
  const user = client !== null && typeof client === 'object' && !Array.isArray(client) ? (client as Record<string, unknown>) : undefined;
  const documents = body['documents'];
  if (vllmVersion !== undefined && vllmAtLeast(vllmVersion, 0, 22)) {
    const effort = body['reasoning_effort'];
    const extra: Record<string, unknown> = { documents, reasoning_effort: effort };
    if (effort !== undefined && effort !== null && (user === undefined || !Object.hasOwn(user, 'enable_thinking')))
      extra['enable_thinking'] = effort !== 'none';
    const merged = mergeKwargs(user ?? {}, extra);
    return Object.keys(merged).length === 0 && user === undefined ? undefined : merged;
  }
  if (documents === undefined || documents === null) return user;
  return { documents, ...(user ?? {}) };
}

/**
 * The `/tokenize` request that renders and tokenises this prompt exactly as the worker's completion path does:
 * chat uses the request's `add_generation_prompt` (default true), `continue_final_message` (default false) and
 * `add_special_tokens` (default false); completions use `add_special_tokens` (default true). Chat `documents` and
 * `reasoning_effort`, which `/tokenize` does not take, travel in `chat_template_kwargs` as the worker's version merges
 * them (`chatTemplateKwargs`; `vllmVersion` is the worker's, from its verified descriptor). A batch of prompts
 * cannot be disaggregated (one `kv_transfer_params` per request) and is refused.
 */
export function toPromptCount(
  endpoint: Endpoint,
  body: Readonly<Record<string, unknown>>,
  vllmVersion?: string,
): Result<PromptCount, KvgateError> {
  const model = body['model'];
  if (typeof model !== 'string' || model === '') return err(new KvgateError('bad_request', 'the request names no model'));
  const truncation = truncationOf(body);
  if (!truncation.ok) return truncation;
  const cut = truncation.value === undefined ? {} : { truncation: truncation.value };
  if (endpoint === 'chat') {
    const messages = body['messages'];
    if (!Array.isArray(messages) || messages.length === 0)
      return err(new KvgateError('bad_request', 'a chat completion needs a non-empty messages array'));
    // `add_generation_prompt` and `continue_final_message` travel only as the client sent them (the defaults, true and
    // false, are the same on both endpoints): vLLM's `check_generation_prompt` validator reads the raw body and
    // refuses both true, so spelling out the default generation prompt next to a client's `continue_final_message`
    // would make /tokenize refuse a chat request the completion path accepts (vllm-project/vllm
    // `vllm/entrypoints/serve/tokenize/protocol.py` @030ea52e; `vllm/entrypoints/openai/protocol.py` in 0.11/0.13).
    const req: Record<string, unknown> = { model, messages };
    // The validator reads raw values the Python way, before pydantic coerces "true", "yes" or 1 to a boolean: any value
    // it finds truthy must not meet a spelled-out default.
    if (body['add_generation_prompt'] !== undefined) req['add_generation_prompt'] = body['add_generation_prompt'];
    else if (!pythonTruthy(body['continue_final_message'])) req['add_generation_prompt'] = true;
    req['continue_final_message'] = body['continue_final_message'] ?? false;
    req['add_special_tokens'] = body['add_special_tokens'] ?? false;
    for (const k of CHAT_TOKENIZE_FIELDS) if (body[k] !== undefined) req[k] = body[k];
    const kwargs = chatTemplateKwargs(body, vllmVersion);
    if (kwargs !== undefined) req['chat_template_kwargs'] = kwargs;
    return ok({ kind: 'tokenize', body: req, ...cut });
  }
  let prompt = body['prompt'];
  if (Array.isArray(prompt) && prompt.length === 1 && (typeof prompt[0] === 'string' || Array.isArray(prompt[0]))) prompt = prompt[0];
  if (Array.isArray(prompt) && prompt.length > 0 && prompt.every((t) => Number.isInteger(t)))
    return ok({ kind: 'known', ids: prompt as number[], ...cut });
  if (typeof prompt === 'string')
    return ok({ kind: 'tokenize', body: { model, prompt, add_special_tokens: body['add_special_tokens'] ?? true }, ...cut });
  return err(
    new KvgateError(
      'bad_request',
      'a disaggregated completion needs one prompt (a string or a list of token ids); send batches as separate requests',
    ),
  );
}

/**
 * Which request field asks vLLM for prompt logprobs, or undefined. vLLM's `to_sampling_params` takes `prompt_logprobs`,
 * and when that is null and `echo` is set, the completion's `logprobs` or the chat's `top_logprobs`, whose default is
 * 0, not null (vllm-project/vllm `vllm/entrypoints/openai/completion/protocol.py` and `chat_completion/protocol.py`
 * @002032ee): any of them not null, 0 included, asks for them. `echo` is read as pydantic reads a boolean, loosely
 * (`"true"`, `1`, `"yes"`); a value it would refuse counts as set (vLLM refuses it anyway).
 */
function promptLogprobsAsked(endpoint: Endpoint, body: Readonly<Record<string, unknown>>): string | undefined {
  const asked = body['prompt_logprobs'];
  if (asked !== undefined && asked !== null) return `prompt_logprobs ${JSON.stringify(asked).slice(0, 32)}`;
  if (!looseBoolean(body['echo'])) return undefined;
  const field = endpoint === 'chat' ? 'top_logprobs' : 'logprobs';
  const implied = body[field] === undefined && endpoint === 'chat' ? 0 : body[field];
  return implied === undefined || implied === null ? undefined : `echo with ${field} ${JSON.stringify(implied).slice(0, 32)}`;
}

/** A JSON value as pydantic's lax boolean reads it: false for absent, null, false, 0 and its false strings; else true. */
function looseBoolean(v: unknown): boolean {
  if (v === undefined || v === null || v === false || v === 0) return false;
  return !(typeof v === 'string' && /^(0|off|f|false|n|no)$/i.test(v));
}

/** What the pure checks learned of a request before any worker computed anything for it. */
export interface RequestShape {
  readonly prompt: PromptCount;
  /**
   * The completion length vLLM checks against `max_model_len`: chat's `max_completion_tokens`, else `max_tokens`
   * (a `max_completion_tokens` that is not a positive integer, 0 included, is refused first: `rewrittenFieldError`);
   * a completion's `max_tokens`, 16 when absent or null (vLLM's default, `requestedMaxTokens`). Undefined when a chat
   * leaves it to vLLM (null: whatever room the prompt leaves).
   */
  readonly maxTokens: number | undefined;
}

/**
 * The checks a sidecar can make on a disaggregated request without any worker: no prompt logprobs (`promptLogprobsAsked`:
 * the decode worker gets the prompt's KV, not its logits; with them asked vLLM's decode engine crashes, issue #50792,
 * or, since PR #57269 made its scheduler skip the connector for such requests, prefills the prompt itself and leaves
 * the transferred KV unread), no `prompt_embeds`, one sequence (`n` 1: vLLM copies the
 * parent's `kv_transfer_params` dict to every child of a parallel-sampling request, `_get_child_sampling_params` in
 * vllm-project/vllm `vllm/v1/engine/parallel_sampling.py` @003d3ee2, which splits a list per child only since PR
 * #38900), one prompt in a form it can count
 * (`toPromptCount`), a truncation vLLM takes, and a completion length that leaves room for a prompt in the worker's
 * `max_model_len` (probed; unknown: not checked). A decode sidecar makes them before its prefill leg starts, since the
 * leg forces `max_tokens: 1` and the prefill side would compute and hold the KV of a request this side then refuses;
 * a prefill sidecar makes them before its worker is called.
 */
export function checkRequestShape(
  endpoint: Endpoint,
  body: Readonly<Record<string, unknown>>,
  maxModelLen: number | undefined,
): Result<RequestShape, KvgateError> {
  const samples = body['n'];
  if (samples !== undefined && samples !== null && samples !== 1) {
    return err(
      new KvgateError(
        'bad_request',
        `n is ${JSON.stringify(samples)}: a disaggregated request generates one sequence. vLLM hands each of n parallel samples the prefill's kv_transfer_params whole, so all n would read the blocks of one prefill that vLLM tracks as one transfer (a list with one entry per sample exists only from vllm-project/vllm PR #38900 on, and kvgate attests one transfer). Send n separate requests, or n 1`,
      ),
    );
  }
  const logprobs = promptLogprobsAsked(endpoint, body);
  if (logprobs !== undefined) {
    return err(
      new KvgateError(
        'bad_request',
        `${logprobs} asks for prompt logprobs, which a disaggregated request cannot give: the decode worker receives the prompt's KV, not its logits (vLLM's decode engine then crashes, vllm-project/vllm#50792, or since PR #57269 computes the whole prompt again and leaves the prefill's KV unread); send it without prompt logprobs, or to a route without a prefill leg`,
      ),
    );
  }
  // Embeddings cannot be disaggregated: this side cannot count or attest an embeddings prompt, and next to a `prompt`
  // vLLM renders both as separate engine requests (embeddings first; `render_prompt_and_embeds` in vllm-project/vllm
  // `vllm/entrypoints/renderer.py` @09b5e071), each handed the one `kv_transfer_params`: the prefill side would compute
  // and hold KV for requests the decode side reads from one attested transfer, as with n > 1.
  if (body['prompt_embeds'] !== undefined && body['prompt_embeds'] !== null) {
    return err(
      new KvgateError(
        'bad_request',
        'prompt_embeds cannot be disaggregated: the decode side cannot count or attest an embeddings prompt, and next to "prompt" vLLM runs both as separate requests that would share one prefill\'s KV transfer; send token ids or text in "prompt" instead',
      ),
    );
  }
  const prompt = toPromptCount(endpoint, body);
  if (!prompt.ok) return prompt;
  const keep = prompt.value.truncation?.tokens;
  if (maxModelLen !== undefined && keep !== undefined && keep > maxModelLen) {
    return err(
      new KvgateError(
        'bad_request',
        `truncate_prompt_tokens (${keep}) is greater than this worker's max_model_len (${maxModelLen}); ask for at most ${maxModelLen}, or -1`,
      ),
    );
  }
  const rewritten = rewrittenFieldError(endpoint, body);
  if (rewritten !== undefined) return err(new KvgateError('bad_request', rewritten));
  const asked = requestedMaxTokens(endpoint, body);
  const param = endpoint === 'chat' && body['max_completion_tokens'] ? 'max_completion_tokens' : 'max_tokens';
  let maxTokens: number | undefined;
  if (typeof asked === 'number') {
    if (!Number.isInteger(asked) || asked < 1) return err(new KvgateError('bad_request', `${param} must be a positive integer`));
    if (maxModelLen !== undefined && asked >= maxModelLen) {
      return err(
        new KvgateError(
          'bad_request',
          `${param} (${asked}) leaves no room for the prompt in this worker's max_model_len (${maxModelLen}); ask for at most ${maxModelLen - 1} minus the prompt's tokens`,
        ),
      );
    }
    maxTokens = asked;
  }
  if (prompt.value.kind === 'known') {
    const fits = checkPromptFits(truncateIds(prompt.value.ids, prompt.value.truncation, maxModelLen).length, maxTokens, maxModelLen);
    if (!fits.ok) return fits;
  }
  return ok({ prompt: prompt.value, maxTokens });
}

/**
 * vLLM's length check, `OpenAIServing._validate_input` (vllm-project/vllm vllm/entrypoints/openai/engine/serving.py
 * @00bd1493; serving_engine.py in v0.10.x): the prompt, as the worker counts it after truncation, must be shorter than
 * `max_model_len` (400 "your request has N input tokens"), and leave room for `maxTokens` when the request names them
 * (400 "'max_tokens' or 'max_completion_tokens' is too large"). Unknown `max_model_len`: ok.
 */
export function checkPromptFits(
  promptTokens: number,
  maxTokens: number | undefined,
  maxModelLen: number | undefined,
): Result<void, KvgateError> {
  if (maxModelLen === undefined) return ok(undefined);
  if (promptTokens >= maxModelLen) {
    return err(
      new KvgateError(
        'bad_request',
        `the prompt is ${promptTokens} tokens, and this worker's max_model_len is ${maxModelLen}; shorten it or set truncate_prompt_tokens`,
      ),
    );
  }
  if (maxTokens !== undefined && promptTokens + maxTokens > maxModelLen) {
    return err(
      new KvgateError(
        'bad_request',
        `the prompt (${promptTokens} tokens) and max_tokens (${maxTokens}) exceed this worker's max_model_len (${maxModelLen}); ask for at most ${maxModelLen - promptTokens} tokens`,
      ),
    );
  }
  return ok(undefined);
}

/** `usage.prompt_tokens` of a completion response, if present. */
export function usagePromptTokens(response: Readonly<Record<string, unknown>>): number | undefined {
  const usage = response['usage'];
  const n = usage !== null && typeof usage === 'object' ? (usage as Record<string, unknown>)['prompt_tokens'] : undefined;
  return typeof n === 'number' && Number.isInteger(n) && n >= 0 ? n : undefined;
}

/** The response's `kv_transfer_params` object, if it has one. */
export function kvParamsOf(response: Readonly<Record<string, unknown>>): Record<string, unknown> | undefined {
  const p = response['kv_transfer_params'];
  return p !== null && typeof p === 'object' && !Array.isArray(p) ? (p as Record<string, unknown>) : undefined;
}
