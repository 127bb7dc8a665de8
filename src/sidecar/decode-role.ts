/**
 * The decode role: coordinate one disaggregated request end to end, checking before every step that the KV about
 * to be consumed means what this worker would have computed.
 *
 *   contract verified (server.ts) -> prefill leg (same group, retried safely) || count the prompt on MY worker
 *                                    || my worker's GET /version against the probed one (launch-check.ts)
 *   -> attestation verified against contract, my fingerprint, my token count and ids, the connector rules
 *   -> original request + attested kv_transfer_params -> local worker -> stream to the client
 *
 * A contract without a prefill leg is served locally. A transfer the worker reports as failed before any token
 * reached the client is recomputed locally (`onTransferFailure: recompute`) or refused; after tokens, the stream
 * ends with an error event. A prefill side that refuses its own KV as incompatible is treated the same way
 * (`afterPrefillRefusal`); a token count that disagrees never is, since it may be this worker that changed.
 */
import type http from 'node:http';
import type { TransferContract } from '../contract/contract.js';
import { KvgateError, ok } from '../errors.js';
import { checkAttestedTransfer } from './attestation-check.js';
import { forwardHeaders, workerHeaders, type IncomingCall, type SidecarContext } from './context.js';
import { sendError } from './http-io.js';
import { confirmDecodeWorker } from './launch-check.js';
import { ATTESTATION_KEY, checkClientKvParams, checkPromptFits, checkRequestShape, kvParamsOf, toPrefillLegBody } from './openai-body.js';
import { workerRefusalCode, workerRefusalReason, type Outcome } from './outcome.js';
import { PREFILL_STATUS, type PrefillLegInput } from './prefill-leg.js';
import { releasePrefillKv } from './prefill-release.js';
import { mayRerunPrefill, noteRerun, rerunsAfter, timedPrefillLeg, type Rerun } from './prefill-rerun.js';
import { countPromptTokens, probedMaxModelLen, tokenizeRefusalReason } from './prompt-count.js';
import { relayCompletion, type RelayResult } from './relay.js';
import { nextTurn } from './shared-read.js';
import { SILENT_RECOMPUTE, silentRecomputeCheck } from './silent-recompute.js';
import type { TransferWindow } from './transfer-watch.js';

/** Handle one decode request whose contract already verified (server.ts). */
export async function serveDecode(
  ctx: SidecarContext,
  call: IncomingCall,
  contract: TransferContract,
  contractToken: string,
  res: http.ServerResponse,
): Promise<Outcome> {
  const requestId = contract.requestId;
  const refuse = (e: KvgateError, outcome: Outcome['outcome'] = 'refused'): Outcome => {
    sendError(res, e, requestId);
    return { outcome, code: e.code, reason: e.reason };
  };
  // A P/D coordinator in front of this sidecar (llm-d's routing sidecar) ran the prefill itself and hands over the
  // prefill sidecar's attested kv_transfer_params; they are checked exactly like this sidecar's own prefill leg.
  const coordinated = coordinatedParams(call.body);
  const forbidden = checkClientKvParams(coordinated === undefined ? call.body : withoutKvParams(call.body), 'decode');
  if (!forbidden.ok) return refuse(forbidden.error);
  const leg = forwardHeaders(call, requestId);
  const headers = workerHeaders(ctx, leg);
  if (contract.prefill === null && coordinated !== undefined) {
    return refuse(
      new KvgateError(
        'contract_invalid',
        'the request carries prefilled kv_transfer_params, but its contract has no prefill leg; only a prefill the gate routed may feed this worker',
      ),
    );
  }
  if (contract.prefill === null) {
    const launch = await confirmDecodeWorker(ctx, call);
    if (!launch.ok) return refuse(launch.error, launch.error.code === 'incompatible_transfer' ? 'refused' : 'failed');
    return local(ctx, call, res, headers, requestId, 'the contract has no prefill leg');
  }
  if (coordinated === undefined && call.body['kv_transfer_params'] === null) {
    // A coordinator (llm-d's P/D sidecar) ran the prefill leg and its answer carried no kv_transfer_params, so it sends
    // `kv_transfer_params: null` (llm-d/llm-d-router `pkg/sidecar/proxy/connector_nixlv2.go` @ebab687). vLLM keeps no
    // KV when the prefill's one token ended the request in versions whose NixlConnector `request_finished` keeps
    // blocks only on a length-capped finish. The gate refuses the field from clients, so only something between gate
    // and sidecar writes it. The contract's prefill was spent there (its prefill sidecar admitted it; a second leg
    // would be refused as a replay), so this worker, verified in the bound group, prefills itself: the same answer as
    // when its own leg comes back without KV.
    const launch = await confirmDecodeWorker(ctx, call);
    if (!launch.ok) return refuse(launch.error, launch.error.code === 'incompatible_transfer' ? 'refused' : 'failed');
    return local(ctx, call, res, headers, requestId, 'the coordinated prefill kept no KV for this request');
  }

  // The cheap checks before the prefill leg: the leg forces max_tokens 1, so the prefill side would compute and hold
  // the KV of a request this side then refuses (a batch, a truncation vLLM refuses, a max_tokens that cannot fit).
  const shape = checkRequestShape(call.endpoint, call.body, probedMaxModelLen(ctx));
  if (!shape.ok) return refuse(shape.error);
  const legInput: PrefillLegInput = {
    contract,
    contractToken,
    path: call.path,
    body: toPrefillLegBody(call.body, contract.priority),
    headers: leg,
    signal: call.signal,
  };
  let window = ctx.transfers.begin();
  try {
    // The prefill leg goes out first: it is the critical path, the checks on this worker only have to beat it. They
    // start one turn later (the shared reads by themselves, the prompt count here), so under a burst every arrived
    // request's prefill leg is written before any check's call.
    const [prefill, count, launch, failedBefore] = await Promise.all([
      coordinated !== undefined
        ? Promise.resolve(ok({ body: { kv_transfer_params: coordinated }, ms: 0, servedBy: undefined }))
        : timedPrefillLeg(ctx, call, legInput),
      nextTurn().then(() => countPromptTokens(ctx, call, headers)),
      confirmDecodeWorker(ctx, call),
      ctx.failedTransfers.read(window.startedAt, call.signal),
    ]);
    const base = { contract, requestId, headers, count, launch, maxTokens: shape.value.maxTokens };
    const mayRerun = mayRerunPrefill(ctx.config, coordinated !== undefined);
    const first = await decodeAfterPrefill(ctx, call, res, { ...base, prefill, window, failedBefore, mayRerun });
    if (!('rerun' in first)) return first;
    // The first leg's KV could not be loaded and nothing reached the client: once more, elsewhere in the group.
    const exclude = prefill.ok && prefill.value.servedBy !== undefined ? [prefill.value.servedBy] : [];
    noteRerun(ctx, call, first, exclude);
    window.end();
    window = ctx.transfers.begin();
    const [again, before] = await Promise.all([
      timedPrefillLeg(ctx, call, { ...legInput, exclude }),
      ctx.failedTransfers.read(window.startedAt, call.signal),
    ]);
    if (!again.ok) {
      // No other prefill endpoint of the group could run it (e.g. the only one is excluded): the first failure stands.
      call.logger.warn({ event: 'prefill_rerun_failed', code: again.error.code }, again.error.reason);
      return await first.answer();
    }
    return (await decodeAfterPrefill(ctx, call, res, {
      ...base,
      prefill: again,
      window,
      failedBefore: before,
      mayRerun: false,
    })) as Outcome;
  } finally {
    window.end();
  }
}

interface AfterPrefill {
  readonly contract: TransferContract;
  readonly requestId: string;
  readonly headers: Record<string, string>;
  readonly count: Awaited<ReturnType<typeof countPromptTokens>>;
  readonly prefill: Awaited<ReturnType<typeof timedPrefillLeg>>;
  readonly launch: Awaited<ReturnType<typeof confirmDecodeWorker>>;
  /** The completion length the request asks for (`RequestShape.maxTokens`). */
  readonly maxTokens: number | undefined;
  readonly window: TransferWindow;
  readonly failedBefore: number | undefined;
  /** Hand back a `Rerun` instead of failing when the KV cannot be loaded before any output (prefill-rerun.ts). */
  readonly mayRerun: boolean;
}

/**
 * The prefill leg is back: check everything, then decode with the attested KV. With `mayRerun`, a KV load failure
 * before any output comes back as a `Rerun` with nothing sent; without it, the answer is always an `Outcome`.
 */
async function decodeAfterPrefill(
  ctx: SidecarContext,
  call: IncomingCall,
  res: http.ServerResponse,
  a: AfterPrefill,
): Promise<Outcome | Rerun> {
  const { contract, requestId, headers, count, prefill, launch } = a;
  // From here until the decode call, a request that ends leaves the prefill worker holding its KV for a read that
  // never comes: free it through this worker where that is safe (prefill-release.ts), before the answer goes out (one
  // local call, bounded), so the request's outcome and audit line follow it.
  const kv = prefill.ok ? kvParamsOf(prefill.value.body) : undefined;
  const release = async (): Promise<void> => {
    if (kv === undefined) return;
    const counted = count.ok ? count.value : undefined;
    await releasePrefillKv(
      ctx,
      call,
      { contract, params: kv, count: counted, launch, headers },
      call.signal.aborted ? 'client_gone' : 'refused',
    );
  };
  const refuse = async (e: KvgateError, outcome: Outcome['outcome'] = 'refused'): Promise<Outcome> => {
    await release();
    sendError(res, e, requestId);
    return { outcome, code: e.code, reason: e.reason };
  };
  // This worker first: if it is no longer what was verified, nothing may run on it, not even a local prefill.
  if (!launch.ok) return refuse(launch.error, launch.error.code === 'incompatible_transfer' ? 'refused' : 'failed');
  // The prompt as this worker counts it must leave room for the completion asked for (the check vLLM makes), so a
  // request it would refuse is refused here, before any KV is pulled for it.
  if (count.ok) {
    const fits = checkPromptFits(count.value.count, a.maxTokens, probedMaxModelLen(ctx));
    if (!fits.ok) return refuse(fits.error);
  }
  if (!prefill.ok) return afterPrefillRefusal(ctx, call, res, headers, requestId, prefill.error);
  const params = kv;
  if (params === undefined) return local(ctx, call, res, headers, requestId, 'the prefill worker kept no KV for this request');
  // A prompt this worker's /tokenize refuses (4xx) is the client's; one it could not count is a worker failure.
  if (!count.ok) {
    if (count.error.status >= 500) return refuse(count.error, 'failed');
    await release();
    sendError(res, count.error, requestId);
    return { outcome: 'refused', code: count.error.code, reason: tokenizeRefusalReason(count.error) };
  }
  const checked = checkAttestedTransfer({
    params,
    contract,
    descriptor: ctx.config.descriptor,
    fingerprint: ctx.config.fingerprint,
    localPromptTokens: count.value.count,
    localPromptTokenDigest: count.value.digest,
    compatMode: ctx.config.compatMode,
    keys: call.keys,
    nowMs: ctx.now(),
  });
  if (!checked.ok) {
    ctx.metrics.attestationFailures.inc({ reason: checked.error.reason });
    call.logger.warn({ event: 'attestation_refused', reason: checked.error.reason }, checked.error.error.reason);
    // Either side's tokenizer or template may have changed (other count, or same count and other ids); a fresh probe
    // of this worker tells the gate if it was this one.
    if (checked.error.reason === 'prompt_tokens_mismatch') void ctx.reverify();
    return refuse(checked.error.error);
  }
  // The client left (or its deadline passed) while this side checked: the decode worker never gets the request.
  if (call.signal.aborted) {
    await release();
    return { outcome: 'failed', code: 'worker_error' };
  }
  const body = { ...call.body, kv_transfer_params: checked.value.params };
  ctx.metrics.addedFirstTokenSeconds.observe(
    { path: 'transfer' },
    Math.max(0, performance.now() - call.receivedAt - prefill.value.ms) / 1000,
  );
  const silent = { seen: false };
  const beforeCommit = silentRecomputeCheck(ctx, call, a.failedBefore, a.window, silent);
  const relayed = await relayCompletion(ctx, call, res, { requestId, body, headers, holdUntilOutput: true, beforeCommit });
  const answer = async (): Promise<Outcome> => {
    if (silent.seen && relayed.kind === 'failed_before_tokens')
      return refuse(
        new KvgateError(
          'worker_error',
          `${SILENT_RECOMPUTE}; onTransferFailure is "fail": retry the request, or set onTransferFailure: recompute to accept local prefills`,
        ),
        'failed',
      );
    return afterTransfer(ctx, call, res, headers, requestId, relayed);
  };
  if (relayed.kind === 'failed_before_tokens' && !res.headersSent && a.mayRerun && (silent.seen || rerunsAfter(relayed.message)))
    return silent.seen
      ? { rerun: 'silent_recompute', message: SILENT_RECOMPUTE, answer }
      : { rerun: 'kv_load_failed', message: relayed.message, answer };
  return answer();
}

/**
 * The prefill leg failed. Only one failure may be answered with a local prefill: the prefill side refusing its own
 * KV as `incompatible_transfer` (its worker changed since it was verified), when `onTransferFailure: recompute` is
 * configured. That is not a transfer failure, but the same trade the operator chose for one: this worker is verified
 * in the bound group (its launch was just confirmed), so its own prefill is that group's baseline, never mixed, and
 * nothing has reached the client yet. Logged and counted. Every other failure, and the default `fail`, is answered
 * with the prefill side's error: a 4xx the prefill side answered is its refusal, audited where it was made (the
 * prefill sidecar, or the gate's hop check), so it is recorded `refused` here without a second audit line.
 */
async function afterPrefillRefusal(
  ctx: SidecarContext,
  call: IncomingCall,
  res: http.ServerResponse,
  headers: Record<string, string>,
  requestId: string,
  e: KvgateError,
): Promise<Outcome> {
  const relayed = refusedByPrefillSide(e);
  if (e.code !== 'incompatible_transfer') {
    sendError(res, e, requestId);
    if (e.status >= 500) return { outcome: 'failed', code: e.code };
    return { outcome: 'refused', code: e.code, reason: e.reason, ...(relayed ? { relayed } : {}) };
  }
  const action = ctx.config.onTransferFailure;
  ctx.metrics.prefillRefusals.inc({ action });
  call.logger.warn({ event: 'prefill_refused', action }, e.reason);
  if (action === 'recompute') {
    const relayed = await relayCompletion(ctx, call, res, { requestId, body: withoutKvParams(call.body), headers, holdUntilOutput: false });
    return relayOutcome(relayed, res, requestId, 'recomputed');
  }
  sendError(res, e, requestId);
  return { outcome: 'refused', code: e.code, reason: e.reason, ...(relayed ? { relayed } : {}) };
}

/** Whether a prefill leg error is the prefill side's own answer (`prefillFailure`), not one this sidecar made. */
function refusedByPrefillSide(e: KvgateError): boolean {
  return typeof e.detail[PREFILL_STATUS] === 'number';
}

/** Serve without a remote prefill: the worker computes the prompt itself (always correct, never mixed). */
async function local(
  ctx: SidecarContext,
  call: IncomingCall,
  res: http.ServerResponse,
  headers: Record<string, string>,
  requestId: string,
  why: string,
): Promise<Outcome> {
  call.logger.info({ event: 'decode_local' }, `serving with a local prefill: ${why}`);
  ctx.metrics.addedFirstTokenSeconds.observe({ path: 'local' }, (performance.now() - call.receivedAt) / 1000);
  const relayed = await relayCompletion(ctx, call, res, { requestId, body: withoutKvParams(call.body), headers, holdUntilOutput: false });
  return relayOutcome(relayed, res, requestId, 'local');
}

async function afterTransfer(
  ctx: SidecarContext,
  call: IncomingCall,
  res: http.ServerResponse,
  headers: Record<string, string>,
  requestId: string,
  relayed: RelayResult,
): Promise<Outcome> {
  if (relayed.kind === 'failed_after_tokens') ctx.metrics.transferFailures.inc({ action: 'after_tokens' });
  if (relayed.kind !== 'failed_before_tokens') return relayOutcome(relayed, res, requestId, 'served');
  ctx.metrics.transferFailures.inc({ action: ctx.config.onTransferFailure });
  call.logger.warn({ event: 'transfer_failed', action: ctx.config.onTransferFailure }, relayed.message);
  if (ctx.config.onTransferFailure === 'recompute') {
    const again = await relayCompletion(ctx, call, res, { requestId, body: withoutKvParams(call.body), headers, holdUntilOutput: false });
    return relayOutcome(again, res, requestId, 'recomputed');
  }
  const handshake = /compatib|handshake/i.test(relayed.message);
  const e = new KvgateError(
    handshake ? 'incompatible_transfer' : 'worker_error',
    `the decode worker could not load the prefilled KV (${relayed.message}); nothing was generated. ` +
      'onTransferFailure is "fail": retry the request, or set onTransferFailure: recompute to prefill locally instead',
  );
  sendError(res, e, requestId);
  // A transfer the worker refused as incompatible is answered as a refusal (409, what the gate counts `refused`), so
  // it is one here, with its audit line; any other failed load is a worker failure.
  // The audit reason names the failure, not the engine's words: the client got those, and a worker's message is
  // never an audit line's text (workerRefusalReason says why).
  const reason =
    'the decode worker refused to load the prefilled KV as incompatible (its handshake or compatibility check failed); ' +
    "the worker's message went to the client and is not logged";
  return handshake ? { outcome: 'refused', code: e.code, reason } : { outcome: 'failed', code: e.code };
}

function relayOutcome(relayed: RelayResult, res: http.ServerResponse, requestId: string, success: Outcome['outcome']): Outcome {
  switch (relayed.kind) {
    case 'sent': {
      if (relayed.status < 400) return { outcome: success };
      // The worker's own error went to the client verbatim; a refusal of what the client sent is recorded as one.
      const code = workerRefusalCode(relayed.status);
      return code === undefined
        ? { outcome: 'failed', code: 'worker_error' }
        : { outcome: 'refused', code, reason: workerRefusalReason('decode', relayed.status) };
    }
    case 'client_gone':
      return { outcome: 'failed', code: 'worker_error' };
    case 'failed_after_tokens':
      return { outcome: 'failed', code: 'worker_error' };
    case 'failed_before_tokens': {
      sendError(res, new KvgateError('worker_error', `the decode worker failed before any output: ${relayed.message}`), requestId);
      return { outcome: 'failed', code: 'worker_error' };
    }
  }
}

/**
 * `kv_transfer_params` a coordinator placed in the decode request after running the prefill through a kvgate
 * prefill sidecar: recognised by the attestation that sidecar added (`kvgate`); anything else stays forbidden.
 */
export function coordinatedParams(body: Readonly<Record<string, unknown>>): Record<string, unknown> | undefined {
  const p = body['kv_transfer_params'];
  if (p === null || typeof p !== 'object' || Array.isArray(p)) return undefined;
  const params = p as Record<string, unknown>;
  return typeof params[ATTESTATION_KEY] === 'string' && params['do_remote_prefill'] === true ? params : undefined;
}

function withoutKvParams(body: Record<string, unknown>): Record<string, unknown> {
  const { kv_transfer_params: _dropped, ...rest } = body;
  return rest;
}
