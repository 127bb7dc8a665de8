/**
 * The decode sidecar's prefill leg: send the prefill request to a prefill worker of the SAME group, retrying only
 * what is safe to retry, and turn every failure into a kvgate error that keeps the prefill worker's message.
 *
 * Routing: by default through Envoy's internal listener with the contract, so the gate checks the hop and picks a
 * prefill endpoint of the contract's group; a retry names the endpoints that failed (`x-kvgate-retry-exclude`) so
 * the gate picks another one in that group, never one outside it. In `direct` mode the only address ever called is
 * the prefill endpoint the signed contract names (an SSRF guard: a client cannot point the sidecar anywhere).
 *
 * Retried: 502, 503, 504 and connection failures, with bounded attempts and exponential backoff. Not retried:
 * timeouts (the prefill may still be running), 500/501 and 4xx, which are final.
 */
import type { TransferContract } from '../contract/contract.js';
import { err, isErrorCode, KvgateError, ok, type ErrorCode, type Result } from '../errors.js';
import { H } from '../headers.js';
import { isIpPort } from '../policy/schema.js';
import type { SidecarConfig } from './config.js';
import type { SidecarContext } from './context.js';
import { callUpstream, parseJsonObject, upstreamMessage, type UpstreamReply } from './http-io.js';

const RETRYABLE = new Set([502, 503, 504]);

/** Where the prefill leg goes. Pure; refuses any address that does not come from the signed contract. */
export function prefillTargetUrl(
  via: SidecarConfig['prefill']['via'],
  contract: TransferContract,
  path: string,
): Result<string, KvgateError> {
  if (via !== 'direct') return ok(`${via.envoy.replace(/\/+$/, '')}${path}`);
  const endpoint = contract.prefill?.endpoint ?? null;
  if (endpoint === null) {
    return err(
      new KvgateError(
        'internal',
        'direct prefill needs the contract to name a prefill endpoint, and this one leaves the choice to Envoy; set prefill.via to { envoy: <internal listener URL> }',
      ),
    );
  }
  if (!isIpPort(endpoint)) {
    return err(
      new KvgateError(
        'contract_invalid',
        `the contract's prefill endpoint ${JSON.stringify(endpoint.slice(0, 80))} is not an ip:port literal; refusing to call it`,
      ),
    );
  }
  return ok(`http://${endpoint}${path}`);
}

export interface PrefillLegInput {
  readonly contract: TransferContract;
  readonly contractToken: string;
  readonly path: string;
  readonly body: Record<string, unknown>;
  readonly headers: Record<string, string>;
  readonly signal: AbortSignal;
  /**
   * Prefill endpoints this request must not use again (a leg run again after its KV could not be loaded): sent as
   * `x-kvgate-retry-exclude` from the first attempt, so the gate's hop check picks another one of the same group.
   */
  readonly exclude?: readonly string[];
}

/** The prefill answer, and the prefill endpoint that gave it (as its sidecar named itself) when known. */
export interface PrefillLegResult {
  readonly body: Record<string, unknown>;
  readonly servedBy: string | undefined;
}

/** Backoff before attempt `n` (1-based retries): doubling from `backoffMs`, capped at `maxBackoffMs`. */
export function backoffMs(retry: number, cfg: Pick<SidecarConfig['prefill'], 'backoffMs' | 'maxBackoffMs'>): number {
  return Math.min(cfg.backoffMs * 2 ** (retry - 1), cfg.maxBackoffMs);
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (ms <= 0 || signal.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done(): void {
      clearTimeout(t);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });
}

/** Run the prefill leg. Resolves to the prefill response JSON, or a kvgate error for the client. */
export async function runPrefillLeg(ctx: SidecarContext, input: PrefillLegInput): Promise<Result<PrefillLegResult, KvgateError>> {
  const target = prefillTargetUrl(ctx.config.prefill.via, input.contract, input.path);
  if (!target.ok) return target;
  const cfg = ctx.config.prefill;
  const excluded: string[] = [...(input.exclude ?? [])];
  let last: { reply?: UpstreamReply; error?: string } = {};
  for (let attempt = 1; attempt <= cfg.maxAttempts; attempt++) {
    if (attempt > 1) await sleep(backoffMs(attempt - 1, cfg), input.signal);
    if (input.signal.aborted) return err(new KvgateError('worker_error', 'the request was cancelled during the prefill leg'));
    const headers: Record<string, string> = { ...input.headers, [H.contract]: input.contractToken };
    if (excluded.length > 0) headers[H.retryExclude] = excluded.join(',');
    const reply = await callUpstream(ctx.fetch, target.value, {
      body: input.body,
      headers,
      timeoutMs: cfg.timeoutMs,
      signal: input.signal,
    });
    if (!reply.ok) {
      last = { error: reply.error.message };
      // A timeout is final: the prefill may still be running, and a second one would double the work.
      if (reply.error.timedOut || attempt === cfg.maxAttempts) break;
      ctx.metrics.prefillRetries.inc({ status: '0' });
    } else if (reply.value.status === 200) {
      const parsed = parseJsonObject(reply.value.text, 'the prefill answer');
      if (!parsed.ok) return err(new KvgateError('worker_error', parsed.error.reason));
      return ok({ body: parsed.value, servedBy: servedByOf(reply.value, input.contract, excluded) });
    } else {
      last = { reply: reply.value };
      if (!RETRYABLE.has(reply.value.status) || attempt === cfg.maxAttempts) break;
      ctx.metrics.prefillRetries.inc({ status: String(reply.value.status) });
    }
    const failed = failedEndpoint(last.reply, input.contract, attempt);
    if (failed !== undefined && !excluded.includes(failed)) excluded.push(failed);
    ctx.logger.warn(
      { event: 'prefill_retry', attempt, status: last.reply?.status ?? 0, excluded },
      'retrying the prefill leg inside the bound group',
    );
  }
  return err(prefillFailure(last, cfg.maxAttempts));
}

/**
 * The endpoint that answered: as the prefill sidecar named itself, else the contract's when nothing was excluded (the
 * gate's hop check then serves the planned endpoint while it is usable; unknown otherwise).
 */
function servedByOf(reply: UpstreamReply, contract: TransferContract, excluded: readonly string[]): string | undefined {
  const named = reply.headers.get(H.servedBy) ?? undefined;
  if (named !== undefined && isIpPort(named)) return named;
  return excluded.length === 0 ? (contract.prefill?.endpoint ?? undefined) : undefined;
}

/** The endpoint that just failed: as the prefill sidecar named itself, else (first try) the one the contract named. */
function failedEndpoint(reply: UpstreamReply | undefined, contract: TransferContract, attempt: number): string | undefined {
  const named = reply?.headers.get(H.servedBy) ?? undefined;
  if (named !== undefined && isIpPort(named)) return named;
  return attempt === 1 ? (contract.prefill?.endpoint ?? undefined) : undefined;
}

const STATUS_CODES: Readonly<Record<number, ErrorCode>> = { 404: 'unknown_model', 413: 'body_too_large', 429: 'queue_full' };

/**
 * The `detail` key of a prefill leg error that is the prefill side's own answer: the HTTP status it answered. Such a
 * refusal was audited where it was made (the prefill sidecar, or the gate's hop check); the decode side only relays it.
 */
export const PREFILL_STATUS = 'prefillStatus';

/** A final prefill failure as the client will see it: the prefill side's own code and message where it gave one. */
export function prefillFailure(last: { reply?: UpstreamReply; error?: string }, attempts: number): KvgateError {
  if (last.reply === undefined) {
    return new KvgateError('worker_error', `the prefill leg failed: ${last.error ?? 'no answer'}`);
  }
  const { status, text } = last.reply;
  const message = upstreamMessage(text);
  const detail = { detail: { [PREFILL_STATUS]: status } };
  const tried = RETRYABLE.has(status) && attempts > 1 ? ` after ${attempts} attempts inside the bound group` : '';
  const kvgateCode = kvgateErrorCode(last.reply);
  if (kvgateCode !== undefined) return new KvgateError(kvgateCode, `the prefill leg was refused${tried}: ${message}`, detail);
  if (status >= 400 && status < 500) {
    return new KvgateError(
      STATUS_CODES[status] ?? 'bad_request',
      `the prefill worker refused the request (HTTP ${status}): ${message}`,
      detail,
    );
  }
  return new KvgateError('worker_error', `the prefill worker failed (HTTP ${status})${tried}: ${message}`, detail);
}

/**
 * The kvgate code of a refusal kvgate made on the prefill side (the prefill sidecar's `sendError`, the gate's hop check
 * on the internal listener), or undefined. Both send it as `x-kvgate-reject-reason` beside the JSON body; a body alone
 * is not enough, because the prefill sidecar hands its worker's own error answers on with their body as it came (and
 * never with that header): a prefill worker writing `{"error":{"type":"kvgate_error","code":"mixed_revision"}}` into its
 * 4xx would otherwise have the decode side refuse under kvgate's code, counted by the gate as a sidecar's refusal of
 * that kind (`kvgate_routed_responses_total`, the alerts on it) and shown to the client as kvgate's finding.
 */
function kvgateErrorCode(reply: UpstreamReply): ErrorCode | undefined {
  const header = reply.headers.get(H.rejectReason) ?? undefined;
  if (header === undefined || !isErrorCode(header)) return undefined;
  try {
    const e = (JSON.parse(reply.text) as { error?: { type?: unknown; code?: unknown } }).error;
    return e?.type === 'kvgate_error' && e.code === header ? header : undefined;
  } catch {
    return undefined;
  }
}
