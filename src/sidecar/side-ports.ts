/**
 * The sidecar's two small ports beside its main one. The admin port serves `POST /kvgate/v1/drain` (announced first:
 * new requests are refused only after `drainAnnounceMs`, sidecar-state.ts) and `POST /kvgate/v1/undrain` and listens on loopback only (config refuses anything else): taking a worker in and out
 * of service is for the pod itself (a preStop hook, `kubectl exec`), never for whoever reaches the request port. The
 * metrics port serves `GET /metrics` alone, so monitoring can be allowed to it without reaching the port that serves
 * completions (deploy/kubernetes/network-policies.yaml).
 */
import http from 'node:http';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import { listen, sendJson, sendText } from './http-io.js';
import { closeSilentConnections } from '../silent-connections.js';
import type { SidecarState } from './sidecar-state.js';

export interface SidePorts {
  /** `http://127.0.0.1:PORT` of the admin port, or null when disabled. */
  readonly adminUrl: string | null;
  /** `http://HOST:PORT` of the metrics port, or null when disabled. */
  readonly metricsUrl: string | null;
  close(): Promise<void>;
}

export const DRAIN_PATH = '/kvgate/v1/drain';
export const UNDRAIN_PATH = '/kvgate/v1/undrain';

/** Start the admin (`admin`) and metrics (`metrics`) ports; '' skips one. */
export async function startSidePorts(
  cfg: { readonly admin: string; readonly metrics: string },
  state: SidecarState,
  registry: Registry,
  logger: Logger,
): Promise<SidePorts> {
  const servers: http.Server[] = [];
  const start = async (hostPort: string, handler: http.RequestListener): Promise<string | null> => {
    if (hostPort === '') return null;
    const server = http.createServer(handler);
    closeSilentConnections(server, server.headersTimeout);
    servers.push(server);
    const { host, port } = await listen(server, hostPort);
    return `http://${host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host.includes(':') ? `[${host}]` : host}:${port}`;
  };
  const adminUrl = await start(cfg.admin, (req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    req.resume();
    if (req.method === 'POST' && path === DRAIN_PATH) {
      logger.warn({ event: 'admin', action: 'drain' }, 'drain requested on the admin port');
      void state.drain();
      const s = state.status();
      return sendJson(res, 202, { draining: true, inFlight: s.inFlight, drainAdmitsUntilMs: s.drainAdmitsUntilMs });
    }
    if (req.method === 'POST' && path === UNDRAIN_PATH) {
      logger.warn({ event: 'admin', action: 'undrain' }, 'undrain requested on the admin port');
      state.undrain();
      return sendJson(res, 200, { draining: false, inFlight: state.status().inFlight });
    }
    return sendText(res, 404, 'text/plain', `not found: the admin port serves POST ${DRAIN_PATH} and ${UNDRAIN_PATH}\n`);
  });
  const metricsUrl = await start(cfg.metrics, (req, res) => {
    req.resume();
    if (req.method === 'GET' && (req.url ?? '/').split('?')[0] === '/metrics') {
      void registry.metrics().then((text) => sendText(res, 200, registry.contentType, text));
      return;
    }
    sendText(res, 404, 'text/plain', 'not found: the metrics port serves GET /metrics only\n');
  });
  return {
    adminUrl,
    metricsUrl,
    close: async () => {
      await Promise.all(
        servers.map(
          (s) =>
            new Promise<void>((resolve) => {
              s.close(() => resolve());
              s.closeAllConnections();
            }),
        ),
      );
    },
  };
}
