/**
 * Request fields refused wherever a body is read, at the gate (src/decide/request-facts.ts) and again at both sidecars
 * (src/sidecar/server.ts), because vLLM would run the request outside what kvgate bound and attested: the one check
 * both call, client media ids and media URLs (src/client-media.ts) included. Pure.
 */
import { clientMediaRefusal } from './client-media.js';
import type { MediaPolicy } from './media-url.js';

/** The OpenAI paths kvgate serves, as both readers name them. */
type Endpoint = 'completions' | 'chat';

/**
 * Prompt fields of the other path. A transfer contract binds the body's prompt fields (src/contract/body-binding.ts)
 * but not the path the gate minted it for, and vLLM's request models ignore fields they do not declare: a completions
 * body that also carried `messages`, or a chat body that also carried `prompt`, would be a prompt on both paths, and
 * its contract could be spent on the path the gate did not decide (vllm-project/vllm
 * `vllm/entrypoints/openai/completion/protocol.py` and `chat_completion/protocol.py` @002032ee: `CompletionRequest`
 * reads `prompt` and `prompt_embeds`, `ChatCompletionRequest` reads `messages`). With each path's body free of the
 * other's, a body has a prompt on one path only: sent to the other, the sidecar's shape checks and vLLM refuse it for
 * its missing prompt. The sidecars check this from the request's own path, so no contract field is needed and no
 * upgrade order either. A null is no value (vLLM reads it as absent).
 */
const OTHER_PATH_PROMPT_FIELDS: Readonly<Record<Endpoint, readonly string[]>> = {
  completions: ['messages'],
  chat: ['prompt', 'prompt_embeds'],
};

const PATH_OF: Readonly<Record<Endpoint, string>> = { completions: '/v1/completions', chat: '/v1/chat/completions' };

/**
 * Why the body asks for something kvgate does not route, or undefined.
 *
 * - `use_beam_search` (any value but absent, null or false): vLLM then runs `beam_search` instead of one engine
 *   request, a request per beam and step, each with sampling parameters it builds itself (`max_tokens` 1, logprobs),
 *   never the request's own, so without its `kv_transfer_params` (vllm-project/vllm
 *   `vllm/entrypoints/openai/completion/serving.py` @030ea52e and `chat_completion/serving.py` @006c49d4 take
 *   `request.use_beam_search` to `self.beam_search`; `vllm/entrypoints/generate/beam_search/online.py`): the prefill
 *   leg computes the prompt and keeps nothing for the decode side, and the decode worker ignores the attested transfer
 *   and prefills the prompt itself, so the transfer kvgate attested never happens. Earlier copies of that loop
 *   (`OpenAIServing.beam_search` in `vllm/entrypoints/openai/serving_engine.py`, as read in late-2025 copies) also built each step's
 *   prompt from token ids, multimodal data and processor kwargs alone, without the request's `cache_salt`, so the
 *   steps ran in the unsalted prefix cache every tenant's beam searches share; current copies carry the salt over
 *   (`vllm/beam_search.py` @00634b8a `BeamSearchSequence.get_prompt`).
 * - `priority` other than 0 (absent and null pass): with `--scheduling-policy priority` vLLM orders its waiting queue by
 *   it (lower first) and preempts running requests for an earlier one, so a client naming its own priority on a pool
 *   several tenants share would go before every other tenant and evict their running requests (whose KV is then
 *   recomputed, the transferred KV of a decode included); without that policy vLLM refuses any priority but 0
 *   (`CompletionRequest.priority` in `vllm/entrypoints/openai/completion/protocol.py` @002032ee). Its header twin,
 *   `X-Vllm-Priority` (`_get_priority`, `vllm/entrypoints/generate/base/serving.py` @015d1c9b), never reaches a worker:
 *   the sidecars forward no client header but `authorization` (src/sidecar/context.ts `forwardHeaders`).
 * - a prompt field of the other path (`OTHER_PATH_PROMPT_FIELDS`).
 * - a client-chosen media id, or a media URL a worker would fetch that `media` does not allow, in `messages`, on either
 *   path (`clientMediaRefusal`), checked first. The gate passes its route table's `media`, each sidecar its own config's.
 */
export function refusedRequestField(body: Readonly<Record<string, unknown>>, endpoint: Endpoint, media: MediaPolicy): string | undefined {
  const refused = clientMediaRefusal(body['messages'], media);
  if (refused !== undefined) return refused;
  const beam = body['use_beam_search'];
  if (beam !== undefined && beam !== null && beam !== false) {
    return 'use_beam_search is not served through kvgate: vLLM runs beam search as requests it builds itself, without the KV transfer the gate bound (the prefill leg is wasted and the decode worker prefills again), and older vLLM ran them outside the tenant\'s cache_salt; remove "use_beam_search"';
  }
  const priority = body['priority'];
  if (priority !== undefined && priority !== null && priority !== 0) {
    return `priority ${JSON.stringify(priority).slice(0, 32)} is not taken from a client: on workers several tenants share, vLLM's priority scheduling would put this request before every other tenant's and preempt theirs; remove "priority" (or send 0)`;
  }
  for (const field of OTHER_PATH_PROMPT_FIELDS[endpoint]) {
    const v = body[field];
    if (v !== undefined && v !== null) {
      return `"${field}" is a prompt field of the other path, not of ${PATH_OF[endpoint]}: vLLM ignores it here, and a body with a prompt for both paths is refused (its contract binds the prompt, not the path); send ${field === 'messages' ? '"messages" to /v1/chat/completions' : `"${field}" to /v1/completions`}, or remove it`;
    }
  }
  return undefined;
}
