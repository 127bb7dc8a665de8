/**
 * The harness's data plane: every listener of an `EnvoyConfig` served over HTTP/1.1 with node:http, each request
 * run through the HCM, the ext_proc filter (if the chain has one) and the router. Test support only — it stands in
 * for Envoy in tests and the local demo and never replaces Envoy in a deployment (README.md).
 */
import http from 'node:http';
import { createUpstreamAgents, type UpstreamAgents } from './upstream-agents.js';
import type { Json } from './ext-proc-messages.js';
import type { AddressInfo, Socket } from 'node:net';
import { AccessLog, type AccessLogEntry } from './access-log.js';
import { ActiveStream, type StreamDeps } from './active-stream.js';
import { createClusterManager } from './cluster-manager.js';
import type { EnvoyConfig, ListenerConfig } from './envoy-config-types.js';
import { createExtProcClient, type ExtProcClient } from './ext-proc-client.js';
import type { HostHealth } from './health-check.js';
import type { AppendSemantics } from './header-mutation.js';
import { createRouteTable } from './router.js';
import { closesAfterLastResponse, type EnvoyVersion } from './runtime-config.js';
import { CLUSTER_COUNTERS, EXT_PROC_COUNTERS, HCM_COUNTERS, StatStore, type ClusterCounter, type CounterScope } from './stats.js';

export type { AccessLogEntry } from './access-log.js';

export interface EnvoyHarnessOptions {
  /** How `HeaderValueOption` append fields are read (see header-mutation.ts); default: released Envoy's. */
  readonly appendSemantics?: AppendSemantics;
  /** Randomness for LEAST_REQUEST (default Math.random). */
  readonly random?: () => number;
  /** How long `close()` waits for in-flight requests before cutting them (default 5 s). */
  readonly drainTimeoutMs?: number;
  /**
   * The Envoy release line to play (runtime-config.ts): '1.36' keeps each ext_proc stream until its HTTP request
   * ends; '1.37' (default) closes it after the last response that will be processed, unless the YAML's
   * `layered_runtime` turns `ext_proc_stream_close_optimization` off; '1.40' always closes it then (the guard is gone).
   */
  readonly envoyVersion?: EnvoyVersion;
  /**
   * Dynamic metadata an earlier filter would have set on each request (namespace -> values), from its headers: how a
   * gateway hands an endpoint picker the GIE subset hint (`envoy.lb.subset_hint`). Forwarded to ext_proc only for the
   * filter's `forwarding_namespaces`, as Envoy does.
   */
  readonly requestMetadata?: (headers: http.IncomingHttpHeaders) => Record<string, Record<string, Json>> | undefined;
  /**
   * Model a GIE data plane: once a host is chosen, write it as `envoy.lb` / `x-gateway-destination-endpoint-served`
   * (GIE endpoint-picker protocol, "Destination Endpoint Served"), so the response-path ext_proc messages carry it.
   */
  readonly reportServedEndpoint?: boolean;
  /**
   * Run the ext_proc clusters' gRPC health checks as Envoy does (health-check.ts): streams go to healthy hosts only,
   * and start waits for every host's first check, as Envoy's cluster initialisation does. Default: recorded only,
   * every host healthy.
   */
  readonly activeHealthChecks?: boolean;
  /**
   * FULL_DUPLEX_STREAMED: after the processor has ended a direction's body, send it one more empty chunk with
   * `end_of_stream: true`, as Envoy 1.35 to 1.39 do when a filter ahead of ext_proc resumes after the body ended
   * (ext-proc-duplex.ts, docs/envoy-ext-proc.md §14). Off by default: it needs such a filter, which the harness has not.
   */
  readonly duplexRepeatEndOfStream?: boolean;
}

export interface ListenerHandle {
  readonly port: number;
  readonly url: string;
}

export interface EnvoyHarness {
  readonly listeners: Readonly<Record<string, ListenerHandle>>;
  /** Every counter, Envoy-named: `http.<stat_prefix>.ext_proc.streams_started`, `cluster.<name>.upstream_rq_total`. */
  stats(): Record<string, number>;
  /** One entry per finished request, in completion order. */
  accessLog(): readonly AccessLogEntry[];
  /** Resolves when at least `n` requests have finished (a request's log entry lands after its response closes). */
  waitForAccessLog(n: number, timeoutMs?: number): Promise<readonly AccessLogEntry[]>;
  /**
   * New hosts for `cluster` (`host:port` each), as Envoy gets them at run time. For an ext_proc cluster of STRICT_DNS
   * type: the next DNS answer, what Envoy resolves at its `dns_refresh_rate` when a headless Service's ready pods
   * change (ExtProcClient.setEndpoints; hosts keep their health checks). For a routing cluster: an EDS update, a
   * control plane's endpoint push, for every request routed from now on (IP literals; not for ORIGINAL_DST clusters).
   */
  setClusterEndpoints(cluster: string, endpoints: readonly string[]): void;
  /** An ext_proc cluster's hosts and their health (`HOST:PORT` -> healthy | unhealthy). */
  hostHealth(cluster: string): Record<string, HostHealth>;
  /** Stops accepting, lets in-flight requests finish (up to the drain timeout), then closes everything. */
  close(): Promise<void>;
}

interface Shared {
  readonly config: EnvoyConfig;
  readonly options: EnvoyHarnessOptions;
  readonly store: StatStore;
  readonly clusters: ReturnType<typeof createClusterManager>;
  readonly clusterStats: Map<string, CounterScope<ClusterCounter>>;
  readonly agents: UpstreamAgents;
  readonly clients: ExtProcClient[];
  /** The ext_proc clients of each cluster (one per listener that uses it). */
  readonly clientsByCluster: Map<string, ExtProcClient[]>;
  readonly log: AccessLog;
}

/** Binds every listener and returns once all of them accept connections. */
export async function startEnvoyHarness(config: EnvoyConfig, options: EnvoyHarnessOptions = {}): Promise<EnvoyHarness> {
  const store = new StatStore();
  const clusterStats = new Map<string, CounterScope<ClusterCounter>>();
  for (const name of Object.keys(config.clusters)) clusterStats.set(name, store.scope(`cluster.${name}.`, CLUSTER_COUNTERS));
  const shared: Shared = {
    config,
    options,
    store,
    clusters: createClusterManager(config.clusters, options.random),
    clusterStats,
    agents: createUpstreamAgents(),
    clients: [],
    clientsByCluster: new Map(),
    log: new AccessLog(),
  };
  const active = new Set<ActiveStream>();
  const servers: http.Server[] = [];
  const sockets = new Set<Socket>();
  const listeners: Record<string, ListenerHandle> = {};
  const allDeps = config.listeners.map((l) => listenerDeps(shared, l));
  // Envoy starts its listeners once the clusters have initialised, which for a health-checked cluster means once
  // every host has had its first check (ClusterImplBase::onPreInitComplete).
  await Promise.all(shared.clients.map((c) => c.checked()));
  for (const [i, l] of config.listeners.entries()) {
    const deps = allDeps[i]!;
    // request_headers_timeout: Node's own header timer stands in for the HCM's (both answer 408 and close; Node checks
    // it every connectionsCheckingInterval, so it is armed at a second's resolution here).
    const headersMs = l.hcm.requestHeadersTimeoutMs;
    const serverOptions: http.ServerOptions =
      headersMs > 0 ? { headersTimeout: headersMs, connectionsCheckingInterval: Math.min(1000, headersMs) } : {};
    const server = http.createServer(serverOptions, (req, res) => {
      const stream = new ActiveStream(deps, req, res);
      for (const [ns, v] of Object.entries(options.requestMetadata?.(req.headers) ?? {})) stream.dynamicMetadata.set(ns, v);
      active.add(stream);
      void stream.done.then(() => active.delete(stream));
      void stream.run();
    });
    server.on('connection', (s: Socket) => {
      sockets.add(s);
      s.once('close', () => sockets.delete(s));
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(l.port, l.address, () => resolve());
    });
    servers.push(server);
    const port = (server.address() as AddressInfo).port;
    listeners[l.name] = { port, url: `http://${l.address.includes(':') ? `[${l.address}]` : l.address}:${port}` };
  }
  return {
    listeners,
    stats: () => store.snapshot(),
    accessLog: () => shared.log.entries(),
    waitForAccessLog: (n, timeoutMs = 5000) => shared.log.waitFor(n, timeoutMs),
    setClusterEndpoints(cluster, endpoints) {
      const clients = shared.clientsByCluster.get(cluster);
      if (clients === undefined) {
        shared.clusters.setEndpoints(cluster, endpoints);
        return;
      }
      const eps = endpoints.map((e) => {
        const i = e.lastIndexOf(':');
        return { address: e.slice(0, i).replace(/^\[|\]$/g, ''), port: Number(e.slice(i + 1)) };
      });
      for (const c of clients) c.setEndpoints(eps);
    },
    hostHealth(cluster) {
      return shared.clientsByCluster.get(cluster)?.[0]?.health() ?? {};
    },
    async close() {
      const closed = Promise.all(servers.map((s) => new Promise<void>((resolve) => s.close(() => resolve()))));
      for (const s of servers) s.closeIdleConnections();
      const drained = Promise.all([...active].map((a) => a.done));
      const timeout = new Promise<void>((resolve) => setTimeout(resolve, options.drainTimeoutMs ?? 5000).unref());
      await Promise.race([drained, timeout]);
      for (const s of sockets) s.destroy();
      await closed;
      shared.agents.destroy();
      for (const c of shared.clients) c.close();
    },
  };
}

/** What every request on one listener shares: its routes, its ext_proc client and counters. */
function listenerDeps(shared: Shared, l: ListenerConfig): StreamDeps {
  const prefix = `http.${l.hcm.statPrefix}.`;
  const ep = l.hcm.extProc;
  let extProc: StreamDeps['extProc'];
  if (ep !== undefined) {
    const cluster = shared.config.clusters[ep.clusterName];
    if (cluster === undefined) throw new Error(`ext_proc cluster ${ep.clusterName} missing (config not validated?)`);
    const client = createExtProcClient(cluster, ep.authority, ep.initialMetadata, {
      gracefulClose: shared.config.runtime.extProcGracefulGrpcClose,
      activeHealthChecks: shared.options.activeHealthChecks === true,
    });
    shared.clients.push(client);
    shared.clientsByCluster.set(ep.clusterName, [...(shared.clientsByCluster.get(ep.clusterName) ?? []), client]);
    // Assumed naming (docs/envoy-ext-proc.md §9 gives only the HCM part): http.<hcm stat_prefix>.ext_proc.<filter stat_prefix.>counter.
    const filterPrefix = ep.statPrefix === '' ? '' : `${ep.statPrefix}.`;
    extProc = {
      client,
      stats: shared.store.scope(`${prefix}ext_proc.${filterPrefix}`, EXT_PROC_COUNTERS),
      closeAfterLastResponse: closesAfterLastResponse(shared.options.envoyVersion ?? '1.37', shared.config.runtime),
      sendHeaderRawValue: shared.config.runtime.sendHeaderRawValue,
      repeatEndOfStream: shared.options.duplexRepeatEndOfStream === true,
    };
  }
  return {
    reportServedEndpoint: shared.options.reportServedEndpoint === true,
    listener: l,
    routes: createRouteTable(l.hcm),
    clusters: shared.clusters,
    hcmStats: shared.store.scope(prefix, HCM_COUNTERS),
    clusterStats: (name) => shared.clusterStats.get(name) ?? shared.store.scope(`cluster.${name}.`, CLUSTER_COUNTERS),
    extProc,
    semantics: shared.options.appendSemantics ?? 'envoy',
    agents: shared.agents,
    log: (entry) => shared.log.push(entry),
  };
}
