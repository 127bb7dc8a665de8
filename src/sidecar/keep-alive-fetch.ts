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
import http from 'node:http';
import { err, ok, type Result } from '../errors.js';
import type { FetchFn, UpstreamCall, UpstreamFailure, UpstreamReply } from './http-io.js';

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
    const body = call.body === undefined ? undefined : JSON.stringify(call.body);
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
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
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
  return new Response(bodyStream(res), { status, statusText: res.statusMessage ?? '', headers });
}

/** Chunks a body may queue before the socket is paused (backpressure toward the upstream). */
const MAX_QUEUED = 16;

/**
 * The response body as a pull stream. Unlike `Readable.toWeb`, a connection that breaks mid-body first delivers every
 * chunk that arrived before the break and only then fails the read (as undici does), so a relay passes on all the
 * output the worker produced before it ends the stream with an error event.
 */
function bodyStream(res: http.IncomingMessage): ReadableStream<Uint8Array> {
  const queue: Uint8Array[] = [];
  let ended = false;
  let failure: unknown;
  let wake: (() => void) | undefined;
  const notify = (): void => {
    const w = wake;
    wake = undefined;
    w?.();
  };
  res.on('data', (chunk: Buffer) => {
    queue.push(chunk);
    if (queue.length >= MAX_QUEUED) res.pause();
    notify();
  });
  res.on('end', () => {
    ended = true;
    notify();
  });
  res.on('error', (e) => {
    failure ??= e;
    notify();
  });
  res.on('close', () => {
    if (!ended) failure ??= new Error('the connection closed before the response body ended');
    notify();
  });
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        while (queue.length === 0 && !ended && failure === undefined) await new Promise<void>((r) => (wake = r));
        const chunk = queue.shift();
        if (chunk !== undefined) {
          controller.enqueue(chunk);
          if (queue.length < MAX_QUEUED / 2 && res.isPaused()) res.resume();
        } else if (ended) controller.close();
        else controller.error(failure);
      },
      cancel() {
        res.destroy();
      },
    },
    { highWaterMark: 0 },
  );
}

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
