/**
 * The gate's plain-HTTP admin port: `/metrics` (Prometheus text), `/status` (JSON: route table version, worker
 * view and its age, draining), `/healthz` (200 while serving, 503 while draining). Read-only by design: every
 * change to routing goes through the route table file, so it is reviewed and versioned.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Registry } from 'prom-client';

export interface AdminServer {
  readonly port: number;
  close(): Promise<void>;
}

export interface AdminOptions {
  readonly listen: string;
  readonly registry: Registry;
  readonly status: () => unknown;
  readonly serving: () => boolean;
}

export async function startAdminServer(opts: AdminOptions): Promise<AdminServer> {
  const server = http.createServer((req, res) => {
    void handle(req, res, opts);
  });
  server.keepAliveTimeout = 5_000;
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
