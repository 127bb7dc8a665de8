/**
 * `createSimServer`: one simulated vLLM worker on two ports, the OpenAI API (node:http, no framework) and the NIXL
 * side channel. A thin shell: the parts are wired in `worker.ts`, the logic lives in the modules they come from.
 */
import { metricsExposition } from './metrics-exposition.js';
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pino, type Logger } from 'pino';
import { AggregatorRegistry, type Registry } from 'prom-client';
import type { SimConfig } from './config.js';
import { FAULT_HEADER, parseFaultHeader, parseFaultPatch, type FaultPatch, type FaultState } from './faults.js';
import { handleGeneration, type ResponseSink, type WorkerContext } from './generate-handler.js';
import { handleDetokenize, handleModels, handleTokenize } from './info-handlers.js';
import { validationError, vllmError } from './protocol.js';
import { createSideChannelClient, startSideChannel, type SideChannelClient } from './side-channel.js';
import { simCompatHash } from './nixl-compat-hash.js';
import { startZmqSideChannel } from './zmq-side-channel.js';
import { createWorker } from './worker.js';

export interface SimServerOptions {
  readonly logger?: Logger;
  /** Wall clock in ms (leases, `created`); injected so tests can move time. */
  readonly now?: () => number;
  /** Randomness for the error-rate fault. */
  readonly random?: () => number;
  readonly sideChannelClient?: SideChannelClient;
  /** Test hook: the text of every JSON body `/tokenize` and the generation routes receive, as it arrived, by path. */
  readonly onRequestText?: (path: string, text: string) => void;
}

export interface SimServer {
  readonly url: string;
  readonly sideChannelUrl: string;
  readonly port: number;
  readonly sideChannelPort: number;
  /** The ZMQ ROUTER side channel vLLM serves its handshake payload on (zmq-side-channel.ts; rank 0). */
  readonly nixlSideChannelPort: number;
  /** Rank 0's engine id (the only one without data parallelism). */
  readonly engineId: string;
  /** Every rank's engine id (`<id>_dp<rank>` under data parallelism). */
  readonly engineIds: readonly string[];
  /** vLLM's NIXL compatibility hash of what this worker really runs (what its handshake serves). */
  readonly compatibilityHash: string;
  readonly config: SimConfig;
  /** Rank 0's metrics registry (/metrics serves every rank's series: `servedRegistry`). */
  readonly registry: Registry;
  /** Every data-parallel rank's registry, by rank. */
  readonly registries: readonly Registry[];
  setFaults(patch: FaultPatch): FaultState;
  getFaults(): FaultState;
  /**
   * Test hook: the requests whose blocks this prefill worker still holds for a decode worker (every rank; expired
   * holds reaped first), with how long each was granted for (`leaseMs` from connector v4, `abortRequestTimeoutMs`
   * before).
   */
  heldKv(): readonly { readonly requestId: string; readonly durationMs: number; readonly blocks: number }[];
  /** Test hook: drop the prefix cache (vLLM's /reset_prefix_cache). */
  resetPrefixCache(): void;
  /**
   * SIGTERM under `--shutdown-timeout` (seconds there, ms here): where the version drains (flavour.ts
   * `drainsOnShutdown`) and the timeout is above 0, every new request but `/live` and `/metrics` is answered 503 while
   * the generations in flight finish, for up to `timeoutMs`; then `close()`. Otherwise `close()` at once.
   */
  shutdown(timeoutMs: number): Promise<void>;
  close(): Promise<void>;
}

export async function createSimServer(config: SimConfig, opts: SimServerOptions = {}): Promise<SimServer> {
  const s = config.sim;
  const ranks = await startRanks(config, opts);
  const workers = ranks.map((r) => r.worker);
  const worker = workers[0]!;
  const zmq = await startZmqSideChannel({
    host: s.host,
    port: s.nixlSideChannelPort,
    connectorVersion: config.behaviour.connector.version,
    compatibilityHash: simCompatHash(config.behaviour, config.runtime),
    agentMetadata: worker.sideChannelDeps.payload.agent_metadata as unknown as Record<string, unknown>,
    logger: worker.ctx.logger,
  }).catch(async (e: unknown) => {
    await Promise.all(ranks.map((r) => r.side.close()));
    throw e;
  });
  const setFaults = (patch: FaultPatch): FaultState => workers.map((w) => w.setFaults(patch))[0]!;
  const drain: DrainState = { rejecting: false, inflight: 0, idle: [] };
  let closing: Promise<void> | undefined;
  const admin: Admin = {
    registries: workers.map((w) => w.registry),
    setFaults,
    getFaults: worker.getFaults,
    drain,
    onRequestText: opts.onRequestText ?? (() => undefined),
  };
  let next = 0;
  // vLLM's API server balances requests over its DP engine ranks; the simulator takes them in turn.
  const pick = (): WorkerContext => workers[next++ % workers.length]!.ctx;
  const http = createServer((req, res) => {
    void route(worker.ctx, pick, admin, req, res).catch((e: unknown) => {
      worker.ctx.logger.error({ err: e }, 'unhandled error in simulated worker');
      if (!res.headersSent) sendJson(res, 500, vllmError(500, 'Internal server error'));
      else res.destroy();
    });
  });
  try {
    await listen(http, s.port, s.host);
  } catch (e) {
    await Promise.all([...ranks.map((r) => r.side.close()), zmq.close()]);
    throw e;
  }
  // vLLM sweeps every outstanding lease each step; the simulator sweeps on a timer and on every access.
  const sweep = setInterval(
    () => {
      for (const w of workers) w.leases.sweep();
    },
    Math.max(10, Math.min(1000, Math.floor(s.leaseMs / 2))),
  );
  sweep.unref();
  const port = (http.address() as AddressInfo).port;
  const side = ranks[0]!.side;
  worker.ctx.logger.info(
    { port, sideChannelPort: side.port, model: worker.ctx.servedModelName, ranks: ranks.length },
    'simulated vLLM worker listening',
  );
  return {
    url: `http://${s.host}:${port}`,
    sideChannelUrl: `http://${s.host}:${side.port}`,
    port,
    sideChannelPort: side.port,
    nixlSideChannelPort: zmq.port,
    engineId: worker.engineId,
    engineIds: workers.map((w) => w.engineId),
    compatibilityHash: worker.compatibilityHash,
    config,
    registry: worker.registry,
    registries: workers.map((w) => w.registry),
    setFaults,
    getFaults: worker.getFaults,
    heldKv: () =>
      workers.flatMap((w) => w.leases.list().map((l) => ({ requestId: l.requestId, durationMs: l.durationMs, blocks: l.blockIds.length }))),
    resetPrefixCache: () => {
      for (const w of workers) w.pool.resetCache();
    },
    shutdown: async (timeoutMs) => {
      if (worker.ctx.traits.drainsOnShutdown && timeoutMs > 0) {
        drain.rejecting = true;
        worker.ctx.logger.info({ inflight: drain.inflight, timeoutMs }, 'graceful shutdown: draining in-flight requests');
        if (drain.inflight > 0) {
          let timer: NodeJS.Timeout | undefined;
          await Promise.race([
            new Promise<void>((resolve) => drain.idle.push(resolve)),
            new Promise<void>((resolve) => {
              timer = setTimeout(resolve, timeoutMs);
            }),
          ]);
          clearTimeout(timer);
        }
      }
      await closeAll();
    },
    close: () => closeAll(),
  };

  /** Closes both ports once; `shutdown` and `close` share it, so a test's cleanup after a shutdown is harmless. */
  function closeAll(): Promise<void> {
    closing ??= (async () => {
      clearInterval(sweep);
      await Promise.all([
        new Promise<void>((resolve) => {
          http.close(() => resolve());
          http.closeAllConnections();
        }),
        ...ranks.map((r) => r.side.close()),
        zmq.close(),
      ]);
    })();
    return closing;
  }
}

/**
 * One engine per data-parallel rank, each with its own KV pool and NIXL side channel (vLLM listens on
 * `VLLM_NIXL_SIDE_CHANNEL_PORT + dp rank`) and the engine id vLLM's engine core gives a rank, `<engine_id>_dp<rank>`
 * (vllm-project/vllm `vllm/v1/engine/core.py`). Without DP, one engine under the plain id.
 */
async function startRanks(config: SimConfig, opts: SimServerOptions) {
  const s = config.sim;
  const base = s.engineId ?? randomUUID();
  const out: Array<{ worker: Awaited<ReturnType<typeof createWorker>>; side: Awaited<ReturnType<typeof startSideChannel>> }> = [];
  try {
    for (let rank = 0; rank < s.dataParallelSize; rank++) {
      let sidePort = 0;
      const worker = await createWorker(config, {
        logger: opts.logger ?? pino({ enabled: false }),
        now: opts.now ?? Date.now,
        random: opts.random ?? Math.random,
        sideChannelClient: opts.sideChannelClient ?? createSideChannelClient(),
        sideChannelPort: () => sidePort,
        engineId: s.dataParallelSize > 1 ? `${base}_dp${rank}` : base,
        rank,
      });
      const side = await startSideChannel(worker.sideChannelDeps, s.host, s.sideChannelPort === 0 ? 0 : s.sideChannelPort + rank);
      sidePort = side.port;
      out.push({ worker, side });
    }
  } catch (e) {
    await Promise.all(out.map((r) => r.side.close()));
    throw e;
  }
  return out;
}

function listen(server: ReturnType<typeof createServer>, port: number, host: string): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
}

/**
 * The registry /metrics answers from: every data-parallel rank's series on one exposition, told apart by their
 * `engine` label. vLLM's API server runs one PrometheusStatLogger over all the engine ranks it manages
 * (vllm-project/vllm `vllm/v1/engine/async_llm.py` `StatLoggerManager(engine_idxs=self.engine_core.engine_ranks_managed)`
 * @8ef0b5f; `vllm/v1/metrics/loggers.py` builds `per_engine_labelvalues = {idx: [model_name, str(idx)]}`), and the NIXL
 * series get one child per engine (`NixlPromMetrics`, `vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py`
 * `create_metric_per_engine` @bd33ba3), so a failed transfer on rank 1 shows as `engine="1"` on the same /metrics.
 * The ranks' series never share a label set (each carries its `engine`), so merging them only lays them side by
 * side; the simulator-only series without `engine` add up over the server, as one API server would count them.
 */
async function servedRegistry(registries: readonly Registry[]): Promise<Registry> {
  if (registries.length === 1) return registries[0]!;
  return AggregatorRegistry.aggregate(await Promise.all(registries.map((r) => r.getMetricsAsJSON())));
}

interface Admin {
  /** Every rank's registry, by rank: /metrics serves them together (`servedRegistry`). */
  readonly registries: readonly Registry[];
  readonly setFaults: (patch: FaultPatch) => FaultState;
  readonly getFaults: () => FaultState;
  readonly drain: DrainState;
  readonly onRequestText: (path: string, text: string) => void;
}

/** The graceful-shutdown state (`SimServer.shutdown`): rejecting new requests, and the generations still running. */
interface DrainState {
  rejecting: boolean;
  inflight: number;
  /** Resolved when the last generation in flight ends. */
  idle: Array<() => void>;
}

/**
 * Paths vLLM still serves while it drains: `_EXEMPT_PATHS` of the middleware that answers 503 to everything else
 * (vllm-project/vllm `vllm/entrypoints/serve/middleware.py` @43e1530d). The simulator has no `/live` route, so it
 * answers 404 there. Where this middleware sits against `--api-key`'s was not established: draining is checked first.
 */
const DRAIN_EXEMPT = new Set(['/live', '/metrics']);

async function route(
  ctx: WorkerContext,
  pick: () => WorkerContext,
  admin: Admin,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  const path = (req.url ?? '/').split('?')[0]!;
  const method = req.method ?? 'GET';
  if (admin.drain.rejecting && !DRAIN_EXEMPT.has(path))
    return sendJson(res, 503, { error: 'Server is unavailable. Please try again later.' });
  if (!authorized(ctx.config.sim.apiKey, ctx.traits.apiKeyPrefixes, path, method, req))
    return sendJson(res, 401, { error: 'Unauthorized' });
  const allow = (m: string): boolean => {
    if (method === m) return true;
    sendJson(res, 405, { detail: 'Method Not Allowed' });
    return false;
  };
  switch (path) {
    case '/health':
      if (allow('GET')) res.writeHead(200).end();
      return;
    case '/version':
      if (allow('GET')) sendJson(res, 200, { version: ctx.config.behaviour.engine.version });
      return;
    case '/v1/models':
      if (allow('GET')) sendJson(res, 200, handleModels(ctx));
      return;
    case '/metrics':
      if (allow('GET')) {
        const query = new URLSearchParams((req.url ?? '').split('?')[1] ?? '');
        const registry = await servedRegistry(admin.registries);
        const body = await metricsExposition(registry, query, ctx.traits, ctx.config.sim.apiServerCount);
        res.writeHead(200, { 'content-type': registry.contentType }).end(body);
      }
      return;
    case '/admin/faults':
      if (method === 'GET') return sendJson(res, 200, admin.getFaults());
      if (!allow('POST')) return;
      return withJson(req, res, (body) => {
        const p = parseFaultPatch(body);
        if (!p.ok) return sendJson(res, 400, vllmError(400, p.error));
        sendJson(res, 200, admin.setFaults(p.value));
      });
    case '/tokenize':
    case '/detokenize':
      if (!allow('POST')) return;
      return withJson(
        req,
        res,
        (body) => {
          const out = path === '/tokenize' ? handleTokenize(ctx, body) : handleDetokenize(ctx, body);
          sendJson(res, out.status, out.body);
        },
        ctx.traits.validationErrorType,
        (text) => admin.onRequestText(path, text),
      );
    case '/v1/completions':
    case '/v1/chat/completions': {
      if (!allow('POST')) return;
      const f = parseFaultHeader(header(req, FAULT_HEADER));
      if (!f.ok) return sendJson(res, 400, vllmError(400, f.error));
      return withJson(
        req,
        res,
        async (body) => {
          const ac = new AbortController();
          const d = admin.drain;
          d.inflight++;
          res.on('close', () => {
            ac.abort(new Error('client disconnected'));
            if (--d.inflight === 0) for (const resolve of d.idle.splice(0)) resolve();
          });
          const kind = path === '/v1/completions' ? 'completion' : 'chat';
          await handleGeneration(pick(), kind, body, header(req, 'x-request-id'), f.value, sinkFor(res), ac.signal);
        },
        ctx.traits.validationErrorType,
        (text) => admin.onRequestText(path, text),
      );
    }
    default:
      sendJson(res, 404, { detail: 'Not Found' });
  }
}

/**
 * vLLM's `--api-key` middleware (`AuthenticationMiddleware`; vllm-project/vllm `vllm/entrypoints/openai/api_server.py`,
 * then `vllm/entrypoints/openai/server_utils.py` @029329a8, now `vllm/entrypoints/serve/middleware/authenticate.py`
 * @baaf6e9c): every path starting with one of the version's guarded prefixes (flavour.ts `apiKeyPrefixes`: `/v1`, and
 * on main also `/v2`, `/inference`, `/cohere`) except OPTIONS needs an `Authorization` header that `partition(" ")`
 * splits into a scheme equal to "bearer" in any case and exactly the key (compared by sha256 digest); other paths
 * are open.
 */
function authorized(key: string | undefined, prefixes: readonly string[], path: string, method: string, req: IncomingMessage): boolean {
  if (key === undefined || method === 'OPTIONS' || !prefixes.some((p) => path.startsWith(p))) return true;
  const value = req.headers['authorization'];
  if (!value) return false;
  const space = value.indexOf(' ');
  const scheme = space < 0 ? value : value.slice(0, space);
  const param = space < 0 ? '' : value.slice(space + 1);
  return scheme.toLowerCase() === 'bearer' && param === key;
}

function header(req: IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

/**
 * Read a JSON body. JSON that does not parse is FastAPI's `json_invalid` `RequestValidationError` in vLLM (routes take
 * the pydantic request model as the body), so it gets the validation handler's 400 (`errorType`, flavour.ts).
 */
async function withJson(
  req: IncomingMessage,
  res: ServerResponse,
  fn: (body: unknown) => void | Promise<void>,
  errorType: 'Bad Request' | 'BadRequestError' = 'BadRequestError',
  onText: (text: string) => void = () => undefined,
): Promise<void> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  const text = Buffer.concat(chunks).toString('utf8');
  onText(text);
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch (e) {
    return sendJson(res, 400, validationError(errorType, `JSON decode error: ${(e as Error).message}`));
  }
  await fn(body);
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  if (res.headersSent || res.destroyed) return;
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) }).end(text);
}

function sinkFor(res: ServerResponse): ResponseSink {
  return {
    json: (status, body) => sendJson(res, status, body),
    sse: () => {
      res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', connection: 'keep-alive' });
    },
    event: (data) => {
      if (res.destroyed || res.writableEnded) return;
      res.write(`data: ${data === '[DONE]' ? '[DONE]' : JSON.stringify(data)}\n\n`);
      if (data === '[DONE]') res.end();
    },
    drop: () => {
      // Flush what was written, then cut the TCP connection mid-response (the client sees a truncated body).
      if (res.socket) res.socket.end();
      else res.destroy();
    },
  };
}
