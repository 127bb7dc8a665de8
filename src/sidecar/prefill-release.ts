/**
 * Prefill KV left behind: the prefill leg succeeded, so the prefill worker (P) holds the prompt's blocks for this
 * decode worker (D), and then the request ended without D ever receiving it (the client left or its deadline passed,
 * or this sidecar refused after the leg: the prompt does not fit, it could not be counted, the attestation failed).
 * vLLM's P frees such blocks only when a D notifies it, else at `VLLM_NIXL_ABORT_REQUEST_TIMEOUT` (480 s) before leases
 * or at the lease's end (30 s, connector v4+): a client repeating this would pin prefill capacity for every tenant of
 * the group. What frees them early, read in vLLM (docs/vllm-disaggregation.md §10.1):
 *
 * - `rejected_request`: D's OpenAI layer, from vLLM 0.21 (PR #41269), answers a `do_remote_prefill` request it refuses
 *   before admission by submitting a pre-aborted engine request, whose `request_finished` makes D's worker notify P
 *   with no blocks read (`_with_kv_transfer_rejection_cleanup`, vllm-project/vllm
 *   `vllm/entrypoints/generate/base/serving.py` @015d1c9b; `nixl/pull_scheduler.py` @73ee90a0). The sidecar sends its
 *   worker the request under a model name no worker serves: the model check refuses it (404) and P is notified. No
 *   KV moves, so attested parameters are enough, even ones this worker did not verify for reading.
 * - `handover`: older vLLM has no such path; only a read (or an abort before scheduling, which an HTTP client cannot
 *   time) notifies P. The sidecar then gives its worker the parameters it VERIFIED for this very request (the full
 *   attestation check, prompt token count and ids included) as a one-token, unstreamed decode: exactly the read the
 *   request would have made, on the attested endpoint, whose answer is discarded.
 * - `none`: parameters that are not the attested ones (their notify would go to a host nobody vouched for), a worker
 *   that failed its own launch check, or older vLLM with parameters not verified for reading: P keeps the blocks to
 *   its timeout or lease.
 *
 * Bounded: at most one release per request, awaited by the request's own handler before it answers (so it holds the
 * request's admission slot and nothing runs in the background), one call of at most 5 s, a small answer read. A client
 * cannot amplify it: a release replaces the decode call the request would have made.
 */
import type { KvgateError, Result } from '../errors.js';
import type { TransferContract } from '../contract/contract.js';
import { vllmAtLeast } from '../compat/vllm-defaults.js';
import { checkAttestedTransfer, checkReleasableTransfer } from './attestation-check.js';
import type { IncomingCall, SidecarContext } from './context.js';
import { callUpstream } from './http-io.js';
import { confirmDecodeWorker } from './launch-check.js';
import { countPromptTokens } from './prompt-count.js';

/** Why the blocks were left behind. */
export type ReleaseReason = 'client_gone' | 'refused';
/** How they were released (`none`: left to P's timeout or lease). */
type ReleaseVia = 'rejected_request' | 'handover' | 'none';

/**
 * The model the `rejected_request` names: no deployment serves it, so vLLM's model check refuses it before anything
 * else (under `VLLM_ALLOW_RUNTIME_LORA_UPDATING` with a LoRA resolver plugin, the resolvers are asked for it first and
 * find nothing).
 */
export const RELEASE_MODEL = 'kvgate-release-prefill-kv-not-a-model';

/** The longest release answer read: a 404 error body, or a one-token completion. */
const MAX_RELEASE_ANSWER_BYTES = 256 * 1024;

/**
 * The longest a release waits for its worker (at most `workerTimeoutMs`). A refusal waits for it, so it stays short;
 * a handover cut off while queued is an abort before scheduling, which vLLM answers with the same notification.
 */
const RELEASE_TIMEOUT_MS = 5_000;

/** vLLM whose OpenAI layer notifies P for a refused `do_remote_prefill` request (PR #41269, opened 2026-04-29, merged in May 2026: 0.21 on, read from those dates). */
export function notifiesOnRefusal(vllmVersion: string): boolean {
  return vllmAtLeast(vllmVersion, 0, 21);
}

export interface ReleaseFacts {
  /** The parameters passed the full attestation check for this worker (they may be read here). */
  readonly verified?: Record<string, unknown> | undefined;
  /** The parameters are the attested ones for this contract and group (they may be notified, not read). */
  readonly authentic?: Record<string, unknown> | undefined;
  /** This worker's launch was confirmed for this request (launch-check.ts), or, when that was cut short, last verified. */
  readonly workerTrusted: boolean;
  readonly notifiesOnRefusal: boolean;
}

export type ReleasePlan =
  | { readonly via: Exclude<ReleaseVia, 'none'>; readonly params: Record<string, unknown> }
  | { readonly via: 'none'; readonly why: string };

/** Pure: how to free P's blocks, from what is known about the parameters and this worker. */
export function planRelease(f: ReleaseFacts): ReleasePlan {
  if (f.authentic === undefined) {
    return { via: 'none', why: 'the kv_transfer_params are not the ones a prefill sidecar attested for this contract' };
  }
  if (!f.workerTrusted) return { via: 'none', why: 'this decode worker is not verified now; nothing is sent to it' };
  if (f.notifiesOnRefusal) return { via: 'rejected_request', params: f.authentic };
  if (f.verified !== undefined) return { via: 'handover', params: f.verified };
  return {
    via: 'none',
    why: "this vLLM (before 0.21) frees a prefill worker's blocks only by reading them, and these were not verified for reading here",
  };
}

/** What the decode role knows when the request ends after its prefill leg. */
export interface LeftBehind {
  readonly contract: TransferContract;
  /** The prefill leg's `kv_transfer_params`, attestation included. */
  readonly params: Readonly<Record<string, unknown>>;
  /** This worker's prompt count and digest, when it has them. */
  readonly count?: { readonly count: number; readonly digest?: string | undefined } | undefined;
  readonly launch: Result<void, KvgateError>;
  /** Headers for a call to the worker (request id, worker key). */
  readonly headers: Record<string, string>;
}

/** The facts `planRelease` needs, from the attestation (checked in full when this worker counted the prompt). */
function releaseFacts(ctx: SidecarContext, call: IncomingCall, left: LeftBehind, clientGone: boolean): ReleaseFacts {
  const base = {
    params: left.params,
    contract: left.contract,
    descriptor: ctx.config.descriptor,
    fingerprint: ctx.config.fingerprint,
    compatMode: ctx.config.compatMode,
    keys: call.keys,
    nowMs: ctx.now(),
  };
  const full =
    left.count === undefined
      ? undefined
      : checkAttestedTransfer({ ...base, localPromptTokens: left.count.count, localPromptTokenDigest: left.count.digest });
  const authentic = full?.ok ? full : checkReleasableTransfer(base);
  return {
    verified: full?.ok && left.launch.ok ? full.value.params : undefined,
    authentic: authentic.ok ? authentic.value.params : undefined,
    // A launch check the client's leaving cut short proves nothing either way: the last probe's verdict stands.
    workerTrusted: left.launch.ok || (clientGone && ctx.status().verified),
    notifiesOnRefusal: notifiesOnRefusal(ctx.config.descriptor.engine.version),
  };
}

/**
 * Free the prefill worker's blocks a request left behind, as `planRelease` says: one call to this worker (never to
 * another decode endpoint), one metric increment and one log line. Never throws.
 */
export async function releasePrefillKv(ctx: SidecarContext, call: IncomingCall, left: LeftBehind, reason: ReleaseReason): Promise<void> {
  const clientGone = reason === 'client_gone';
  let facts = releaseFacts(ctx, call, left, clientGone);
  if (clientGone && facts.verified === undefined && facts.authentic !== undefined && !facts.notifiesOnRefusal) {
    // The client left before this worker's prompt count or launch check finished, and this vLLM frees P's blocks only
    // by reading them, which needs both: run them once more without the client (two local calls, in place of the
    // decode call the request would have made).
    const detached: IncomingCall = { ...call, signal: ctx.closed };
    const [count, launch] = await Promise.all([countPromptTokens(ctx, detached, left.headers), confirmDecodeWorker(ctx, detached)]);
    facts = releaseFacts(ctx, detached, { ...left, count: count.ok ? count.value : undefined, launch }, clientGone);
  }
  const plan = planRelease(facts);
  const log = { event: 'prefill_kv_release', reason, via: plan.via, remoteEngineId: left.params['remote_engine_id'] };
  ctx.metrics.prefillKvReleases.inc({ reason, via: plan.via });
  if (plan.via === 'none') {
    call.logger.warn(log, `prefill KV left on the prefill worker until its lease or timeout: ${plan.why}`);
    return;
  }
  const body = plan.via === 'rejected_request' ? rejectedRequestBody(call.body, plan.params) : handoverBody(call.body, plan.params);
  const r = await callUpstream(ctx.fetch, `${ctx.workerUrl}${call.path}`, {
    method: 'POST',
    body,
    headers: left.headers,
    timeoutMs: Math.min(RELEASE_TIMEOUT_MS, ctx.config.workerTimeoutMs),
    signal: ctx.closed,
    maxBytes: MAX_RELEASE_ANSWER_BYTES,
  });
  const answered = r.ok ? r.value.status : undefined;
  // A rejected request is answered 404 (the model check); a handover with 200. Anything else is logged as it came.
  const expected = plan.via === 'rejected_request' ? answered === 404 : answered === 200;
  const message = r.ok ? `worker answered ${r.value.status}` : r.error.message;
  if (expected) call.logger.info({ ...log, status: answered }, `prefill KV released through this decode worker (${plan.via})`);
  else
    call.logger.warn(
      { ...log, status: answered ?? null },
      `prefill KV release through this decode worker may not have freed it: ${message}`,
    );
}

/** The request under a model no worker serves, so vLLM refuses it before admission and notifies P (0.21+). */
export function rejectedRequestBody(body: Readonly<Record<string, unknown>>, params: Record<string, unknown>): Record<string, unknown> {
  const { stream_options: _so, ...rest } = body;
  return { ...rest, model: RELEASE_MODEL, stream: false, kv_transfer_params: params };
}

/**
 * The request as a one-token, unstreamed decode of the verified parameters (the toy proxy's prefill shape, read the
 * other way): the worker reads the blocks, notifies P and stops after one token. Fields that only add to the answer are
 * dropped; `min_tokens` is popped so it cannot exceed the one token (vLLM refuses min_tokens > max_tokens).
 */
export function handoverBody(body: Readonly<Record<string, unknown>>, params: Record<string, unknown>): Record<string, unknown> {
  const {
    stream_options: _so,
    min_tokens: _mt,
    min_completion_tokens: _mct,
    return_token_ids: _rt,
    logprobs: _lp,
    top_logprobs: _tl,
    ...rest
  } = body;
  const out: Record<string, unknown> = { ...rest, stream: false, max_tokens: 1, kv_transfer_params: params };
  if ('max_completion_tokens' in body) out['max_completion_tokens'] = 1;
  return out;
}
