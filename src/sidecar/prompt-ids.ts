/**
 * Prompt token ids, which both sidecars digest so the attestation also catches a tokenizer or chat template change
 * that keeps the prompt token COUNT (a retrained vocabulary renumbers ids; a template edit can swap one token for
 * another). Pure.
 *
 * - Prefill side: the worker is asked for them with vLLM's `return_token_ids: true` (chat answers carry
 *   `prompt_token_ids` at the top level, completions in `choices[0]`); vLLM versions without the option ignore it
 *   and return none, and the attestation then carries the count alone. When the client did not ask for token ids
 *   itself, they are taken out of the answer again (`withoutTokenIds`).
 * - Decode side: the worker's `/tokenize` answer already lists the ids (`tokens`; prompt-count.ts).
 */
import { promptTokenDigestOf } from '../contract/attestation.js';

/** True when the client itself asked for token ids, so the answer keeps them. */
export function clientWantsTokenIds(body: Readonly<Record<string, unknown>>): boolean {
  return body['return_token_ids'] === true;
}

/** The prefill request body with token ids requested from the worker. */
export function withTokenIdsRequested(body: Readonly<Record<string, unknown>>): Record<string, unknown> {
  return { ...body, return_token_ids: true };
}

function tokenIds(value: unknown): number[] | undefined {
  return Array.isArray(value) && value.every((t) => Number.isInteger(t) && (t as number) >= 0) ? (value as number[]) : undefined;
}

function firstChoice(response: Readonly<Record<string, unknown>>): Record<string, unknown> | undefined {
  const choices = response['choices'];
  const c: unknown = Array.isArray(choices) ? choices[0] : undefined;
  return c !== null && typeof c === 'object' && !Array.isArray(c) ? (c as Record<string, unknown>) : undefined;
}

/** The prompt token ids a completion answer carries (`prompt_token_ids`, top level for chat, else the first choice). */
export function promptTokenIdsOf(response: Readonly<Record<string, unknown>>): number[] | undefined {
  return tokenIds(response['prompt_token_ids']) ?? tokenIds(firstChoice(response)?.['prompt_token_ids']);
}

const CHOICE_ID_FIELDS = ['prompt_token_ids', 'token_ids'] as const;

/**
 * The answer as the worker writes it when token ids were not requested: `prompt_token_ids` and every choice's
 * `prompt_token_ids` / `token_ids` set back to null (vLLM serialises these optional fields as null). Fields the
 * worker did not write stay absent.
 */
export function withoutTokenIds(response: Readonly<Record<string, unknown>>): Record<string, unknown> {
  const out: Record<string, unknown> = { ...response };
  if ('prompt_token_ids' in out) out['prompt_token_ids'] = null;
  const choices = out['choices'];
  if (Array.isArray(choices)) {
    out['choices'] = choices.map((c: unknown) => {
      if (c === null || typeof c !== 'object' || Array.isArray(c)) return c;
      const copy: Record<string, unknown> = { ...(c as Record<string, unknown>) };
      for (const k of CHOICE_ID_FIELDS) if (k in copy) copy[k] = null;
      return copy;
    });
  }
  return out;
}

/**
 * The digest to attest for a prefill answer: only when its prompt token ids are present and agree with the count
 * it reports (an answer that contradicts itself is attested on the count alone, as before digests existed).
 */
export function attestableDigest(
  response: Readonly<Record<string, unknown>>,
  promptTokens: number,
): { digest?: string; inconsistent?: number } {
  const ids = promptTokenIdsOf(response);
  if (ids === undefined) return {};
  if (ids.length !== promptTokens) return { inconsistent: ids.length };
  return { digest: promptTokenDigestOf(ids) };
}
