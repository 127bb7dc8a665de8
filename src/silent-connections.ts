/**
 * Connections that never send a request, closed: for every plain-HTTP port kvgate serves (the sidecars' request,
 * metrics and admin ports, the gate's admin port). Types only from node:http, so the gate loads no HTTP module for it.
 */
import type http from 'node:http';
import type { Duplex } from 'node:stream';

/** Where a connection keeps the timer that closes it if no request comes (cleared by its first request). */
const FIRST_REQUEST = Symbol('kvgate.firstRequest');
type SilentSocket = Duplex & { [FIRST_REQUEST]?: NodeJS.Timeout };

/**
 * Close a connection that sends no request within `ms`. Node bounds a request's headers (`headersTimeout`) only from
 * their first byte, and idle keep-alive connections only after a response (`keepAliveTimeout`): a connection that
 * never sends a byte stays open for ever (Node 20 and 24). Whatever reaches the port (for a sidecar the data plane, the
 * gate, an in-mesh workload the network lets in; for the gate's admin port the monitoring namespace) could then hold
 * silent sockets until the process had no file descriptor left for its real work. The timer stops at the connection's first request.
 */
export function closeSilentConnections(server: http.Server, ms: number): void {
  server.on('connection', (socket: SilentSocket) => {
    const timer = setTimeout(() => socket.destroy(), ms);
    timer.unref();
    socket[FIRST_REQUEST] = timer;
    socket.once('close', () => clearTimeout(timer));
  });
  server.on('request', (req: http.IncomingMessage) => clearTimeout((req.socket as SilentSocket)[FIRST_REQUEST]));
}
