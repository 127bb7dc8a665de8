/**
 * One downstream request through the data plane: HCM (headers, request id, route cache), the ext_proc filter, the
 * router (cluster, host, upstream leg, timeouts) and the encode path back to the client. Local replies — from the
 * router, from the 413 buffer limit, from ext_proc — are sent here; once the response has started, any later error
 * resets the stream instead, as Envoy does.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { UpstreamAgents } from './upstream-agents.js';
import { BodyReader } from './body-reader.js';
import type { ClusterManager } from './cluster-manager.js';
import type { ClusterConfig, ListenerConfig } from './envoy-config-types.js';
import type { ExtProcClient } from './ext-proc-client.js';
import { ExtProcFilter, type DirectionResult, type FilterCallbacks, type LocalReply } from './ext-proc-filter.js';
import type { DynamicMetadata, StreamInfo } from './ext-proc-request.js';
import type { HeaderMap } from './header-map.js';
import type { AppendSemantics } from './header-mutation.js';
import { requestHasBody, requestHeadersFromNode, responseHasBody, responseHeadersFromNode, upstreamRequestHeaders } from './http-codec.js';
import type { Direction } from './processor-state.js';
import type { ResolvedRoute, RouteTable } from './router.js';
import type { ClusterCounter, CounterScope, ExtProcCounter, HcmCounter } from './stats.js';
import { startUpstream, write, type UpstreamCall } from './upstream.js';
import { localReplyHeaders, upstreamFailureReply } from './local-reply.js';
import type { AccessLogEntry } from './access-log.js';

export interface StreamDeps {
  readonly listener: ListenerConfig;
  readonly routes: RouteTable;
  readonly clusters: ClusterManager;
  readonly hcmStats: CounterScope<HcmCounter>;
  clusterStats(name: string): CounterScope<ClusterCounter>;
  readonly extProc:
    | {
        readonly client: ExtProcClient;
        readonly stats: CounterScope<ExtProcCounter>;
        readonly closeAfterLastResponse: boolean;
        readonly sendHeaderRawValue: boolean;
        readonly repeatEndOfStream: boolean;
      }
    | undefined;
  readonly semantics: AppendSemantics;
  readonly agents: UpstreamAgents;
  /** Write the chosen host as envoy.lb / x-gateway-destination-endpoint-served (EnvoyHarnessOptions). */
  readonly reportServedEndpoint?: boolean;
  log(entry: AccessLogEntry): void;
}

export class ActiveStream implements FilterCallbacks {
  readonly dynamicMetadata: DynamicMetadata = new Map();
  readonly info: StreamInfo;
  readonly bufferLimit: number;
  readonly done: Promise<void>;
  readonly #deps: StreamDeps;
  readonly #req: IncomingMessage;
  readonly #res: ServerResponse;
  readonly #headers: HeaderMap;
  readonly #filter: ExtProcFilter | undefined;
  #route: ResolvedRoute | undefined;
  #routeCleared = false;
  #upstream: UpstreamCall | undefined;
  #release: (() => void) | undefined;
  #timers: NodeJS.Timeout[] = [];
  /** The HCM's request_timeout, while armed. */
  #requestTimer: NodeJS.Timeout | undefined;
  /** The request body being received, for the 408/504 choice of a request timeout. */
  #requestBody: BodyReader | undefined;
  #idle: NodeJS.Timeout | undefined;
  #responseStarted = false;
  /** Response headers entered the encode path; later local replies bypass the filters (Envoy's direct reply). */
  #encodeStarted = false;
  #generation = 0;
  #details = 'via_upstream';
  #flags: string[] = [];
  #cluster: string | undefined;
  #host: string | undefined;
  #reset = false;

  constructor(deps: StreamDeps, req: IncomingMessage, res: ServerResponse) {
    this.#deps = deps;
    this.#req = req;
    this.#res = res;
    this.bufferLimit = deps.listener.perConnectionBufferLimitBytes;
    this.#headers = requestHeadersFromNode(req);
    this.info = {
      requestId: this.#headers.get('x-request-id') ?? '',
      protocol: `HTTP/${req.httpVersion}`,
      sourceAddress: req.socket.remoteAddress ?? '',
      sourcePort: req.socket.remotePort ?? 0,
      destinationAddress: req.socket.localAddress ?? '',
      destinationPort: req.socket.localPort ?? 0,
    };
    this.#filter =
      deps.extProc === undefined || deps.listener.hcm.extProc === undefined
        ? undefined
        : new ExtProcFilter({
            config: deps.listener.hcm.extProc,
            client: deps.extProc.client,
            stats: deps.extProc.stats,
            semantics: deps.semantics,
            callbacks: this,
            closeAfterLastResponse: deps.extProc.closeAfterLastResponse,
            sendHeaderRawValue: deps.extProc.sendHeaderRawValue,
            repeatEndOfStream: deps.extProc.repeatEndOfStream,
          });
    this.done = new Promise((resolve) => res.once('close', () => resolve(this.#finish())));
  }

  /** Runs the request to completion (or until a local reply / reset takes over). Never rejects. */
  async run(): Promise<void> {
    this.#deps.hcmStats.inc('downstream_rq_total');
    const hcm = this.#deps.listener.hcm;
    // request_timeout runs from the stream's start until the router has sent the whole request on, or the response
    // starts (ConnectionManagerImpl::ActiveStream::onRequestTimeout: 408 while the request is still coming in).
    if (hcm.requestTimeoutMs > 0) this.#requestTimer = setTimeout(() => this.#onRequestTimeout(), hcm.requestTimeoutMs);
    const body = BodyReader.fromMessage(this.#req, requestHasBody(this.#req));
    this.#requestBody = body;
    // The HCM resolves and caches the route before any filter runs.
    this.#route = this.#deps.routes.resolve(this.#headers);
    const gen = this.#generation;
    if (hcm.buffer !== undefined && !body.ended) {
      // envoy.filters.http.buffer (source/extensions/filters/http/buffer/buffer_filter.cc): decodeHeaders stops
      // iteration, decodeData buffers until end_stream with the decoder buffer limit at max_request_bytes (past it the
      // HCM answers 413), so the filters after it, ext_proc included, see nothing of the request until it is whole.
      const length = await body.bufferAll(hcm.buffer.maxRequestBytes);
      if (gen !== this.#generation || this.#res.writableEnded) return;
      if (length === undefined) return this.sendPayloadTooLarge('request');
      // maybeAddContentLength: a request that came without a length gets the buffered one.
      if (!this.#headers.has('content-length')) this.#headers.set('content-length', String(length));
    }
    const decoded = this.#filter === undefined ? passThrough(body) : await this.#filter.decode(this.#headers, body);
    if (decoded.kind === 'stop' || gen !== this.#generation || this.#res.writableEnded) return;
    await this.#routeRequest(decoded);
  }

  sendLocalReply(reply: LocalReply): void {
    void this.#localReply(reply, false, []);
  }

  sendPayloadTooLarge(direction: Direction): void {
    if (direction === 'request') {
      this.#deps.hcmStats.inc('downstream_rq_too_large');
      void this.#localReply({ status: 413, body: Buffer.from('Payload Too Large'), details: 'request_payload_too_large' }, true, []);
    } else {
      this.#deps.hcmStats.inc('rs_too_large');
      void this.#localReply({ status: 500, body: Buffer.from('Internal Server Error'), details: 'response_payload_too_large' }, true, []);
    }
  }

  clearRouteCache(): void {
    this.#routeCleared = true;
  }

  async #routeRequest(decoded: Extract<DirectionResult, { kind: 'continue' }>): Promise<void> {
    if (this.#routeCleared) this.#route = this.#deps.routes.resolve(this.#headers);
    const route = this.#route;
    if (route === undefined) {
      this.#deps.hcmStats.inc('no_route');
      return this.#routerReply(404, '', 'route_not_found', 'NR');
    }
    const cluster = route.clusterName === undefined ? undefined : this.#deps.clusters.get(route.clusterName);
    this.#cluster = route.clusterName;
    if (cluster === undefined) {
      this.#deps.hcmStats.inc('no_cluster');
      return this.#routerReply(route.route.action.clusterNotFoundResponseCode, '', 'cluster_not_found', 'NC');
    }
    const cstats = this.#deps.clusterStats(cluster.name);
    const host = this.#deps.clusters.chooseHost(cluster, { headers: this.#headers, metadata: this.dynamicMetadata });
    if (host === undefined) {
      cstats.inc('upstream_cx_none_healthy');
      return this.#routerReply(503, 'no healthy upstream', 'no_healthy_upstream', 'UH');
    }
    this.#host = `${host.address}:${host.port}`;
    if (this.#deps.reportServedEndpoint === true) {
      this.dynamicMetadata.set('envoy.lb', {
        ...(this.dynamicMetadata.get('envoy.lb') ?? {}),
        'x-gateway-destination-endpoint-served': this.#host,
      });
    }
    if (this.#deps.clusters.overflowed(cluster)) {
      // The connection pool refuses the stream (circuit-breakers.ts): Envoy's router answers 503, flag UO.
      cstats.inc('upstream_rq_pending_overflow');
      return this.#routerReply(
        503,
        'upstream connect error or disconnect/reset before headers. reset reason: overflow',
        'upstream_reset_before_response_started{overflow}',
        'UO',
      );
    }
    this.#release = this.#deps.clusters.acquire(cluster, host);
    cstats.inc('upstream_rq_total');
    // A route's idle_timeout overrides the HCM's stream_idle_timeout (Envoy default 5 min).
    const idle = route.route.action.idleTimeoutMs ?? this.#deps.listener.hcm.streamIdleTimeoutMs;
    await this.#proxy(cluster, host, decoded, route.route.action.timeoutMs, idle);
  }

  async #proxy(
    cluster: ClusterConfig,
    host: { address: string; port: number },
    decoded: Extract<DirectionResult, { kind: 'continue' }>,
    timeoutMs: number,
    idleTimeoutMs: number,
  ): Promise<void> {
    const headers = this.#headers;
    // The router tells the upstream what deadline it works to (unless there is none).
    if (timeoutMs > 0) headers.set('x-envoy-expected-rq-timeout-ms', String(timeoutMs));
    const hasBody = decoded.prefix !== null || decoded.rest !== null;
    const started = Date.now();
    const gen = this.#generation;
    const up = startUpstream({
      host,
      method: headers.get(':method') ?? 'GET',
      path: headers.get(':path') ?? '/',
      headers: upstreamRequestHeaders(headers, hasBody),
      connectTimeoutMs: cluster.connectTimeoutMs,
      agent: this.#deps.agents.agentFor(cluster),
    });
    this.#upstream = up;
    const touch = (): void => {
      if (idleTimeoutMs > 0) this.#armIdle(idleTimeoutMs);
    };
    touch();
    void up
      .sendBody(decoded.prefix, decoded.rest, () => this.#requestTrailers(decoded), touch)
      .then(() => {
        this.#disarmRequestTimeout(); // the router sent the last byte upstream
        if (timeoutMs > 0 && gen === this.#generation) this.#timers.push(setTimeout(() => this.#onRouteTimeout(cluster), timeoutMs));
      });
    const result = await up.response;
    if (gen !== this.#generation || this.#res.writableEnded) return;
    if (!result.ok) {
      const cstats = this.#deps.clusterStats(cluster.name);
      if (result.failure.kind === 'connect_timeout') cstats.inc('upstream_cx_connect_timeout');
      if (result.failure.kind !== 'reset_before_headers') cstats.inc('upstream_cx_connect_fail');
      return this.#localReply(upstreamFailureReply(result.failure), true, ['UF']);
    }
    touch();
    const res = result.res;
    const respHeaders = responseHeadersFromNode(res);
    respHeaders.set('x-envoy-upstream-service-time', String(Date.now() - started));
    const body = BodyReader.fromMessage(res, responseHasBody(headers.get(':method') ?? 'GET', res));
    this.#encodeStarted = true;
    const encoded = this.#filter === undefined ? passThrough(body) : await this.#filter.encode(respHeaders, body);
    if (encoded.kind === 'stop' || gen !== this.#generation || this.#res.writableEnded) return;
    await this.#respond(respHeaders, encoded, touch);
    this.#deps.clusterStats(cluster.name).inc('upstream_rq_completed');
  }

  async #requestTrailers(decoded: Extract<DirectionResult, { kind: 'continue' }>): Promise<HeaderMap | null | 'stop'> {
    if (decoded.rest === null) return decoded.trailers;
    const trailers = decoded.rest.trailers();
    if (trailers === null || this.#filter === undefined) return trailers;
    return (await this.#filter.processTrailers('request', trailers)) === 'stop' ? 'stop' : trailers;
  }

  /** Writes status and headers, then streams the body chunk by chunk with backpressure (SSE stays incremental). */
  async #respond(headers: HeaderMap, out: Extract<DirectionResult, { kind: 'continue' }>, touch: () => void): Promise<void> {
    const res = this.#res;
    headers.set('server', 'envoy');
    // Envoy's HTTP/1 codec frames a response that ends with its headers as content-length: 0.
    const empty = out.rest === null && (out.prefix === null || out.prefix.length === 0);
    const status = Number(headers.get(':status') ?? 200);
    if (empty && !headers.has('content-length') && !headers.has('transfer-encoding') && status >= 200 && status !== 204 && status !== 304) {
      headers.set('content-length', '0');
    }
    this.#responseStarted = true;
    this.#disarmRequestTimeout();
    res.writeHead(Number(headers.get(':status') ?? 200), headers.toNodeHeaders());
    res.flushHeaders();
    try {
      if (out.prefix !== null && out.prefix.length > 0) await write(res, out.prefix);
      let trailers = out.trailers;
      if (out.rest !== null) {
        for (let c = await out.rest.next(); c !== null; c = await out.rest.next()) {
          touch();
          await write(res, c);
        }
        trailers = out.rest.trailers();
        if (trailers !== null && this.#filter !== undefined) {
          if ((await this.#filter.processTrailers('response', trailers)) === 'stop') return;
        }
      }
      if (trailers !== null && headers.get('content-length') === undefined) res.addTrailers(trailers.toNodeHeaders());
      res.end();
    } catch {
      this.#resetStream('upstream_reset_after_response_started');
    }
  }

  /** Router-originated local replies pass through the filter's encode path (ext_proc sees `response_headers`). */
  #routerReply(status: number, body: string, details: string, flag: string): Promise<void> {
    return this.#localReply({ status, body: Buffer.from(body), details }, true, [flag]);
  }

  async #localReply(reply: LocalReply, throughFilter: boolean, flags: string[]): Promise<void> {
    if (this.#res.writableEnded || this.#reset) return;
    if (this.#responseStarted) {
      this.#resetStream(reply.details);
      return;
    }
    const gen = ++this.#generation;
    this.#upstream?.abort();
    this.#clearTimers();
    this.#details = reply.details;
    this.#flags = flags;
    const headers = localReplyHeaders(reply);
    let out: DirectionResult = { kind: 'continue', prefix: reply.body, rest: null, trailers: null };
    // FilterManager::sendLocalReply: through the encoder filters only if no response headers entered them yet.
    if (throughFilter && !this.#encodeStarted && this.#filter !== undefined && !this.#filter.processingComplete) {
      this.#encodeStarted = true;
      out = await this.#filter.encode(headers, BodyReader.fromBuffer(reply.body));
    }
    if (out.kind === 'stop' || gen !== this.#generation || this.#res.writableEnded) return;
    await this.#respond(headers, out, () => undefined);
  }

  #onRouteTimeout(cluster: ClusterConfig): void {
    this.#deps.clusterStats(cluster.name).inc('upstream_rq_timeout');
    void this.#routerReply(504, 'upstream request timeout', 'upstream_response_timeout', 'UT');
  }

  #armIdle(ms: number): void {
    if (this.#idle !== undefined) clearTimeout(this.#idle);
    this.#idle = setTimeout(() => {
      this.#deps.hcmStats.inc('downstream_rq_idle_timeout');
      void this.#localReply({ status: 408, body: Buffer.from('stream timeout'), details: 'stream_idle_timeout' }, true, []);
    }, ms);
  }

  #onRequestTimeout(): void {
    this.#requestTimer = undefined;
    this.#deps.hcmStats.inc('downstream_rq_timeout');
    // Http::Utility::maybeRequestTimeoutCode: 408 while the request is still being received, 504 after.
    const status = this.#requestBody?.received === true ? 504 : 408;
    void this.#localReply({ status, body: Buffer.from('request timeout'), details: 'request_overall_timeout' }, true, []);
  }

  #disarmRequestTimeout(): void {
    if (this.#requestTimer !== undefined) clearTimeout(this.#requestTimer);
    this.#requestTimer = undefined;
  }

  #clearTimers(): void {
    this.#disarmRequestTimeout();
    for (const t of this.#timers) clearTimeout(t);
    this.#timers = [];
    if (this.#idle !== undefined) clearTimeout(this.#idle);
    this.#idle = undefined;
  }

  #resetStream(details: string): void {
    if (this.#reset) return;
    this.#reset = true;
    this.#details = details;
    this.#generation++;
    this.#upstream?.abort();
    this.#res.destroy();
  }

  #finish(): void {
    this.#clearTimers();
    this.#upstream?.abort();
    this.#release?.();
    this.#filter?.onDestroy();
    const completed = this.#res.writableFinished;
    if (!completed && !this.#reset) {
      this.#reset = true;
      this.#details = 'downstream_remote_disconnect';
      this.#flags = [...this.#flags, 'DC'];
    }
    const status = this.#responseStarted && completed ? this.#res.statusCode : undefined;
    if (status !== undefined) this.#deps.hcmStats.inc(`downstream_rq_${Math.floor(status / 100)}xx` as HcmCounter);
    this.#deps.log({
      listener: this.#deps.listener.name,
      requestId: this.info.requestId,
      method: this.#req.method ?? '',
      path: this.#req.url ?? '',
      status,
      responseCodeDetails: this.#details,
      responseFlags: this.#flags,
      upstreamCluster: this.#cluster,
      upstreamHost: this.#host,
      dynamicMetadata: Object.fromEntries(this.dynamicMetadata),
      reset: this.#reset,
    });
  }
}

function passThrough(body: BodyReader): Extract<DirectionResult, { kind: 'continue' }> {
  return { kind: 'continue', prefix: null, rest: body.ended ? null : body, trailers: null };
}
