/**
 * The prefill role: run a verified request's prefill on the local worker exactly as vLLM's proxies do (one output
 * token, `do_remote_decode`), and sign what was computed: fingerprint, prompt token count and (when the worker returns
 * the prompt token ids) their digest, block size and layout, engine id, request, group and tenant scope. The ids
 * are asked for with `return_token_ids` and taken out of the answer again unless the client asked for them too.
 * Only answers from the launch the last probe verified are signed
 * (launch-check.ts): a worker upgraded in place since is re-probed first, and refused with 409
 * `incompatible_transfer` unless it still matches its declaration. The attestation rides back inside `kv_transfer_params` under
 * `kvgate`, so the decode side can check it before it lets its worker pull a single block.
 */
import type http from 'node:http';
import type { TransferContract } from '../contract/contract.js';
import { mintAttestation, transferParamsDigestOf } from '../contract/attestation.js';
import { normalizeKvLayout } from '../compat/normalize.js';
import { KvgateError } from '../errors.js';
import { forwardHeaders, workerHeaders, type IncomingCall, type SidecarContext } from './context.js';
import { inChildSpan } from './spans.js';
import { callUpstream, parseJsonObject, sendError, sendJson } from './http-io.js';
import { confirmPrefillEngine } from './launch-check.js';
import { ATTESTATION_KEY, checkClientKvParams, checkRequestShape, kvParamsOf, toPrefillBody, usagePromptTokens } from './openai-body.js';
import { probedMaxModelLen } from './prompt-count.js';
import { H } from '../headers.js';
import { workerRefusalCode, workerRefusalReason, type Outcome } from './outcome.js';
import { attestableDigest, clientWantsTokenIds, withoutTokenIds, withTokenIdsRequested } from './prompt-ids.js';

function servedBy(ctx: SidecarContext): Record<string, string> {
  return ctx.config.advertise === undefined ? {} : { [H.servedBy]: ctx.config.advertise };
}

/** Handle one prefill request whose contract already verified (server.ts). */
export async function servePrefill(
  ctx: SidecarContext,
  call: IncomingCall,
  contract: TransferContract,
  res: http.ServerResponse,
): Promise<Outcome> {
  const requestId = contract.requestId;
  const fail = (e: KvgateError, outcome: Outcome['outcome'] = 'failed'): Outcome => {
    sendError(res, e, requestId, servedBy(ctx));
    return { outcome, code: e.code, reason: e.reason };
  };
  if (contract.prefill === null) {
    const e = new KvgateError(
      'contract_invalid',
      'the contract has no prefill leg, so no prefill may run for it; the gate routed a non-disaggregated request to a prefill pool',
    );
    sendError(res, e, requestId, servedBy(ctx));
    return { outcome: 'refused', code: e.code, reason: e.reason };
  }
  const forbidden = checkClientKvParams(call.body, 'prefill');
  if (!forbidden.ok) {
    sendError(res, forbidden.error, requestId, servedBy(ctx));
    return { outcome: 'refused', code: forbidden.error.code, reason: forbidden.error.reason };
  }
  // The decode side makes the same checks before its leg; a caller that did not (a coordinator, another decode
  // sidecar) must not have this worker compute and hold KV that no decode will use.
  const shape = checkRequestShape(call.endpoint, call.body, probedMaxModelLen(ctx));
  if (!shape.ok) return fail(shape.error, 'refused');
  const reply = await inChildSpan(
    ctx,
    call,
    'kvgate.sidecar worker prefill',
    forwardHeaders(call, requestId),
    (headers) =>
      callUpstream(ctx.fetch, `${ctx.workerUrl}${call.path}`, {
        body: withTokenIdsRequested(toPrefillBody(call.body)),
        headers: workerHeaders(ctx, headers),
        timeoutMs: ctx.config.prefill.timeoutMs,
        signal: call.signal,
      }),
    (r) => !r.ok || r.value.status !== 200,
  );
  if (!reply.ok) return fail(new KvgateError('worker_error', `the prefill worker did not answer: ${reply.error.message}`));
  if (reply.value.status !== 200) {
    // The worker's own error, verbatim (status and body), so the decode side can tell retryable from final.
    const { status, text } = reply.value;
    const type = reply.value.headers.get('content-type') ?? 'application/json';
    res.writeHead(status, { 'content-type': type, ...servedBy(ctx), 'x-request-id': requestId });
    res.end(text);
    // A request the worker refused as the client sent it is this sidecar's refusal to audit (the decode side only relays it).
    const code = workerRefusalCode(status);
    if (code === undefined) return { outcome: 'failed', code: 'worker_error' };
    return { outcome: 'refused', code, reason: workerRefusalReason('prefill', status) };
  }
  const parsed = parseJsonObject(reply.value.text, "the prefill worker's answer");
  if (!parsed.ok) return fail(new KvgateError('worker_error', parsed.error.reason));
  const response = parsed.value;
  // What the client gets is the worker's answer as it would be without the token ids this sidecar asked for.
  const answer = clientWantsTokenIds(call.body) ? response : withoutTokenIds(response);
  const params = kvParamsOf(response);
  if (params === undefined) {
    // vLLM keeps no blocks for this request (e.g. it stopped on EOS); the decode side prefills locally.
    call.logger.info({ event: 'prefill_without_kv' }, 'the prefill worker returned no kv_transfer_params');
    sendJson(res, 200, answer, servedBy(ctx));
    return { outcome: 'served' };
  }
  const attested = await attest(ctx, call, contract, response, params);
  // The blocks the refused prefill holds are never pulled; the worker frees them when their lease lapses.
  if (!attested.ok) return fail(attested.error, attested.error.code === 'incompatible_transfer' ? 'refused' : 'failed');
  sendJson(res, 200, { ...answer, kv_transfer_params: { ...params, [ATTESTATION_KEY]: attested.token } }, servedBy(ctx));
  return { outcome: 'served' };
}

/**
 * Sign what the worker computed, but only for the launch the last probe verified: an answer from another engine
 * (the worker was restarted in place since) is attested only after a fresh probe verifies that launch.
 */
async function attest(
  ctx: SidecarContext,
  call: IncomingCall,
  contract: TransferContract,
  response: Record<string, unknown>,
  params: Record<string, unknown>,
): Promise<{ ok: true; token: string } | { ok: false; error: KvgateError }> {
  const engineId = params['remote_engine_id'];
  const promptTokens = usagePromptTokens(response);
  if (typeof engineId !== 'string' || engineId === '') {
    return {
      ok: false,
      error: new KvgateError(
        'worker_error',
        'the prefill worker returned kv_transfer_params without remote_engine_id; its KV cannot be attested',
      ),
    };
  }
  if (promptTokens === undefined) {
    return {
      ok: false,
      error: new KvgateError(
        'worker_error',
        'the prefill worker returned no usage.prompt_tokens; the prompt token count cannot be attested',
      ),
    };
  }
  const launch = await confirmPrefillEngine(ctx, engineId, call.logger);
  if (!launch.ok) return { ok: false, error: launch.error };
  const ids = attestableDigest(response, promptTokens);
  if (ids.inconsistent !== undefined) {
    call.logger.warn(
      { event: 'prompt_ids_inconsistent', promptTokens, promptTokenIds: ids.inconsistent },
      'the prefill worker returned prompt token ids that disagree with usage.prompt_tokens; attesting the count alone',
    );
  }
  const now = ctx.now();
  const token = mintAttestation(
    {
      requestId: contract.requestId,
      groupId: contract.groupId,
      fingerprint: ctx.config.fingerprint,
      tenantScope: contract.tenantScope,
      promptTokens,
      promptTokenDigest: ids.digest,
      transferDigest: transferParamsDigestOf(withoutAttestation(params)),
      blockSize: ctx.config.descriptor.kvCache.blockSize,
      layout: normalizeKvLayout(ctx.config.descriptor.kvCache.layout) === 'NHD' ? 'NHD' : 'HND',
      engineId,
      issuedAtMs: now,
      expiresAtMs: now + ctx.config.attestationTtlMs,
    },
    call.keys,
  );
  return { ok: true, token };
}

/** The worker's kv_transfer_params as the decode side will receive them, minus kvgate's own key. */
function withoutAttestation(params: Record<string, unknown>): Record<string, unknown> {
  const { [ATTESTATION_KEY]: _own, ...rest } = params;
  return rest;
}
