/**
 * The gate's plain-HTTP admin port: `/metrics` (Prometheus text), `/status` (JSON: route table version, worker
 * view and its age, draining), `/healthz` (200 while serving, 503 while draining). Read-only by design: every
 * change to routing goes through the route table file, so it is reviewed and versioned.
 */
import type http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Registry } from 'prom-client';
import { closeSilentConnections } from '../silent-connections.js';

/**
 * node:http through `process.getBuiltinModule`, not an ESM import: on Node 22 and later an ESM import of node:http
 * builds its named exports, which evaluates the module's lazy `WebSocket`/`CloseEvent`/`MessageEvent` getters and so
 * loads Node's bundled undici (about 2.3 MiB of heap and 14 MiB of RSS in a process that never calls fetch). The gate
 * serves only this admin port over HTTP/1.1.
 */
const nodeHttp = (): typeof http => process.getBuiltinModule('node:http');

export interface AdminServer {
  readonly port: number;
  close(): Promise<void>;
}

export interface AdminOptions {
  readonly listen: string;
  readonly registry: Registry;
  readonly status: () => unknown;
  readonly serving: () => boolean;
  /** How long a new connection may stay silent before its first request (ms; default the server's headersTimeout). */
  readonly firstRequestTimeoutMs?: number;
}

export async function startAdminServer(opts: AdminOptions): Promise<AdminServer> {
  const server = nodeHttp().createServer((req, res) => {
    void handle(req, res, opts);
  });
  server.keepAliveTimeout = 5_000;
  closeSilentConnections(server, opts.firstRequestTimeoutMs ?? server.headersTimeout);
  const i = opts.listen.lastIndexOf(':');
  const host = opts.listen.slice(0, i).replace(/^\[|\]$/g, '');
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(Number(opts.listen.slice(i + 1)), host, resolve);
  });
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

async function handle(req: http.IncomingMessage, res: http.ServerResponse, opts: AdminOptions): Promise<void> {
  const url = (req.url ?? '/').split('?')[0];
  try {
    if (req.method !== 'GET') return send(res, 405, 'text/plain', 'only GET\n');
    if (url === '/metrics') return send(res, 200, opts.registry.contentType, await opts.registry.metrics());
    if (url === '/status') return send(res, 200, 'application/json', `${JSON.stringify(opts.status(), null, 2)}\n`);
    if (url === '/healthz') return opts.serving() ? send(res, 200, 'text/plain', 'ok\n') : send(res, 503, 'text/plain', 'draining\n');
    return send(res, 404, 'text/plain', 'not found: try /metrics, /status or /healthz\n');
  } catch (e) {
    return send(res, 500, 'text/plain', `${(e as Error).message}\n`);
  }
}

function send(res: http.ServerResponse, status: number, type: string, body: string): void {
  res.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(body) });
  res.end(body);
}
