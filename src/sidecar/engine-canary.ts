/**
 * The engine canary: a one-token prefill with `do_remote_decode`, run at the start of every prefill-role probe, whose
 * only purpose is to read the worker's NIXL engine id (`kv_transfer_params.remote_engine_id`).
 *
 * vLLM draws that id afresh (`uuid4`) at every launch, and no other endpoint reports it (only `/server_info` in dev
 * mode). So it is the one per-launch identity a prefill sidecar can see on every prefill answer: if an answer names
 * another engine than the probe verified, the worker was restarted since, possibly as something else (weights,
 * tokenizer, version), and its KV must not be attested before it is probed again.
 *
 * Cost: the canary's KV (one block) stays on the worker until its lease lapses (`kv_lease_duration`, or
 * `VLLM_NIXL_ABORT_REQUEST_TIMEOUT` before leases): no decode worker will ever pull it, and vLLM frees a producer's
 * blocks only on a consumer's NIXL notification or at expiry. A sidecar cannot send a NIXL notification (the real
 * side channel is ZMQ plus NIXL; the simulator's HTTP `/notify` exists only in the simulator), so each probe leaves
 * one block to expire, counted once in the worker's `vllm:nixl_num_kv_expired_reqs_total`.
 */
import { err, ok, type Result } from '../errors.js';
import { kvParamsOf, PREFILL_KV_PARAMS } from './openai-body.js';

/** `x-request-id` prefix of engine canaries, so logs, metrics and test spies can tell them from real prefills. */
export const ENGINE_CANARY_REQUEST_PREFIX = 'kvgate-engine-canary-';

/** Short on purpose: the canary holds the KV of these tokens until the lease lapses. */
export const ENGINE_CANARY_PROMPT = 'kvgate';

/**
 * The canary's `/v1/completions` body: the prefill shape vLLM's proxies send (`do_remote_decode`, one token, not
 * streamed). `ignore_eos` makes the request finish length-capped, the only finish for which a v2 connector keeps
 * the blocks and answers with `kv_transfer_params`; a sampled EOS would otherwise hide the engine id.
 */
export function engineCanaryRequest(model: string): Record<string, unknown> {
  return {
    model,
    prompt: ENGINE_CANARY_PROMPT,
    max_tokens: 1,
    temperature: 0,
    ignore_eos: true,
    stream: false,
    kv_transfer_params: { ...PREFILL_KV_PARAMS },
  };
}

/** The NIXL engine id in a prefill answer, or why there is none. */
export function engineIdOf(response: Readonly<Record<string, unknown>>): Result<string, string> {
  const params = kvParamsOf(response);
  if (params === undefined) {
    return err(
      'the canary prefill (do_remote_decode) answered without kv_transfer_params; is the worker started with a KV connector as producer (kv_role kv_producer or kv_both)?',
    );
  }
  const id = params['remote_engine_id'];
  if (typeof id !== 'string' || id === '') return err('the canary prefill answered kv_transfer_params without remote_engine_id');
  return ok(id);
}

/**
 * The launch an engine id names. Under data parallelism vLLM's engine core renames every rank's engine id to
 * `<engine_id>_dp<rank>` (vllm-project/vllm `vllm/v1/engine/core.py`, `EngineCoreProc.run_engine_core` /
 * `DPEngineCoreProc`, v0.11.0 to main; the node-local rank in older copies, the global DP rank at @00080ee1, which
 * differ only for a pod started with `--data-parallel-start-rank`; either is a `_dp<digits>` suffix), so one worker
 * answers prefills under several ids that share a base: they are
 * ranks of one launch, not restarts. A restart draws a new base (a fresh uuid4 unless the operator pins
 * `kv_transfer_config.engine_id`; then only the periodic probe's canaries can tell a restart).
 */
export function engineLaunchId(engineId: string): string {
  return engineId.replace(/_dp\d+$/, '');
}
