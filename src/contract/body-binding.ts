/**
 * What a transfer contract binds of the request body: the tenant's cache scope (a digest of the `cache_salt` the gate
 * wrote), the model the client named, and a digest of everything that decides which tokens the prompt becomes. A
 * contract minted for one tenant's request therefore authorises that request's body only: the same contract with
 * another tenant's salt (prefix-cache probing across tenants), another prompt, or no salt at all (an unsalted,
 * shared cache) is refused by every sidecar before its worker is called. Pure (node:crypto).
 */
import { hash } from 'node:crypto';
import { canonicalJson } from '../compat/canonical-json.js';
import { err, ok, type Result } from '../errors.js';

/**
 * Body fields that decide the prompt's tokens (and so the KV a worker computes and caches): the prompt or messages
 * themselves, and every field vLLM's completion and chat paths read while rendering and tokenizing them
 * (vllm-project/vllm, vllm/entrypoints/openai/protocol.py at v0.11.0: CompletionRequest `prompt`, `prompt_embeds`,
 * `suffix`, `add_special_tokens`; ChatCompletionRequest `messages`, `chat_template`, `chat_template_kwargs`, `tools`,
 * `documents`, `add_generation_prompt`, `continue_final_message`, `add_special_tokens`, `mm_processor_kwargs`), and
 * what later versions read there too: `reasoning_effort`, which `ChatCompletionRequest.build_chat_params` merges into
 * the template's kwargs, and `truncate_prompt_tokens` (with `truncation_side`), which `build_tok_params` cuts the
 * prompt's tokens by (vllm/entrypoints/openai/chat_completion/protocol.py @d5dba2d7); and, in later copies of that file
 * (@002032ee), `media_io_kwargs` (how media are loaded: a video's frames are prompt tokens), `tool_choice` and
 * `response_format`, which `build_chat_params` now hands the renderer.
 * The sidecars rewrite none of them on either leg (src/sidecar/openai-body.ts `toPrefillBody`).
 */
export const PROMPT_FIELDS = [
  'prompt',
  'prompt_embeds',
  'suffix',
  'messages',
  'chat_template',
  'chat_template_kwargs',
  'tools',
  'documents',
  'add_generation_prompt',
  'continue_final_message',
  'add_special_tokens',
  'mm_processor_kwargs',
  'reasoning_effort',
  'truncate_prompt_tokens',
  'truncation_side',
  'media_io_kwargs',
  'tool_choice',
  'response_format',
] as const;

/** Why a body does not match its contract. */
export const BODY_BINDING_FAILURE_REASONS = [
  'salt_missing',
  'salt_mismatch',
  'model_mismatch',
  'adapter_mismatch',
  'prompt_mismatch',
] as const;

// One-shot `crypto.hash` (Node >= 20.12): the same digest as createHash().update(text, 'utf8'), without a Hash object.
const sha256 = (text: string): string => hash('sha256', text, 'hex');

/** sha256 (hex) of the canonical JSON of the body's prompt fields: equal for equal prompts, whatever the key order. */
export function promptDigestOf(body: Readonly<Record<string, unknown>>): string {
  const picked: Record<string, unknown> = {};
  for (const k of PROMPT_FIELDS) if (Object.hasOwn(body, k)) picked[k] = body[k];
  return sha256(canonicalJson(picked));
}

/** sha256 (hex) of a `cache_salt`: the contract carries the digest, so a leaked contract does not reveal the salt. */
export function cacheSaltDigestOf(salt: string): string {
  return sha256(salt);
}

/** The contract fields the body is checked against. */
export interface BodyBound {
  readonly requestId: string;
  readonly model: string;
  readonly adapter: string | null;
  readonly cacheSaltDigest: string;
  readonly promptDigest: string;
}

export interface BodyMismatch {
  readonly reason: (typeof BODY_BINDING_FAILURE_REASONS)[number];
  readonly message: string;
}

/**
 * Does `body` carry exactly what the contract authorised? `workerAdapter` is the adapter this worker serves (its
 * declared descriptor's adapter id, or null for base weights).
 */
export function checkBodyBinding(
  contract: BodyBound,
  body: Readonly<Record<string, unknown>>,
  workerAdapter: string | null,
): Result<void, BodyMismatch> {
  const id = contract.requestId;
  const salt = body['cache_salt'];
  if (typeof salt !== 'string' || salt === '') {
    return err({
      reason: 'salt_missing',
      message: `the body of request ${id} has no cache_salt; the gate writes the tenant's salt into every request, so send it through the gate`,
    });
  }
  if (cacheSaltDigestOf(salt) !== contract.cacheSaltDigest) {
    return err({
      reason: 'salt_mismatch',
      message: `the body's cache_salt is not the one the contract of request ${id} authorises; a contract covers one tenant's cache scope only`,
    });
  }
  if (body['model'] !== contract.model) {
    const got = typeof body['model'] === 'string' ? JSON.stringify(body['model'].slice(0, 128)) : 'no model';
    return err({
      reason: 'model_mismatch',
      message: `the body names ${got}, the contract of request ${id} authorises model ${JSON.stringify(contract.model)}`,
    });
  }
  if (contract.adapter !== workerAdapter) {
    return err({
      reason: 'adapter_mismatch',
      message: `the contract of request ${id} authorises adapter ${contract.adapter ?? 'none'}, this worker serves ${workerAdapter ?? 'base weights'}`,
    });
  }
  if (promptDigestOf(body) !== contract.promptDigest) {
    return err({
      reason: 'prompt_mismatch',
      message: `the body's prompt is not the one the gate saw for request ${id}; a contract authorises one prompt, send new prompts through the gate`,
    });
  }
  return ok(undefined);
}
