/**
 * Relaying the local worker's completion to the client. Streams are piped as they arrive with backpressure (a slow
 * client slows the read from the worker; nothing is buffered beyond the first events).
 *
 * When the request carried `kv_transfer_params`, the relay first holds the stream until the first event that carries
 * output: a failure the worker reports before that (an error answer, an `error` event, or a choice finishing with
 * `finish_reason: "error"`, which is how vLLM reports a failed KV load under `kv_load_failure_policy: fail`) is
 * returned to the caller with nothing sent, so it can recompute or refuse cleanly. After output was sent, a failure
 * ends the stream with an SSE error event and `[DONE]`: the client sees that it stopped and why, and never a
 * silent switch to another computation. A held stream that ends before any output or finish_reason failed too (some
 * vLLM versions drop an error that comes before the first token; `ENDED_WITHOUT_OUTPUT`).
 */
import type http from 'node:http';
import { toErrorBody } from '../errors.js';
import type { IncomingCall, SidecarContext } from './context.js';
import { answerTooLong, boundedText, describeFetchError, MAX_UPSTREAM_ANSWER_BYTES, openUpstream, upstreamMessage } from './http-io.js';
import { bodyTapOf, type BodyTap } from './keep-alive-fetch.js';
import { inChildSpan } from './spans.js';
import { classifyEvent, SseSplitter, sseErrorFrames } from './sse.js';

export type RelayResult =
  /** The worker's answer reached the client: its status. */
  | { readonly kind: 'sent'; readonly status: number }
  /** Nothing reached the client: the caller decides (recompute, or a kvgate error). */
  | { readonly kind: 'failed_before_tokens'; readonly message: string }
  /** Output reached the client, then the worker failed; the stream was ended with an error event. */
  | { readonly kind: 'failed_after_tokens'; readonly message: string }
  | { readonly kind: 'client_gone' };

export interface RelayOptions {
  readonly requestId: string;
  readonly body: Record<string, unknown>;
  readonly headers: Record<string, string>;
  /** Hold the response until output is seen, and report failures before it instead of relaying them. */
  readonly holdUntilOutput: boolean;
  /**
   * With `holdUntilOutput`: asked once, when the first output is about to be sent; a message turns the answer into
   * `failed_before_tokens` (the worker reported success, but something else says the transfer failed).
   */
  readonly beforeCommit?: () => Promise<string | undefined>;
}

/** Send `body` to the local worker and relay its answer to `res`. */
export function relayCompletion(
  ctx: SidecarContext,
  call: IncomingCall,
  res: http.ServerResponse,
  opts: RelayOptions,
): Promise<RelayResult> {
  // One span per worker call, from the request to the end of the relayed answer; its traceparent goes to the worker.
  return inChildSpan(
    ctx,
    call,
    'kvgate.sidecar worker completion',
    opts.headers,
    (headers) => relay(ctx, call, res, { ...opts, headers }),
    (r) => r.kind !== 'sent',
  );
}

async function relay(ctx: SidecarContext, call: IncomingCall, res: http.ServerResponse, opts: RelayOptions): Promise<RelayResult> {
  const url = `${ctx.workerUrl}${call.path}`;
  const upstream = await openUpstream(ctx.fetch, url, {
    body: opts.body,
    headers: opts.headers,
    timeoutMs: ctx.config.workerTimeoutMs,
    signal: call.signal,
  });
  if (!upstream.ok)
    return call.signal.aborted ? { kind: 'client_gone' } : { kind: 'failed_before_tokens', message: upstream.error.message };
  const response = upstream.value;
  const type = response.headers.get('content-type') ?? 'application/json';
  if (response.status === 200 && type.startsWith('text/event-stream') && response.body !== null) {
    return relayStream(response, res, call, opts, url);
  }
  let text: string | undefined;
  try {
    text = await boundedText(response, MAX_UPSTREAM_ANSWER_BYTES);
    if (text === undefined) return { kind: 'failed_before_tokens', message: answerTooLong(url, MAX_UPSTREAM_ANSWER_BYTES).message };
  } catch (e) {
    return call.signal.aborted ? { kind: 'client_gone' } : { kind: 'failed_before_tokens', message: describeFetchError(e, url) };
  }
  if (opts.holdUntilOutput) {
    const failure =
      response.status >= 500
        ? `HTTP ${response.status}: ${upstreamMessage(text)}`
        : response.status === 200
          ? jsonFailure(text)
          : undefined;
    if (failure !== undefined) return { kind: 'failed_before_tokens', message: failure };
    const vetoed = response.status === 200 ? await opts.beforeCommit?.() : undefined;
    if (vetoed !== undefined) return { kind: 'failed_before_tokens', message: vetoed };
  }
  res.writeHead(response.status, { 'content-type': type, 'content-length': Buffer.byteLength(text), 'x-request-id': opts.requestId });
  res.end(text);
  // The worker's message is not kept: the client has it, and a refusal's may quote the prompt (workerRefusalReason).
  return { kind: 'sent', status: response.status };
}

/** A non-streamed 200 answer that is really a failure: an `error` object or a choice that finished with "error". */
function jsonFailure(text: string): string | undefined {
  const c = classifyEvent(text);
  return c.kind === 'error' ? (c.message ?? 'the worker reported an error') : undefined;
}

async function relayStream(
  response: Response,
  res: http.ServerResponse,
  call: IncomingCall,
  opts: RelayOptions,
  url: string,
): Promise<RelayResult> {
  const reader = response.body!.getReader();
  const decoder = new TextDecoder();
  const splitter = new SseSplitter();
  const held: Uint8Array[] = [];
  let heldBytes = 0;
  const tap = bodyTapOf(response);
  let committed = !opts.holdUntilOutput;
  if (committed) {
    // Nothing to hold back: the client learns at once that the worker took the request, as from vLLM itself.
    writeStreamHead(res, opts.requestId);
    res.flushHeaders();
    if (tap !== undefined) return pipeCommitted(tap, res, call, opts.requestId);
  }
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      if (committed) {
        if (!(await writeWithBackpressure(res, value))) return cancel(reader);
        continue;
      }
      held.push(value);
      heldBytes += value.byteLength;
      if (heldBytes > MAX_UPSTREAM_ANSWER_BYTES) {
        // Held, not yet sent: a worker that streams without ever producing output must not grow the sidecar.
        void reader.cancel().catch(() => undefined);
        return { kind: 'failed_before_tokens', message: answerTooLong(url, MAX_UPSTREAM_ANSWER_BYTES).message };
      }
      for (const data of splitter.push(decoder.decode(value, { stream: true }))) {
        const c = classifyEvent(data);
        if (c.kind === 'error' && !committed) {
          void reader.cancel().catch(() => undefined);
          return { kind: 'failed_before_tokens', message: c.message ?? 'the worker reported an error' };
        }
        if (c.kind === 'done' && !committed) {
          void reader.cancel().catch(() => undefined);
          return { kind: 'failed_before_tokens', message: ENDED_WITHOUT_OUTPUT };
        }
        if (c.kind === 'token') committed = true;
      }
      if (committed && opts.beforeCommit !== undefined) {
        const vetoed = await opts.beforeCommit();
        if (vetoed !== undefined) {
          void reader.cancel().catch(() => undefined);
          return { kind: 'failed_before_tokens', message: vetoed };
        }
      }
      if (committed) {
        // Headers and the held events leave in one write (the socket is corked for the tick): on the time to first
        // token, each extra write is one more wake-up of the client.
        writeStreamHead(res, opts.requestId);
        for (const chunk of held.splice(0)) if (!(await writeWithBackpressure(res, chunk))) return cancel(reader);
        // From here every chunk is passed on as it is: over the sidecar's own pool, straight from the socket.
        if (tap !== undefined) return pipeCommitted(tap, res, call, opts.requestId);
      }
    }
  } catch (e) {
    if (call.signal.aborted || res.destroyed) return { kind: 'client_gone' };
    const message = `the worker's stream broke: ${describeFetchError(e, 'worker')}`;
    if (!committed) return { kind: 'failed_before_tokens', message };
    res.end(sseErrorFrames(toErrorBody('worker_error', `${message}; the output above is incomplete`, opts.requestId)));
    return { kind: 'failed_after_tokens', message };
  }
  if (!committed) return { kind: 'failed_before_tokens', message: ENDED_WITHOUT_OUTPUT };
  res.end();
  return { kind: 'sent', status: 200 };
}

/**
 * A held stream that ends (`[DONE]`, or the body closing) before any output or finish_reason. A request vLLM ran
 * always streams a chunk with a finish_reason, so this is a failure it did not report: vLLM's completions stream (main,
 * vllm-project/vllm `vllm/entrypoints/openai/completion/serving.py` @030ea52e) and 0.13's chat and completions skip an
 * output with no text and no token ids before checking it for `finish_reason: "error"`, so a KV load that fails under
 * `kv_load_failure_policy: fail` streams nothing but `[DONE]` (vllm PR #40986).
 */
const ENDED_WITHOUT_OUTPUT =
  'the worker ended the stream with no output and no finish_reason (vLLM drops an error that comes before any token from a stream)';

/**
 * The rest of a committed stream, chunk by chunk from the worker's socket to the client's, with backpressure: what
 * the read loop above does, without a stream pull, a read and a write promise per token. A break in the worker's
 * stream ends the client's with an SSE error event, after every chunk that arrived before it.
 */
function pipeCommitted(tap: BodyTap, res: http.ServerResponse, call: IncomingCall, requestId: string): Promise<RelayResult> {
  return new Promise((resolve) => {
    let done = false;
    let waiting = false;
    const finish = (r: RelayResult): void => {
      if (done) return;
      done = true;
      res.off('close', onClientClose);
      res.off('drain', onDrain);
      resolve(r);
    };
    const onDrain = (): void => {
      waiting = false;
      tap.resume();
    };
    const onClientClose = (): void => {
      tap.destroy();
      finish({ kind: 'client_gone' });
    };
    if (res.destroyed) return onClientClose();
    res.on('close', onClientClose);
    tap.divert({
      chunk(chunk) {
        if (done) return;
        if (res.destroyed) return onClientClose();
        let accepted: boolean;
        try {
          accepted = res.write(chunk);
        } catch {
          return onClientClose(); // a write the client's response refuses: this runs in a 'data' event, never throw
        }
        if (!accepted && !waiting) {
          waiting = true;
          tap.pause();
          res.once('drain', onDrain);
        }
      },
      end() {
        if (done) return;
        res.end();
        finish({ kind: 'sent', status: 200 });
      },
      fail(e) {
        if (done) return;
        if (call.signal.aborted || res.destroyed) return onClientClose();
        const message = `the worker's stream broke: ${describeFetchError(e, 'worker')}`;
        res.end(sseErrorFrames(toErrorBody('worker_error', `${message}; the output above is incomplete`, requestId)));
        finish({ kind: 'failed_after_tokens', message });
      },
    });
  });
}

function cancel(reader: ReadableStreamDefaultReader<Uint8Array>): RelayResult {
  void reader.cancel().catch(() => undefined);
  return { kind: 'client_gone' };
}

function writeStreamHead(res: http.ServerResponse, requestId: string): void {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', 'x-request-id': requestId });
}

/** Write one chunk; when the socket buffer is full wait for `drain`. False when the client went away. */
function writeWithBackpressure(res: http.ServerResponse, chunk: Uint8Array): Promise<boolean> {
  if (res.destroyed) return Promise.resolve(false);
  if (res.write(chunk)) return Promise.resolve(true);
  return new Promise((resolve) => {
    const onDrain = (): void => {
      res.off('close', onClose);
      resolve(true);
    };
    const onClose = (): void => {
      res.off('drain', onDrain);
      resolve(false);
    };
    res.once('drain', onDrain);
    res.once('close', onClose);
  });
}
