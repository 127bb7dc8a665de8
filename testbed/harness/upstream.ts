/**
 * One upstream HTTP/1.1 request for the router: connect (with the cluster's connect_timeout), send headers, stream
 * the body with backpressure, hand back the response or say why there is none. Failure kinds map to Envoy's
 * response flags: UF (connect failure / reset before headers), with the cluster counters to match.
 */
import http from 'node:http';
import type { Socket } from 'node:net';
import type { BodyReader } from './body-reader.js';
import type { Endpoint } from './envoy-config-types.js';
import type { HeaderMap } from './header-map.js';

export type UpstreamFailure =
  | { readonly kind: 'connect_failure'; readonly reason: string }
  | { readonly kind: 'connect_timeout'; readonly reason: string }
  | { readonly kind: 'reset_before_headers'; readonly reason: string };

export type UpstreamResult =
  | { readonly ok: true; readonly res: http.IncomingMessage }
  | { readonly ok: false; readonly failure: UpstreamFailure };

export interface UpstreamCall {
  readonly response: Promise<UpstreamResult>;
  /** Streams the body: `prefix`, then whatever `rest` yields, then trailers (chunked only). Resolves when sent. */
  sendBody(
    prefix: Buffer | null,
    rest: BodyReader | null,
    trailers: () => Promise<HeaderMap | null | 'stop'>,
    onData: () => void,
  ): Promise<void>;
  abort(): void;
}

export interface UpstreamSpec {
  readonly host: Endpoint;
  readonly method: string;
  readonly path: string;
  readonly headers: Record<string, string | string[]>;
  readonly connectTimeoutMs: number;
  readonly agent: http.Agent;
}

export function startUpstream(spec: UpstreamSpec): UpstreamCall {
  let connected = false;
  let timedOut = false;
  const req = http.request({
    host: spec.host.address,
    port: spec.host.port,
    method: spec.method,
    path: spec.path,
    headers: spec.headers,
    agent: spec.agent,
    setHost: false,
  });
  req.on('socket', (socket: Socket) => {
    if (!socket.connecting) {
      connected = true;
      return;
    }
    const timer =
      spec.connectTimeoutMs > 0
        ? setTimeout(() => {
            timedOut = true;
            req.destroy(new Error('connection timeout'));
          }, spec.connectTimeoutMs)
        : undefined;
    socket.once('connect', () => {
      connected = true;
      if (timer !== undefined) clearTimeout(timer);
    });
    socket.once('close', () => {
      if (timer !== undefined) clearTimeout(timer);
    });
  });
  const response = new Promise<UpstreamResult>((resolve) => {
    req.once('response', (res) => resolve({ ok: true, res }));
    req.once('error', (e: NodeJS.ErrnoException) => {
      if (timedOut) resolve({ ok: false, failure: { kind: 'connect_timeout', reason: 'connection timeout' } });
      else if (!connected) {
        resolve({ ok: false, failure: { kind: 'connect_failure', reason: `delayed connect error: ${e.code ?? e.message}` } });
      } else resolve({ ok: false, failure: { kind: 'reset_before_headers', reason: 'connection termination' } });
    });
  });
  return {
    response,
    async sendBody(prefix, rest, trailers, onData) {
      try {
        if (prefix !== null && prefix.length > 0) await write(req, prefix);
        if (rest !== null) {
          for (let c = await rest.next(); c !== null; c = await rest.next()) {
            onData();
            await write(req, c);
          }
        }
        const t = await trailers();
        if (t === 'stop') return;
        if (t !== null && req.getHeader('content-length') === undefined) req.addTrailers(t.toNodeHeaders());
        req.end();
      } catch {
        req.destroy();
      }
    },
    abort() {
      req.destroy();
    },
  };
}

/** Writes with backpressure; resolves once the chunk is accepted (or rejects if the request died). */
export function write(stream: NodeJS.WritableStream & { destroyed?: boolean }, chunk: Buffer): Promise<void> {
  if (stream.destroyed === true) return Promise.reject(new Error('stream destroyed'));
  if (stream.write(chunk)) return Promise.resolve();
  return new Promise((resolve, reject) => {
    const onDrain = (): void => {
      stream.removeListener('close', onClose);
      resolve();
    };
    const onClose = (): void => {
      stream.removeListener('drain', onDrain);
      reject(new Error('stream closed'));
    };
    stream.once('drain', onDrain);
    stream.once('close', onClose);
  });
}
