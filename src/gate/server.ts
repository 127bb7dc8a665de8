/**
 * The gate's gRPC server: `envoy.service.ext_proc.v3.ExternalProcessor/Process` plus `grpc.health.v1.Health`.
 * A thin adapter: it feeds each stream's messages, one at a time and in order, to an ExtProcSession and writes
 * back exactly one response per message.
 *
 * Draining never cuts a generation. Envoy treats a stream the processor ends with status OK as "carry on without
 * the processor" and a stream that fails (cancelled, or any other status) as a processor error, which resets the
 * client's request when its response has started (`Filter::onGrpcClose` / `Filter::onGrpcError` in
 * envoyproxy/envoy source/extensions/filters/http/ext_proc/ext_proc.cc, the same in 1.36 and 1.37). On Envoy 1.36
 * the stream lives as long as the HTTP request, so a streamed generation holds its stream open for its whole
 * length. So on SIGTERM: health goes NOT_SERVING; after the announce period new streams are refused; every stream
 * whose messages have all been answered and whose decision is stamped is ended with OK at once (and every other
 * one as soon as it gets there); at the end of the grace period the streams that are decided are ended with OK
 * too, and only a stream with an unanswered message or no decision yet is cancelled (Envoy then fails that
 * request closed, before anything reached upstream). One exception: a response body sent FULL_DUPLEX_STREAMED (as
 * Istio's InferencePool filter sends it) reaches the client only through the gate, and Envoy keeps no copy
 * (`ProcessorState::clearAsyncState` in processor_state.cc has nothing queued in that mode), so an OK close would
 * let the response go on with the chunks in flight missing; such a stream ends OK once its body is over, and is
 * cancelled at the end of the grace period if it is not.
 */
import { randomUUID } from 'node:crypto';
import * as grpc from '@grpc/grpc-js';
import { HealthImplementation } from 'grpc-health-check';
import type { Tracer } from '@opentelemetry/api';
import type { Logger } from 'pino';
import { EXT_PROC_SERVICE, extProcService } from '../envoy/protos.js';
import { decodeRequest } from '../envoy/request-decoder.js';
import { encodeAnswer } from '../envoy/response-encoder.js';
import type { WireProcessingRequest, WireProcessingResponse } from '../envoy/wire.js';
import { AUDIT_REASON_MAX, auditCut } from '../json-limits.js';
import type { Admission } from './admission.js';
import type { GateMetrics } from './metrics.js';
import type { Listener } from '../envoy/inbound.js';
import type { Tenancy } from '../policy/schema.js';
import { ExtProcSession, type SessionDeps } from './session.js';
import { type GateTransport, serverCredentials, streamRole } from './transport.js';

export interface GateServerOptions {
  readonly admission: Admission;
  readonly logger: Logger;
  readonly metrics: GateMetrics;
  /** `host:port`; port 0 picks a free port. */
  readonly listen: string;
  /**
   * `host:port` of a plaintext gRPC port serving only grpc.health.v1 (the same statuses as the main port), for
   * kubelet gRPC probes, which present no client certificate; undefined: none.
   */
  readonly healthListen?: string | undefined;
  /** mTLS with roles from the verified peer, or (tests, `insecure: true`) plaintext with caller-claimed roles. */
  readonly transport: GateTransport;
  /** Whether the gate can route yet (every pod watch listed once); default true. */
  readonly ready?: () => boolean;
  readonly gieHeaders?: boolean;
  /** One info line per route and hop decision here (the gate config's `log.decisions`); undefined writes none. */
  readonly decisionLog?: Logger | undefined;
  /** Decision spans (src/tracing.ts); default: the API's no-op tracer. */
  readonly tracer?: Tracer | undefined;
  readonly gieFallbackEndpoints?: number;
  /** How long streams in flight may take to finish once draining starts. */
  readonly drainGraceMs?: number;
  /** How long to keep answering (as NOT_SERVING) before refusing new streams, so health checkers notice. */
  readonly drainAnnounceMs?: number;
  /**
   * The largest ext_proc message accepted (bytes). grpc-js refuses bigger messages (default 4 MiB) and Envoy turns
   * that into a 500, so this must exceed the route table's `limits.maxBodyBytes` plus the headers (default: 4 MiB).
   */
  readonly maxReceiveMessageBytes?: number;
  /** The route table's current `limits.maxBodyBytes`, for FULL_DUPLEX_STREAMED bodies (SessionDeps.maxBodyBytes). */
  readonly maxBodyBytes?: () => number;
  /** The route table's current tenancy, to name the tenant on the audit line of a request refused undecided. */
  readonly tenancy?: () => Tenancy;
  readonly now?: () => number;
}

/** The gRPC health service names GIE's data planes and probes use (kept SERVING / following readiness). */
const LIVENESS_SERVICE = 'liveness';
export const READINESS_SERVICE = 'readiness';
/**
 * The name GIE's own EPP chart probes (liveness and readiness) with a single replica, and the only name its
 * lightweight EPP registers on its health port. kubernetes-sigs/gateway-api-inference-extension @1748e829
 * config/charts/epplib/templates/_deployment.yaml (`grpc: { port: 9003, service: inference-extension }`); @84436a96
 * conformance/resources/base.yaml (the EPP Deployments' `livenessProbe` and `readinessProbe` both name it). GIE sets
 * it NOT_SERVING at start and SERVING once the pool has synced, and never back (@84436a96
 * pkg/lwepp/server/runserver.go `HealthServerRunnable`: nothing flips it again, on shutdown neither). kvgate does the
 * same: SERVING from the first time its pods are discovered, through a later loss of sync and through a drain. A
 * liveness probe on this name (as GIE's manifests set it) must not fail while the gate drains its streams, or the
 * kubelet restarts the pod after failureThreshold x periodSeconds and cuts the generations the drain protects;
 * the readiness side needs no flip either, as a terminating pod leaves its Service's ready endpoints anyway.
 * Without the name, a Deployment copied from GIE's chart fails its probes against kvgate.
 */
const GIE_CHART_SERVICE = 'inference-extension';
/** Every service that follows readiness (and goes NOT_SERVING on drain). */
const READY_SERVICES = ['', EXT_PROC_SERVICE, READINESS_SERVICE] as const;

export interface GateServer {
  /** Readiness changed (pod discovery synced or not): '', the ext_proc service and `readiness` follow it. */
  setReady(ready: boolean): void;
  readonly port: number;
  readonly address: string;
  /** The plaintext health port, when `healthListen` asked for one. */
  readonly healthPort?: number;
  /** Streams currently open. */
  activeStreams(): number;
  /** NOT_SERVING, let streams in flight finish (bounded by the grace period), then stop. */
  drain(): Promise<void>;
  /**
   * Stop now (a second signal, or the end of a drain): streams whose decision is answered end with OK (their requests
   * go on; a streamed generation is not cut), the rest are cancelled with their audit line, then the server stops.
   */
  close(): Promise<void>;
}

export async function startGateServer(opts: GateServerOptions): Promise<GateServer> {
  const server = new grpc.Server({
    // Envoy keeps one HTTP/2 connection to the gate and multiplexes a stream per request over it.
    'grpc.max_concurrent_streams': 100_000,
    'grpc.keepalive_permit_without_calls': 1,
    ...(opts.maxReceiveMessageBytes === undefined ? {} : { 'grpc.max_receive_message_length': opts.maxReceiveMessageBytes }),
  });
  // Besides '' and the ext_proc service, GIE's probes: `liveness` (the process answers) and `readiness` (pods
  // discovered, i.e. the datastore synced). kubernetes-sigs/gateway-api-inference-extension @1748e829,
  // cmd/epp/runner/health.go; docs/proposals/004-endpoint-picker-protocol, "Health Checking".
  const ready = opts.ready?.() ?? true;
  const status = ready ? 'SERVING' : 'NOT_SERVING';
  const health = new HealthImplementation({
    ...Object.fromEntries(READY_SERVICES.map((svc) => [svc, status])),
    [GIE_CHART_SERVICE]: status,
    [LIVENESS_SERVICE]: 'SERVING',
  });
  health.addToServer(server);
  const active = new Set<ServedStream>();
  const onStreamClosed = (s: ServedStream): void => {
    if (active.delete(s)) opts.metrics.streamsActive.dec();
  };
  const deps: SessionDeps = {
    admission: opts.admission,
    logger: opts.logger,
    metrics: opts.metrics,
    newRequestId: randomUUID,
    now: opts.now ?? Date.now,
    gieHeaders: opts.gieHeaders ?? false,
    decisionLog: opts.decisionLog,
    tracer: opts.tracer,
    ...(opts.maxBodyBytes === undefined ? {} : { maxBodyBytes: opts.maxBodyBytes }),
    ...(opts.tenancy === undefined ? {} : { tenancy: opts.tenancy }),
    gieFallbackEndpoints: opts.gieFallbackEndpoints ?? 0,
  };

  server.addService(gateExtProcService(), {
    Process: (call: grpc.ServerDuplexStream<WireProcessingRequest, WireProcessingResponse>) => {
      const role = streamRole(opts.transport, call);
      if (!role.ok) {
        // Before any message is read: the peer is not one of the Envoys this gate serves.
        opts.metrics.streamsRefused.inc({ reason: role.reason });
        opts.logger.warn(
          { audit: 'refusal', code: 'permission_denied', reason: auditCut(role.message, AUDIT_REASON_MAX), peer: call.getPeer() },
          'refused an ext_proc stream',
        );
        // grpc-js turns an 'error' on a server stream into its status and ends the call (server-call.js
        // ServerDuplexStreamImpl: the 'error' listener sets pendingStatus, _final sends it); destroy() would not.
        call.emit('error', Object.assign(new Error(`kvgate: ${role.message}`), { code: grpc.status.PERMISSION_DENIED }));
        return;
      }
      const listener = role.role;
      opts.metrics.streamsActive.inc();
      opts.metrics.streamCounts.inc(listener);
      const served = new StreamServer(call, listener, deps, opts, onStreamClosed);
      active.add(served);
      if (draining !== undefined) served.closeWhenSettled();
    },
  });

  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync(opts.listen, serverCredentials(opts.transport), (e, p) => (e ? reject(e) : resolve(p))),
  );
  let draining: Promise<void> | undefined;
  const host = opts.listen.slice(0, opts.listen.lastIndexOf(':'));
  opts.metrics.insecureTransport.set(opts.transport.kind === 'insecure' ? 1 : 0);
  if (opts.transport.kind === 'insecure') {
    opts.logger.warn(
      { listen: `${host}:${port}`, transport: 'insecure' },
      'INSECURE gate port (insecure: true): plaintext gRPC, and any client that reaches it can claim the internal role with x-kvgate-listener; never do this outside a local test',
    );
  }
  opts.logger.info({ listen: `${host}:${port}`, transport: opts.transport.kind }, 'kvgate gate listening (ext_proc + grpc.health.v1)');
  const healthOnly = opts.healthListen === undefined ? undefined : await startHealthPort(opts.healthListen, health, opts.logger);

  return {
    port,
    address: `${host}:${port}`,
    ...(healthOnly === undefined ? {} : { healthPort: healthOnly.port }),
    activeStreams: () => active.size,
    drain: () => (draining ??= drainServer(server, health, active, opts).finally(() => healthOnly?.server.forceShutdown())),
    setReady(ready) {
      if (draining !== undefined) return;
      const st = ready ? 'SERVING' : 'NOT_SERVING';
      for (const svc of READY_SERVICES) health.setStatus(svc, st);
      if (ready) health.setStatus(GIE_CHART_SERVICE, 'SERVING'); // once synced, for good (see GIE_CHART_SERVICE)
    },
    close: () => {
      healthOnly?.server.forceShutdown();
      return closeNow(server, active, opts);
    },
  };
}

/**
 * The ext_proc service with Envoy's everyday messages decoded directly (src/envoy/request-decoder.ts) and the gate's
 * answers encoded directly (src/envoy/response-encoder.ts); every other message (forwarded metadata and attributes;
 * refusals, dynamic metadata, streamed bodies, timeout extensions) through proto-loader's deserializer and serializer.
 */
function gateExtProcService(): grpc.ServiceDefinition {
  const def = extProcService();
  const process = def['Process'];
  if (process === undefined) throw new Error('kvgate: the loaded ext_proc service has no Process method');
  const genericDecode = process.requestDeserialize;
  const genericEncode = process.responseSerialize;
  return {
    ...def,
    Process: {
      ...process,
      requestDeserialize: (b: Buffer) => decodeRequest(b) ?? genericDecode(b),
      responseSerialize: (r: WireProcessingResponse) => encodeAnswer(r) ?? genericEncode(r),
    },
  };
}

/** grpc-js's default receive limit, which an ext_proc message carrying a body must not be held to. */
const GRPC_DEFAULT_RECEIVE_BYTES = 4 * 1024 * 1024;
/** Room for the headers, metadata and framing that travel with the largest body in one message. */
const RECEIVE_HEADROOM_BYTES = 1024 * 1024;

/** The receive limit for a route table's `limits.maxBodyBytes`: the body plus headroom, never below grpc-js's default. */
export function receiveLimitFor(maxBodyBytes: number): number {
  return Math.max(GRPC_DEFAULT_RECEIVE_BYTES, maxBodyBytes + RECEIVE_HEADROOM_BYTES);
}

/** One stream being served, as the drain sees it. */
interface ServedStream {
  /** From now on, end the stream with OK as soon as it is settled (and now, if it already is). */
  closeWhenSettled(): void;
  /** End with OK if the decision has been answered and no message is waiting; true when it did. */
  closeIfDecided(): boolean;
  /** Fail the stream (Envoy fails the request closed: nothing of it reached upstream yet); `why` goes in its audit line. */
  cancel(why: string): void;
}

type GateCall = grpc.ServerDuplexStream<WireProcessingRequest, WireProcessingResponse>;

/**
 * Where a call keeps its StreamServer, for the listeners all streams share: a property on the call itself (a
 * WeakMap would make every stream an ephemeron the garbage collector has to trace specially).
 */
const STREAM_SERVER = Symbol('kvgate.streamServer');
type ServedCall = GateCall & { [STREAM_SERVER]?: StreamServer };
const serverOf = (call: GateCall): StreamServer | undefined => (call as ServedCall)[STREAM_SERVER];

const SETTLED: Promise<void> = Promise.resolve();

// The stream listeners, shared by every stream: EventEmitter calls them with `this` = the call, and each finds its
// StreamServer through `STREAM_SERVER`, so an open stream carries no closures of its own.
function onData(this: GateCall, msg: WireProcessingRequest): void {
  serverOf(this)?.received(msg);
}
function onEnd(this: GateCall): void {
  serverOf(this)?.ended();
}
function onCancelled(this: GateCall): void {
  serverOf(this)?.cancelled();
}
function onError(this: GateCall): void {
  serverOf(this)?.errored();
}
function onClose(this: GateCall): void {
  serverOf(this)?.peerClosed();
}

/**
 * One stream being served: a class, not a set of closures, because Envoy holds a stream open for the whole response
 * and 10,000 open streams should not each carry a dozen functions.
 */
class StreamServer implements ServedStream {
  readonly #call: GateCall;
  readonly #session: ExtProcSession;
  readonly #opts: GateServerOptions;
  readonly #onClosed: (s: StreamServer) => void;
  readonly #listener: Listener;
  /** The answer in progress (the last message's); a shared settled promise while none is. */
  #chain: Promise<void> = SETTLED;
  /** Messages received and not yet answered. */
  #busy = 0;
  #closed = false;
  #closeWhenSettled = false;

  constructor(call: GateCall, listener: Listener, deps: SessionDeps, opts: GateServerOptions, onClosed: (s: StreamServer) => void) {
    this.#call = call;
    this.#session = new ExtProcSession(deps, listener, call);
    this.#listener = listener;
    this.#opts = opts;
    this.#onClosed = onClosed;
    (call as ServedCall)[STREAM_SERVER] = this; // how the shared listeners above find this object
    call.on('data', onData);
    call.on('end', onEnd);
    call.on('cancelled', onCancelled);
    call.on('error', onError);
    call.on('close', onClose);
  }

  /** A message arrived (`data`). */
  received(msg: WireProcessingRequest): void {
    this.#busy++;
    // Strictly one message at a time: the answer to message n is written before message n+1 is looked at. With
    // nothing in progress the message is answered now, inside its 'data' event: a chained `then` would cost a promise,
    // a closure and a microtask turn per message for an answer that is almost always ready at once.
    if (this.#chain === SETTLED) {
      const pending = this.#process(msg);
      if (pending !== undefined) this.#chain = pending;
    } else {
      this.#chain = this.#chain.then(() => this.#process(msg));
    }
  }

  /** Envoy half-closed (`end`): answer what is pending, then close. */
  ended(): void {
    void this.#chain.then(() => {
      if (!this.#closed) this.#call.end();
      this.#close();
    });
  }

  // Envoy resets a stream it no longer needs once the request is done; only a cancel with a message unanswered is
  // an abnormal end (the client went away, or Envoy timed the gate out).
  cancelled(): void {
    this.#close(this.#busy > 0 ? 'cancelled_unanswered' : undefined);
  }

  errored(): void {
    this.#close('error');
  }

  peerClosed(): void {
    this.#close();
  }

  /** Answer one message; a promise only while its answer is still to come (admission parked the request). */
  #process(msg: WireProcessingRequest): Promise<void> | undefined {
    if (this.#closed) return undefined;
    try {
      const answer = this.#session.answerNow(msg);
      if (answer instanceof Promise) return this.#whenAnswered(answer);
      this.#send(answer);
    } catch (e) {
      this.#failed(e);
    }
    this.#answered();
    return undefined;
  }

  async #whenAnswered(answer: Promise<WireProcessingResponse | null>): Promise<void> {
    try {
      this.#send(await answer);
    } catch (e) {
      this.#failed(e);
    } finally {
      this.#answered();
    }
  }

  #send(response: WireProcessingResponse | null): void {
    if (response !== null && !this.#closed) this.#call.write(response);
  }

  /** The answer could not be made or written: the request fails closed. */
  #failed(e: unknown): void {
    // Envoy answers the client its status_on_error (500) for this request: a refusal, so it is this line's audit
    // line (the session wrote none: its answer never came back).
    this.#opts.logger.error(
      {
        err: e,
        request_id: this.#session.requestId || undefined,
        audit: 'refusal',
        code: 'internal',
        tenant: this.#session.auditTenant(),
        reason: 'the gate failed while answering this request; Envoy answers it with its status_on_error (fail closed)',
      },
      'ext_proc stream failed',
    );
    // A gRPC error makes Envoy fail the request (500) unless failure_mode_allow: fail closed.
    this.#close('internal');
    this.#fail(grpc.status.INTERNAL, 'kvgate: internal error');
  }

  /** One message answered (or failed): the next may go. */
  #answered(): void {
    this.#busy--;
    // Nothing in flight: drop the finished answer's promise (the next message chains on a shared settled one).
    if (this.#busy === 0) this.#chain = SETTLED;
    this.#settle();
  }

  #close(reason?: string): void {
    if (this.#closed) return;
    this.#closed = true;
    if (reason) this.#opts.metrics.streamErrors.inc({ reason });
    this.#session.finish();
    this.#onClosed(this);
  }

  /**
   * End the stream with a gRPC error status now. `emit('error')`, not `destroy()`: grpc-js sends a server stream's
   * status from its 'error' listener and `_final` (as for a refused peer in `Process`); a destroyed stream sends none,
   * so Envoy would wait out its message timeout on a stream the gate has given up.
   */
  #fail(code: grpc.status, message: string): void {
    this.#call.emit('error', Object.assign(new Error(message), { code }));
  }

  /** Status OK: Envoy carries on without the gate; the request keeps the routing it was given. */
  #endOk(): boolean {
    if (this.#closed || this.#busy > 0) return false;
    this.#call.end();
    this.#close();
    return true;
  }

  #settle(): void {
    if (this.#closeWhenSettled && this.#session.closableWithOk) this.#endOk();
  }

  closeWhenSettled(): void {
    this.#closeWhenSettled = true;
    this.#settle();
  }

  closeIfDecided(): boolean {
    return this.#session.decisionAnswered && !this.#session.inDuplexResponse && this.#endOk();
  }

  cancel(why: string): void {
    if (this.#closed) return;
    // A request still undecided (queued, or its body not yet in) is refused by this cancel: Envoy answers it with its
    // status_on_error before anything reached a worker. One audit line says so (a decided one goes on, unaudited).
    const refused = this.#session.requestId !== '' && !this.#session.decisionAnswered;
    this.#close('drain_cancelled');
    this.#fail(grpc.status.UNAVAILABLE, 'kvgate: the gate is shutting down');
    if (refused) {
      this.#opts.logger.warn(
        {
          request_id: this.#session.requestId,
          ...(this.#session.clientRequestId === undefined ? {} : { client_request_id: this.#session.clientRequestId }),
          audit: 'refusal',
          code: 'draining',
          tenant: this.#session.auditTenant(),
          reason: `the gate shut down (${why}) before this request was decided; Envoy answers it with its status_on_error, before any worker saw it`,
          listener: this.#listener,
        },
        'refused: draining',
      );
    }
  }
}

async function drainServer(
  server: grpc.Server,
  health: HealthImplementation,
  active: ReadonlySet<ServedStream>,
  opts: GateServerOptions,
): Promise<void> {
  for (const svc of READY_SERVICES) health.setStatus(svc, 'NOT_SERVING');
  opts.logger.info({ in_flight: active.size }, 'draining: health NOT_SERVING');
  const announce = opts.drainAnnounceMs ?? 0;
  if (announce > 0) await new Promise((r) => setTimeout(r, announce));
  const grace = opts.drainGraceMs ?? 10_000;
  await new Promise<void>((resolve) => {
    let last: NodeJS.Timeout | undefined;
    const timer = setTimeout(() => {
      const { ended, cancelled } = endOpenStreams(active, 'drain.graceMs over');
      opts.logger.warn(
        { ended_ok: ended, cancelled },
        'drain grace period over; decided streams ended OK (their requests go on), undecided ones cancelled',
      );
      // Every stream has its final status queued; give the transport a moment to write them, then stop.
      last = setTimeout(() => {
        server.forceShutdown();
        resolve();
      }, 1000);
    }, grace);
    server.tryShutdown(() => {
      clearTimeout(timer);
      clearTimeout(last);
      resolve();
    });
    // After tryShutdown no new stream starts; every settled stream ends OK now, the others once they settle.
    for (const s of [...active]) s.closeWhenSettled();
  });
  opts.logger.info('drained');
}

/** Decided streams end with OK (their requests go on), the others are cancelled (fail closed, one audit line each). */
function endOpenStreams(active: ReadonlySet<ServedStream>, why: string): { ended: number; cancelled: number } {
  let ended = 0;
  let cancelled = 0;
  for (const s of [...active]) {
    if (s.closeIfDecided()) ended++;
    else {
      s.cancel(why);
      cancelled++;
    }
  }
  return { ended, cancelled };
}

/** How long a close waits for the final statuses it queued to be written before it drops the connections. */
const STATUS_FLUSH_MS = 1000;

/**
 * Stop now: the end a drain's grace period gives, without waiting for it. A cancelled stream resets the client's
 * response once it has started (the module comment), so a decided stream ends with OK and its generation goes on;
 * undecided ones are cancelled. As at the end of the grace period, a decided stream is cancelled too when, at that
 * moment, a message of it is still being answered or its FULL_DUPLEX_STREAMED response body is still passing through
 * the gate (`closeIfDecided`). Then no new stream starts, and the connections are dropped once the statuses are
 * written (at most STATUS_FLUSH_MS).
 */
async function closeNow(server: grpc.Server, active: ReadonlySet<ServedStream>, opts: GateServerOptions): Promise<void> {
  if (active.size === 0) {
    server.forceShutdown();
    return;
  }
  const { ended, cancelled } = endOpenStreams(active, 'closed at once by a second signal');
  opts.logger.warn(
    { ended_ok: ended, cancelled },
    'closing now; decided streams ended OK (their requests go on), undecided ones cancelled',
  );
  await new Promise<void>((resolve) => {
    const timer = setTimeout(() => {
      server.forceShutdown();
      resolve();
    }, STATUS_FLUSH_MS);
    server.tryShutdown(() => {
      clearTimeout(timer);
      resolve();
    });
  });
}

/**
 * The health services alone on a plaintext port: kubelet's gRPC probes cannot present a client certificate, so with
 * mTLS on the ext_proc port they need one of their own. GIE's EPP does the same: a separate `grpc.NewServer()` with
 * no credentials on its health port, 9003 by default (kubernetes-sigs/gateway-api-inference-extension @1748e829,
 * cmd/epp/runner/runner.go `registerHealthServer`). Only grpc.health.v1 is served there, never ext_proc.
 */
async function startHealthPort(
  listen: string,
  health: HealthImplementation,
  logger: Logger,
): Promise<{ server: grpc.Server; port: number }> {
  const server = new grpc.Server();
  health.addToServer(server);
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync(listen, grpc.ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))),
  );
  logger.info(
    { listen: `${listen.slice(0, listen.lastIndexOf(':'))}:${port}` },
    'kvgate health port listening (grpc.health.v1 only, plaintext)',
  );
  return { server, port };
}
