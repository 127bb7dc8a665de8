/**
 * The gRPC side of the ext_proc filter: one HTTP/2 channel per ext_proc endpoint (Envoy pools connections to the
 * cluster), one bidi `Process` stream per HTTP request, opened lazily by the filter on its first message.
 * `close()` is Envoy's `ExternalProcessorStreamImpl::close()`: half-close, then reset.
 */
import { requestLimit } from './circuit-breakers.js';
import { readFileSync } from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import { extProcClientConstructor } from '../../src/envoy/protos.js';
import type { ClusterConfig } from './envoy-config-types.js';
import { sansOf, type UpstreamTlsConfig } from './transport-socket.js';
import { grpcHealthCheck, HealthCheckSession, type HostHealth, PANIC_THRESHOLD_PERCENT } from './health-check.js';

/**
 * The cluster's transport socket as grpc-js credentials (transport-socket.ts says what Envoy does): the client
 * certificate Envoy presents, the server chain verified against `trusted_ca` only when there is a validation context,
 * and the server's SANs checked only against `match_typed_subject_alt_names` (no hostname check otherwise).
 */
function channelCredentials(tls: UpstreamTlsConfig | undefined): grpc.ChannelCredentials {
  if (tls === undefined) return grpc.credentials.createInsecure();
  const read = (f: string | undefined) => (f === undefined ? null : readFileSync(f));
  return grpc.credentials.createSsl(read(tls.caFile), read(tls.keyFile), read(tls.certFile), {
    rejectUnauthorized: tls.caFile !== undefined,
    checkServerIdentity: (_host, cert) => {
      if (tls.sanMatchers.length === 0) return undefined;
      const ok = tls.sanMatchers.some((m) => sansOf(cert.subjectaltname, m.type).includes(m.exact));
      return ok
        ? undefined
        : new Error(`the server certificate matches none of ${tls.sanMatchers.map((m) => `${m.type}:${m.exact}`).join(', ')}`);
    },
  });
}
import type { WireProcessingRequest, WireProcessingResponse } from './ext-proc-messages.js';

export interface ExtProcStreamHandlers {
  onMessage(msg: WireProcessingResponse): void;
  /** The stream ended with a non-OK status (including connect failures: UNAVAILABLE). */
  onGrpcError(code: number, details: string): void;
  /** The server closed the stream with OK. */
  onGrpcClose(): void;
}

export interface ExtProcStream {
  send(msg: WireProcessingRequest): void;
  /**
   * Half-close and reset; `true` if the stream was still open (Envoy then counts `streams_closed`). `graceful` (Envoy's
   * `closeStreamMaybeGraceful`) waits for the server's status first when `ext_proc_graceful_grpc_close` is on.
   */
  close(graceful?: boolean): boolean;
}

export interface ExtProcClient {
  start(handlers: ExtProcStreamHandlers): ExtProcStream;
  /**
   * A STRICT_DNS refresh with a new answer (Envoy's `updateDynamicHostList`): added hosts join (unhealthy until their
   * first check passes, with active health checks), dropped ones leave at once, or, with active health checks, once
   * they fail a check. A host that leaves gets no new stream; its connections close when their streams end.
   */
  setEndpoints(endpoints: readonly ClusterConfig['endpoints'][number][]): void;
  /** Each host (`address:port`) and its health: every host is healthy without active health checks. */
  health(): Record<string, HostHealth>;
  /** Resolves once every current host has had its first health check (immediately without active checks). */
  checked(): Promise<void>;
  close(): void;
}

export interface ExtProcClientOptions {
  /**
   * `ext_proc_graceful_grpc_close` (runtime-config.ts): closing a finished stream half-closes it and waits up to
   * `remoteCloseTimeoutMs` (Envoy's default 1 s) for the server's status before resetting it; otherwise it resets.
   */
  readonly gracefulClose?: boolean;
  readonly remoteCloseTimeoutMs?: number;
  /** Run the cluster's gRPC health check (health-check.ts) and balance over healthy hosts; default: recorded only. */
  readonly activeHealthChecks?: boolean;
}

const hostKey = (ep: ClusterConfig['endpoints'][number]): string => `${ep.address}:${ep.port}`;

/** A client for the ext_proc cluster; hosts are used round robin (healthy ones, with active checks), one channel each. */
export function createExtProcClient(
  cluster: ClusterConfig,
  authority: string,
  initialMetadata: readonly (readonly [string, string])[] = [],
  options: ExtProcClientOptions = {},
): ExtProcClient {
  const Ctor = extProcClientConstructor();
  const creds = channelCredentials(cluster.tls);
  const target = (ep: ClusterConfig['endpoints'][number]): string =>
    `${ep.address.includes(':') ? `[${ep.address}]` : ep.address}:${ep.port}`;
  const channelOptions: grpc.ChannelOptions = {
    ...(cluster.tls?.sni === undefined ? {} : { 'grpc.ssl_target_name_override': cluster.tls.sni }),
    // Envoy's envoy_grpc uses the cluster name as :authority.
    'grpc.default_authority': authority,
    'grpc.initial_reconnect_backoff_ms': 100,
    'grpc.max_reconnect_backoff_ms': 1000,
    // Each channel its own connection: grpc-js otherwise shares subchannels (and so the HTTP/2 connection)
    // between channels to the same address, and a replaced channel would keep using the old connection.
    'grpc.use_local_subchannel_pool': 1,
  };
  const open = (ep: ClusterConfig['endpoints'][number]): grpc.Client => new Ctor(target(ep), creds, channelOptions);
  // One connection per endpoint, replaced after `max_requests_per_connection` streams as Envoy's pool does: the old
  // connection is drained (closed once its last stream ends), never cut under streams still using it.
  interface Conn {
    readonly channel: grpc.Client;
    streams: number;
    active: number;
    retired: boolean;
  }
  interface Host {
    readonly ep: ClusterConfig['endpoints'][number];
    conn: Conn;
    readonly hc: HealthCheckSession | undefined;
    /** Dropped by a DNS answer, kept while it passes its checks. */
    pendingRemoval: boolean;
  }
  const connect = (ep: ClusterConfig['endpoints'][number]): Conn => ({ channel: open(ep), streams: 0, active: 0, retired: false });
  const check = options.activeHealthChecks === true ? grpcHealthCheck(cluster.healthChecks) : undefined;
  const hosts = new Map<string, Host>();
  const all = new Set<Conn>();
  /** Whether a stream was ever opened on this cluster (Envoy: `upstream_cx_total` used), for the health checks' intervals. */
  let hadTraffic = false;
  const retire = (c: Conn): void => {
    c.retired = true;
    if (c.active === 0) {
      c.channel.close();
      all.delete(c);
    }
  };
  const remove = (key: string): void => {
    const h = hosts.get(key);
    if (h === undefined) return;
    hosts.delete(key);
    h.hc?.close();
    retire(h.conn);
  };
  const onHealthChange = (): void => {
    for (const [key, h] of hosts) if (h.pendingRemoval && h.hc?.health === 'unhealthy') remove(key);
  };
  const add = (ep: ClusterConfig['endpoints'][number]): void => {
    const conn = connect(ep);
    all.add(conn);
    const hc =
      check === undefined
        ? undefined
        : new HealthCheckSession(ep, check, target(ep), creds, channelOptions, onHealthChange, () => hadTraffic);
    hosts.set(hostKey(ep), { ep, conn, hc, pendingRemoval: false });
  };
  for (const ep of cluster.endpoints) add(ep);
  const max = cluster.maxRequestsPerConnection;
  let next = 0;
  const release = (c: Conn): void => {
    c.active--;
    if (c.retired && c.active === 0) {
      c.channel.close();
      all.delete(c);
    }
  };
  /** Healthy hosts, or every host below the panic threshold (Envoy's load balancer). */
  const candidates = (): Host[] => {
    const list = [...hosts.values()];
    if (check === undefined) return list;
    const healthy = list.filter((h) => h.hc?.health === 'healthy');
    return healthy.length * 100 < list.length * PANIC_THRESHOLD_PERCENT ? list : healthy;
  };
  return {
    start(handlers) {
      const list = candidates();
      const pool = list[next++ % Math.max(1, list.length)];
      if (pool === undefined) throw new Error(`ext_proc cluster ${cluster.name} has no endpoints`);
      let open = 0;
      for (const c of all) open += c.active;
      if (open >= requestLimit(cluster.circuitBreakers, true)) return overflowStream(handlers);
      if (max !== undefined && pool.conn.streams >= max) {
        retire(pool.conn);
        pool.conn = connect(pool.ep);
        all.add(pool.conn);
      }
      const conn = pool.conn;
      hadTraffic = true;
      conn.streams++;
      conn.active++;
      const metadata = new grpc.Metadata();
      for (const [k, v] of initialMetadata) metadata.add(k, v);
      const call = (
        conn.channel as unknown as { Process(m: grpc.Metadata): grpc.ClientDuplexStream<WireProcessingRequest, WireProcessingResponse> }
      ).Process(metadata);
      let done = false;
      call.on('status', () => {
        if (!done) {
          done = true;
          release(conn);
        }
      });
      return wrapCall(call, handlers, options);
    },
    setEndpoints(endpoints) {
      if (cluster.type !== 'STRICT_DNS')
        throw new Error(`cluster ${cluster.name} is ${cluster.type}: only a STRICT_DNS cluster's hosts change`);
      const keep = new Set(endpoints.map(hostKey));
      for (const ep of endpoints) {
        const h = hosts.get(hostKey(ep));
        if (h === undefined) add(ep);
        else h.pendingRemoval = false;
      }
      for (const [key, h] of [...hosts]) {
        if (keep.has(key)) continue;
        if (h.hc !== undefined && h.hc.health === 'healthy') h.pendingRemoval = true;
        else remove(key);
      }
    },
    health() {
      return Object.fromEntries([...hosts].map(([k, h]) => [k, h.hc?.health ?? 'healthy']));
    },
    async checked() {
      await Promise.all([...hosts.values()].map((h) => h.hc?.firstAnswer()));
    },
    close() {
      for (const h of hosts.values()) h.hc?.close();
      for (const c of all) c.channel.close();
    },
  };
}

/**
 * The gRPC stream the circuit breaker refused: Envoy's async client gets the router's 503 overflow, which is gRPC
 * UNAVAILABLE, and the ext_proc filter fails the request (closed) as for any stream error.
 */
function overflowStream(handlers: ExtProcStreamHandlers): ExtProcStream {
  let open = true;
  setImmediate(() => {
    if (open)
      handlers.onGrpcError(grpc.status.UNAVAILABLE, 'upstream connect error or disconnect/reset before headers. reset reason: overflow');
    open = false;
  });
  return {
    send: () => undefined,
    close() {
      const was = open;
      open = false;
      return was;
    },
  };
}

function wrapCall(
  call: grpc.ClientDuplexStream<WireProcessingRequest, WireProcessingResponse>,
  handlers: ExtProcStreamHandlers,
  options: ExtProcClientOptions,
): ExtProcStream {
  let open = true;
  let resetTimer: NodeJS.Timeout | undefined;
  call.on('data', (msg: WireProcessingResponse) => {
    if (open) handlers.onMessage(msg);
  });
  // 'error' carries the same status as 'status'; listening keeps Node from throwing on it.
  call.on('error', () => undefined);
  call.on('status', (status: grpc.StatusObject) => {
    if (resetTimer !== undefined) clearTimeout(resetTimer);
    if (!open) return;
    open = false;
    if (status.code === grpc.status.OK) handlers.onGrpcClose();
    else handlers.onGrpcError(status.code, status.details);
  });
  return {
    send(msg) {
      if (open) call.write(msg);
    },
    close(graceful = false) {
      if (!open) return false;
      open = false;
      call.end();
      if (graceful && options.gracefulClose === true)
        resetTimer = setTimeout(() => call.cancel(), options.remoteCloseTimeoutMs ?? 1000).unref();
      else call.cancel();
      return true;
    },
  };
}
