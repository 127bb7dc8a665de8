/**
 * The gate's gRPC server: `envoy.service.ext_proc.v3.ExternalProcessor/Process` plus `grpc.health.v1.Health`.
 * A thin adapter: it feeds each stream's messages, one at a time and in order, to an ExtProcSession and writes
 * back exactly one response per message. Draining: health goes NOT_SERVING, new streams are refused by grpc-js,
 * streams in flight get a grace period, then the server is forced down.
 */
import { randomUUID } from 'node:crypto';
import * as grpc from '@grpc/grpc-js';
import { HealthImplementation } from 'grpc-health-check';
import type { Logger } from 'pino';
import { EXT_PROC_SERVICE, extProcService } from '../envoy/protos.js';
import type { WireProcessingRequest, WireProcessingResponse } from '../envoy/wire.js';
import type { Listener } from '../envoy/inbound.js';
import type { Admission } from './admission.js';
import type { GateMetrics } from './metrics.js';
import { ExtProcSession } from './session.js';

/** gRPC initial metadata key an Envoy listener's ext_proc filter sets (`grpc_service.initial_metadata`). */
export const LISTENER_METADATA_KEY = 'x-kvgate-listener';

export interface GateServerOptions {
  readonly admission: Admission;
  readonly logger: Logger;
  readonly metrics: GateMetrics;
  /** `host:port`; port 0 picks a free port. */
  readonly listen: string;
  readonly gieHeaders?: boolean;
  /** One info line per route and hop decision here (the gate config's `log.decisions`); undefined writes none. */
  readonly decisionLog?: Logger | undefined;
  /** How long streams in flight may take to finish once draining starts. */
  readonly drainGraceMs?: number;
  /** How long to keep answering (as NOT_SERVING) before refusing new streams, so health checkers notice. */
  readonly drainAnnounceMs?: number;
  readonly now?: () => number;
}

export interface GateServer {
  readonly port: number;
  readonly address: string;
  /** Streams currently open. */
  activeStreams(): number;
  /** NOT_SERVING, let streams in flight finish (bounded by the grace period), then stop. */
  drain(): Promise<void>;
  /** Stop at once, cancelling streams in flight. */
  close(): void;
}

export async function startGateServer(opts: GateServerOptions): Promise<GateServer> {
  const server = new grpc.Server({
    // Envoy keeps one HTTP/2 connection to the gate and multiplexes a stream per request over it.
    'grpc.max_concurrent_streams': 100_000,
    'grpc.keepalive_permit_without_calls': 1,
  });
  const health = new HealthImplementation({ '': 'SERVING', [EXT_PROC_SERVICE]: 'SERVING' });
  health.addToServer(server);
  const active = new Set<grpc.ServerDuplexStream<WireProcessingRequest, WireProcessingResponse>>();
  const deps = {
    admission: opts.admission,
    logger: opts.logger,
    metrics: opts.metrics,
    newRequestId: randomUUID,
    now: opts.now ?? Date.now,
    gieHeaders: opts.gieHeaders ?? false,
    decisionLog: opts.decisionLog,
  };

  server.addService(extProcService(), {
    Process: (call: grpc.ServerDuplexStream<WireProcessingRequest, WireProcessingResponse>) => {
      const listener = listenerOf(call.metadata);
      active.add(call);
      opts.metrics.streamsActive.inc();
      opts.metrics.streamsTotal.inc({ listener });
      serveStream(call, new ExtProcSession(deps, listener, (r) => call.write(r)), opts, () => {
        if (active.delete(call)) opts.metrics.streamsActive.dec();
      });
    },
  });

  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync(opts.listen, grpc.ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))),
  );
  const host = opts.listen.slice(0, opts.listen.lastIndexOf(':'));
  opts.logger.info({ listen: `${host}:${port}` }, 'kvgate gate listening (ext_proc + grpc.health.v1)');

  let draining: Promise<void> | undefined;
  return {
    port,
    address: `${host}:${port}`,
    activeStreams: () => active.size,
    drain: () => (draining ??= drainServer(server, health, active, opts)),
    close: () => server.forceShutdown(),
  };
}

function listenerOf(md: grpc.Metadata): Listener {
  return md.get(LISTENER_METADATA_KEY)[0]?.toString() === 'internal' ? 'internal' : 'public';
}

function serveStream(
  call: grpc.ServerDuplexStream<WireProcessingRequest, WireProcessingResponse>,
  session: ExtProcSession,
  opts: GateServerOptions,
  onClosed: () => void,
): void {
  let chain: Promise<void> = Promise.resolve();
  let busy = 0; // messages received and not yet answered
  let closed = false;
  const close = (reason?: string): void => {
    if (closed) return;
    closed = true;
    if (reason) opts.metrics.streamErrors.inc({ reason });
    session.finish();
    onClosed();
  };
  call.on('data', (msg: WireProcessingRequest) => {
    busy++;
    // Strictly one message at a time: the answer to message n is written before message n+1 is looked at.
    chain = chain.then(async () => {
      if (closed) return;
      try {
        const response = await session.onMessage(msg);
        if (response !== null && !closed) call.write(response);
      } catch (e) {
        opts.logger.error({ err: e, request_id: session.requestId }, 'ext_proc stream failed');
        // A gRPC error makes Envoy fail the request (500) unless failure_mode_allow: fail closed.
        call.destroy(Object.assign(new Error('kvgate: internal error'), { code: grpc.status.INTERNAL }));
        close('internal');
      } finally {
        busy--;
      }
    });
  });
  call.on('end', () => {
    void chain.then(() => {
      if (!closed) call.end();
      close();
    });
  });
  // Envoy resets a stream it no longer needs once the request is done; only a cancel with a message unanswered is
  // an abnormal end (the client went away, or Envoy timed the gate out).
  call.on('cancelled', () => close(busy > 0 ? 'cancelled_unanswered' : undefined));
  call.on('error', () => close('error'));
  call.on('close', () => close());
}

async function drainServer(
  server: grpc.Server,
  health: HealthImplementation,
  active: ReadonlySet<unknown>,
  opts: GateServerOptions,
): Promise<void> {
  health.setStatus('', 'NOT_SERVING');
  health.setStatus(EXT_PROC_SERVICE, 'NOT_SERVING');
  opts.logger.info({ in_flight: active.size }, 'draining: health NOT_SERVING');
  const announce = opts.drainAnnounceMs ?? 0;
  if (announce > 0) await new Promise((r) => setTimeout(r, announce));
  const grace = opts.drainGraceMs ?? 10_000;
  await new Promise<void>((resolve) => {
    const timer = setTimeout(() => {
      opts.logger.warn({ in_flight: active.size }, 'drain grace period over; cancelling streams in flight');
      server.forceShutdown();
      resolve();
    }, grace);
    server.tryShutdown(() => {
      clearTimeout(timer);
      resolve();
    });
  });
  opts.logger.info('drained');
}
