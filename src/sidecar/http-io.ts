/**
 * HTTP plumbing shared by both roles: bounded body reading, JSON and kvgate-error responses, and calls to upstreams
 * (the local worker, the prefill leg) with a timeout and a failure description a person can act on.
 */
import { serializeBody } from './exact-integers.js';
import type http from 'node:http';
import type { AddressInfo } from 'node:net';
import { boundedBytes } from '../bounded-body.js';
import { err, KvgateError, ok, toErrorBody, type Result } from '../errors.js';
import { H } from '../headers.js';
import { hasNonFiniteNumber, jsonNestingExceeds, MAX_JSON_DEPTH } from '../json-limits.js';

/**
 * The fetch the sidecar uses (keep-alive-fetch.ts over a pooled http.Agent, unless a test injects one). It may also
 * carry `whole`, which reads an entire answer without building a WHATWG Response; `callUpstream` uses it when present.
 */
export type FetchFn = ((input: string, init?: RequestInit) => Promise<Response>) & { readonly whole?: WholeCall };

/** Read an `http:` upstream's whole answer; the same results and failures as `callUpstream` over fetch. */
export type WholeCall = (url: string, call: UpstreamCall) => Promise<Result<UpstreamReply, UpstreamFailure>>;

/** Why a request body was not read: the error for the client, and whether it was the deadline that passed. */
export interface BodyFailure {
  readonly error: KvgateError;
  /** The body did not arrive within `timeoutMs`: answered 408, and the connection is closed (it may never end). */
  readonly timedOut: boolean;
}

/**
 * Read a request body up to `limit` bytes within `timeoutMs`; a larger body is refused without buffering the rest,
 * and one still arriving after the deadline is refused too, so a client trickling bytes cannot hold its caller.
 */
export function readBody(req: http.IncomingMessage, limit: number, timeoutMs: number): Promise<Result<Buffer, BodyFailure>> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let done = false;
    const timer = setTimeout(() => {
      const e = new KvgateError(
        'bad_request',
        `the request body did not arrive within ${timeoutMs} ms (bodyTimeoutMs); send the whole body at once, as the gate forwards it`,
      );
      finish(err({ error: e, timedOut: true }));
    }, timeoutMs);
    timer.unref();
    const finish = (r: Result<Buffer, BodyFailure>): void => {
      clearTimeout(timer);
      if (!done) {
        done = true;
        resolve(r);
      }
    };
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        const e = new KvgateError(
          'body_too_large',
          `the request body exceeds ${limit} bytes; send a smaller request or raise maxBodyBytes`,
        );
        finish(err({ error: e, timedOut: false }));
        req.resume();
        return;
      }
      if (!done) chunks.push(chunk);
    });
    req.on('end', () => finish(ok(Buffer.concat(chunks))));
    req.on('error', (e) =>
      finish(
        err({ error: new KvgateError('bad_request', `the request body could not be read: ${e.message}`, { cause: e }), timedOut: false }),
      ),
    );
  });
}

/** Parse a JSON object body (the OpenAI APIs take nothing else). */
export function parseJsonObject(body: Buffer | string, what = 'the request body'): Result<Record<string, unknown>, KvgateError> {
  let value: unknown;
  const text = typeof body === 'string' ? body : body.toString('utf8');
  // Before parsing: deeper nesting would overflow every recursive walk after it (JSON.stringify included).
  if (jsonNestingExceeds(text))
    return err(new KvgateError('bad_request', `${what} nests objects or arrays more than ${MAX_JSON_DEPTH} levels deep`));
  try {
    value = JSON.parse(text);
  } catch {
    return err(new KvgateError('bad_request', `${what} is not valid JSON`));
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    return err(new KvgateError('bad_request', `${what} must be a JSON object`));
  }
  // JSON.parse reads a literal beyond a double's range (1e400) as Infinity: canonical JSON, and so the contract's
  // prompt digest and the attestation's transfer digest, cannot represent it (it throws), and JSON.stringify would
  // pass it on as null. Refused here, so every walk and digest after this sees finite numbers only.
  if (hasNonFiniteNumber(value)) {
    return err(new KvgateError('bad_request', `${what} holds a number beyond the range of a double (such as 1e400); send finite numbers`));
  }
  return ok(value as Record<string, unknown>);
}

/** Send a JSON answer; after headers went out (a stream) it can only end the response. */
export function sendJson(res: http.ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = `${JSON.stringify(body)}\n`;
  if (res.headersSent) {
    res.end();
    return;
  }
  res.writeHead(status, { ...headers, 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

/**
 * The kvgate refusal shape (README.md, "The external contract"): JSON error body, status from the code (`status`
 * overrides it only where HTTP has a more precise one, e.g. 408 for a body that never arrived), `x-kvgate-reject-reason`.
 */
export function sendError(
  res: http.ServerResponse,
  e: KvgateError,
  requestId: string,
  headers: Record<string, string> = {},
  status: number = e.status,
): void {
  const extra: Record<string, string> = { ...headers, [H.rejectReason]: e.code, [H.requestId]: requestId };
  const retry = e.detail['retryAfterSeconds'];
  if (retry !== undefined) extra['retry-after'] = String(retry);
  sendJson(res, status, toErrorBody(e.code, e.reason, requestId), extra);
}

/** Send a small non-JSON answer (health, metrics, 404). */
export function sendText(res: http.ServerResponse, status: number, type: string, body: string): void {
  res.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

/** What an upstream answered: status, headers and the whole body (for small JSON answers). */
export interface UpstreamReply {
  readonly status: number;
  readonly headers: Headers;
  readonly text: string;
}

/**
 * The longest answer the sidecar reads whole from an upstream: its worker (probes, `/tokenize`, `/version`, a prefill,
 * a completion that is not streamed) and the prefill leg. Each is held in memory before it is parsed, so without a
 * bound a worker that answers without end (lying, broken or compromised) would grow the sidecar until the kernel
 * killed it, and through the prefill leg a prefill worker could do that to the decode sidecars of other pods. vLLM's
 * honest answers stay below it (a 128k-token prompt's token ids are about 1 MB) except `prompt_logprobs` near vLLM's
 * maximum of 20 over a prompt of tens of thousands of tokens, which fails as a worker error.
 */
export const MAX_UPSTREAM_ANSWER_BYTES = 64 * 1024 * 1024;

/** The failure of an answer longer than `limit` bytes (the rest is not read). */
export function answerTooLong(url: string, limit: number): UpstreamFailure {
  return { message: `${url}: the answer is longer than ${limit} bytes; refused unread`, timedOut: false };
}

export interface UpstreamCall {
  /** The longest answer read (bytes); default `MAX_UPSTREAM_ANSWER_BYTES`. */
  readonly maxBytes?: number;
  readonly method?: 'GET' | 'POST';
  readonly body?: unknown;
  readonly headers?: Record<string, string>;
  readonly timeoutMs: number;
  /** Aborts the call when the client goes away or the sidecar closes. */
  readonly signal?: AbortSignal;
}

/** Why an upstream gave no answer: the description, and whether it was our timeout (the upstream may still be working). */
export interface UpstreamFailure {
  readonly message: string;
  readonly timedOut: boolean;
}

/**
 * Call an upstream and read its whole answer. A network failure or timeout is a described error, not a throw. Over
 * the sidecar's own pool (`fetchFn.whole`) no Response, Headers stream or composite AbortSignal is built per call:
 * most of a small call's client-side CPU went there (keep-alive-fetch.ts).
 */
export async function callUpstream(fetchFn: FetchFn, url: string, call: UpstreamCall): Promise<Result<UpstreamReply, UpstreamFailure>> {
  if (fetchFn.whole !== undefined && url.startsWith('http:')) return fetchFn.whole(url, call);
  const res = await openUpstream(fetchFn, url, call);
  if (!res.ok) return res;
  const limit = call.maxBytes ?? MAX_UPSTREAM_ANSWER_BYTES;
  try {
    const text = await boundedText(res.value, limit);
    if (text === undefined) return err(answerTooLong(url, limit));
    return ok({ status: res.value.status, headers: res.value.headers, text });
  } catch (e) {
    return err({ message: describeFetchError(e, url), timedOut: false });
  }
}

/**
 * A Response's body as `text()` reads it (UTF-8, invalid sequences replaced, a leading byte order mark dropped), or
 * undefined once it passes `limit` bytes: the body is then cancelled, not read to its end.
 */
export async function boundedText(res: Response, limit: number): Promise<string | undefined> {
  const bytes = await boundedBytes(res, limit);
  return bytes === undefined ? undefined : new TextDecoder().decode(bytes);
}

/**
 * Abort `controller` when `parent` aborts, with the parent's reason; the returned function drops the link. What
 * `AbortSignal.any` does, at a quarter of its cost per request (17 vs 4.6 us in one process on Node 20) and without
 * the weak references it leaves on a long-lived parent (the sidecar's `closed`) for the garbage collector to clear.
 */
export function abortWith(parent: AbortSignal, controller: AbortController): () => void {
  if (parent.aborted) {
    controller.abort(parent.reason);
    return () => undefined;
  }
  const onAbort = (): void => controller.abort(parent.reason);
  parent.addEventListener('abort', onAbort, { once: true });
  return () => parent.removeEventListener('abort', onAbort);
}

/** Start an upstream call and return the response with its body unread (for streaming). */
export async function openUpstream(fetchFn: FetchFn, url: string, call: UpstreamCall): Promise<Result<Response, UpstreamFailure>> {
  const timeout = AbortSignal.timeout(call.timeoutMs);
  let signal = timeout;
  if (call.signal !== undefined) {
    // Both links live as long as this call's signals do (the request's signal and this call's timeout).
    const both = new AbortController();
    abortWith(timeout, both);
    abortWith(call.signal, both);
    signal = both.signal;
  }
  const headers: Record<string, string> = { ...(call.headers ?? {}) };
  if (call.body !== undefined) headers['content-type'] = 'application/json';
  try {
    const init: RequestInit = { method: call.method ?? (call.body === undefined ? 'GET' : 'POST'), headers, signal };
    if (call.body !== undefined) init.body = serializeBody(call.body);
    return ok(await fetchFn(url, init));
  } catch (e) {
    if (timeout.aborted) return err({ message: `no answer from ${url} within ${call.timeoutMs} ms`, timedOut: true });
    return err({ message: describeFetchError(e, url), timedOut: false });
  }
}

/** undici hides the useful part (`ECONNREFUSED 127.0.0.1:8000`) in `cause`; surface it. */
export function describeFetchError(e: unknown, url: string): string {
  const cause = (e as { cause?: { code?: string; message?: string } } | undefined)?.cause;
  const detail = cause?.code ?? cause?.message ?? (e instanceof Error ? e.message : String(e));
  return `${url}: ${detail}`;
}

/** The `error.message` of an OpenAI/vLLM/kvgate error body, or the raw text cut short. */
export function upstreamMessage(text: string): string {
  try {
    const v = JSON.parse(text) as { error?: { message?: unknown } | string; message?: unknown; detail?: unknown };
    if (typeof v.error === 'string') return v.error;
    if (typeof v.error?.message === 'string') return v.error.message;
    if (typeof v.message === 'string') return v.message;
    if (typeof v.detail === 'string') return v.detail;
  } catch {
    // not JSON: fall through to the raw text
  }
  const t = text.trim();
  return t.length > 500 ? `${t.slice(0, 500)}…` : t || '(empty body)';
}

/** Listen on `host:port` (port 0: any free port); resolves to the bound host and port. */
export async function listen(server: http.Server, hostPort: string): Promise<{ host: string; port: number }> {
  const i = hostPort.lastIndexOf(':');
  const host = hostPort.slice(0, i).replace(/^\[|\]$/g, '');
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(Number(hostPort.slice(i + 1)), host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  return { host, port: (server.address() as AddressInfo).port };
}
