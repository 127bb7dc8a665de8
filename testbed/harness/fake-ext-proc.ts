/**
 * A fake ext_proc server for tests: a real grpc-js server on 127.0.0.1:0 (like Envoy's own `TestProcessor`) whose
 * behaviour per stream is a function. The function reads what Envoy (here: the harness) sent with `recv()` and
 * answers with `send()`, or ends the stream with `closeOk()` / `fail()`. Builders for common replies are below.
 */
import * as grpc from '@grpc/grpc-js';
import { extProcService } from '../../src/envoy/protos.js';
import type {
  RequestKind,
  WireCommonResponse,
  WireHeaderValueOption,
  WireProcessingRequest,
  WireProcessingResponse,
} from './ext-proc-messages.js';

export interface FakeExtProcStream {
  /** The next message, or null once the client half-closed or cancelled. Rejects after `timeoutMs`. */
  recv(timeoutMs?: number): Promise<WireProcessingRequest | null>;
  send(resp: WireProcessingResponse): void;
  /** Ends the stream with status OK: Envoy carries on without the processor. */
  closeOk(): void;
  /** Ends the stream with an error status. */
  fail(code: grpc.status, details?: string): void;
  /** Every message received on this stream so far. */
  readonly received: readonly WireProcessingRequest[];
  readonly metadata: grpc.Metadata;
  /** The stream's `:authority` (Envoy: the ext_proc cluster name). */
  readonly authority: string;
  /** Resolves when the client side is done: `end` (half-close) or `cancelled` (reset). */
  readonly ended: Promise<'end' | 'cancelled'>;
  /** Whether the client reset the stream (at any time, also after a half-close). */
  wasCancelled(): boolean;
}

export type FakeHandler = (stream: FakeExtProcStream) => void | Promise<void>;

export interface FakeExtProc {
  readonly port: number;
  /** "127.0.0.1:port", ready for `clusterEndpoints`. */
  readonly address: string;
  readonly streams: readonly FakeExtProcStream[];
  /** All messages received, across streams, in arrival order. */
  requests(): WireProcessingRequest[];
  setHandler(handler: FakeHandler): void;
  close(): Promise<void>;
}

/** `credentials`: the server's TLS (e.g. the dev PKI's gate certificate, for a config with a TLS transport socket). */
export async function startFakeExtProc(handler: FakeHandler, credentials = grpc.ServerCredentials.createInsecure()): Promise<FakeExtProc> {
  let current = handler;
  const streams: FakeExtProcStream[] = [];
  const all: WireProcessingRequest[] = [];
  const server = new grpc.Server();
  server.addService(extProcService(), {
    Process: (call: grpc.ServerDuplexStream<WireProcessingRequest, WireProcessingResponse>) => {
      const stream = wrap(call, all);
      streams.push(stream);
      Promise.resolve()
        .then(() => current(stream))
        .catch((e: unknown) => stream.fail(grpc.status.INTERNAL, `fake handler threw: ${String(e)}`));
    },
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', credentials, (e, p) => (e ? reject(e) : resolve(p))),
  );
  return {
    port,
    address: `127.0.0.1:${port}`,
    streams,
    requests: () => [...all],
    setHandler(h) {
      current = h;
    },
    close: () =>
      new Promise<void>((resolve) => {
        const timer = setTimeout(() => {
          server.forceShutdown();
          resolve();
        }, 1000);
        server.tryShutdown(() => {
          clearTimeout(timer);
          resolve();
        });
      }),
  };
}

function wrap(
  call: grpc.ServerDuplexStream<WireProcessingRequest, WireProcessingResponse>,
  all: WireProcessingRequest[],
): FakeExtProcStream {
  const received: WireProcessingRequest[] = [];
  const queue: Array<WireProcessingRequest | null> = [];
  const waiting: Array<(m: WireProcessingRequest | null) => void> = [];
  let finished = false;
  let cancelled = false;
  let resolveEnded: (how: 'end' | 'cancelled') => void = () => undefined;
  const ended = new Promise<'end' | 'cancelled'>((resolve) => (resolveEnded = resolve));
  const push = (m: WireProcessingRequest | null): void => {
    const w = waiting.shift();
    if (w !== undefined) w(m);
    else queue.push(m);
  };
  call.on('data', (m: WireProcessingRequest) => {
    received.push(m);
    all.push(m);
    push(m);
  });
  call.on('end', () => {
    resolveEnded('end');
    push(null);
  });
  call.on('cancelled', () => {
    finished = true;
    cancelled = true;
    resolveEnded('cancelled');
    push(null);
  });
  call.on('error', () => undefined);
  return {
    received,
    metadata: call.metadata,
    authority: call.getHost(),
    ended,
    wasCancelled: () => cancelled,
    recv(timeoutMs = 5000) {
      if (queue.length > 0) return Promise.resolve(queue.shift() ?? null);
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => {
          waiting.splice(waiting.indexOf(done), 1);
          reject(new Error(`fake ext_proc: no message within ${timeoutMs} ms (got ${received.length} so far)`));
        }, timeoutMs);
        const done = (m: WireProcessingRequest | null): void => {
          clearTimeout(timer);
          resolve(m);
        };
        waiting.push(done);
      });
    },
    send(resp) {
      if (!finished) call.write(resp);
    },
    closeOk() {
      if (finished) return;
      finished = true;
      call.end();
    },
    fail(code, details = 'fake failure') {
      if (finished) return;
      finished = true;
      call.emit('error', { code, details });
    },
  };
}

/** Which reply answers which request (Envoy pairs them by oneof). */
export function replyKind(req: WireProcessingRequest): RequestKind {
  const k = req.request;
  if (k === undefined) throw new Error('fake ext_proc: request without a oneof');
  return k;
}

/** A `CONTINUE` reply for `req`, optionally with a common response (mutations, clear_route_cache, ...). */
export function reply(
  req: WireProcessingRequest,
  common: WireCommonResponse = {},
  extra: WireProcessingResponse = {},
): WireProcessingResponse {
  const kind = replyKind(req);
  if (kind === 'request_trailers' || kind === 'response_trailers') {
    return { ...extra, [kind]: common.header_mutation === undefined ? {} : { header_mutation: common.header_mutation } };
  }
  return { ...extra, [kind]: { response: common } };
}

/** A header to set, value in `raw_value` as Envoy reads it; `action` maps to append_action / legacy append. */
export function setHeader(
  key: string,
  value: string,
  action: 'overwrite' | 'append' | 'add_if_absent' | 'overwrite_if_exists' | 'legacy_append' | 'default' = 'overwrite',
): WireHeaderValueOption {
  const header = { key, raw_value: Buffer.from(value) };
  switch (action) {
    case 'overwrite':
      return { header, append_action: 'OVERWRITE_IF_EXISTS_OR_ADD' };
    case 'append':
      return { header, append_action: 'APPEND_IF_EXISTS_OR_ADD' };
    case 'add_if_absent':
      return { header, append_action: 'ADD_IF_ABSENT' };
    case 'overwrite_if_exists':
      return { header, append_action: 'OVERWRITE_IF_EXISTS' };
    case 'legacy_append':
      return { header, append: { value: true } };
    case 'default':
      return { header };
  }
}

/** Answers every message with a plain CONTINUE: the "transparent" processor. */
export const continueAll: FakeHandler = async (s) => {
  for (let m = await s.recv(30_000).catch(() => null); m !== null; m = await s.recv(30_000).catch(() => null)) {
    s.send(reply(m));
  }
};

/** Reads the headers sent in a `request_headers`/`response_headers` message as a plain map (first value wins). */
export function headersOf(req: WireProcessingRequest | null | undefined): Record<string, string> {
  const h = req?.request_headers?.headers ?? req?.response_headers?.headers;
  const out: Record<string, string> = {};
  for (const e of h?.headers ?? []) {
    if (out[e.key] === undefined) out[e.key] = Buffer.from(e.raw_value ?? new Uint8Array()).toString('latin1');
  }
  return out;
}
