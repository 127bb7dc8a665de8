/**
 * `kvgate sidecar`: the composition root of one sidecar process. Reads the config (a file, or flags for the
 * common case), loads the key ring, starts the sidecar, reloads a `keys.file` key ring on SIGHUP (and when the file
 * changes), and on SIGTERM/SIGINT drains (announced at once, new work
 * refused after `drainAnnounceMs`, in-flight requests finish, all bounded by `drainGraceMs`) before it exits. Every config problem is printed with its file, path
 * and fix, and the process exits before opening a port.
 *
 *   kvgate sidecar --config sidecar.yaml
 *   kvgate sidecar --role decode --worker http://127.0.0.1:8000 --descriptor rev-a.yaml --listen 0.0.0.0:9090 --keys keys.yaml
 */
import { parseArgs } from 'node:util';
import { pino, type DestinationStream } from 'pino';
import { Registry } from 'prom-client';
import { formatIssues, issue, type ConfigIssue } from '../config/issues.js';
import { keyRingFrom } from '../contract/key-source.js';
import { err, ok, type Result } from '../errors.js';
import { EndpointAddressSchema } from '../policy/schema.js';
import {
  hostPortFlag,
  loadDescriptorFile,
  loadSidecarConfig,
  NIXL_UNCHECKED,
  parseSidecarConfig,
  sidecarConfigWarnings,
  type SidecarConfig,
} from './config.js';
import { registerProcessMetrics } from '../process-metrics.js';
import { createTracing } from '../tracing.js';
import { sidecarOptIns } from './opt-ins.js';
import { createSidecar } from './server.js';
import { secretSourceIssues } from './secret-sources.js';
import { loadWorkerAuth } from './worker-auth.js';

export const SIDECAR_USAGE = `usage: kvgate sidecar --config FILE
       kvgate sidecar --role prefill|decode --worker URL --descriptor FILE [--listen host:port]
                      [--admin 127.0.0.1:port (drain/undrain, loopback only; '' disables)] [--metrics host:port ('' disables)]
                      (--keys FILE | --dev-keys SEED) [--prefill-via direct|URL] [--on-transfer-failure fail|recompute]
                      [--worker-api-key-file FILE | --worker-api-key-env NAME]   (the worker's --api-key)
                      [--trust recorded|declared-only] [--nixl-side-channel host:port|unchecked] [--pod-uid UID]
                      [--advertise IP:PORT] [--drain-announce-ms N]

The descriptor must carry the canary digests recorded on a known-good worker (kvgate verify --record, or kvgate
fingerprint --worker URL --descriptor FILE); --trust declared-only accepts a worker without them, and says so loudly.
From vLLM 0.13 the worker's NIXL side channel (VLLM_NIXL_SIDE_CHANNEL_HOST:PORT) is required, to read its live
handshake hash; --nixl-side-channel unchecked opts out, and says so loudly. --nixl-side-channel may be given with
--config (it overrides the file's nixlSideChannel: the pod IP is known only at run time), and so may --pod-uid
(this pod's metadata.uid, reported on /status so a gate that discovers pods by selector can tell this pod from one
that reused its IP) and --advertise (this sidecar's endpoint as the gate names it, podIP:targetPort: a decode sidecar
then serves only contracts routed to it, a prefill sidecar names itself in x-kvgate-served-by). Write addresses from
the pod IP in brackets, "[$(POD_IP)]:9090": right for IPv4 and IPv6 pod IPs alike.

Runs beside one vLLM worker: probes it against its declared descriptor, verifies transfer contracts, and
(decode) coordinates the prefill leg and verifies its attestation before any KV is consumed.
Signals: SIGTERM or SIGINT drains; SIGHUP reloads the key file (--keys FILE or keys.file, also reloaded when the file
changes; keys.env and --dev-keys are read at start only).
`;

const OPTIONS = {
  config: { type: 'string' },
  role: { type: 'string' },
  worker: { type: 'string' },
  descriptor: { type: 'string' },
  listen: { type: 'string' },
  admin: { type: 'string' },
  metrics: { type: 'string' },
  keys: { type: 'string' },
  'dev-keys': { type: 'string' },
  'prefill-via': { type: 'string' },
  'on-transfer-failure': { type: 'string' },
  'worker-api-key-file': { type: 'string' },
  'worker-api-key-env': { type: 'string' },
  trust: { type: 'string' },
  'nixl-side-channel': { type: 'string' },
  'pod-uid': { type: 'string' },
  advertise: { type: 'string' },
  'drain-announce-ms': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

/** Where the process's signals and output go; replaceable in tests. */
export interface CommandIo {
  readonly signals: Pick<NodeJS.Process, 'on' | 'once' | 'off'>;
  readonly stdout: (text: string) => void;
  readonly stderr: (text: string) => void;
  readonly env: Readonly<Record<string, string | undefined>>;
  /** Called with the listening URL once the sidecar serves (tests wait on it). */
  readonly onReady?: (url: string) => void;
  /** Where the log lines go instead of stdout (tests read the audit lines). */
  readonly log?: DestinationStream;
}

const processIo = (): CommandIo => ({
  signals: process,
  stdout: (t) => process.stdout.write(t),
  stderr: (t) => process.stderr.write(t),
  env: process.env,
});

/**
 * Flags -> a config, with the same validation and messages as a config file. With `env`, the variables `keys.env` and
 * `workerApiKey.env` name are checked too (the command passes its environment); files named are checked always.
 */
export async function configFromArgs(
  argv: readonly string[],
  env?: Readonly<Record<string, string | undefined>>,
): Promise<Result<SidecarConfig | 'help', ConfigIssue[]>> {
  let values: ReturnType<typeof parseArgs<{ options: typeof OPTIONS }>>['values'];
  try {
    values = parseArgs({ args: [...argv], options: OPTIONS, strict: true, allowPositionals: false }).values;
  } catch (e) {
    return err([issue('command line', [], (e as Error).message, 'see kvgate sidecar --help')]);
  }
  if (values.help === true) return ok('help');
  const addresses = addressFlags(values['nixl-side-channel'], values.advertise);
  if (!addresses.ok) return addresses;
  if (values.config !== undefined) {
    // --nixl-side-channel, --pod-uid and --advertise may accompany --config: the pod IP and UID are known only at run
    // time (Kubernetes expands $(POD_IP) and $(POD_UID) in args, never inside a mounted file).
    const others = Object.keys(values).filter((k) => !RUN_TIME_FLAGS.has(k));
    if (others.length > 0)
      return err([
        issue('command line', [], `--config cannot be combined with --${others.join(', --')}`, 'put those settings in the config file'),
      ]);
    const podUid = values['pod-uid'];
    return loadSidecarConfig(values.config, { ...addresses.value, ...(podUid === undefined ? {} : { podUid }) }, env);
  }
  if (values.descriptor === undefined) {
    return err([
      issue(
        'command line',
        'descriptor',
        'no --descriptor and no --config',
        'pass --config FILE, or --descriptor FILE with --role and --worker',
      ),
    ]);
  }
  const descriptor = await loadDescriptorFile(values.descriptor);
  const via = values['prefill-via'];
  const raw: Record<string, unknown> = {
    role: values.role,
    worker: values.worker,
    ...(descriptor.ok ? { descriptor: descriptor.value } : { descriptorFile: values.descriptor }),
    ...(values.listen === undefined ? {} : { listen: values.listen }),
    ...(values.admin === undefined ? {} : { admin: values.admin }),
    ...(values.metrics === undefined ? {} : { metrics: values.metrics }),
    ...(values.keys !== undefined
      ? { keys: { file: values.keys } }
      : values['dev-keys'] !== undefined
        ? { keys: { devSeed: values['dev-keys'] } }
        : {}),
    ...(via === undefined ? {} : { prefill: { via: via === 'direct' ? 'direct' : { envoy: via } } }),
    ...(values['on-transfer-failure'] === undefined ? {} : { onTransferFailure: values['on-transfer-failure'] }),
    ...workerApiKeyFlags(values['worker-api-key-file'], values['worker-api-key-env']),
    ...(values.trust === undefined ? {} : { trust: values.trust }),
    ...addresses.value,
    ...(values['pod-uid'] === undefined ? {} : { podUid: values['pod-uid'] }),
    ...(values['drain-announce-ms'] === undefined ? {} : { drainAnnounceMs: numberFlag(values['drain-announce-ms']) }),
  };
  // Every problem at once, as with --config: the descriptor file, the other flags, the key file, the worker's API key.
  const parsed = parseSidecarConfig(raw, 'command line', undefined, descriptor.ok ? {} : { descriptorUnread: descriptor.error });
  const secrets = await secretSourceIssues(raw, { file: 'command line', flags: true, ...(env === undefined ? {} : { env }) });
  if (secrets.length === 0) return parsed;
  return err([...(parsed.ok ? [] : parsed.error), ...secrets]);
}

/** The flags `--config` may come with: what only the running pod knows. */
const RUN_TIME_FLAGS: ReadonlySet<string> = new Set(['config', 'nixl-side-channel', 'pod-uid', 'advertise']);

/** `--nixl-side-channel` and `--advertise` as config entries, each written as the config spells it (`hostPortFlag`). */
function addressFlags(
  side: string | undefined,
  advertise: string | undefined,
): Result<{ nixlSideChannel?: string; advertise?: string }, ConfigIssue[]> {
  const s = side === undefined || side === NIXL_UNCHECKED ? ok(side) : hostPortFlag('nixl-side-channel', side);
  if (!s.ok) return s;
  const a = advertise === undefined ? ok(undefined) : hostPortFlag('advertise', advertise);
  if (!a.ok) return a;
  if (a.value !== undefined && !EndpointAddressSchema.safeParse(a.value).success)
    return err([
      issue(
        'command line',
        'advertise',
        `--advertise ${JSON.stringify(advertise)} is not an IP address and port: the gate names endpoints by IP (a listed address, or podIP:targetPort)`,
        'write IP:PORT, e.g. 10.1.2.3:9090, [fd00::1]:9090, or "[$(POD_IP)]:9090" in a manifest',
      ),
    ]);
  return ok({ ...(s.value === undefined ? {} : { nixlSideChannel: s.value }), ...(a.value === undefined ? {} : { advertise: a.value }) });
}

/** A numeric flag as a number when it is one; otherwise the text, so the schema names the flag in its error. */
function numberFlag(v: string): number | string {
  return /^\d+$/.test(v) ? Number(v) : v;
}

/** `--worker-api-key-file` / `--worker-api-key-env` as a `workerApiKey` config entry (both given: the schema refuses). */
export function workerApiKeyFlags(file: string | undefined, env: string | undefined): { workerApiKey?: Record<string, string> } {
  if (file === undefined && env === undefined) return {};
  return { workerApiKey: { ...(file === undefined ? {} : { file }), ...(env === undefined ? {} : { env }) } };
}

/** `kvgate sidecar ...`: resolves to the exit code once the sidecar has drained and closed (or failed to start). */
export async function sidecarCommand(argv: readonly string[], io: CommandIo = processIo()): Promise<number> {
  const parsed = await configFromArgs(argv, io.env);
  if (!parsed.ok) {
    io.stderr(`kvgate sidecar: invalid configuration; nothing was started:\n${formatIssues(parsed.error)}\n`);
    return 2;
  }
  if (parsed.value === 'help') {
    io.stdout(SIDECAR_USAGE);
    return 0;
  }
  const config = parsed.value;
  // Checked with the config already (secret-sources.ts); loaded again here to start, should a file change between.
  const keys = keyRingFrom(config.keys!, io.env);
  const workerAuth = await loadWorkerAuth(config.workerApiKey, io.env);
  if (!keys.ok || !workerAuth.ok) {
    const at = argv.indexOf('--config');
    const source = at >= 0 && argv[at + 1] !== undefined ? argv[at + 1] : 'the command line';
    const lines = [...(keys.ok ? [] : [`keys: ${keys.error}`]), ...(workerAuth.ok ? [] : [`workerApiKey: ${workerAuth.error}`])];
    io.stderr(`kvgate sidecar: cannot start; nothing was started (as set in ${source}):\n${lines.join('\n')}\n`);
    return 2;
  }
  const options = { level: config.log.level, base: { component: 'sidecar', role: config.role } };
  const logger = io.log === undefined ? pino(options) : pino(options, io.log);
  // Every loud opt-in (src/sidecar/opt-ins.ts) is a warning at start; /status lists the same ones as optIns.
  for (const o of sidecarOptIns(config)) logger.warn({ event: o.event, setting: o.setting, ...o.fields }, o.message);
  for (const w of sidecarConfigWarnings(config)) logger.warn({ event: 'config_warning' }, w);
  const tracing = await createTracing(config.tracing, 'sidecar');
  let sidecar: Awaited<ReturnType<typeof createSidecar>>;
  try {
    const registry = new Registry();
    registerProcessMetrics(registry);
    sidecar = await createSidecar(config, { logger, registry, keys: keys.value, workerAuth: workerAuth.value, tracer: tracing.tracer });
  } catch (e) {
    io.stderr(`kvgate sidecar: cannot start on ${config.listen}: ${(e as Error).message}\n`);
    return 1;
  }
  const s = sidecar.status();
  logger.info(
    { event: 'listening', url: sidecar.url, fingerprint: config.fingerprint, verified: s.verified, reasons: s.reasons },
    'sidecar listening',
  );
  // SIGHUP reloads a keys.file key ring (keys.env and --dev-keys are read at start only; the reload says so). A bad
  // file keeps the ring in use, with an error line and kvgate_sidecar_keys_reloads_total{result="rejected"}.
  const running = sidecar;
  const onHup = (): void => {
    try {
      running.keys.reload('SIGHUP');
    } catch (e) {
      logger.error({ err: e }, 'key ring reload failed');
    }
  };
  io.signals.on('SIGHUP', onHup);
  io.onReady?.(sidecar.url);
  await new Promise<void>((resolve) => {
    const stop = (signal: string): void => {
      io.signals.off('SIGTERM', onTerm);
      io.signals.off('SIGINT', onInt);
      io.signals.off('SIGHUP', onHup);
      logger.info({ event: 'signal', signal }, 'draining before exit');
      const grace = new Promise<void>((r) => setTimeout(r, config.drainGraceMs).unref());
      void Promise.race([sidecar.drain(), grace]).then(resolve);
    };
    const onTerm = (): void => stop('SIGTERM');
    const onInt = (): void => stop('SIGINT');
    io.signals.once('SIGTERM', onTerm);
    io.signals.once('SIGINT', onInt);
  });
  await sidecar.close();
  await tracing.shutdown().catch(() => undefined);
  logger.info({ event: 'exit', inFlight: sidecar.status().inFlight }, 'sidecar stopped');
  return 0;
}
