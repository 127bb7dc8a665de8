/**
 * The full local P/D topology on loopback: simulated vLLM workers of two revisions (prefill and decode each), a
 * sidecar in front of each, the gate, and the Envoy-faithful harness running the shipped `envoy/envoy.yaml`.
 * The demo (`npm start`) and the end-to-end tests start exactly this, so the demo shows what the tests prove.
 *
 * The gate's gRPC port runs mTLS as in a deployment: at start the topology mints a throwaway CA and certificates in
 * its run folder (testbed/tls/dev-pki.ts), starts the gate with `tls` (one allowed identity per listener role), and
 * renders envoy.yaml again with the shipped file's own recorded flags but the TLS file paths pointed at those
 * certificates (`<dir>/envoy.yaml`), so the harness runs the same config with the demo's files.
 *
 * The harness stands in for Envoy because no Envoy binary runs where this project is built; a deployment runs
 * Envoy with the same envoy.yaml (see README).
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Tracer } from '@opentelemetry/api';
import type { Logger } from 'pino';
import { Registry } from 'prom-client';
import { stringify as toYaml, parse as parseYaml } from 'yaml';
import { PACKAGE_ROOT } from '../../src/package-root.js';
import { exampleDescriptorValue } from '../../src/policy/testing.js';
import { createDevKeyRing, loadKeyRing, type KeyRing } from '../../src/contract/keys.js';
import { registerProcessMetrics } from '../../src/process-metrics.js';
import { parseGateConfig } from '../../src/gate/config.js';
import { startGate, type RunningGate } from '../../src/gate/gate.js';
import { parseSidecarConfig } from '../../src/sidecar/config.js';
import { createSidecar, type Sidecar } from '../../src/sidecar/server.js';
import { deepMerge, parseSimConfig, type SimSettingsInput } from '../sim/config.js';
import { simCanaryDigests } from '../sim/recorded-canaries.js';
import { createSimServer, type SimServer } from '../sim/server.js';
import { restartSimOnSamePorts } from '../sim/restart.js';
import { mustLoadEnvoyConfig } from '../harness/envoy-config.js';
import { createDevPki, DEV_IDENTITIES, devGateTls, type DevPki } from '../tls/dev-pki.js';
import { parseRenderArgs, renderRequest } from '../../src/cli/envoy-command.js';
import type { RequestBodyMode } from '../../src/envoy/render/settings.js';
import { startEnvoyHarness, type EnvoyHarness } from '../harness/data-plane.js';
import type { EnvoyVersion } from '../harness/runtime-config.js';
import { startLlmdSidecar, type LlmdSidecar, type LlmdVersion } from '../llmd/pd-sidecar.js';

export const SERVED_MODEL = 'llama-3-8b';
export const DEMO_KEY_SEED = 'kvgate-local-demo';
export const REVISIONS = ['llama-a', 'llama-b'] as const;
export type RevisionName = (typeof REVISIONS)[number];
export type Role = 'prefill' | 'decode';

export interface TopologyOptions {
  readonly logger: Logger;
  /** Cohort weight of the candidate revision llama-b (percent of new sessions). */
  readonly candidateWeight?: number;
  /** Simulator knobs for every worker (latency model, lease, failure policy...). */
  readonly sim?: SimSettingsInput;
  /** Per worker overrides, keyed `<revision>/<role>`, e.g. `{ 'llama-b/decode': { behaveAs: {...} } }`. */
  readonly workerOverrides?: Readonly<Record<string, SimSettingsInput>>;
  readonly onTransferFailure?: 'fail' | 'recompute';
  /** Extra route table keys merged over the generated table (fallback chain, tenancy...). */
  readonly routeTable?: Readonly<Record<string, unknown>>;
  readonly sidecarProbeIntervalMs?: number;
  /** Workers per revision and role (default 1); each gets its own sim and sidecar, listed in one pool. */
  readonly replicas?: number;
  /** `maxInFlightPerEndpoint` of every pool (default: the route table's, 64). */
  readonly maxInFlightPerEndpoint?: number;
  /** How often the gate polls sidecar status (default 1000 ms). */
  readonly workerViewIntervalMs?: number;
  /** Export process_* / nodejs_* on the gate and every sidecar, as `kvgate gate` and `kvgate sidecar` do (default off). */
  readonly processMetrics?: boolean;
  /** The gate config's `log.decisions`: one info line per routed request (default off). */
  readonly logDecisions?: boolean;
  /** Merged over both revisions' example descriptors (route table, sims and sidecars all see the result). */
  readonly descriptorOverrides?: Readonly<Record<string, unknown>>;
  /** Extra sidecar config keys for every sidecar (e.g. `workerApiKey`). */
  readonly sidecar?: Readonly<Record<string, unknown>>;
  /**
   * How many live contracts each sidecar's replay guard holds (`replayGuardMaxEntries`; default the product's 200,000):
   * a test fills a small one with a few contracts instead of 200,000.
   */
  readonly replayGuardMaxEntries?: number;
  /** Environment the sidecars read (`workerApiKey.env`); default the process environment. */
  readonly env?: Readonly<Record<string, string | undefined>>;
  /** The Envoy release line the harness plays (its ext_proc stream lifetime; default 1.37). */
  readonly envoyVersion?: EnvoyVersion;
  /** The harness repeats FULL_DUPLEX_STREAMED's empty end_of_stream chunk, as Envoy 1.35 to 1.39 can (data-plane.ts). */
  readonly duplexRepeatEndOfStream?: boolean;
  /**
   * How the public listener sends request bodies to the gate: the shipped envoy.yaml's BUFFERED (default), or
   * FULL_DUPLEX_STREAMED as GIE's gateways send them (`kvgate envoy render --request-body-mode`).
   */
  readonly requestBodyMode?: RequestBodyMode;
  /** One tracer for the gate and every sidecar (a test's in-memory exporter); default: no-op. */
  readonly tracer?: Tracer;
  /**
   * Key files (`keys.file`) instead of the demo's dev seed: the gate reads `gate`, every sidecar `sidecar` (the same
   * path for both, or two, so a test can update one side first). Both are reloaded when they change, as in a pod.
   * `Topology.keys` is then the gate's ring at start; the ring in use is `gate.keys.current()`.
   */
  readonly keyFiles?: { readonly gate: string; readonly sidecar: string };
  /**
   * Per revision, fields merged over its descriptor after `descriptorOverrides` (e.g. an adapter for one revision).
   * A revision with any override gets its canaries recorded at start from an honest simulator of the result, as an
   * operator records them.
   */
  readonly revisionOverrides?: Partial<Readonly<Record<RevisionName, Readonly<Record<string, unknown>>>>>;
  /**
   * llm-d's P/D sidecar in front of every decode sidecar (testbed/llmd): the route table lists it as the decode
   * endpoint, the gate writes llm-d's headers (`envoy.gieHeaders`), and llm-d runs the prefill against the prefill
   * sidecar the gate chose (`x-prefiller-host-port`), then hands the attested parameters to kvgate's decode sidecar.
   */
  readonly llmd?: boolean;
  /** With `llmd`: which llm-d sidecar version to model (testbed/llmd/pd-sidecar.ts; default the current one). */
  readonly llmdVersion?: LlmdVersion;
  /**
   * Abandons the start-up (the demo's Ctrl-C): checked after each step, everything started so far is stopped and the
   * run folder removed, and `startTopology` rejects with the signal's reason.
   */
  readonly signal?: AbortSignal;
}

/** One simulated vLLM with its sidecar. `R` names the revisions (the default topology's two, or a route table's). */
export interface Worker<R extends string = RevisionName> {
  readonly revision: R;
  readonly role: Role;
  /** 0-based replica index within its pool. */
  readonly index: number;
  /** The simulated vLLM behind the sidecar; replaced by `restartWorker` (an in-place upgrade). */
  sim: SimServer;
  readonly sidecar: Sidecar;
  /** `ip:port` of the sidecar: the endpoint the route table lists and Envoy's ORIGINAL_DST connects to. */
  readonly address: string;
  /** With `llmd`, a decode worker's llm-d-style P/D sidecar in front of kvgate's: the endpoint the route table lists. */
  readonly llmd?: LlmdSidecar;
}

export interface Topology {
  readonly publicUrl: string;
  readonly internalUrl: string;
  /** The gate process; replaced by `restartGate`. */
  gate: RunningGate;
  readonly harness: EnvoyHarness;
  readonly workers: readonly Worker[];
  readonly keys: KeyRing;
  readonly routeTablePath: string;
  readonly dir: string;
  /** The throwaway PKI in `<dir>/tls`: the gate's server certificate and one client certificate per listener. */
  readonly pki: DevPki;
  /** The envoy.yaml the harness runs: the shipped one rendered again with the PKI's file paths. */
  readonly envoyYamlPath: string;
  worker(revision: RevisionName, role: Role, index?: number): Worker;
  /**
   * Stop a worker's vLLM and start another on the same ports with `sim` overrides (e.g. `behaveAs`): an in-place
   * upgrade or restart behind a sidecar that has not probed it yet. A new engine id, as a real restart gives.
   */
  restartWorker(revision: RevisionName, role: Role, sim?: SimSettingsInput, index?: number): Promise<Worker>;
  /** Stop the gate (`drain`: gracefully, else at once), wait `downMs`, start it again on the same port. */
  restartGate(opts?: { drain?: boolean; downMs?: number; downUntil?: Promise<void> }): Promise<RunningGate>;
  close(): Promise<void>;
}

/** Free loopback ports, reserved by binding and releasing (the demo needs them before the servers start). */
export async function reservePorts(n: number): Promise<number[]> {
  const servers = await Promise.all(
    Array.from(
      { length: n },
      () =>
        new Promise<import('node:net').Server>((resolve, reject) => {
          const s = createServer();
          s.once('error', reject);
          s.listen(0, '127.0.0.1', () => resolve(s));
        }),
    ),
  );
  const ports = servers.map((s) => (s.address() as import('node:net').AddressInfo).port);
  await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
  return ports;
}

export async function loadExampleDescriptor(revision: RevisionName): Promise<Record<string, unknown>> {
  return exampleDescriptorValue(revision) as unknown as Record<string, unknown>;
}

/**
 * A revision's example descriptor with the topology's overrides merged over it; when anything was overridden, its
 * canaries are recorded again from an honest simulator of the result (what an operator does for a new revision).
 */
async function descriptorFor(revision: RevisionName, opts: TopologyOptions): Promise<Record<string, unknown>> {
  const d = await loadExampleDescriptor(revision);
  const own = opts.revisionOverrides?.[revision];
  if (opts.descriptorOverrides === undefined && own === undefined) return d;
  const { canaries: _stale, ...merged } = deepMerge(deepMerge(d, opts.descriptorOverrides ?? {}), own ?? {}) as Record<string, unknown>;
  return { ...merged, canaries: await simCanaryDigests(merged as never) };
}

export async function startTopology(opts: TopologyOptions): Promise<Topology> {
  return onFreshPorts(opts.logger, () => startTopologyOnce(opts));
}

/**
 * Ports are reserved before the servers bind them (the route table and Envoy config need them up front); another
 * process can take one in between. `start` must stop everything it started when it fails; it is then run again on
 * fresh ports (at most three attempts) rather than failing.
 */
export async function onFreshPorts<T>(logger: Logger, start: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await start();
    } catch (e) {
      if (attempt >= 3 || !String((e as { code?: unknown }).code ?? (e as Error).message).includes('EADDRINUSE')) throw e;
      logger.warn({ attempt }, 'a reserved port was taken before it was bound; starting the topology again');
    }
  }
}

async function startTopologyOnce(opts: TopologyOptions): Promise<Topology> {
  const log = opts.logger;
  const keys = opts.keyFiles === undefined ? createDevKeyRing(DEMO_KEY_SEED) : keyRingOf(opts.keyFiles.gate);
  const dir = await mkdtemp(path.join(tmpdir(), 'kvgate-demo-'));
  const stops: Array<() => Promise<void>> = [async () => rm(dir, { recursive: true, force: true })];
  const closeAll = async () => {
    for (const stop of stops.reverse()) await stop().catch(() => undefined);
  };
  const checkAborted = () => opts.signal?.throwIfAborted();
  try {
    checkAborted();
    const replicas = opts.replicas ?? 1;
    const perRole = REVISIONS.length * replicas;
    const [publicPort, internalPort, gatePort, ...sidecarPorts] = await reservePorts(3 + perRole * 2 + (opts.llmd === true ? perRole : 0));
    const llmdPorts = sidecarPorts.splice(perRole * 2);
    const internalUrl = `http://127.0.0.1:${internalPort}`;
    const workers: Worker[] = [];
    let i = 0;
    const descriptors = new Map<RevisionName, Record<string, unknown>>();
    for (const revision of REVISIONS) descriptors.set(revision, await descriptorFor(revision, opts));
    for (const revision of REVISIONS) {
      const descriptor = descriptors.get(revision)!;
      await writeFile(path.join(dir, `${revision}.yaml`), toYaml(descriptor));
      for (const role of ['prefill', 'decode'] as const) {
        for (let index = 0; index < replicas; index++) {
          const port = sidecarPorts[i++]!;
          const llmdPort = role === 'decode' && opts.llmd === true ? llmdPorts.pop() : undefined;
          const w = await startWorker({
            revision,
            role,
            index,
            descriptor,
            port,
            internalUrl,
            keys,
            opts,
            ...(llmdPort === undefined ? {} : { llmdPort }),
          });
          stops.push(async () => {
            await w.llmd?.close();
            await w.sidecar.close();
            await w.sim.close(); // the current sim, after any restart
          });
          workers.push(w);
          checkAborted();
        }
      }
    }
    const routeTablePath = path.join(dir, 'route-table.yaml');
    await writeFile(routeTablePath, toYaml(routeTableFor(workers, opts, dir)));
    const pki = await createDevPki(path.join(dir, 'tls'));
    checkAborted();
    const viewIntervalMs = opts.workerViewIntervalMs ?? 1000;
    const gateYaml = toYaml({
      listen: `127.0.0.1:${gatePort}`,
      tls: devGateTls(pki),
      admin: '127.0.0.1:0',
      policy: routeTablePath,
      keys: opts.keyFiles === undefined ? { devSeed: DEMO_KEY_SEED } : { file: opts.keyFiles.gate },
      drain: { announceMs: 0, graceMs: 5000 },
      log: { level: 'info', decisions: opts.logDecisions ?? false },
      ...(opts.llmd === true ? { envoy: { gieHeaders: true } } : {}),
      // A test that polls rarely (to hold the state it set up) keeps its endpoints fresh between polls: the gate
      // refuses a staleAfterMs at or below intervalMs + timeoutMs.
      workerView: { mode: 'live', intervalMs: viewIntervalMs, timeoutMs: 1000, staleAfterMs: Math.max(10_000, viewIntervalMs + 2000) },
    });
    // Written for the operator to read (the demo prints where); the gate is started from the same text.
    await writeFile(path.join(dir, 'gate.yaml'), gateYaml);
    const gateConfig = parseGateConfig(gateYaml, path.join(dir, 'gate.yaml'));
    if (!gateConfig.ok) throw new Error(gateConfig.error.map((e) => `${e.path}: ${e.message}`).join('\n'));
    const launchGate = () =>
      startGate(gateConfig.value, {
        logger: log.child({ component: 'gate' }),
        keys,
        defaultMetrics: opts.processMetrics ?? false,
        ...(opts.tracer ? { tracer: opts.tracer } : {}),
      });
    let gate = await launchGate();
    stops.push(() => gate.close()); // `gate` follows restartGate
    checkAborted();
    const envoyYamlPath = path.join(dir, 'envoy.yaml');
    const envoyYaml = await renderDemoEnvoyYaml(pki, opts.requestBodyMode);
    await writeFile(envoyYamlPath, envoyYaml);
    const harness = await startEnvoyHarness(
      mustLoadEnvoyConfig(envoyYaml, {
        listenerPorts: { public: publicPort!, internal: internalPort! },
        clusterEndpoints: Object.fromEntries(gateClusters(envoyYaml).map((c) => [c, [`127.0.0.1:${gate.grpcPort}`]])),
      }),
      {
        ...(opts.envoyVersion === undefined ? {} : { envoyVersion: opts.envoyVersion }),
        ...(opts.duplexRepeatEndOfStream === undefined ? {} : { duplexRepeatEndOfStream: opts.duplexRepeatEndOfStream }),
      },
    );
    stops.push(() => harness.close());
    checkAborted();
    const topology: Topology = {
      publicUrl: harness.listeners['public']!.url,
      internalUrl: harness.listeners['internal']!.url,
      gate,
      harness,
      workers,
      keys,
      routeTablePath,
      dir,
      pki,
      envoyYamlPath,
      worker: (revision, role, index = 0) => workers.find((w) => w.revision === revision && w.role === role && w.index === index)!,
      restartWorker: async (revision, role, sim = {}, index = 0) => {
        const w = workers.find((x) => x.revision === revision && x.role === role && x.index === index)!;
        w.sim = await restartSimOnSamePorts(w.sim, sim, {
          descriptor: descriptors.get(revision)!,
          logger: opts.logger.child({ component: 'sim', worker: `${revision}/${role}` }),
        });
        return w;
      },
      restartGate: async ({ drain = false, downMs = 0, downUntil } = {}) => {
        await (drain ? topology.gate.drain() : topology.gate.close());
        if (downMs > 0) await new Promise((r) => setTimeout(r, downMs));
        await downUntil; // a test holds the outage until it has observed it, however slow the machine
        gate = await launchGate();
        topology.gate = gate;
        return gate;
      },
      close: closeAll,
    };
    return topology;
  } catch (e) {
    await closeAll();
    throw e;
  }
}

/**
 * The shipped envoy/envoy.yaml rendered again from the flags its header records, with gate mTLS pointed at the
 * demo's PKI: the public listener presents envoy-public.crt, the internal one envoy-internal.crt, and the gate's
 * certificate must carry the DNS name the dev PKI gives it. Everything else (route table, Envoy release) as shipped.
 */
export async function renderDemoEnvoyYaml(pki: DevPki, requestBodyMode?: RequestBodyMode): Promise<string> {
  const shipped = await readFile(path.join(PACKAGE_ROOT, 'envoy', 'envoy.yaml'), 'utf8');
  const m = /^# GENERATED by `kvgate envoy (render [^`]+)`/.exec(shipped);
  if (!m) throw new Error('envoy/envoy.yaml has no "# GENERATED by `kvgate envoy render ...`" header; render it again');
  const req = parseRenderArgs(m[1]!.split(' '));
  if (typeof req === 'string') throw new Error(`envoy/envoy.yaml records flags that no longer parse: ${req}`);
  const f = pki.files;
  const settings = {
    ...req.settings,
    ...(requestBodyMode === undefined ? {} : { requestBodyMode }),
    gateTls: {
      caFile: f.ca,
      certFile: f.publicCert,
      keyFile: f.publicKey,
      internalCertFile: f.internalCert,
      internalKeyFile: f.internalKey,
      serverName: DEV_IDENTITIES.gate.dns,
    },
  };
  const rendered = await renderRequest({ target: 'bootstrap', settings }, PACKAGE_ROOT);
  if (!rendered.ok) throw new Error(rendered.error);
  return rendered.text;
}

/** The gate's clusters in a bootstrap (the public listener's and, with its own certificate, the internal one's). */
function gateClusters(yamlText: string): string[] {
  const doc = parseYaml(yamlText) as { static_resources?: { clusters?: { name?: string }[] } };
  return (doc.static_resources?.clusters ?? []).map((c) => c.name ?? '').filter((n) => n === 'kvgate_gate' || n === 'kvgate_gate_internal');
}

/** What one worker (simulated vLLM + sidecar) is started from; shared with the route-table topology (table-topology.ts). */
export interface WorkerSpec<R extends string = RevisionName> {
  readonly revision: R;
  readonly role: Role;
  /** The name vLLM serves the model under (`--served-model-name`); default the demo's model. */
  readonly servedModelName?: string;
  /** The worker's name in logs; default `<revision>/<role>[/<index>]`. */
  readonly name?: string;
  readonly index: number;
  readonly descriptor: Record<string, unknown>;
  readonly port: number;
  /** llm-d's sidecar port in front of this decode sidecar (`TopologyOptions.llmd`). */
  readonly llmdPort?: number;
  readonly internalUrl: string;
  readonly keys: KeyRing;
  readonly opts: TopologyOptions;
}

/** Start a simulated vLLM of `s.descriptor` and a kvgate sidecar of `s.role` in front of it on `s.port`. */
export async function startWorker<R extends string>(s: WorkerSpec<R>): Promise<Worker<R>> {
  const name = s.name ?? (s.index === 0 ? `${s.revision}/${s.role}` : `${s.revision}/${s.role}/${s.index}`);
  const servedModelName = s.servedModelName ?? SERVED_MODEL;
  const simCfg = parseSimConfig({
    descriptor: s.descriptor,
    sim: { servedModelName, maxModelLen: 4096, numGpuBlocks: 2048, ...s.opts.sim, ...s.opts.workerOverrides?.[name] },
  });
  if (!simCfg.ok) throw simCfg.error;
  const sim = await createSimServer(simCfg.value, { logger: s.opts.logger.child({ component: 'sim', worker: name }) });
  const address = `127.0.0.1:${s.port}`;
  // Behind llm-d's sidecar, the pod's endpoint (what the gate names in the contract) is llm-d's port.
  const endpoint = s.llmdPort === undefined ? address : `127.0.0.1:${s.llmdPort}`;
  const sidecarCfg = parseSidecarConfig(
    {
      role: s.role,
      worker: sim.url,
      listen: address,
      admin: '127.0.0.1:0',
      metrics: '',
      advertise: endpoint,
      descriptor: s.descriptor,
      nixlSideChannel: `127.0.0.1:${sim.nixlSideChannelPort}`,
      servedModelName,
      keys: s.opts.keyFiles === undefined ? { devSeed: DEMO_KEY_SEED } : { file: s.opts.keyFiles.sidecar },
      probe: { intervalMs: s.opts.sidecarProbeIntervalMs ?? 2000, timeoutMs: 2000, generation: 'declared' },
      prefill: { via: { envoy: s.internalUrl }, maxAttempts: 3, backoffMs: 20, maxBackoffMs: 200, timeoutMs: 30_000 },
      onTransferFailure: s.opts.onTransferFailure ?? 'fail',
      drainGraceMs: 5000,
      ...s.opts.sidecar,
    },
    `${name} sidecar`,
  );
  if (!sidecarCfg.ok) throw new Error(sidecarCfg.error.map((e) => `${e.path}: ${e.message}`).join('\n'));
  const registry = new Registry();
  if (s.opts.processMetrics === true) registerProcessMetrics(registry);
  const sidecar = await createSidecar(sidecarCfg.value, {
    logger: s.opts.logger.child({ component: 'sidecar', worker: name }),
    registry,
    keys: s.opts.keyFiles === undefined ? s.keys : keyRingOf(s.opts.keyFiles.sidecar),
    ...(s.opts.replayGuardMaxEntries === undefined ? {} : { replayGuardMaxEntries: s.opts.replayGuardMaxEntries }),
    ...(s.opts.env === undefined ? {} : { env: s.opts.env }),
    ...(s.opts.tracer ? { tracer: s.opts.tracer } : {}),
  });
  if (s.llmdPort === undefined) return { revision: s.revision, role: s.role, index: s.index, sim, sidecar, address };
  const llmd = await startLlmdSidecar({
    decoderUrl: `http://${address}`,
    port: s.llmdPort,
    ...(s.opts.llmdVersion === undefined ? {} : { version: s.opts.llmdVersion }),
  });
  return { revision: s.revision, role: s.role, index: s.index, sim, sidecar, address, llmd };
}

/** The ring a key file holds now; throws what the loader says (a topology with a bad key file does not start). */
function keyRingOf(file: string): KeyRing {
  const r = loadKeyRing({ file });
  if (!r.ok) throw r.error;
  return r.value;
}

function routeTableFor(workers: readonly Worker[], opts: TopologyOptions, dir: string): Record<string, unknown> {
  const revisions: Record<string, unknown> = {};
  for (const r of REVISIONS) revisions[r] = { descriptorFile: path.join(dir, `${r}.yaml`) };
  const pools = workers
    .filter((w) => w.index === 0)
    .map((w) => ({
      name: `${w.revision.replace('llama-', '')}-${w.role}`,
      cluster: `${w.revision.replace('llama-', '')}_${w.role}`,
      role: w.role,
      revision: w.revision,
      endpoints: workers
        .filter((x) => x.revision === w.revision && x.role === w.role)
        .map((x) => ({ address: x.llmd === undefined ? x.address : `127.0.0.1:${x.llmd.port}`, status: `http://${x.address}` })),
      ...(opts.maxInFlightPerEndpoint === undefined ? {} : { maxInFlightPerEndpoint: opts.maxInFlightPerEndpoint }),
    }));
  return {
    version: 1,
    revisions,
    models: {
      [SERVED_MODEL]: {
        tenants: ['acme', 'globex'],
        rollout: { stable: 'llama-a', candidate: 'llama-b', weight: opts.candidateWeight ?? 25 },
      },
    },
    pools,
    tenancy: { source: { header: 'x-tenant-id' }, required: true, prefixScope: 'tenant' },
    fallback: [{ refuse: { retryAfterSeconds: 2 } }],
    ...opts.routeTable,
  };
}
