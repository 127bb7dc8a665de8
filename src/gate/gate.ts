/**
 * A whole gate process, assembled: route table store (hot reload), keys, worker view, the ext_proc gRPC server
 * and the admin HTTP port. Used by `kvgate gate`, the demo and the end-to-end tests, so they all run the same
 * wiring.
 */
import { readFile } from 'node:fs/promises';
import type { KubeConfig } from '@kubernetes/client-node';
import type { Tracer } from '@opentelemetry/api';
import type { Logger } from 'pino';
import { Registry } from 'prom-client';
import { isInsecureKeyRing, type KeyRing } from '../contract/keys.js';
import { createKeyStore, type KeyStore } from '../key-store.js';
import { createStaticWorkerView, type WorkerView } from '../decide/worker-view.js';
import type { CompiledPool, CompiledRouteTable } from '../policy/compile.js';
import { createEndpointLoad } from './endpoint-load.js';
import { registerProcessMetrics } from '../process-metrics.js';
import { startAdminServer, type AdminServer } from './admin-http.js';
import type { GateConfig } from './config.js';
import { DECISION_LOG_TAG } from './decision-log.js';
import { createGateMetrics, startRoutedRefusals } from './metrics.js';
import { createPolicyStore, type PolicyStore } from './policy-store.js';
import { createAdmission } from './admission.js';
import type { RoutingState } from './admission-types.js';
import { createRolloutMetrics } from './rollout-metrics.js';
import { rolloutStatus, trustStatus } from '../policy/rollout-status.js';
import { gateConfigOptIns, optInGauge, tableOptIns } from './opt-ins.js';
import { receiveLimitFor, startGateServer, type GateServer } from './server.js';
import { type GateTransport, transportStatus } from './transport.js';
import { createWorkerPoller } from './worker-poller.js';
import type { Discovery } from '../discovery/discovery.js';
import { VERSION } from '../version.js';

/** Poll period while requests wait in the fallback queue (their slots free when a sidecar reports the end). */
const QUEUED_POLL_MS = 250;

export interface RunningGate {
  readonly grpcPort: number;
  /** The plaintext grpc.health.v1 port (`health` in the config), or null when off. */
  readonly healthPort: number | null;
  readonly adminPort: number | null;
  readonly policy: PolicyStore;
  /** The key ring in use and its reload (a `keys.file` source is watched; `kvgate gate` reloads it on SIGHUP too). */
  readonly keys: KeyStore;
  readonly registry: Registry;
  status(): unknown;
  /** Poll every sidecar now instead of waiting for the interval (live view; a no-op for the static view). */
  refreshWorkerView(): Promise<void>;
  /** SIGTERM behaviour: NOT_SERVING, finish streams in flight (bounded), stop everything. */
  drain(): Promise<void>;
  close(): Promise<void>;
}

export interface StartGateDeps {
  readonly logger: Logger;
  /** The ring loaded at start from `config.keys`; a `keys.file` source then reloads it (src/key-store.ts). */
  readonly keys: KeyRing;
  /** Debounce of the key file watch (ms; default 200). */
  readonly keyWatchDebounceMs?: number;
  readonly registry?: Registry;
  readonly now?: () => number;
  /** Replace the worker view built from the table (a test's view); by default the config's mode decides. */
  readonly viewFor?: (table: CompiledRouteTable) => WorkerView;
  readonly defaultMetrics?: boolean;
  /** Where decision spans go (`createTracing(config.tracing)` in `kvgate gate`); default: no-op. */
  readonly tracer?: Tracer;
  /** The Kubernetes client configuration for selector pools (tests); default from `discovery.kubeconfig` or in-cluster. */
  readonly kubeConfig?: KubeConfig;
  /** Pod-watch restart backoff (tests). */
  readonly discoveryBackoff?: { readonly initialMs: number; readonly maxMs: number };
}

function hasSelectorPools(t: CompiledRouteTable): boolean {
  return [...t.pools.values()].some((p) => p.discovery !== null);
}

/** The discovery runtime (and with it the Kubernetes client), loaded on first need: see src/discovery/runtime.ts. */
type DiscoveryRuntime = Pick<typeof import('../discovery/runtime.js'), 'createDiscovery' | 'kubeConfigFrom'>;

export async function startGate(config: GateConfig, deps: StartGateDeps): Promise<RunningGate> {
  const registry = deps.registry ?? new Registry();
  if (deps.defaultMetrics ?? true) registerProcessMetrics(registry);
  const log = deps.logger;
  if (isInsecureKeyRing(deps.keys)) log.warn('using INSECURE development keys (keys.devSeed): never do this in production');
  const created = await createPolicyStore({ file: config.policyPath, logger: log, registry, ...(deps.now ? { now: deps.now } : {}) });
  if (!created.ok) {
    // Name the setting that chose the file too: a relative `policy:` is read next to the gate's config, not the cwd.
    throw new Error(
      `the route table cannot be used:\n${created.message}\n(policy: ${config.policy} in ${config.file}, read as ${config.policyPath})`,
    );
  }
  const policy = created.store;
  const keys = createKeyStore({
    source: config.keys,
    initial: deps.keys,
    logger: log,
    registry,
    metricPrefix: 'kvgate_',
    ...(deps.now ? { now: deps.now } : {}),
  });
  const now = deps.now ?? Date.now;
  const staleAfterMs = config.workerView.mode === 'live' ? config.workerView.staleAfterMs : 0;
  if (config.workerView.mode === 'static') {
    log.warn(
      { workerView: 'static' },
      "STATIC worker view (workerView.mode: static): every endpoint the route table lists is routed on the table's word, no sidecar is polled and nothing checks that a worker is verified; tests and demos only",
    );
  }
  let onPolled = (): void => undefined;
  // In flight = what each sidecar reports + the gate's requests it has not reported yet (src/gate/endpoint-load.ts).
  const inFlight = createEndpointLoad({
    now,
    bridgeTtlMs: () => policy.current().contractTtlMs + staleAfterMs,
    onStreamEnd: (address) => poller?.refresh(address),
  });
  // Selector pools: created on first need (a reload may add one) and fed every table; a static-only gate never
  // touches the Kubernetes API and needs no credentials.
  let discovery: Discovery | undefined;
  let runtime: DiscoveryRuntime | undefined;
  let loading: Promise<void> | undefined;
  const loadRuntime = (): Promise<void> =>
    (loading ??= import('../discovery/runtime.js').then(({ createDiscovery, kubeConfigFrom }) => {
      runtime = { createDiscovery, kubeConfigFrom };
    }));
  if (hasSelectorPools(policy.current())) await loadRuntime();
  // At start: not ready while the runtime a selector pool needs is still loading, then until every pod watch has
  // listed once. Once ready, a reload that adds selector pools (the runtime loading, a watch's first list, a 403 for
  // a namespace without RBAC) keeps only those pools empty: it never takes the whole gate out of service.
  let readyOnce = false;
  const discoveryReady = (): boolean =>
    (readyOnce ||= loading !== undefined && runtime === undefined ? false : (discovery?.ready() ?? true));
  // Assigned once the poller and decider exist: new pods are polled at once, then queued requests re-decide.
  let onDiscoveryChange = (): void => undefined;
  // At start a discovery that cannot start (a kubeconfig that does not load) fails the start; after it, a reload or a
  // late runtime load must not throw: that would leave the table applied in the store but not in routing, or end the
  // process on an unhandled rejection. Selector pools then stay empty (fail closed), and the error says why.
  const syncDiscoveryAfterStart = (t: CompiledRouteTable): void => {
    try {
      syncDiscovery(t);
    } catch (e) {
      log.error(
        { err: e },
        'Kubernetes discovery could not start; pools found by selector stay empty (fail closed) until discovery.kubeconfig is fixed and the gate restarted',
      );
    }
  };
  const syncDiscovery = (t: CompiledRouteTable): void => {
    if (discovery === undefined && !hasSelectorPools(t)) return;
    if (runtime === undefined) {
      // A reload brought the first selector pool: its endpoints stay empty (fail closed) until the runtime is loaded.
      void loadRuntime().then(
        () => syncDiscoveryAfterStart(policy.current()),
        (e: unknown) => log.error({ err: e }, 'the Kubernetes discovery runtime failed to load; selector pools stay empty'),
      );
      return;
    }
    if (discovery === undefined) {
      if (config.workerView.mode !== 'live')
        log.error('pools found by selector need workerView.mode live: their endpoints stay empty until each sidecar is verified');
      discovery = runtime.createDiscovery({
        kubeConfig: deps.kubeConfig ?? runtime.kubeConfigFrom(config.discovery.kubeconfig),
        staleAfterMs: config.discovery.staleAfterMs,
        logger: log,
        registry,
        ...(deps.now ? { now: deps.now } : {}),
        ...(deps.discoveryBackoff ? { backoff: deps.discoveryBackoff } : {}),
      });
      discovery.onChange(() => onDiscoveryChange());
    }
    discovery.sync(t.pools.values());
  };
  const endpointsOf = (p: CompiledPool) => (p.discovery === null || discovery === undefined ? p.endpoints : discovery.endpoints(p));
  const terminatingOf = (p: CompiledPool) => (p.discovery === null || discovery === undefined ? [] : discovery.terminating(p));
  const poller =
    config.workerView.mode === 'live' && deps.viewFor === undefined
      ? createWorkerPoller(config.workerView, {
          inFlight,
          logger: log,
          registry,
          keys: keys.current,
          endpointsOf,
          terminatingOf,
          table: () => policy.current(),
          onPolled: () => onPolled(),
          ...(deps.now ? { now: deps.now } : {}),
        })
      : undefined;
  const viewFor =
    deps.viewFor ??
    (poller ? (t: CompiledRouteTable) => poller.viewFor(t) : (t: CompiledRouteTable) => createStaticWorkerView(t, inFlight));
  syncDiscovery(policy.current());
  if (poller) {
    // One poll before the first request, so a fresh gate does not refuse everything for a poll interval.
    await poller.pollOnce();
    poller.start();
    policy.onSwap(() => void poller.pollOnce());
  }
  let state: RoutingState = { table: policy.current(), view: viewFor(policy.current()) };
  const rollout = createRolloutMetrics(registry);
  rollout.updateVerification(policy.current());
  const gateMetrics = createGateMetrics(registry);
  startRoutedRefusals(gateMetrics, policy.current().revisions.keys());
  const admission = createAdmission({
    state: () => state,
    keys: keys.current,
    inFlight,
    now,
    maxMessageTimeoutMs: config.envoy.maxMessageTimeoutMs,
    metrics: rollout,
    // What the data plane is given after the pick (src/envoy/stamps.ts): a served report of anything else is ignored.
    listedAlternates: config.envoy.gieHeaders ? config.envoy.gieFallbackEndpoints : 0,
  });
  // grpc-js refuses messages over its receive limit (default 4 MiB) and Envoy turns that into a 500, so the limit
  // follows the table's limits.maxBodyBytes; a server's limit is fixed when it starts.
  const receiveLimit = receiveLimitFor(policy.current().limits.maxBodyBytes);
  onPolled = () => admission.notifyChanged();
  // While requests wait in the queue, poll faster: a request ends (and frees its slot) when its sidecar says so.
  const queuedPoll = poller
    ? setInterval(() => {
        if (admission.queueStatus().waiting > 0) void poller.pollOnce();
      }, QUEUED_POLL_MS)
    : undefined;
  queuedPoll?.unref();
  const configOptIns = gateConfigOptIns(config);
  const optIns = (table = policy.current()): string[] => [...configOptIns, ...tableOptIns(table)];
  const optInSeries = optInGauge(registry);
  optInSeries.set(optIns());
  policy.onSwap((table) => {
    optInSeries.set(optIns(table));
    syncDiscoveryAfterStart(table);
    if (receiveLimitFor(table.limits.maxBodyBytes) > receiveLimit) {
      log.warn(
        { maxBodyBytes: table.limits.maxBodyBytes, receiveLimitBytes: receiveLimit },
        'limits.maxBodyBytes grew past the ext_proc receive limit this gate started with; restart the gate to accept bodies that large',
      );
    }
    state = { table, view: viewFor(table) };
    rollout.updateVerification(table);
    startRoutedRefusals(gateMetrics, table.revisions.keys());
    admission.notifyChanged(); // queued requests re-decide, inside their bound group, against the new table
  });
  let setReady = (_ready: boolean): void => undefined;
  onDiscoveryChange = () => {
    setReady(discoveryReady());
    void (poller ? poller.pollOnce() : Promise.resolve()).then(() => admission.notifyChanged());
  };
  policy.watch();
  keys.watch(deps.keyWatchDebounceMs);
  // A start that fails from here on (TLS files that do not read, a port already taken) leaves nothing running: an
  // embedding process (tests, a supervisor that retries) would otherwise keep the watches, the poller and discovery.
  const abandon = async (e: unknown): Promise<never> => {
    clearInterval(queuedPoll);
    poller?.stop();
    await discovery?.close();
    policy.close();
    keys.close();
    admission.close();
    throw e;
  };
  const transport = await loadTransport(config).catch(abandon);
  const grpc: GateServer = await startGateServer({
    admission,
    transport,
    logger: log,
    metrics: gateMetrics,
    listen: config.listen,
    healthListen: config.health === '' ? undefined : config.health,
    gieHeaders: config.envoy.gieHeaders,
    decisionLog: config.log.decisions ? log.child({ log: DECISION_LOG_TAG }) : undefined,
    tracer: deps.tracer,
    gieFallbackEndpoints: config.envoy.gieFallbackEndpoints,
    ready: () => discoveryReady(),
    drainAnnounceMs: config.drain.announceMs,
    drainGraceMs: config.drain.graceMs,
    maxReceiveMessageBytes: receiveLimit,
    maxBodyBytes: () => state.table.limits.maxBodyBytes,
    tenancy: () => state.table.tenancy,
    now,
  }).catch(abandon);
  setReady = (r) => grpc.setReady(r);
  setReady(discoveryReady());
  let draining = false;
  const status = () => ({
    release: VERSION,
    serving: !draining,
    transport: transportStatus(transport),
    policy: { file: config.policyPath, version: policy.version(), lastReload: policy.lastReload() },
    keys: keys.status(),
    streams: grpc.activeStreams(),
    inFlight: Object.fromEntries(inFlight.snapshot()),
    inFlightUnreported: Object.fromEntries(inFlight.bridged()),
    workerView: {
      mode: poller ? 'live' : 'static',
      ageMs: state.view.ageMs ?? null,
      endpoints: poller?.snapshot() ?? null,
      pools: poller?.poolStates() ?? null,
    },
    discovery: discovery?.status(policy.current().pools.values()) ?? null,
    rollout: rolloutStatus(policy.current()),
    trust: trustStatus(policy.current()),
    optIns: optIns(),
    queues: admission.queueStatus(),
  });
  const admin: AdminServer | null =
    config.admin === ''
      ? null
      : await startAdminServer({ listen: config.admin, registry, status, serving: () => !draining }).catch(async (e: unknown) => {
          await grpc.close();
          return abandon(e);
        });
  // Once: a second signal during a drain closes at once, and the drain it cut short must not close (and log) again
  // when its own wait ends.
  let closing: Promise<void> | undefined;
  const close = (): Promise<void> => (closing ??= closeOnce());
  const closeOnce = async () => {
    clearInterval(queuedPoll);
    poller?.stop();
    await discovery?.close();
    policy.close();
    keys.close();
    // The streams first: a queued request is then cancelled with its audit line, as at the end of a drain's grace
    // period (Envoy answers it 500), instead of getting a 503 answer the stopped server would never deliver.
    await grpc.close();
    admission.close();
    await admin?.close();
  };
  return {
    grpcPort: grpc.port,
    healthPort: grpc.healthPort ?? null,
    adminPort: admin?.port ?? null,
    policy,
    keys,
    registry,
    status,
    refreshWorkerView: async () => poller?.pollOnce(),
    async drain() {
      draining = true;
      await grpc.drain();
      await close();
    },
    close,
  };
}

/** The gRPC port's transport from the config: the PEM files are read once, at start, before any port opens. */
async function loadTransport(config: GateConfig): Promise<GateTransport> {
  if (config.tls === undefined) return { kind: 'insecure' };
  const read = async (what: string, file: string): Promise<Buffer> => {
    try {
      return await readFile(file);
    } catch (e) {
      throw new Error(`${config.file}: tls.${what}: cannot read ${file}: ${(e as Error).message}`);
    }
  };
  const [cert, key, clientCa] = await Promise.all([
    read('cert', config.tls.cert),
    read('key', config.tls.key),
    read('clientCa', config.tls.clientCa),
  ]);
  return { kind: 'mtls', cert, key, clientCa, roles: config.tls.roles };
}
