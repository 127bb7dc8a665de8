/**
 * A whole gate process, assembled: route table store (hot reload), keys, worker view, the ext_proc gRPC server
 * and the admin HTTP port. Used by `kvgate gate`, the demo and the end-to-end tests, so they all run the same
 * wiring.
 */
import type { Logger } from 'pino';
import { Registry } from 'prom-client';
import { isInsecureKeyRing, type KeyRing } from '../contract/keys.js';
import { createInFlightTracker, createStaticWorkerView, type WorkerView } from '../decide/worker-view.js';
import type { CompiledRouteTable } from '../policy/compile.js';
import { registerProcessMetrics } from '../process-metrics.js';
import { startAdminServer, type AdminServer } from './admin-http.js';
import type { GateConfig } from './config.js';
import { DECISION_LOG_TAG } from './decision-log.js';
import { createGateMetrics } from './metrics.js';
import { createPolicyStore, type PolicyStore } from './policy-store.js';
import { createAdmission, type RoutingState } from './admission.js';
import { createRolloutMetrics } from './rollout-metrics.js';
import { rolloutStatus } from '../policy/rollout-status.js';
import { startGateServer, type GateServer } from './server.js';
import { createWorkerPoller } from './worker-poller.js';

export interface RunningGate {
  readonly grpcPort: number;
  readonly adminPort: number | null;
  readonly policy: PolicyStore;
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
  readonly keys: KeyRing;
  readonly registry?: Registry;
  readonly now?: () => number;
  /** Replace the worker view built from the table (a test's view); by default the config's mode decides. */
  readonly viewFor?: (table: CompiledRouteTable) => WorkerView;
  readonly defaultMetrics?: boolean;
}

export async function startGate(config: GateConfig, deps: StartGateDeps): Promise<RunningGate> {
  const registry = deps.registry ?? new Registry();
  if (deps.defaultMetrics ?? true) registerProcessMetrics(registry);
  const log = deps.logger;
  if (isInsecureKeyRing(deps.keys)) log.warn('using INSECURE development keys (keys.devSeed): never do this in production');
  const created = await createPolicyStore({ file: config.policyPath, logger: log, registry, ...(deps.now ? { now: deps.now } : {}) });
  if (!created.ok) throw new Error(`the route table cannot be used:\n${created.message}`);
  const policy = created.store;
  const inFlight = createInFlightTracker();
  const poller =
    config.workerView.mode === 'live' && deps.viewFor === undefined
      ? createWorkerPoller(config.workerView, { inFlight, logger: log, registry, table: () => policy.current(), ...(deps.now ? { now: deps.now } : {}) })
      : undefined;
  const viewFor =
    deps.viewFor ?? (poller ? (t: CompiledRouteTable) => poller.viewFor(t) : (t: CompiledRouteTable) => createStaticWorkerView(t, inFlight));
  if (poller) {
    // One poll before the first request, so a fresh gate does not refuse everything for a poll interval.
    await poller.pollOnce();
    poller.start();
    policy.onSwap(() => void poller.pollOnce());
  }
  let state: RoutingState = { table: policy.current(), view: viewFor(policy.current()) };
  const rollout = createRolloutMetrics(registry);
  rollout.updateVerification(policy.current());
  const now = deps.now ?? Date.now;
  const admission = createAdmission({
    state: () => state,
    keys: deps.keys,
    inFlight,
    now,
    maxMessageTimeoutMs: config.envoy.maxMessageTimeoutMs,
    metrics: rollout,
  });
  policy.onSwap((table) => {
    state = { table, view: viewFor(table) };
    rollout.updateVerification(table);
    admission.notifyChanged(); // queued requests re-decide, inside their bound group, against the new table
  });
  policy.watch();
  const grpc: GateServer = await startGateServer({
    admission,
    logger: log,
    metrics: createGateMetrics(registry),
    listen: config.listen,
    gieHeaders: config.envoy.gieHeaders,
    decisionLog: config.log.decisions ? log.child({ log: DECISION_LOG_TAG }) : undefined,
    drainAnnounceMs: config.drain.announceMs,
    drainGraceMs: config.drain.graceMs,
    now,
  });
  let draining = false;
  const status = () => ({
    serving: !draining,
    policy: { file: config.policyPath, version: policy.version(), lastReload: policy.lastReload() },
    streams: grpc.activeStreams(),
    inFlight: Object.fromEntries(inFlight.snapshot()),
    workerView: { mode: poller ? 'live' : 'static', ageMs: state.view.ageMs ?? null, endpoints: poller?.snapshot() ?? null },
    rollout: rolloutStatus(policy.current()),
    queues: admission.queueStatus(),
  });
  const admin: AdminServer | null =
    config.admin === ''
      ? null
      : await startAdminServer({ listen: config.admin, registry, status, serving: () => !draining });
  const close = async () => {
    poller?.stop();
    policy.close();
    admission.close();
    grpc.close();
    await admin?.close();
  };
  return {
    grpcPort: grpc.port,
    adminPort: admin?.port ?? null,
    policy,
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
