/**
 * The decode side's own count of a request's prompt tokens (and the digest of their ids), rendered and cut exactly as
 * its worker's completion path will, so the attestation check compares like with like: a `/tokenize` call for a text
 * or chat prompt (openai-body.ts `toPromptCount`), then vLLM's `truncate_prompt_tokens` applied to the ids, since
 * `/tokenize` takes no truncation field. A real tokenizer difference still shows: the ids differ before the cut.
 */
import { promptTokenDigestOf } from '../contract/attestation.js';
import { err, KvgateError, ok, type Result } from '../errors.js';
import type { IncomingCall, SidecarContext } from './context.js';
import { callUpstream, parseJsonObject, upstreamMessage } from './http-io.js';
import { toPromptCount, truncateIds, type Truncation } from './openai-body.js';
import { inChildSpan } from './spans.js';

export interface LocalPrompt {
  readonly count: number;
  readonly digest?: string | undefined;
}

/** The detail key of a /tokenize refusal's HTTP status. */
const TOKENIZE_STATUS = 'tokenizeStatus';

/**
 * The audit reason of a prompt the worker's /tokenize refused: its status, never its message. vLLM's validation
 * errors quote the request they refuse, and a /tokenize request is the prompt; the client still gets the message.
 */
export function tokenizeRefusalReason(e: KvgateError): string {
  const status = e.detail[TOKENIZE_STATUS];
  return status === undefined
    ? e.reason
    : `this decode worker could not tokenize the prompt (HTTP ${status}); the worker's message went to the client and is not logged, since it may quote the prompt`;
}

/** The prompt as this decode worker sees it; `headers` authenticate the `/tokenize` call. */
export async function countPromptTokens(
  ctx: SidecarContext,
  call: IncomingCall,
  headers: Record<string, string>,
): Promise<Result<LocalPrompt, KvgateError>> {
  const how = toPromptCount(call.endpoint, call.body, ctx.config.descriptor.engine.version);
  if (!how.ok) return how;
  if (how.value.kind === 'known') {
    const ids = truncateIds(how.value.ids, how.value.truncation, probedMaxModelLen(ctx));
    return ok({ count: ids.length, digest: promptTokenDigestOf(ids) });
  }
  const tokenizeBody = how.value.body;
  const reply = await inChildSpan(
    ctx,
    call,
    'kvgate.sidecar worker tokenize',
    headers,
    (h) =>
      callUpstream(ctx.fetch, `${ctx.workerUrl}/tokenize`, {
        body: tokenizeBody,
        headers: h,
        timeoutMs: ctx.config.probe.timeoutMs,
        signal: call.signal,
      }),
    (r) => !r.ok || r.value.status !== 200,
  );
  if (!reply.ok) return err(new KvgateError('worker_error', `this decode worker could not tokenize the prompt: ${reply.error.message}`));
  if (reply.value.status !== 200) {
    const code = reply.value.status < 500 ? 'bad_request' : 'worker_error';
    // The worker's words go to the client; the status alone to the audit line (tokenizeRefusalReason).
    return err(
      new KvgateError(
        code,
        `this decode worker could not tokenize the prompt (HTTP ${reply.value.status}): ${upstreamMessage(reply.value.text)}`,
        { detail: { [TOKENIZE_STATUS]: reply.value.status } },
      ),
    );
  }
  const parsed = parseJsonObject(reply.value.text, 'the /tokenize answer');
  if (!parsed.ok) return err(new KvgateError('worker_error', parsed.error.reason));
  const local = tokenizedPrompt(parsed.value, how.value.truncation);
  return local === undefined ? err(new KvgateError('worker_error', 'the /tokenize answer has neither count nor tokens')) : ok(local);
}

/** A `/tokenize` answer's count and digest after the request's truncation (`max_model_len` from the same answer). */
export function tokenizedPrompt(answer: Readonly<Record<string, unknown>>, t: Truncation | undefined): LocalPrompt | undefined {
  const tokens = answer['tokens'];
  const ids = Array.isArray(tokens) && tokens.every((x) => Number.isInteger(x)) ? (tokens as number[]) : undefined;
  const count = answer['count'];
  const maxLen = typeof answer['max_model_len'] === 'number' ? answer['max_model_len'] : undefined;
  if (ids !== undefined && (typeof count !== 'number' || count === ids.length)) {
    const cut = truncateIds(ids, t, maxLen);
    return { count: cut.length, digest: promptTokenDigestOf(cut) };
  }
  const n = typeof count === 'number' && Number.isInteger(count) ? count : Array.isArray(tokens) ? tokens.length : undefined;
  if (n === undefined) return undefined;
  const keep = t === undefined ? n : t.tokens === -1 ? (maxLen ?? n) : t.tokens;
  return { count: Math.min(n, keep) };
}

/** The worker's `max_model_len` as the last probe read it (`/v1/models`), if it did. */
export function probedMaxModelLen(ctx: Pick<SidecarContext, 'status'>): number | undefined {
  const v = ctx.status().measured['maxModelLen'];
  return typeof v === 'number' ? v : undefined;
}
