/**
 * `npm run testbed -- harness --config envoy.yaml`: the Envoy-faithful harness (testbed/harness) as a process, for
 * running a topology by hand where no Envoy binary is available: it loads the Envoy bootstrap (its listeners and
 * clusters, checked as the harness checks every config: anything it does not implement is refused with its YAML
 * path), prints each listener's address, serves until SIGTERM or SIGINT, then stops accepting, lets requests in
 * flight finish (up to `--drain-ms`) and exits 0. With `--policy FILE` it first checks that every cluster the route
 * table routes to exists in the config (cluster-match.ts). Exit 2 on usage errors, 1 when the config is refused, does
 * not serve the table, or a port cannot be bound. Test support: a deployment runs Envoy with the same file.
 */
import { readFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { startEnvoyHarness } from '../harness/data-plane.js';
import { checkPolicyFile, formatCheckReport } from '../../src/policy/check-report.js';
import { loadEnvoyConfig, type EnvoyConfig, type EnvoyConfigOverrides } from '../harness/envoy-config.js';
import { ENVOY_VERSIONS, type EnvoyVersion } from '../harness/runtime-config.js';
import { clusterMismatches } from './cluster-match.js';
import { userPath } from './user-path.js';
import { waitForSignal } from '../wait-for-signal.js';

const HELP = `usage: npm run testbed -- harness --config envoy.yaml [options]

Runs the Envoy-faithful harness (test support, not Envoy) with an Envoy v3 bootstrap: its listeners, routes,
ext_proc filters and clusters. Prints each listener's address; SIGTERM or SIGINT drains and exits 0.
  --config FILE              the Envoy bootstrap YAML (e.g. one rendered by kvgate envoy render bootstrap)
  --envoy VERSION            the Envoy release to play: ${ENVOY_VERSIONS.join(' or ')} (default 1.37; ext_proc stream lifetime)
  --listener NAME=PORT       bind listener NAME on PORT instead of the file's (0 = any free port); repeatable
  --cluster NAME=HOST:PORT[,HOST:PORT]   endpoints of a STATIC / STRICT_DNS cluster instead of the file's; repeatable
  --file-root PREFIX=DIR     read files the config names under PREFIX from DIR instead (TLS certificates); repeatable
  --policy FILE              the route table the gate serves: refuse to start when a cluster it routes to is missing
                             from the config (Envoy would answer 503 NC for it) or reads another endpoint header
  --drain-ms N               how long in-flight requests may finish after a signal (default 5000)
`;

export interface HarnessCommandIo {
  readonly out: (line: string) => void;
  readonly err: (text: string) => void;
  /** Resolves with the signal name when the harness should stop (default: the first SIGTERM or SIGINT). */
  readonly shutdown?: Promise<string>;
}

const OPTIONS = {
  config: { type: 'string' },
  envoy: { type: 'string' },
  listener: { type: 'string', multiple: true },
  cluster: { type: 'string', multiple: true },
  'file-root': { type: 'string', multiple: true },
  'drain-ms': { type: 'string' },
  policy: { type: 'string' },
  help: { type: 'boolean' },
} as const;

interface Args {
  readonly config: string;
  readonly envoyVersion: EnvoyVersion;
  readonly overrides: EnvoyConfigOverrides;
  readonly drainMs: number;
  readonly policy?: string;
}

export async function harnessCommand(argv: readonly string[], io: HarnessCommandIo = defaultIo()): Promise<number> {
  const args = parse(argv);
  if (args === 'help') {
    io.out(HELP);
    return 0;
  }
  if (typeof args === 'string') {
    io.err(`harness: ${args}\n\n${HELP}`);
    return 2;
  }
  let text: string;
  try {
    text = await readFile(args.config, 'utf8');
  } catch (e) {
    io.err(`harness: cannot read ${args.config}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}; check the --config path`);
    return 1;
  }
  const loaded = loadEnvoyConfig(text, args.overrides);
  if (!loaded.ok) {
    io.err(`harness: ${args.config}: ${loaded.error.message}`);
    return 1;
  }
  if (args.policy !== undefined) {
    const problems = await policyMismatches(args.policy, loaded.value);
    if (problems.length > 0) {
      io.err(`harness: ${args.config} does not serve the route table ${args.policy}:\n  ${problems.join('\n  ')}`);
      return 1;
    }
  }
  const shutdown = io.shutdown ?? waitForSignal();
  let harness;
  try {
    harness = await startEnvoyHarness(loaded.value, { envoyVersion: args.envoyVersion, drainTimeoutMs: args.drainMs });
  } catch (e) {
    io.err(`harness: cannot start: ${(e as Error).message} (a port in the file is taken? use --listener NAME=0)`);
    return 1;
  }
  io.out(`harness: ${args.config} (Envoy ${args.envoyVersion} behaviour; test support, not Envoy)`);
  for (const [name, l] of Object.entries(harness.listeners)) io.out(`  listener ${name.padEnd(12)} ${l.url}`);
  io.out(`  clusters ${Object.keys(loaded.value.clusters).join(', ')}`);
  io.out('ready; SIGTERM or SIGINT stops it');
  const signal = await shutdown;
  io.out(`harness: ${signal} received, letting requests in flight finish (up to ${args.drainMs} ms)`);
  await harness.close();
  io.out('harness: stopped');
  return 0;
}

function parse(argv: readonly string[]): Args | string | 'help' {
  let v: ReturnType<typeof parseArgs<{ options: typeof OPTIONS }>>['values'];
  try {
    ({ values: v } = parseArgs({ args: [...argv], options: OPTIONS }));
  } catch (e) {
    return (e as Error).message;
  }
  if (v.help === true) return 'help';
  if (v.config === undefined) return '--config FILE is required';
  if (v.envoy !== undefined && !ENVOY_VERSIONS.includes(v.envoy as EnvoyVersion))
    return `--envoy must be ${ENVOY_VERSIONS.join(' or ')}, got ${JSON.stringify(v.envoy)}`;
  const drain = v['drain-ms'] ?? '5000';
  if (!/^\d+$/.test(drain)) return `--drain-ms must be a whole number of milliseconds, got ${JSON.stringify(drain)}`;
  const listenerPorts: Record<string, number> = {};
  for (const item of v.listener ?? []) {
    const m = /^([^=]+)=(\d{1,5})$/.exec(item);
    if (!m || Number(m[2]) > 65535) return `--listener must be NAME=PORT (0-65535), got ${JSON.stringify(item)}`;
    listenerPorts[m[1]!] = Number(m[2]);
  }
  const clusterEndpoints: Record<string, string[]> = {};
  for (const item of v.cluster ?? []) {
    const m = /^([^=]+)=(.+)$/.exec(item);
    const hosts = m?.[2]?.split(',') ?? [];
    if (!m || !hosts.every((h) => /^[^:\s]+:\d{1,5}$/.test(h)))
      return `--cluster must be NAME=HOST:PORT[,HOST:PORT], got ${JSON.stringify(item)}`;
    clusterEndpoints[m[1]!] = hosts;
  }
  const fileRoots: Record<string, string> = {};
  for (const item of v['file-root'] ?? []) {
    const m = /^([^=]+)=(.+)$/.exec(item);
    if (!m) return `--file-root must be PREFIX=DIR, got ${JSON.stringify(item)}`;
    fileRoots[m[1]!] = userPath(m[2]!);
  }
  return {
    config: userPath(v.config),
    envoyVersion: (v.envoy as EnvoyVersion | undefined) ?? '1.37',
    overrides: { listenerPorts, clusterEndpoints, fileRoots },
    drainMs: Number(drain),
    ...(v.policy === undefined ? {} : { policy: userPath(v.policy) }),
  };
}

/** What keeps `config` from serving the table in `file` (the table's own errors first, when it cannot be compiled). */
async function policyMismatches(file: string, config: EnvoyConfig): Promise<string[]> {
  // allowInvalid: a table that fails only semantic checks (e.g. canaries not recorded yet) still names its clusters.
  const checked = await checkPolicyFile(file, { allowInvalid: true });
  if (!checked.ok) return [`the route table cannot be read:\n${formatCheckReport(checked.report)}`];
  return clusterMismatches(checked.table, config, file);
}

function defaultIo(): HarnessCommandIo {
  return { out: (l) => process.stdout.write(`${l}\n`), err: (t) => process.stderr.write(t.endsWith('\n') ? t : `${t}\n`) };
}
