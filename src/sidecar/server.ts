/**
 * `createSidecar`: the sidecar's HTTP shell. State lives in `SidecarState`, decisions in the pure modules (compare,
 * contract-check, attestation-check, openai-body, status) and the role handlers; this file wires them to sockets.
 *
 * Routes on the main port: `POST /v1/completions` and `/v1/chat/completions` (the role's work), `GET /kvgate/v1/status`,
 * `GET /healthz` (200 only while serving), `GET /metrics` (Prometheus). Drain and undrain are on the loopback admin
 * port and metrics also on their own port (side-ports.ts); a drain sent to the main port is refused and audited.
 */
import { setMaxListeners } from 'node:events';
import http from 'node:http';
import type { Duplex } from 'node:stream';
import type { Context, Tracer } from '@opentelemetry/api';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import { refusedRequestField } from '../client-request-fields.js';
import { checkBodyBinding } from '../contract/body-binding.js';
import type { TransferContract } from '../contract/contract.js';
import type { KeyRing } from '../contract/keys.js';
import { createKeyStore, type KeyStore } from '../key-store.js';
import { KvgateError } from '../errors.js';
import { AUDIT_REASON_MAX, auditCut, quoteClientValue } from '../json-limits.js';
import { H } from '../headers.js';
import { closeSilentConnections } from '../silent-connections.js';
import { compareObservation } from './compare.js';
import { createLoadReader, type WorkerLoad } from './worker-load.js';
import { NIXL_UNCHECKED, type SidecarConfig } from './config.js';
import { checkContract } from './contract-check.js';
import { createReplayGuard, type ReplayGuard } from './replay-guard.js';
import { headerValue, type IncomingCall, type SidecarContext } from './context.js';
import { serveDecode } from './decode-role.js';
import { ENGINE_CANARY_REQUEST_PREFIX } from './engine-canary.js';
import { abortWith, listen, parseJsonObject, readBody, sendError, sendText, type FetchFn } from './http-io.js';
import { createSidecarMetrics } from './metrics.js';
import { sidecarOptIns } from './opt-ins.js';
import { ENDPOINT_PATHS, withContractPriority } from './openai-body.js';
import type { Outcome } from './outcome.js';
import { servePrefill } from './prefill-role.js';
import { createKeepAliveFetch } from './keep-alive-fetch.js';
import { observeWorker } from './probe.js';
import { SidecarState } from './sidecar-state.js';
import { DRAIN_PATH, startSidePorts, UNDRAIN_PATH } from './side-ports.js';
import { endRequestSpan, NOOP_TRACER, startRequestSpan } from './spans.js';
import { admissionRefusal, type SidecarStatus } from './status.js';
import { sendStatus, statusNonceOf } from './status-answer.js';
import { FailedTransferReads } from './failed-transfer-reads.js';
import { readWorkerVersion } from './launch-check.js';
import { keepExactIntegers } from './exact-integers.js';
import { SharedRead } from './shared-read.js';
import { TransferWatch } from './transfer-watch.js';
import { loadWorkerAuth, type WorkerAuth } from './worker-auth.js';
import { VERSION } from '../version.js';

/** Injected so tests run many sidecars in one process, with their own logs, metrics, keys, clock and fetch. */
export interface SidecarDeps {
  readonly logger: Logger;
  readonly registry: Registry;
  /** The ring loaded at start from `config.keys`; a `keys.file` source then reloads it (src/key-store.ts). */
  readonly keys: KeyRing;
  /** Debounce of the key file watch (ms; default 200). */
  readonly keyWatchDebounceMs?: number;
  readonly fetch?: FetchFn;
  readonly now?: () => number;
  /** Spans (src/tracing.ts); default: the API's no-op tracer (trace context is still passed on). */
  readonly tracer?: Tracer;
  /** The worker's auth headers, already loaded (the command does); otherwise `config.workerApiKey` is read from `env`. */
  readonly workerAuth?: WorkerAuth;
  /** Where `workerApiKey.env` is looked up (default: the process environment). */
  readonly env?: Readonly<Record<string, string | undefined>>;
  /** Live contracts the replay guard holds at most (default 200,000; tests make it small). */
  readonly replayGuardMaxEntries?: number;
  /** How long a new connection may stay silent before its first request (ms; default the server's headersTimeout). */
  readonly firstRequestTimeoutMs?: number;
}

/**
 * The request id a sidecar checks against the contract. Node joins a repeated `x-request-id` as "a, b"; llm-d's P/D
 * sidecar (llm-d-inference-scheduler `pkg/sidecar/proxy/connector_nixlv2.go` @520af478) clones the gate's request
 * and `Header.Add`s its own uuid, so the relayed prefill carries "<gate id>, <uuid>". The first value is the one
 * the gate stamped; the contract must name exactly that one, so a client cannot slip another id in front.
 */
export function contractRequestId(raw: string | undefined): string | undefined {
  if (raw === undefined) return undefined;
  const first = raw.split(',')[0]!.trim();
  return first === '' ? undefined : first;
}

/** A running sidecar. `close` stops probing and drops connections; call `drain` first for a graceful stop. */
export interface Sidecar {
  readonly url: string;
  readonly port: number;
  /** The loopback admin port (drain, undrain), or null when `admin: ''`. */
  readonly adminUrl: string | null;
  /** The metrics-only port, or null when `metrics: ''`. */
  readonly metricsUrl: string | null;
  status(): SidecarStatus;
  /** The key ring in use and its reload (a `keys.file` source is watched; `kvgate sidecar` reloads it on SIGHUP too). */
  readonly keys: KeyStore;
  /** Probe the worker now (it also runs at start and every `probe.intervalMs`); resolves to the new status. */
  probe(): Promise<SidecarStatus>;
  /** Stop taking work; resolves once every in-flight request has finished. */
  drain(): Promise<void>;
  close(): Promise<void>;
}

/** Everything the request handlers share. */
interface Runtime {
  /** vLLM's load gauges, read when the gate polls the status (worker-load.ts). */
  readonly load: () => Promise<WorkerLoad | null>;
  readonly ctx: SidecarContext;
  readonly state: SidecarState;
  readonly registry: Registry;
  readonly replay: ReplayGuard;
  readonly keys: KeyStore;
}

/** Listeners a request's own abort signal may carry before Node warns: well above what one request's calls add. */
const REQUEST_SIGNAL_LISTENERS = 64;

/** Start a sidecar: listen, probe the worker once, then keep probing. Resolves when it is ready to serve. */
export async function createSidecar(config: SidecarConfig, deps: SidecarDeps): Promise<Sidecar> {
  const metrics = createSidecarMetrics(deps.registry);
  // Both results at 0 under this sidecar's role, so the first refused restart shows as an increase to its alert.
  for (const result of ['reverified', 'refused'] as const) metrics.restarts.inc({ role: config.role, result }, 0);
  // Where operators alert: the same opt-ins the start warnings and /status name (opt-ins.ts).
  for (const o of sidecarOptIns(config)) metrics.optIn.set({ setting: o.setting }, 1);
  const now = deps.now ?? Date.now;
  const closed = new AbortController();
  // Every request in flight and every shared worker read listens on `closed` until it ends (removed then): as many as
  // maxInFlight plus a few, not a leak. Node's default warning at 11 would tell operators otherwise.
  setMaxListeners(0, closed.signal);
  const state = new SidecarState(config, metrics, deps.logger, now);
  const auth =
    deps.workerAuth === undefined
      ? await loadWorkerAuth(config.workerApiKey, deps.env ?? process.env)
      : { ok: true as const, value: deps.workerAuth };
  if (!auth.ok) throw new Error(auth.error);
  // Pooled keep-alive connections to the worker and the prefill leg's target (keep-alive-fetch.ts).
  const pool = createKeepAliveFetch();
  const workerUrl = config.worker.replace(/\/+$/, '');
  const keys = createKeyStore({
    source: config.keys,
    initial: deps.keys,
    logger: deps.logger,
    registry: deps.registry,
    metricPrefix: 'kvgate_sidecar_',
    ...(deps.now ? { now: deps.now } : {}),
  });
  const ctx: SidecarContext = {
    config,
    keys: keys.current,
    fetch: deps.fetch ?? pool.fetch,
    now,
    logger: deps.logger,
    metrics,
    tracer: deps.tracer ?? NOOP_TRACER,
    workerUrl,
    workerAuth: auth.value,
    transfers: new TransferWatch(),
    failedTransfers: new FailedTransferReads({
      fetch: deps.fetch ?? pool.fetch,
      workerUrl,
      workerAuth: auth.value,
      timeoutMs: config.probe.timeoutMs,
      closed: closed.signal,
    }),
    workerVersion: new SharedRead(() =>
      readWorkerVersion({ fetch: deps.fetch ?? pool.fetch, workerUrl, workerAuth: auth.value, config, closed: closed.signal }),
    ),
    closed: closed.signal,
    status: () => state.status(),
    reverify: (accept) => loop.reverify(accept),
  };
  const rt: Runtime = {
    ctx,
    state,
    registry: deps.registry,
    replay: createReplayGuard(deps.replayGuardMaxEntries, () => metrics.replayEvictions.inc()),
    keys,
    load: createLoadReader(ctx.fetch, ctx.workerUrl, now),
  };
  const loop = createProbeLoop(rt);
  const server = http.createServer((req, res) => {
    void route(rt, req, res).catch((e: unknown) => {
      deps.logger.error({ err: e }, 'sidecar request handler failed');
      sendError(res, KvgateError.from(e), headerValue(req.headers, H.requestId) ?? '');
    });
  });
  server.on('clientError', (e: Error & { code?: string }, socket: Duplex) => refuseUnparsed(rt, e, socket));
  // Above the proxy's idle timeout (config.ts keepAliveTimeoutMs), so the proxy, not the sidecar, ends idle connections.
  server.keepAliveTimeout = config.keepAliveTimeoutMs;
  server.headersTimeout = Math.max(server.headersTimeout, config.keepAliveTimeoutMs + 1_000);
  closeSilentConnections(server, deps.firstRequestTimeoutMs ?? server.headersTimeout);
  const { port, host } = await listen(server, config.listen);
  const side = await startSidePorts(config, state, deps.registry, deps.logger);
  await loop.probe();
  loop.start(closed.signal);
  keys.watch(deps.keyWatchDebounceMs);
  return {
    url: `http://${host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host.includes(':') ? `[${host}]` : host}:${port}`,
    port,
    adminUrl: side.adminUrl,
    metricsUrl: side.metricsUrl,
    status: () => state.status(),
    keys,
    probe: loop.probe,
    drain: () => state.drain(),
    close: async () => {
      closed.abort();
      keys.close();
      await loop.stop();
      await side.close();
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      pool.close();
    },
  };
}

interface ProbeLoop {
  /** A probe round: the one under way, else a new one. */
  probe(): Promise<SidecarStatus>;
  /** See `SidecarContext.reverify`. */
  reverify(accept?: (status: SidecarStatus) => boolean): Promise<SidecarStatus | undefined>;
  start(signal: AbortSignal): void;
  stop(): Promise<void>;
}

/**
 * Probe now (one round at a time: concurrent callers share it) and every `probe.intervalMs` after `start`. A prefill
 * sidecar's rounds begin with the engine canary, so each verdict names the launch it is about.
 */
function createProbeLoop(rt: Runtime): ProbeLoop {
  const { config, fetch: fetchFn } = rt.ctx;
  let running: Promise<SidecarStatus> | undefined;
  let started = 0;
  let timer: NodeJS.Timeout | undefined;
  const served = config.servedModelName === undefined ? {} : { servedModelName: config.servedModelName };
  // Recorded trust needs the generation canary on every probe (it is what tells weights and adapters apart).
  const generation =
    config.probe.generation === 'always' ||
    (config.probe.generation === 'declared' && (config.trust === 'recorded' || config.descriptor.canaries?.generation !== undefined));
  const compareOpts = { ...served, requireRecorded: config.trust === 'recorded' };
  const side =
    config.nixlSideChannel === undefined || config.nixlSideChannel === NIXL_UNCHECKED ? {} : { nixlSideChannel: config.nixlSideChannel };
  const round = async (n: number): Promise<SidecarStatus> => {
    const engineCanary =
      config.role === 'prefill' ? { engineCanary: { requestId: `${ENGINE_CANARY_REQUEST_PREFIX}${rt.ctx.now()}-${n}` } } : {};
    const observation = await observeWorker(rt.ctx.workerUrl, config.descriptor, {
      fetch: fetchFn,
      timeoutMs: config.probe.timeoutMs,
      generation,
      headers: rt.ctx.workerAuth,
      ...served,
      ...engineCanary,
      ...side,
      signal: rt.ctx.closed,
    });
    // A round cut short by close() says nothing about the worker: no verdict, no 'unverified' line at shutdown.
    if (rt.ctx.closed.aborted) return rt.state.status();
    rt.state.recordProbe(compareObservation(config.descriptor, observation, compareOpts), observation.down !== undefined);
    return rt.state.status();
  };
  const probe = (): Promise<SidecarStatus> => {
    running ??= round(++started).finally(() => {
      running = undefined;
    });
    return running;
  };
  const fresh = async (): Promise<SidecarStatus> => {
    const want = started + 1;
    // A round already under way may have read the engine id before the restart: wait it out, then start another.
    while (running !== undefined && started < want) await running.catch(() => undefined);
    if (started >= want || rt.ctx.closed.aborted) return running ?? rt.state.status();
    return probe();
  };
  return {
    probe,
    reverify: (accept) => {
      const joinOrFresh = async (): Promise<SidecarStatus> => {
        if (running !== undefined && accept !== undefined) {
          const current = await running.catch(() => undefined);
          if (current !== undefined && accept(current)) return current;
        }
        return fresh();
      };
      return withinMs(joinOrFresh(), config.probe.timeoutMs);
    },
    start(signal) {
      const schedule = (): void => {
        if (signal.aborted) return;
        timer = setTimeout(() => void probe().finally(schedule), config.probe.intervalMs);
        timer.unref();
      };
      schedule();
    },
    async stop() {
      if (timer !== undefined) clearTimeout(timer);
      await running?.catch(() => undefined);
    },
  };
}

/** `p`'s value, or undefined once `ms` have passed (p keeps running). */
function withinMs<T>(p: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), ms);
    timer.unref();
  });
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

async function route(rt: Runtime, req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
  const path = (req.url ?? '/').split('?')[0] ?? '/';
  const endpoint = ENDPOINT_PATHS[path];
  if (endpoint !== undefined && req.method === 'POST') return handleCompletion(rt, req, res, path, endpoint);
  if (req.method === 'POST' && path === '/v1/responses') {
    // llm-d's sidecar also serves the Responses API; kvgate binds only the two OpenAI paths it can check.
    req.resume();
    const e = new KvgateError(
      'bad_request',
      'kvgate does not route the Responses API (POST /v1/responses): its prompt and KV cannot be bound to a compatibility group; send the request as POST /v1/chat/completions',
    );
    return refuseWithoutContract(rt, req, res, path, e);
  }
  if (req.method === 'GET' && path === '/kvgate/v1/status') {
    // The gate's poll carries a nonce: the answer is signed for it (status-answer.ts), so nothing else that answers
    // for this pod IP, and no replay of an earlier answer, passes for this sidecar.
    const polled = statusNonceOf(req.headers);
    if ('error' in polled) return refuseWithoutContract(rt, req, res, path, polled.error);
    const ring = rt.ctx.keys();
    const load = await rt.load();
    // The keys: current id, ids held, source and last reload (never a secret), so an operator can check every sidecar
    // holds a new id before switching current to it.
    const keys = rt.keys.status();
    // `release`: the kvgate version, so `kvgate status` shows a rolling upgrade's skew (an older gate ignores the field).
    const body = load === null ? { ...rt.state.status(), keys, release: VERSION } : { ...rt.state.status(), keys, release: VERSION, load };
    return sendStatus(res, body, ring, polled.nonce);
  }
  if (req.method === 'GET' && path === '/healthz') {
    // Not ready from the first moment of a drain (readiness takes the pod out of Services), even while the announce
    // window still admits requests routed here before the gate saw it.
    const status = rt.state.status();
    if (status.draining) return sendText(res, 503, 'text/plain', 'draining\n');
    const refusal = admissionRefusal(status);
    if (refusal === undefined || refusal.code === 'queue_full') return sendText(res, 200, 'text/plain', 'ok\n');
    return sendText(res, 503, 'text/plain', `${refusal.code}\n`);
  }
  if (req.method === 'GET' && path === '/metrics') return sendText(res, 200, rt.registry.contentType, await rt.registry.metrics());
  if (req.method === 'POST' && (path === DRAIN_PATH || path === UNDRAIN_PATH)) {
    // Whoever reaches this port (Envoy, the gate, anything the network lets in) must not take the worker out of service.
    req.resume();
    const e = new KvgateError(
      'bad_request',
      `${path} is served only on the sidecar's loopback admin port (admin: ${rt.ctx.config.admin || 'disabled'}); call it from inside the pod`,
    );
    return refuseWithoutContract(rt, req, res, path, e, { remote: req.socket.remoteAddress ?? null });
  }
  if (endpoint !== undefined || (req.method !== 'GET' && req.method !== 'HEAD')) {
    // A request this port does not serve (another method on a completion path, a trailing slash, another API): whoever
    // sent it reached the request port, so it is refused and audited like the gate's unrouted paths, not a bare 404.
    req.resume();
    const e = new KvgateError(
      'bad_request',
      `the sidecar serves POST /v1/completions and /v1/chat/completions, not ${req.method ?? ''} ${quoteClientValue(path)}; send requests through the gate`,
    );
    return refuseWithoutContract(rt, req, res, auditCut(path), e);
  }
  return sendText(
    res,
    404,
    'text/plain',
    'not found: the sidecar serves POST /v1/completions, /v1/chat/completions and GET /kvgate/v1/status, /healthz, /metrics\n',
  );
}

/**
 * What Node's HTTP parser refuses before `route` sees a request: request smuggling (Transfer-Encoding with
 * Content-Length, two lengths, a folded header), headers over the limit, a request that did not arrive within
 * `headersTimeout`. Answered as Node answers it (400, 431, 408; the connection closes, so nothing pipelined behind it
 * is read), and, unlike Node's own answer, counted and audited like every other refusal. A reset connection is the
 * client leaving, not a refusal.
 */
function refuseUnparsed(rt: Runtime, e: Error & { code?: string }, socket: Duplex): void {
  if (e.code === 'ECONNRESET' || e.code === 'EPIPE') return void socket.destroy();
  const { config, metrics } = rt.ctx;
  const code = auditCut(e.code ?? 'unknown', 64);
  metrics.requests.inc({ role: config.role, outcome: 'refused', code: 'bad_request' });
  rt.ctx.logger.warn(
    {
      audit: 'refusal',
      code: 'bad_request',
      reason: `the request is not valid HTTP/1.1 (${code}): its framing, headers or timing were refused before it was read`,
      tenant: null,
      role: config.role,
      trust: config.trust,
      remote: (socket as Duplex & { remoteAddress?: string }).remoteAddress ?? null,
    },
    'refused: bad_request',
  );
  const status = code === 'HPE_HEADER_OVERFLOW' ? 431 : code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 408 : 400;
  // An answer already under way on this connection (a pipelined request broke behind it) cannot be followed by one.
  const answering = (socket as Duplex & { _httpMessage?: { headersSent?: boolean } })._httpMessage?.headersSent === true;
  if (!socket.writable || answering) return void socket.destroy();
  socket.end(`HTTP/1.1 ${status} ${http.STATUS_CODES[status]}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`);
}

/**
 * A refusal made before any contract is read (a path or method this port does not serve): joinable and counted like
 * every other, under the caller's request id (an audit line without one matches nothing in Envoy's access log) and
 * in kvgate_sidecar_requests_total, with one audit line.
 */
function refuseWithoutContract(
  rt: Runtime,
  req: http.IncomingMessage,
  res: http.ServerResponse,
  path: string,
  e: KvgateError,
  extra: Record<string, unknown> = {},
): void {
  const requestId = contractRequestId(headerValue(req.headers, H.requestId));
  const { config, metrics } = rt.ctx;
  metrics.requests.inc({ role: config.role, outcome: 'refused', code: e.code });
  rt.ctx.logger.warn(
    {
      request_id: requestId === undefined ? undefined : auditCut(requestId),
      role: config.role,
      audit: 'refusal',
      code: e.code,
      reason: e.reason,
      tenant: null,
      trust: config.trust,
      path,
      ...extra,
    },
    `refused: ${e.code}`,
  );
  sendError(res, e, requestId ?? '');
}

/**
 * The contract (from the headers alone), admission (draining, unverified, full), then in-flight accounting around
 * the work itself. A request that is not the gate's is refused before it counts as load: it takes no admission slot
 * and its id is not listed on the status (the gate reads listed ids as requests it routed here; src/gate/endpoint-load.ts).
 */
async function handleCompletion(
  rt: Runtime,
  req: http.IncomingMessage,
  res: http.ServerResponse,
  path: string,
  endpoint: IncomingCall['endpoint'],
): Promise<void> {
  const { config, metrics } = rt.ctx;
  const receivedAt = performance.now();
  // This request's ring: the contract is verified, and the attestation signed or verified, with this one snapshot.
  const keys = rt.ctx.keys();
  const requestId = contractRequestId(headerValue(req.headers, H.requestId));
  const logger = rt.ctx.logger.child({ request_id: requestId === undefined ? undefined : auditCut(requestId), role: config.role });
  const who: { tenant: string | null } = { tenant: null }; // set once the contract verified
  const traced = startRequestSpan(rt.ctx.tracer, config.role, req.headers, requestId);
  const record = (o: Outcome): void => {
    endRequestSpan(traced.span, o.outcome, o.code);
    metrics.requests.inc({ role: config.role, outcome: o.outcome, code: o.code ?? '' });
    logger.info({ event: 'request', outcome: o.outcome, code: o.code, ...(o.relayed === true ? { relayed: true } : {}) }, 'request done');
    if (o.outcome === 'refused' && o.relayed !== true) {
      // The audit trail, as the gate writes it: one line per refusal; code and reason, never prompt text or secrets.
      const reason = o.reason === undefined ? null : auditCut(o.reason, AUDIT_REASON_MAX);
      logger.warn(
        { audit: 'refusal', code: o.code ?? null, reason, tenant: who.tenant === null ? null : auditCut(who.tenant), trust: config.trust },
        `refused: ${o.code ?? ''}`,
      );
    }
  };
  const token = headerValue(req.headers, H.contract);
  const contract = checkContract({
    token,
    requestId,
    groupHeader: headerValue(req.headers, H.group),
    fingerprint: config.fingerprint,
    tenantScopes: config.tenantScopes,
    keys,
    nowMs: rt.ctx.now(),
  });
  if (!contract.ok) {
    req.resume();
    metrics.contractFailures.inc({ reason: contract.error.reason });
    logger.warn({ event: 'contract_refused', reason: contract.error.reason }, contract.error.error.reason);
    sendError(res, contract.error.error, requestId ?? '');
    return record({ outcome: 'refused', code: contract.error.error.code, reason: contract.error.error.reason });
  }
  who.tenant = contract.value.tenant;
  // Everything the contract alone decides is decided here, from the headers, before the body: a contract for another
  // decode worker, or one this worker already holds, must not take an admission slot while its body trickles in (one
  // captured contract sent 256 times with bodies that never end would otherwise fill every slot for bodyTimeoutMs).
  const misrouted = wrongEndpoint(config, contract.value);
  if (misrouted !== undefined) {
    req.resume();
    metrics.contractFailures.inc({ reason: 'wrong_endpoint' });
    sendError(res, misrouted, requestId ?? '');
    return record({ outcome: 'refused', code: misrouted.code, reason: misrouted.reason });
  }
  // Keyed by the contract itself (its signature), not the request id: a client that retries with the same
  // x-request-id gets a new contract from the gate, while a captured contract still admits one request per worker.
  const contractKey = token!.slice(token!.lastIndexOf('.') + 1);
  if (!rt.replay.claim(contractKey, contract.value.expiresAtMs, rt.ctx.now())) {
    req.resume();
    metrics.contractFailures.inc({ reason: 'replayed' });
    logger.warn({ event: 'contract_refused', reason: 'replayed' }, 'contract replayed');
    const e = new KvgateError(
      'contract_invalid',
      `the transfer contract of request ${contract.value.requestId} was already admitted by this worker; a contract covers exactly one request - send new requests through the gate`,
    );
    sendError(res, e, requestId ?? '');
    return record({ outcome: 'refused', code: e.code, reason: e.reason });
  }
  rt.state.receive(requestId);
  const refusal = admissionRefusal(rt.state.status());
  if (refusal !== undefined) {
    req.resume();
    rt.replay.release(contractKey); // refused before any work: the data plane may retry it here
    const detail = refusal.code === 'queue_full' ? { detail: { retryAfterSeconds: 1 } } : {};
    sendError(res, new KvgateError(refusal.code, refusal.message, detail), requestId ?? '');
    return record({ outcome: 'refused', code: refusal.code, reason: refusal.message });
  }
  rt.state.enter(requestId);
  // Aborted when the client goes away before the answer ended, or the sidecar closes.
  const aborter = new AbortController();
  // One listener per upstream call of this request (prefill leg attempts, /tokenize, /version, reads, the decode leg),
  // each gone with the request: bounded by what one request does, which can pass Node's warning threshold of 10.
  setMaxListeners(REQUEST_SIGNAL_LISTENERS, aborter.signal);
  const unlink = abortWith(rt.ctx.closed, aborter);
  res.once('close', () => {
    unlink();
    if (!res.writableFinished) aborter.abort();
    rt.state.leave(requestId);
  });
  const signal = aborter.signal;
  let outcome: Outcome;
  try {
    outcome = await runCompletion(rt, req, res, {
      path,
      endpoint,
      requestId,
      contract: contract.value,
      contractToken: token!,
      contractKey,
      signal,
      logger,
      receivedAt,
      trace: traced.context,
      keys,
    });
  } catch (e) {
    // A bug, not a refusal: the client gets 500 (or its stream ends), and the request is still counted, logged and
    // its span ended like every other.
    const error = KvgateError.from(e);
    logger.error({ err: e }, 'sidecar request handler failed');
    sendError(res, error, requestId ?? '');
    outcome = { outcome: 'failed', code: error.code };
  }
  record(outcome);
}

/** Body (within `bodyTimeoutMs`), its binding to the verified contract, then the role's handler. Every refusal here happens before any worker call. */
async function runCompletion(
  rt: Runtime,
  req: http.IncomingMessage,
  res: http.ServerResponse,
  c: {
    path: string;
    endpoint: IncomingCall['endpoint'];
    requestId: string | undefined;
    contract: TransferContract;
    contractToken: string;
    /** The contract's replay-guard entry, claimed from the headers (handleCompletion). */
    contractKey: string;
    signal: AbortSignal;
    logger: Logger;
    receivedAt: number;
    trace: Context;
    keys: KeyRing;
  },
): Promise<Outcome> {
  const { config, metrics } = rt.ctx;
  // Refusals before the role's handler ran: no work was done for this contract, so it is released (as before it was
  // claimed only once a bound body had arrived); a sender can hold at most one slot per contract at a time.
  const refuse = (e: KvgateError): Outcome => {
    rt.replay.release(c.contractKey);
    sendError(res, e, c.requestId ?? '');
    return { outcome: 'refused', code: e.code, reason: e.reason };
  };
  const raw = await readBody(req, config.maxBodyBytes, config.bodyTimeoutMs);
  if (!raw.ok) {
    if (!raw.error.timedOut) return refuse(raw.error.error);
    rt.replay.release(c.contractKey);
    // 408, and the connection goes with it: the rest of that body may never come.
    sendError(res, raw.error.error, c.requestId ?? '', { connection: 'close' }, 408);
    return { outcome: 'refused', code: raw.error.error.code, reason: raw.error.error.reason };
  }
  const text = raw.value.toString('utf8');
  const body = parseJsonObject(text);
  if (!body.ok) return refuse(body.error);
  // Integers beyond 2^53 (a 64-bit seed) go on to the worker as the client wrote them (exact-integers.ts).
  keepExactIntegers(text, body.value);
  const contract = c.contract;
  const token = c.contractToken;
  // The contract authorises one body: this tenant's cache_salt, this model and adapter, this prompt.
  const bound = checkBodyBinding(contract, body.value, config.descriptor.adapter?.id ?? null);
  if (!bound.ok) {
    metrics.contractFailures.inc({ reason: bound.error.reason });
    c.logger.warn({ event: 'contract_refused', reason: bound.error.reason }, bound.error.message);
    return refuse(new KvgateError('contract_invalid', bound.error.message));
  }
  // As the gate refuses them (client media ids, media URLs this sidecar's config does not allow, beam search, a client
  // priority, the other path's prompt), judged from this request's own path.
  const field = refusedRequestField(body.value, c.endpoint, config.media);
  if (field !== undefined) return refuse(new KvgateError('bad_request', field));
  const call: IncomingCall = {
    endpoint: c.endpoint,
    path: c.path,
    // Every call to this worker carries the operator's priority for the tenant from the signed contract (the prefill
    // leg to another sidecar goes without it: decode-role.ts `toPrefillLegBody`).
    body: withContractPriority(body.value, contract.priority),
    headers: req.headers,
    requestId: c.requestId,
    signal: c.signal,
    logger: c.logger,
    receivedAt: c.receivedAt,
    trace: c.trace,
    keys: c.keys,
  };
  const outcome =
    config.role === 'prefill' ? await servePrefill(rt.ctx, call, contract, res) : await serveDecode(rt.ctx, call, contract, token, res);
  // A prefill attempt that did not run may be retried here (the decode side's retry names failed endpoints, but a
  // direct-mode retry can come back); a decode request is never admitted twice.
  if (config.role === 'prefill' && (outcome.outcome === 'failed' || outcome.outcome === 'refused')) rt.replay.release(c.contractKey);
  return outcome;
}

/**
 * The gate names the decode endpoint it routed to; another decode worker of the group must not take the request. In
 * GIE mode the gate also names an ordered fallback list of the same group (the data plane walks it on retry).
 */
function wrongEndpoint(config: SidecarConfig, contract: TransferContract): KvgateError | undefined {
  const target = contract.decode.endpoint;
  if (config.role !== 'decode' || config.advertise === undefined || target === null) return undefined;
  if (target === config.advertise || (contract.decode.alternates ?? []).includes(config.advertise)) return undefined;
  return new KvgateError(
    'contract_invalid',
    `the contract of request ${contract.requestId} routes its decode to ${target}, not to this worker (${config.advertise}); only the gate's choice may serve it`,
  );
}
