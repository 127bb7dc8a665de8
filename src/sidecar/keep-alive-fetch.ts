/**
 * The sidecar's default upstream client: `http.request` over one keep-alive `http.Agent` per sidecar, answered as a
 * WHATWG `Response` so every caller (and every test that injects its own fetch) keeps the `FetchFn` shape.
 *
 * Why not the global fetch: every decode request makes three to four upstream calls (the prefill leg, `/tokenize`
 * and `GET /version` on its worker, the completion it relays), and undici's fetch spends several times the CPU of
 * `http.request` per call on the same pooled connection (measured side by side in one process while writing this;
 * see bench/README.md). Both pool connections; this one keeps the pool explicit and closes it with the sidecar.
 *
 * Semantics kept from fetch: the body is streamed, not buffered (`Response.body` reads the socket as data arrives);
 * `signal` aborts the request and the body; a network failure rejects with `TypeError('fetch failed')` whose `cause`
 * carries the system error (`ECONNREFUSED` ...), as undici does, so `describeFetchError` reads both alike. Free
 * sockets close after `FREE_SOCKET_MS`, below uvicorn's default 5 s keep-alive (vLLM's server), so a request is not
 * written onto a connection the worker is closing; a server's `Keep-Alive: timeout=N` hint shortens it further
 * (Node's `Agent.keepSocketAlive`). URLs other than `http:` (TLS) go to the global fetch unchanged.
 */
import { serializeBody } from './exact-integers.js';
import http from 'node:http';
import { err, ok, type Result } from '../errors.js';
import {
  answerTooLong,
  MAX_UPSTREAM_ANSWER_BYTES,
  type FetchFn,
  type UpstreamCall,
  type UpstreamFailure,
  type UpstreamReply,
} from './http-io.js';

/** Idle time after which a pooled connection is closed (uvicorn's `timeout_keep_alive` default is 5 s). */
export const FREE_SOCKET_MS = 4_000;

/** Statuses whose Response must not have a body (the Fetch standard's null body statuses). */
const NULL_BODY = new Set([101, 103, 204, 205, 304]);

export interface KeepAliveFetch {
  readonly fetch: FetchFn;
  /** Close every pooled connection (the sidecar is closing). */
  close(): void;
}

/** A fetch over a keep-alive agent of its own; `fallback` serves what it does not (https). */
export function createKeepAliveFetch(fallback: FetchFn = (input, init) => fetch(input, init)): KeepAliveFetch {
  const agent = new http.Agent({ keepAlive: true, timeout: FREE_SOCKET_MS, scheduling: 'lifo' });
  const fetchFn: FetchFn = Object.assign(
    (input: string, init?: RequestInit) => (input.startsWith('http:') ? request(agent, input, init ?? {}) : fallback(input, init)),
    { whole: (url: string, call: UpstreamCall) => readWhole(agent, url, call) },
  );
  return { fetch: fetchFn, close: () => agent.destroy() };
}

/**
 * One call whose whole answer is wanted (`callUpstream`: /tokenize, /version, /metrics, the prefill leg), straight
 * over `http.request`: the body is collected as bytes and decoded once, the timeout is one unref'd timer cleared
 * with the call, and the caller's signal gets one listener, removed with it. Measured in one process against a local
 * server, this path costs well under half the client CPU of fetch + `text()`, which builds a Response, a Headers
 * object, a ReadableStream and a composite AbortSignal per call. A timeout at any point, the body included, is
 * `timedOut` (the upstream may still be working); a stale pooled socket is handled as `request` does.
 */
function readWhole(agent: http.Agent, url: string, call: UpstreamCall, retried = false): Promise<Result<UpstreamReply, UpstreamFailure>> {
  return new Promise((resolve) => {
    const signal = call.signal;
    if (signal?.aborted) return resolve(err({ message: `${url}: ${abortMessage(signal)}`, timedOut: false }));
    const headers = headersOf(call.headers);
    const body = call.body === undefined ? undefined : serializeBody(call.body);
    if (body !== undefined) {
      headers['content-type'] = 'application/json';
      headers['content-length'] = String(Buffer.byteLength(body));
    }
    const method = call.method ?? (body === undefined ? 'GET' : 'POST');
    let settled = false;
    let timer: NodeJS.Timeout | undefined;
    /** Settle this attempt: its timer and abort listener go, whatever answers the caller. */
    const settle = (): boolean => {
      if (settled) return false;
      settled = true;
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      return true;
    };
    const finish = (r: Result<UpstreamReply, UpstreamFailure>): void => {
      if (settle()) resolve(r);
    };
    let req: http.ClientRequest;
    try {
      req = http.request(url, { method, agent, headers }, onResponse);
    } catch (e) {
      // An invalid header value or URL is refused before anything is sent.
      return resolve(err({ message: `${url}: ${(e as Error).message}`, timedOut: false }));
    }
    function onResponse(res: http.IncomingMessage): void {
      const chunks: Buffer[] = [];
      const limit = call.maxBytes ?? MAX_UPSTREAM_ANSWER_BYTES;
      let size = 0;
      res.on('data', (chunk: Buffer) => {
        size += chunk.length;
        if (size <= limit) return void chunks.push(chunk);
        // Longer than any honest answer: the call fails now and the connection goes (the rest is never read).
        chunks.length = 0;
        finish(err(answerTooLong(url, limit)));
        req.destroy();
      });
      res.on('end', () => {
        try {
          finish(ok({ status: res.statusCode ?? 0, headers: responseHeaders(res.rawHeaders), text: utf8(chunks) }));
        } catch (e) {
          // A header the Fetch standard refuses (as fetch would have): no answer rather than a crash.
          finish(err({ message: `${url}: ${(e as Error).message}`, timedOut: false }));
        }
      });
      res.on('error', (e) => finish(err({ message: `${url}: ${(e as NodeJS.ErrnoException).code ?? e.message}`, timedOut: false })));
      res.on('close', () => {
        if (!res.complete) finish(err({ message: `${url}: the connection closed before the response body ended`, timedOut: false }));
      });
    }
    timer = setTimeout(() => {
      finish(err({ message: `no answer from ${url} within ${call.timeoutMs} ms`, timedOut: true }));
      req.destroy();
    }, call.timeoutMs);
    timer.unref();
    const onAbort = (): void => {
      finish(err({ message: `${url}: ${abortMessage(signal!)}`, timedOut: false }));
      req.destroy();
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    req.on('error', (e) => {
      if (settled) return;
      if (staleSocket(req, e, method) && !retried) {
        settle();
        return void readWhole(agent, url, call, true).then(resolve);
      }
      finish(err({ message: `${url}: ${(e as NodeJS.ErrnoException).code ?? e.message}`, timedOut: false }));
    });
    req.end(body);
  });
}

/** A GET or HEAD cut on a pooled socket before any answer: the worker closed that idle connection (see `request`). */
function staleSocket(req: http.ClientRequest, e: Error, method: string): boolean {
  return req.reusedSocket && (e as NodeJS.ErrnoException).code === 'ECONNRESET' && (method === 'GET' || method === 'HEAD');
}

function abortMessage(signal: AbortSignal): string {
  const reason: unknown = signal.reason;
  return reason instanceof Error ? reason.message : 'the call was aborted';
}

/** UTF-8 as `Response.text()` decodes it: invalid sequences replaced, a leading byte order mark dropped. */
function utf8(chunks: Buffer[]): string {
  const text = (chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks)).toString('utf8');
  return text.charCodeAt(0) === 0xfeff ? text.slice(1) : text;
}

function responseHeaders(raw: readonly string[]): Headers {
  const headers = new Headers();
  for (let i = 0; i + 1 < raw.length; i += 2) headers.append(raw[i]!, raw[i + 1]!);
  return headers;
}

/**
 * A GET or HEAD that fails on a pooled socket before any answer is retried once on a fresh one: the worker may have
 * closed that idle connection (a restart, its keep-alive timeout) as the request was written. Node's documented
 * pattern (`request.reusedSocket`); undici does the same for idempotent requests. Anything else is not repeated.
 */
function request(agent: http.Agent, url: string, init: RequestInit, retried = false): Promise<Response> {
  return new Promise((resolve, reject) => {
    const signal = init.signal ?? undefined;
    if (signal?.aborted) return reject(signal.reason);
    const body = bodyOf(init.body);
    const headers = headersOf(init.headers);
    if (body !== undefined) headers['content-length'] = String(Buffer.byteLength(body));
    const req = http.request(url, { method: init.method ?? 'GET', agent, headers, ...(signal ? { signal } : {}) }, (res) => {
      try {
        resolve(toResponse(res));
      } catch (e) {
        res.destroy();
        reject(new TypeError('fetch failed', { cause: e }));
      }
    });
    req.on('error', (e) => {
      const method = (init.method ?? 'GET').toUpperCase();
      const stale = staleSocket(req, e, method);
      if (stale && !retried && !signal?.aborted) return void request(agent, url, init, true).then(resolve, reject);
      reject(signal?.aborted ? signal.reason : new TypeError('fetch failed', { cause: e }));
    });
    req.end(body);
  });
}

function toResponse(res: http.IncomingMessage): Response {
  const headers = responseHeaders(res.rawHeaders);
  const status = res.statusCode ?? 0;
  if (NULL_BODY.has(status)) {
    res.resume();
    return new Response(null, { status, statusText: res.statusMessage ?? '', headers });
  }
  const body = new NodeBody(res);
  const response = new Response(body.stream(), { status, statusText: res.statusMessage ?? '', headers });
  TAPS.set(response, body);
  return response;
}

/** Where a body's chunks go once it is diverted (`BodyTap.divert`). */
export interface BodySink {
  chunk(chunk: Buffer): void;
  end(): void;
  fail(error: unknown): void;
}

/**
 * A body read as Node chunks instead of through its ReadableStream: for a relay that passes every chunk on as it is
 * (a streamed completion after its first output), the stream's pull, its promises and the reader's read cost more
 * per token than the socket write itself.
 */
export interface BodyTap {
  /**
   * From now on every chunk goes to `sink`, those already queued first, in order; the end or failure too (a failure
   * only after every chunk that arrived before it). The Response's body must not be read after this.
   */
  divert(sink: BodySink): void;
  /** Stop reading from the upstream (backpressure) until `resume`. */
  pause(): void;
  resume(): void;
  /** Give up the body: the upstream connection is closed. */
  destroy(): void;
}

const TAPS = new WeakMap<Response, BodyTap>();

/** The Node-level tap of a Response this module made, undefined for any other (the global fetch's, a test's). */
export function bodyTapOf(response: Response): BodyTap | undefined {
  return TAPS.get(response);
}

/** Chunks a body may queue before the socket is paused (backpressure toward the upstream). */
const MAX_QUEUED = 16;

/**
 * The response body as a pull stream, or diverted to a sink. Unlike `Readable.toWeb`, a connection that breaks
 * mid-body first delivers every chunk that arrived before the break and only then fails the read (as undici does),
 * so a relay passes on all the output the worker produced before it ends the stream with an error event.
 */
class NodeBody implements BodyTap {
  readonly #res: http.IncomingMessage;
  readonly #queue: Buffer[] = [];
  #ended = false;
  #failure: unknown;
  #wake: (() => void) | undefined;
  #sink: BodySink | undefined;

  constructor(res: http.IncomingMessage) {
    this.#res = res;
    res.on('data', (chunk: Buffer) => {
      if (this.#sink !== undefined) return this.#sink.chunk(chunk);
      this.#queue.push(chunk);
      if (this.#queue.length >= MAX_QUEUED) res.pause();
      this.#notify();
    });
    res.on('end', () => {
      this.#ended = true;
      this.#notify();
    });
    res.on('error', (e) => {
      this.#failure ??= e;
      this.#notify();
    });
    res.on('close', () => {
      if (!this.#ended) this.#failure ??= new Error('the connection closed before the response body ended');
      this.#notify();
    });
  }

  stream(): ReadableStream<Uint8Array> {
    return new ReadableStream<Uint8Array>(
      {
        pull: async (controller) => {
          while (this.#queue.length === 0 && !this.#ended && this.#failure === undefined) await new Promise<void>((r) => (this.#wake = r));
          const chunk = this.#queue.shift();
          if (chunk !== undefined) {
            controller.enqueue(chunk);
            if (this.#queue.length < MAX_QUEUED / 2 && this.#res.isPaused()) this.#res.resume();
          } else if (this.#ended) controller.close();
          else controller.error(this.#failure);
        },
        cancel: () => {
          this.#res.destroy();
        },
      },
      { highWaterMark: 0 },
    );
  }

  divert(sink: BodySink): void {
    if (this.#sink !== undefined) throw new Error('kvgate: a response body was diverted twice');
    this.#sink = sink;
    this.#wake = undefined; // no reader waits any more
    // Lift the queue's own pause first: the sink may pause the body again while it takes the queued chunks, and that
    // pause must hold (no 'data' event runs before this returns, so the order stays queued chunks first).
    if (this.#res.isPaused()) this.#res.resume();
    for (const chunk of this.#queue.splice(0)) sink.chunk(chunk);
    this.#notify();
  }

  pause(): void {
    this.#res.pause();
  }

  resume(): void {
    this.#res.resume();
  }

  destroy(): void {
    this.#res.destroy();
  }

  /** Tell whoever waits (the stream's pull, or a diverted sink) that the body ended or failed. */
  #notify(): void {
    const sink = this.#sink;
    if (sink !== undefined) {
      if (this.#ended) {
        this.#sink = DONE;
        sink.end();
      } else if (this.#failure !== undefined) {
        this.#sink = DONE;
        sink.fail(this.#failure);
      }
      return;
    }
    const w = this.#wake;
    this.#wake = undefined;
    w?.();
  }
}

/** The sink of a body that has ended or failed: anything later (a `close` after `end`) goes nowhere. */
const DONE: BodySink = { chunk: () => undefined, end: () => undefined, fail: () => undefined };

function bodyOf(body: RequestInit['body']): string | Uint8Array | undefined {
  if (body === undefined || body === null) return undefined;
  if (typeof body === 'string' || body instanceof Uint8Array) return body;
  throw new TypeError('the sidecar sends only string or byte bodies upstream');
}

function headersOf(h: RequestInit['headers']): Record<string, string> {
  const out: Record<string, string> = {};
  if (h === undefined) return out;
  if (!(h instanceof Headers) && !Array.isArray(h)) {
    // The sidecar's own calls pass a plain record (http-io.ts): copied as it is, http.request validates it.
    for (const [name, value] of Object.entries(h as Record<string, string>)) out[name.toLowerCase()] = value;
    return out;
  }
  new Headers(h).forEach((value, name) => {
    out[name] = value;
  });
  return out;
}
