/**
 * The local P/D topology for an operator's own route table (`npm run testbed -- demo --policy FILE`): simulated vLLM
 * workers per pool of the table (each from its revision's descriptor, each behind a kvgate sidecar of the pool's
 * role), the gate, and the Envoy-faithful harness running an Envoy bootstrap generated from the table by the
 * product's renderer (`kvgate envoy render bootstrap`, src/envoy/render/) - not the shipped envoy/envoy.yaml.
 *
 * Nothing the operator wrote is edited: the run folder holds a runtime copy of the table whose pools list the started
 * sidecars (and whose revisions point at descriptor files there), the gate config that names it, the rendered
 * envoy.yaml and a throwaway PKI for the gate's mTLS port. The runtime copy is checked again with the product's loader
 * before the gate reads it. `topology.ts` is the default demo's fixed two-revision topology; both start their workers
 * with its `startWorker`.
 */
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Logger } from 'pino';
import { stringify as toYaml } from 'yaml';
import { renderRequest } from '../../src/cli/envoy-command.js';
import { createDevKeyRing, type KeyRing } from '../../src/contract/keys.js';
import { DEFAULT_SETTINGS, type EnvoyVersion, type RenderSettings } from '../../src/envoy/render/settings.js';
import { loadGateConfig } from '../../src/gate/config.js';
import { startGate, type RunningGate } from '../../src/gate/gate.js';
import { checkPolicyFile, formatCheckReport } from '../../src/policy/check-report.js';
import { mustLoadEnvoyConfig } from '../harness/envoy-config.js';
import { startEnvoyHarness, type EnvoyHarness } from '../harness/data-plane.js';
import { createDevPki, DEV_IDENTITIES, devGateTls } from '../tls/dev-pki.js';
import type { TablePlan } from './table-plan.js';
import { DEMO_KEY_SEED, onFreshPorts, reservePorts, startWorker, type Worker } from './topology.js';

/** A started worker and the pool of the table it serves. */
export interface TableWorker extends Worker<string> {
  readonly pool: string;
  readonly cluster: string;
}

/** Where the run's files are (all inside `dir`, removed by `close`). */
export interface TableTopologyFiles {
  /** The runtime copy of the operator's table: its pools list the started sidecars. */
  readonly routeTable: string;
  readonly envoyYaml: string;
  readonly gateConfig: string;
  /** Revision -> the descriptor file its workers run (canaries included). */
  readonly descriptors: Readonly<Record<string, string>>;
  readonly tlsDir: string;
}

export interface TableTopology {
  readonly plan: TablePlan;
  readonly publicUrl: string;
  readonly internalUrl: string;
  readonly gate: RunningGate;
  readonly harness: EnvoyHarness;
  readonly workers: readonly TableWorker[];
  readonly keys: KeyRing;
  readonly dir: string;
  readonly files: TableTopologyFiles;
  readonly envoyVersion: EnvoyVersion;
  close(): Promise<void>;
}

export interface TableTopologyOptions {
  readonly logger: Logger;
  /** The Envoy release the bootstrap is rendered for and the harness plays (default 1.37, as envoy/envoy.yaml). */
  readonly envoyVersion?: EnvoyVersion;
  /** Abandons the start-up, as `TopologyOptions.signal`: what was started is stopped and the run folder removed. */
  readonly signal?: AbortSignal;
}

/** Start the topology a plan describes. Everything started is stopped again when any step fails. */
export async function startTableTopology(plan: TablePlan, opts: TableTopologyOptions): Promise<TableTopology> {
  return onFreshPorts(opts.logger, () => startTableTopologyOnce(plan, opts));
}

async function startTableTopologyOnce(plan: TablePlan, opts: TableTopologyOptions): Promise<TableTopology> {
  const envoyVersion = opts.envoyVersion ?? '1.37';
  const keys = createDevKeyRing(DEMO_KEY_SEED);
  const dir = await mkdtemp(path.join(tmpdir(), 'kvgate-demo-'));
  const stops: Array<() => Promise<void>> = [async () => rm(dir, { recursive: true, force: true })];
  const closeAll = async () => {
    for (const stop of stops.reverse()) await stop().catch(() => undefined);
  };
  const checkAborted = () => opts.signal?.throwIfAborted();
  try {
    checkAborted();
    const total = plan.pools.reduce((n, p) => n + p.workers, 0);
    const [publicPort, internalPort, gatePort, ...workerPorts] = await reservePorts(3 + total);
    const internalUrl = `http://127.0.0.1:${internalPort}`;
    const descriptors: Record<string, string> = {};
    await mkdir(path.join(dir, 'descriptors'));
    for (const r of plan.revisions) {
      descriptors[r.name] = path.join(dir, 'descriptors', `${safeName(r.name)}.yaml`);
      await writeFile(descriptors[r.name]!, toYaml(r.descriptor));
    }
    const workers: TableWorker[] = [];
    for (const pool of plan.pools) {
      const rev = plan.revisions.find((r) => r.name === pool.revision)!;
      for (let index = 0; index < pool.workers; index++) {
        const w = await startWorker({
          revision: pool.revision,
          // A `both` pool serves whole requests: a decode sidecar without a prefill leg (src/sidecar/decode-role.ts).
          role: pool.role === 'prefill' ? 'prefill' : 'decode',
          index,
          name: `${pool.name}/${index}`,
          servedModelName: rev.servedModelName,
          descriptor: rev.descriptor,
          port: workerPorts.shift()!,
          internalUrl,
          keys,
          opts: { logger: opts.logger },
        });
        stops.push(async () => {
          await w.sidecar.close();
          await w.sim.close();
        });
        workers.push({ ...w, pool: pool.name, cluster: pool.cluster });
        checkAborted();
      }
    }
    const files: TableTopologyFiles = {
      routeTable: path.join(dir, 'route-table.yaml'),
      envoyYaml: path.join(dir, 'envoy.yaml'),
      gateConfig: path.join(dir, 'gate.yaml'),
      descriptors,
      tlsDir: path.join(dir, 'tls'),
    };
    await writeFile(files.routeTable, runtimeTableText(plan, workers, descriptors, dir));
    const runtime = await checkPolicyFile(files.routeTable);
    if (!runtime.ok) throw new Error(`the runtime copy of ${plan.file} does not load:\n${formatCheckReport(runtime.report)}`);
    const pki = await createDevPki(files.tlsDir);
    checkAborted();
    await writeFile(
      files.gateConfig,
      toYaml({
        listen: `127.0.0.1:${gatePort}`,
        admin: '127.0.0.1:0',
        policy: 'route-table.yaml',
        keys: { devSeed: DEMO_KEY_SEED },
        tls: devGateTls(pki),
        drain: { announceMs: 0, graceMs: 5000 },
        log: { level: 'info', decisions: false },
        workerView: { mode: 'live', intervalMs: 1000, timeoutMs: 1000, staleAfterMs: 10_000 },
      }),
    );
    const gateConfig = await loadGateConfig(files.gateConfig);
    if (!gateConfig.ok) throw new Error(gateConfig.error.map((e) => `${e.path}: ${e.message}`).join('\n'));
    const gate = await startGate(gateConfig.value, { logger: opts.logger.child({ component: 'gate' }), keys });
    stops.push(() => gate.close());
    checkAborted();
    const rendered = await renderRequest(
      { target: 'bootstrap', settings: renderSettings(files, pki.files, envoyVersion, gate, publicPort!, internalPort!) },
      dir,
    );
    if (!rendered.ok) throw new Error(rendered.error);
    await writeFile(files.envoyYaml, rendered.text);
    const harness = await startEnvoyHarness(mustLoadEnvoyConfig(rendered.text), { envoyVersion });
    stops.push(() => harness.close());
    checkAborted();
    return {
      plan,
      publicUrl: harness.listeners['public']!.url,
      internalUrl: harness.listeners['internal']!.url,
      gate,
      harness,
      workers,
      keys,
      dir,
      files,
      envoyVersion,
      close: closeAll,
    };
  } catch (e) {
    await closeAll();
    throw e;
  }
}

/** `kvgate envoy render bootstrap` settings for this run: its ports, its gate, gate mTLS with the run's PKI. */
function renderSettings(
  files: TableTopologyFiles,
  pki: { ca: string; publicCert: string; publicKey: string; internalCert: string; internalKey: string },
  envoyVersion: EnvoyVersion,
  gate: RunningGate,
  publicPort: number,
  internalPort: number,
): RenderSettings {
  return {
    ...DEFAULT_SETTINGS,
    policy: files.routeTable,
    envoyVersion,
    gateHost: '127.0.0.1',
    gatePort: gate.grpcPort,
    publicPort,
    internalPort,
    gateTls: {
      caFile: pki.ca,
      certFile: pki.publicCert,
      keyFile: pki.publicKey,
      internalCertFile: pki.internalCert,
      internalKeyFile: pki.internalKey,
      serverName: DEV_IDENTITIES.gate.dns,
    },
  };
}

/**
 * The runtime copy: the operator's table as written, with each revision's descriptor in the run folder, each pool's
 * endpoints (or Kubernetes selector) replaced by the started sidecars, and a metadata tenant source read from a
 * header (the harness runs no filter that sets dynamic metadata). Every other key is kept as written.
 */
function runtimeTableText(plan: TablePlan, workers: readonly TableWorker[], descriptors: Record<string, string>, dir: string): string {
  const doc = structuredClone(plan.doc) as Record<string, any>;
  for (const [name, rev] of Object.entries(doc['revisions'] as Record<string, Record<string, unknown>>)) {
    if (descriptors[name] === undefined) continue;
    delete rev['descriptor'];
    rev['descriptorFile'] = path.relative(dir, descriptors[name]!);
  }
  doc['pools'] = (doc['pools'] as Record<string, unknown>[]).map((p) => {
    const { endpoints: _e, discovery: _d, ...rest } = p;
    const mine = workers.filter((w) => w.pool === p['name']);
    return { ...rest, endpoints: mine.map((w) => ({ address: w.address, status: `http://${w.address}` })) };
  });
  const tenancy = doc['tenancy'] as { source?: { metadata?: unknown } } | undefined;
  if (tenancy?.source?.metadata !== undefined) tenancy.source = { header: 'x-tenant-id' } as never;
  return `# Runtime copy of ${plan.file} for the local topology (npm run testbed -- demo --policy): pools list the\n# started sidecars, descriptors are the run's. The original is unchanged.\n${toYaml(doc)}`;
}

function safeName(s: string): string {
  return s.replace(/[^A-Za-z0-9._-]/g, '_');
}
