/**
 * Fake upstream HTTP servers for harness tests: bind 127.0.0.1:0, record every request (headers as received, body,
 * trailers) and answer with a per-test handler. The default handler echoes who answered, so a test can see which
 * cluster a request was routed to.
 */
import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

export interface RecordedRequest {
  readonly method: string;
  readonly url: string;
  readonly headers: http.IncomingHttpHeaders;
  readonly rawHeaders: readonly string[];
  readonly body: Buffer;
  readonly trailers: http.IncomingHttpHeaders;
}

export type UpstreamHandler = (req: RecordedRequest, res: http.ServerResponse, name: string) => void | Promise<void>;

export interface FakeUpstream {
  readonly name: string;
  readonly port: number;
  readonly address: string;
  readonly requests: readonly RecordedRequest[];
  /** Connections the upstream accepted, and how many of them have closed since. */
  connections(): { readonly opened: number; readonly closed: number };
  setHandler(handler: UpstreamHandler): void;
  close(): Promise<void>;
}

/** The decode sidecar's default `keepAliveTimeoutMs` (src/sidecar/config.ts). */
const UPSTREAM_KEEP_ALIVE_MS = 75_000;

/** Answers 200 with `{"upstream": name, "method", "path", "bodyBytes"}`. */
export const echoHandler: UpstreamHandler = (req, res, name) => {
  const body = JSON.stringify({ upstream: name, method: req.method, path: req.url, bodyBytes: req.body.length });
  res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), 'x-upstream': name });
  res.end(body);
};

export async function startFakeUpstream(name: string, handler: UpstreamHandler = echoHandler): Promise<FakeUpstream> {
  let current = handler;
  const requests: RecordedRequest[] = [];
  const sockets = new Set<Socket>();
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const recorded: RecordedRequest = {
        method: req.method ?? '',
        url: req.url ?? '',
        headers: req.headers,
        rawHeaders: req.rawHeaders,
        body: Buffer.concat(chunks),
        trailers: req.trailers,
      };
      requests.push(recorded);
      Promise.resolve(current(recorded, res, name)).catch(() => res.destroy());
    });
  });
  let opened = 0;
  let closed = 0;
  server.on('connection', (s: Socket) => {
    opened++;
    sockets.add(s);
    s.once('close', () => {
      closed++;
      sockets.delete(s);
    });
  });
  // Kept open like the decode sidecar these stand in for (its keepAliveTimeoutMs, 75 s by default), above the shipped
  // pool clusters' idle_timeout (60 s), so the proxy ends idle connections. Node's own 5 s made the server close a pooled
  // connection while the harness reused it, a 503 "reset before headers. reset reason: connection termination" that
  // Envoy gives in that race too (seen once in a 2,000-request CI run); envoy/envoy.yaml's idle_timeout avoids it.
  server.keepAliveTimeout = UPSTREAM_KEEP_ALIVE_MS;
  server.headersTimeout = Math.max(server.headersTimeout, UPSTREAM_KEEP_ALIVE_MS + 1_000);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const port = (server.address() as AddressInfo).port;
  return {
    name,
    port,
    address: `127.0.0.1:${port}`,
    requests,
    connections: () => ({ opened, closed }),
    setHandler(h) {
      current = h;
    },
    close() {
      for (const s of sockets) s.destroy();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}
