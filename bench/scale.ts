/**
 * Bench: how decision cost and memory scale.
 *
 * (1) The pure decision core in-process (ns/decision) with 10, 100 and 1,000 endpoints per pool, rounds
 *     interleaved across sizes; the cost should be flat in endpoint count (large groups are sampled). When it is not, the
 *     1,000-endpoint case is re-run under `node --cpu-prof` and the hot functions are printed.
 * (2) A large route table (200 models x 2 revisions x prefill+decode pools) against the one-model table: the cost
 *     of a decision should not depend on how many other models the table serves. Compile time is reported too.
 * (3) RSS of `kvgate gate` (child process) with 10,000 ext_proc streams held open, against the no-op ext_proc
 *     server with the same streams: after request_headers only, and after the buffered body (decided).
 *
 * Run: npm run build && node dist/bench/scale.js [--quick] [--streams 10000] [--skip-memory]
 */
import { spawn } from 'node:child_process';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { createDevKeyRing } from '../src/contract/keys.js';
import { createInFlightTracker, createStaticWorkerView } from '../src/decide/worker-view.js';
import { intFlag, intListFlag, parseBenchArgs, writeSummary, type TargetResult } from './lib/args.js';
import { describeEnvironment, formatEnvironment } from './lib/bench-env.js';
import { spawnGate, spawnNoopServer, type ChildServer } from './lib/child-server.js';
import { holdStreams } from './lib/held-streams.js';
import { createProfileDir } from './lib/profile-dir.js';
import { measureDecisions, rawFactsOf, type PureRunOptions } from './lib/pure-decide.js';
import { benchRequest } from './lib/requests.js';
import { fmt, fmtInt, fmtMiB, formatTable, median, verdict } from './lib/stats.js';
import { benchTableValue, compileBenchTable } from './lib/tables.js';

const HELP = `usage: node dist/bench/scale.js [options]
  --quick              short rounds, 1,000 held streams (smoke pass, noisy figures)
  --endpoints LIST     endpoints per pool to compare (default 10,100,1000)
  --round-ms N         one measured round per case (default 1000)
  --rounds N           interleaved rounds per case (default 3; the median is reported)
  --models N           models in the large table (default 200)
  --streams N          ext_proc streams held open for the memory figure (default 10000)
  --skip-memory        only the in-process decision-cost part
  --profile            always profile the largest endpoint case (default: only when cost grows more than 2x)
  --profile-case N     internal: run only the N-endpoint case (used under --cpu-prof)
  --summary FILE       write target verdicts as JSON (used by run-all)
`;

const TARGET_RSS_BYTES = 200e6;
const TARGET_RSS_RATIO = 1.15;
/**
 * The most the decision cost may grow from the smallest to the largest pool (issue target: 10 -> 1,000 endpoints at
 * most 2x; a linear scan grows ~100x). Large groups are sampled (src/decide/pick.ts), so the cost should be flat.
 */
const MAX_ENDPOINT_GROWTH = 2;

interface Case {
  readonly label: string;
  readonly endpoints: number;
  readonly models: number;
  readonly options: Omit<PureRunOptions, 'durationMs'>;
  readonly compileMs: number;
  readonly rounds: number[];
}

function buildCase(label: string, endpoints: number, models: number): Case {
  const value = benchTableValue({ models, endpointsPerPool: endpoints, maxInFlightPerEndpoint: 64 });
  const t0 = performance.now();
  const table = compileBenchTable(value);
  const compileMs = performance.now() - t0;
  const view = createStaticWorkerView(table, createInFlightTracker());
  const facts = Array.from({ length: 4096 }, (_, i) => rawFactsOf(benchRequest(i, models, 'scale')));
  return { label, endpoints, models, options: { table, view, keys: createDevKeyRing('kvgate-bench'), facts }, compileMs, rounds: [] };
}

/** Rounds interleaved across cases (a, b, c, a, b, c, ...) so drift hits every case alike. */
function runCases(cases: readonly Case[], roundMs: number, rounds: number): void {
  for (const c of cases) {
    const r = measureDecisions({ ...c.options, durationMs: Math.min(300, roundMs) }); // JIT warm-up
    if ((r.outcomes['route'] ?? 0) !== r.decisions)
      throw new Error(`case ${c.label} did not route every request: ${JSON.stringify(r.outcomes)}`);
  }
  for (let i = 0; i < rounds; i++)
    for (const c of cases) c.rounds.push(measureDecisions({ ...c.options, durationMs: roundMs }).nsPerDecision);
}

function costTable(cases: readonly Case[], base: Case): string {
  const rows = cases.map((c) => {
    const ns = median(c.rounds);
    return [
      c.label,
      fmtInt(c.models),
      fmtInt(c.endpoints),
      fmtInt(c.models * 4 * c.endpoints),
      fmt(c.compileMs, 1),
      fmtInt(ns),
      fmtInt(1e9 / ns),
      fmt(ns / median(base.rounds)),
    ];
  });
  return formatTable(['case', 'models', 'endpoints/pool', 'endpoints', 'compile ms', 'ns/decision', 'decisions/s', 'vs base'], rows);
}

/** Re-run one case under `node --cpu-prof` in a child and summarise the profile. */
async function profileCase(endpoints: number, roundMs: number): Promise<string> {
  const profile = createProfileDir();
  const self = fileURLToPath(import.meta.url);
  await new Promise<void>((resolve, reject) => {
    const p = spawn(process.execPath, [...profile.nodeFlags, self, '--profile-case', String(endpoints), '--round-ms', String(roundMs)], {
      stdio: 'inherit',
    });
    p.once('error', reject);
    p.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`profiling run exited with ${code}`))));
  });
  return profile.summarize(12);
}

interface MemoryRow {
  readonly server: string;
  readonly mode: string;
  readonly idle: number;
  readonly held: number;
  /** After a forced full GC in the server, with the streams still open. */
  readonly heldAfterGc: number;
  /** Live JS heap with the streams open minus live heap at idle, both after a full GC. */
  readonly heapGrowth: number;
  readonly open: number;
  readonly failed: number;
  readonly firstError?: string;
}

async function memoryOf(name: string, start: () => Promise<ChildServer>, streams: number, withBody: boolean): Promise<MemoryRow> {
  const server = await start();
  try {
    await new Promise((r) => setTimeout(r, 500));
    const idle = server.rssBytes();
    const idleGc = await server.memoryAfterGc();
    const held = await holdStreams({
      address: `127.0.0.1:${server.port}`,
      streams,
      withBody,
      request: (i) => benchRequest(i, 1, `mem-${name}`),
    });
    await new Promise((r) => setTimeout(r, 1000)); // let allocation settle; RSS is what the kernel charges now
    const rss = server.rssBytes();
    const gc = await server.memoryAfterGc();
    await held.release();
    return {
      server: name,
      mode: withBody ? 'headers + body (decided)' : 'headers only',
      idle,
      held: rss,
      heldAfterGc: gc.rss,
      heapGrowth: gc.heapUsed + gc.external - (idleGc.heapUsed + idleGc.external),
      open: held.open,
      failed: held.failed,
      ...(held.firstError === undefined ? {} : { firstError: held.firstError }),
    };
  } finally {
    await server.stop();
  }
}

async function memorySection(
  streams: number,
): Promise<{ text: string; gateWorst: MemoryRow; gateDecided: MemoryRow; noopDecided: MemoryRow }> {
  const table = benchTableValue({ models: 1, endpointsPerPool: 4, maxInFlightPerEndpoint: 100_000 });
  const rows: MemoryRow[] = [];
  for (const withBody of [false, true]) {
    rows.push(await memoryOf('kvgate gate', () => spawnGate(table, { gcProbe: true }), streams, withBody));
    rows.push(await memoryOf('no-op', () => spawnNoopServer({ gcProbe: true }), streams, withBody));
  }
  const per = (bytes: number, r: MemoryRow) => `${fmtInt(bytes / Math.max(1, r.open))} B`;
  const text = formatTable(
    ['server', 'held after', 'open', 'idle RSS', `RSS at ${fmtInt(streams)}`, 'RSS after GC', 'RSS/stream', 'live heap/stream', 'failed'],
    rows.map((r) => [
      r.server,
      r.mode,
      fmtInt(r.open),
      fmtMiB(r.idle),
      fmtMiB(r.held),
      fmtMiB(r.heldAfterGc),
      per(r.held - r.idle, r),
      per(r.heapGrowth, r),
      r.failed === 0 ? '0' : `${r.failed} (${r.firstError ?? ''})`,
    ]),
  );
  const gateRows = rows.filter((r) => r.server === 'kvgate gate');
  const decided = (server: string) => rows.find((r) => r.server === server && r.mode === 'headers + body (decided)')!;
  return {
    text,
    gateWorst: gateRows.reduce((a, r) => (r.held > a.held ? r : a)),
    gateDecided: decided('kvgate gate'),
    noopDecided: decided('no-op'),
  };
}

interface Settings {
  readonly quick: boolean;
  readonly endpoints: number[];
  readonly roundMs: number;
  readonly rounds: number;
  readonly models: number;
  readonly streams: number;
  readonly memory: boolean;
  readonly profile: boolean;
  readonly profileCase: number | undefined;
  readonly summary: string | undefined;
}

function settingsFrom(argv: readonly string[]): Settings {
  const v = parseBenchArgs(
    argv,
    {
      endpoints: { type: 'string' },
      'round-ms': { type: 'string' },
      rounds: { type: 'string' },
      models: { type: 'string' },
      streams: { type: 'string' },
      'skip-memory': { type: 'boolean', default: false },
      profile: { type: 'boolean', default: false },
      'profile-case': { type: 'string' },
    },
    HELP,
  );
  const quick = v.quick === true;
  return {
    quick,
    endpoints: intListFlag(v.endpoints, 'endpoints', [10, 100, 1000]),
    roundMs: intFlag(v['round-ms'], 'round-ms', quick ? 200 : 1000),
    rounds: intFlag(v.rounds, 'rounds', quick ? 1 : 3),
    models: intFlag(v.models, 'models', 200),
    streams: intFlag(v.streams, 'streams', quick ? 1000 : 10_000),
    memory: v['skip-memory'] !== true,
    profile: v.profile === true,
    profileCase: v['profile-case'] === undefined ? undefined : intFlag(v['profile-case'], 'profile-case', 1000),
    summary: v.summary,
  };
}

async function costSection(s: Settings, targets: TargetResult[], notes: string[]): Promise<void> {
  const byEndpoints = s.endpoints.map((e) => buildCase(`1 model, ${e} endpoints/pool`, e, 1));
  const small = buildCase('1 model, 2 endpoints/pool', 2, 1);
  const large = buildCase(`${s.models} models, 2 endpoints/pool`, 2, s.models);
  runCases([...byEndpoints, small, large], s.roundMs, s.rounds);
  const first = byEndpoints[0]!;
  const last = byEndpoints[byEndpoints.length - 1]!;
  process.stdout.write(
    `\ndecision cost vs endpoints per pool (pure core, 1 thread, median of ${s.rounds} interleaved rounds x ${s.roundMs} ms)\n${costTable(byEndpoints, first)}\n`,
  );
  process.stdout.write(`\ndecision cost vs route-table size\n${costTable([small, large], small)}\n`);
  const growth = median(last.rounds) / median(first.rounds);
  const perEndpointNs = (median(last.rounds) - median(first.rounds)) / (last.endpoints - first.endpoints);
  const flatOk = growth <= MAX_ENDPOINT_GROWTH;
  targets.push({
    name: `decision cost ${first.endpoints} -> ${last.endpoints} endpoints/pool`,
    target: `flat (<= ${fmt(MAX_ENDPOINT_GROWTH)}x)`,
    measured: `${fmt(growth)}x (+${fmt(perEndpointNs, 1)} ns per endpoint)`,
    ok: flatOk,
  });
  const tableGrowth = median(large.rounds) / median(small.rounds);
  targets.push({
    name: `decision cost 1 -> ${s.models} models`,
    target: 'flat (<= 1.5x)',
    measured: `${fmt(tableGrowth)}x (compile ${fmt(large.compileMs, 0)} ms)`,
    ok: tableGrowth <= 1.5,
  });
  if (!flatOk || s.profile) {
    notes.push(`decision cost grows ${fmt(growth)}x from ${first.endpoints} to ${last.endpoints} endpoints per pool; see the profile`);
    process.stdout.write(
      `\nprofile of the ${last.endpoints}-endpoint case (node --cpu-prof):\n${await profileCase(last.endpoints, Math.max(2000, s.roundMs))}\n`,
    );
  }
}

export async function main(argv: readonly string[]): Promise<void> {
  const s = settingsFrom(argv);
  if (s.profileCase !== undefined) {
    const c = buildCase('profile', s.profileCase, 1);
    measureDecisions({ ...c.options, durationMs: s.roundMs });
    return;
  }
  const env = describeEnvironment();
  process.stdout.write(formatEnvironment(env, 'scale: decision cost vs endpoints and table size; gate RSS at many open streams'));
  const targets: TargetResult[] = [];
  const notes: string[] = [];
  await costSection(s, targets, notes);
  if (s.memory) {
    process.stderr.write(`holding ${fmtInt(s.streams)} ext_proc streams on each server (4 runs)...\n`);
    const mem = await memorySection(s.streams);
    process.stdout.write(
      `\nRSS with ${fmtInt(s.streams)} ext_proc streams held open (fresh child process per row; client on its own process)\n${mem.text}\n`,
    );
    const w = mem.gateWorst;
    targets.push({
      name: `gate RSS at ${fmtInt(s.streams)} open streams (${w.mode})`,
      target: '<= 200 MB',
      measured: `${fmt(w.held / 1e6, 0)} MB (${fmt(w.heldAfterGc / 1e6, 0)} MB after a forced GC)`,
      ok: w.failed === 0 ? w.held <= TARGET_RSS_BYTES : undefined,
    });
    // Issue 17: RSS at this many decided streams at most 1.15x the no-op floor's, measured in the same run.
    const ratio = mem.gateDecided.held / mem.noopDecided.held;
    targets.push({
      name: `gate RSS / no-op RSS at ${fmtInt(s.streams)} decided streams`,
      target: `<= ${TARGET_RSS_RATIO}x`,
      // Three decimals: the ratio sits on the target, and 1.1504 printed as "1.15x" next to MISSED reads as a bug.
      measured: `${fmt(ratio, 3)}x (${fmtMiB(mem.gateDecided.held)} vs ${fmtMiB(mem.noopDecided.held)})`,
      ok: mem.gateDecided.failed + mem.noopDecided.failed === 0 ? ratio <= TARGET_RSS_RATIO : undefined,
    });
    if (w.failed > 0) notes.push(`memory: ${w.failed} streams failed to open on the gate (${w.firstError ?? ''})`);
  }
  process.stdout.write(
    `\n${formatTable(
      ['target', 'wanted', 'measured', 'verdict'],
      targets.map((t) => [t.name, t.target, t.measured, verdict(t.ok)]),
    )}\n`,
  );
  writeSummary(s.summary, { bench: 'scale', quick: s.quick, targets, notes });
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  main(process.argv.slice(2)).catch((e: unknown) => {
    process.stderr.write(`scale: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    process.exitCode = 1;
  });
}
