/**
 * Bench: what kvgate's gate adds to each request, side by side with the floor.
 *
 * (1) The pure decision core in-process on one thread (decisions/s): kvgate's own logic, nothing else.
 * (2) The gate (`kvgate gate`, child process, realistic two-revision P/D route table) and a no-op ext_proc server
 *     (same library, same server options, empty CONTINUE answers) under the same closed-loop gRPC load at several
 *     concurrency levels, rounds interleaved gate/no-op/no-op/gate... to cancel drift. Both servers are pinned to
 *     one CPU and the load generator to another when taskset exists, so the gate's figures are one-core figures.
 *
 * Run: npm run build && node dist/bench/gate-decisions.js [--quick] [--concurrency 1,8,64,256] [--round-ms 2000]
 */
import { pathToFileURL } from 'node:url';
import { createDevKeyRing } from '../src/contract/keys.js';
import { createInFlightTracker, createStaticWorkerView } from '../src/decide/worker-view.js';
import { intFlag, intListFlag, parseBenchArgs, writeSummary, type TargetResult } from './lib/args.js';
import { describeEnvironment, formatEnvironment } from './lib/bench-env.js';
import { pinSelf, spawnGate, spawnNoopServer, type ChildServer } from './lib/child-server.js';
import { createExtProcLoadTarget, type ExtProcLoadTarget, type LoadRun } from './lib/ext-proc-load.js';
import { createProfileDir, type ProfileDir } from './lib/profile-dir.js';
import { measureDecisions, rawFactsOf, type PureRun } from './lib/pure-decide.js';
import { benchRequest } from './lib/requests.js';
import { measureSessionPath } from './lib/session-path.js';
import { fmt, fmtInt, formatTable, summarize, verdict } from './lib/stats.js';
import { benchTableValue, compileBenchTable } from './lib/tables.js';

const HELP = `usage: node dist/bench/gate-decisions.js [options]
  --quick              one short round per level at concurrency 1 and 16 (smoke pass, noisy figures)
  --concurrency LIST   concurrent ext_proc streams per level (default 1,8,64,256)
  --round-ms N         length of one measured round per server (default 2000)
  --rounds N           interleaved rounds per level and server (default 3)
  --channels N         HTTP/2 connections the load generator spreads streams over (default 2)
  --pure-ms N          length of the in-process decision-core run (default 3000)
  --warmup-ms N        warm-up per server before the measured levels, in 1 s rounds at c=64, alternating (default 8000)
  --unpinned           do not pin servers and load generator to separate CPUs
  --profile            run the gate under node --cpu-prof and print what is hot in it afterwards
  --summary FILE       write target verdicts as JSON (used by run-all)
`;

/** The realistic table: one model mid-rollout, two revisions, prefill + decode pools of 4 endpoints each. */
export const GATE_TABLE = benchTableValue({ models: 1, endpointsPerPool: 4, maxInFlightPerEndpoint: 10_000 });

const TARGET_P99_RATIO = 1.5;
const TARGET_CPU_RATIO = 1.5;
const TARGET_DECISIONS_PER_S = 5_000;

interface Settings {
  readonly quick: boolean;
  readonly levels: number[];
  readonly roundMs: number;
  readonly rounds: number;
  readonly channels: number;
  readonly pureMs: number;
  readonly warmupMs: number;
  readonly pin: boolean;
  readonly profile: boolean;
  readonly summary: string | undefined;
}

function settingsFrom(argv: readonly string[]): Settings {
  const v = parseBenchArgs(
    argv,
    {
      concurrency: { type: 'string' },
      'round-ms': { type: 'string' },
      rounds: { type: 'string' },
      channels: { type: 'string' },
      'pure-ms': { type: 'string' },
      'warmup-ms': { type: 'string' },
      unpinned: { type: 'boolean', default: false },
      profile: { type: 'boolean', default: false },
    },
    HELP,
  );
  const quick = v.quick === true;
  return {
    quick,
    levels: intListFlag(v.concurrency, 'concurrency', quick ? [1, 16] : [1, 8, 64, 256]),
    roundMs: intFlag(v['round-ms'], 'round-ms', quick ? 500 : 2000),
    rounds: intFlag(v.rounds, 'rounds', quick ? 1 : 3),
    channels: intFlag(v.channels, 'channels', 2),
    pureMs: intFlag(v['pure-ms'], 'pure-ms', quick ? 500 : 3000),
    warmupMs: intFlag(v['warmup-ms'], 'warmup-ms', quick ? 600 : 8000),
    pin: v.unpinned !== true,
    profile: v.profile === true,
    summary: v.summary,
  };
}

/** The decision core on this thread, over the same table and requests the gate gets. */
export function runPureCore(durationMs: number): PureRun {
  const table = compileBenchTable(GATE_TABLE);
  const view = createStaticWorkerView(table, createInFlightTracker());
  const facts = Array.from({ length: 4096 }, (_, i) => rawFactsOf(benchRequest(i, 1, 'pure')));
  const keys = createDevKeyRing('kvgate-bench');
  measureDecisions({ table, view, keys, facts, durationMs: Math.min(500, durationMs) }); // warm-up (JIT)
  return measureDecisions({ table, view, keys, facts, durationMs });
}

interface Side {
  readonly runs: LoadRun[];
  cpuMs: number;
}

interface Level {
  readonly concurrency: number;
  readonly gate: Side;
  readonly noop: Side;
}

async function measuredRun(
  server: ChildServer,
  target: ExtProcLoadTarget,
  side: Side,
  concurrency: number,
  roundMs: number,
): Promise<void> {
  const cpu0 = server.cpuMs();
  side.runs.push(await target.run({ concurrency, durationMs: roundMs }));
  side.cpuMs += server.cpuMs() - cpu0;
}

/**
 * Warm-up before anything is measured: alternating rounds at c=64 until each server has run `warmupMs`. A gate that
 * serves for days runs optimised code; its first seconds run V8's interpreter and baseline tiers and pay for compiling
 * the optimised ones (on background threads, which /proc counts). The gate has far more code to compile than the
 * no-op, so a level measured in those seconds charges it for start-up. Each round's CPU per request is printed: the
 * warm-up is shown, not hidden, and the last rounds show whether it was long enough.
 */
async function warmUp(
  s: Settings,
  servers: { gate: ChildServer; noop: ChildServer },
  targets: { gate: ExtProcLoadTarget; noop: ExtProcLoadTarget },
): Promise<string> {
  const roundMs = Math.min(1000, s.warmupMs);
  const seen = { gate: [] as number[], noop: [] as number[] };
  for (let ran = 0; ran < s.warmupMs; ran += roundMs) {
    for (const k of ['gate', 'noop'] as const) {
      const cpu0 = servers[k].cpuMs();
      const run = await targets[k].run({ concurrency: 64, durationMs: roundMs });
      const n = run.outcomes.routed + run.outcomes.continued + run.outcomes.refused;
      seen[k].push(n === 0 ? Number.NaN : ((servers[k].cpuMs() - cpu0) * 1000) / n);
    }
  }
  const row = (xs: number[]) => xs.map((x) => fmt(x, 0)).join(' ');
  return `\nwarm-up at c=64, ${seen.gate.length} alternating rounds of ${roundMs} ms (not measured; server CPU us/req per round):\n  kvgate ${row(seen.gate)}\n  no-op  ${row(seen.noop)}\n`;
}

/** Interleave: round r runs gate then no-op when r is even, no-op then gate when odd. */
async function runLevels(
  s: Settings,
  servers: { gate: ChildServer; noop: ChildServer },
  targets: { gate: ExtProcLoadTarget; noop: ExtProcLoadTarget },
): Promise<Level[]> {
  const levels: Level[] = [];
  for (const concurrency of s.levels) {
    const level: Level = { concurrency, gate: { runs: [], cpuMs: 0 }, noop: { runs: [], cpuMs: 0 } };
    for (let r = 0; r < s.rounds; r++) {
      const order = r % 2 === 0 ? (['gate', 'noop'] as const) : (['noop', 'gate'] as const);
      for (const k of order) await measuredRun(servers[k], targets[k], level[k], concurrency, s.roundMs);
    }
    levels.push(level);
    process.stderr.write(`  c=${concurrency} done\n`);
  }
  return levels;
}

export interface SideFigures {
  readonly requests: number;
  readonly perSecond: number;
  readonly p50: number;
  readonly p99: number;
  /** Server CPU time per request, in microseconds (all the server's threads). */
  readonly cpuUsPerRequest: number;
  readonly refused: number;
  readonly errors: number;
  readonly firstError: string | undefined;
}

function figuresOf(side: Side): SideFigures {
  const all = side.runs.flatMap((r) => Array.from(r.latenciesMs));
  const elapsed = side.runs.reduce((a, r) => a + r.elapsedMs, 0);
  const done = all.length;
  const lat = summarize(all);
  return {
    requests: done,
    perSecond: (done * 1000) / elapsed,
    p50: lat.p50,
    p99: lat.p99,
    cpuUsPerRequest: (side.cpuMs * 1000) / Math.max(1, done),
    refused: side.runs.reduce((a, r) => a + r.outcomes.refused, 0),
    errors: side.runs.reduce((a, r) => a + r.outcomes.error, 0),
    firstError: side.runs.find((r) => r.firstError !== undefined)?.firstError,
  };
}

function levelTable(levels: readonly Level[]): { text: string; figures: { c: number; gate: SideFigures; noop: SideFigures }[] } {
  const figures = levels.map((l) => ({ c: l.concurrency, gate: figuresOf(l.gate), noop: figuresOf(l.noop) }));
  const rows = figures.flatMap(({ c, gate, noop }) => [
    [
      `c=${c} kvgate`,
      fmtInt(gate.requests),
      fmtInt(gate.perSecond),
      fmt(gate.p50, 3),
      fmt(gate.p99, 3),
      fmt(gate.cpuUsPerRequest, 0),
      fmt(gate.p99 / noop.p99),
      fmtInt(gate.refused + gate.errors),
    ],
    [
      `c=${c} no-op`,
      fmtInt(noop.requests),
      fmtInt(noop.perSecond),
      fmt(noop.p50, 3),
      fmt(noop.p99, 3),
      fmt(noop.cpuUsPerRequest, 0),
      '1.00',
      fmtInt(noop.refused + noop.errors),
    ],
  ]);
  const text = formatTable(['server', 'requests', 'req/s', 'p50 ms', 'p99 ms', 'srv CPU us/req', 'p99 ratio', 'refused+err'], rows);
  return { text, figures };
}

function verdicts(pure: PureRun, figures: ReturnType<typeof levelTable>['figures'], pinned: boolean): TargetResult[] {
  const out: TargetResult[] = [];
  // A level where the gate refused or failed anything measured something else than decided routes: no verdict (n/a).
  const clean = (f: (typeof figures)[number]): boolean => f.gate.refused + f.gate.errors + f.noop.errors === 0;
  for (const f of figures) {
    const ratio = f.gate.p99 / f.noop.p99;
    out.push({
      name: `gate p99 / no-op p99 at c=${f.c}`,
      target: `<= ${TARGET_P99_RATIO}x`,
      measured: `${fmt(ratio)}x (${fmt(f.gate.p99, 3)} vs ${fmt(f.noop.p99, 3)} ms)`,
      ok: clean(f) ? ratio <= TARGET_P99_RATIO : undefined,
    });
  }
  // Issue 17: the gate's server CPU per decided request at most 1.5x the no-op floor's, at every level.
  for (const f of figures) {
    const ratio = f.gate.cpuUsPerRequest / f.noop.cpuUsPerRequest;
    out.push({
      name: `gate CPU per request / no-op's at c=${f.c}`,
      target: `<= ${TARGET_CPU_RATIO}x`,
      measured: `${fmt(ratio)}x (${fmt(f.gate.cpuUsPerRequest, 0)} vs ${fmt(f.noop.cpuUsPerRequest, 0)} us)`,
      ok: clean(f) ? ratio <= TARGET_CPU_RATIO : undefined,
    });
  }
  out.push({
    name: 'decision core, one thread (in-process)',
    target: `>= ${fmtInt(TARGET_DECISIONS_PER_S)}/s`,
    measured: `${fmtInt(pure.decisionsPerSecond)}/s (${fmt(pure.nsPerDecision / 1000, 1)} us each)`,
    ok: pure.decisionsPerSecond >= TARGET_DECISIONS_PER_S,
  });
  const best = figures.reduce((a, f) => (f.gate.perSecond > a.gate.perSecond ? f : a));
  out.push({
    name: `whole gate over gRPC, ${pinned ? 'pinned to one CPU' : 'unpinned'} (best level c=${best.c})`,
    target: `>= ${fmtInt(TARGET_DECISIONS_PER_S)}/s`,
    measured: `${fmtInt(best.gate.perSecond)}/s (server CPU ${fmt(best.gate.cpuUsPerRequest, 0)} us/req -> ${fmtInt(1e6 / best.gate.cpuUsPerRequest)}/s at 100% of one core)`,
    ok: clean(best) ? best.gate.perSecond >= TARGET_DECISIONS_PER_S : undefined,
  });
  return out;
}

async function startServers(pin: boolean, profile: ProfileDir | undefined) {
  const cpu = pin ? { cpu: 1 } : {};
  const gate = await spawnGate(GATE_TABLE, { ...cpu, ...(profile === undefined ? {} : { nodeFlags: profile.nodeFlags }) });
  const noop = await spawnNoopServer(cpu).catch(async (e: unknown) => {
    await gate.stop();
    throw e;
  });
  return { gate, noop };
}

export async function main(argv: readonly string[]): Promise<void> {
  const s = settingsFrom(argv);
  const env = describeEnvironment();
  const pin = s.pin && env.taskset && env.cores >= 2;
  process.stdout.write(formatEnvironment(env, 'gate-decisions: kvgate gate vs no-op ext_proc server'));
  if (pin && !(await pinSelf(0))) throw new Error('taskset could not pin the load generator; rerun with --unpinned');
  process.stdout.write(
    pin
      ? 'placement: servers pinned to CPU 1 (taskset -c 1), load generator to CPU 0\n'
      : `placement: unpinned (${env.cores} cores shared by servers and load generator)\n`,
  );

  const pure = runPureCore(s.pureMs);
  process.stdout.write(
    `\ndecision core in-process (decideRequest, 1 thread): ${fmtInt(pure.decisionsPerSecond)} decisions/s, ${fmt(pure.nsPerDecision / 1000, 2)} us/decision over ${fmtInt(pure.decisions)} (${JSON.stringify(pure.outcomes)})\n`,
  );

  const sessionPath = await measureSessionPath({
    table: compileBenchTable(GATE_TABLE),
    requests: Array.from({ length: 997 }, (_, i) => benchRequest(i, 1, 'session')),
    count: s.quick ? 3_000 : 30_000,
    warmup: s.quick ? 1_000 : 15_000,
  });
  if (sessionPath.routed !== sessionPath.requests) throw new Error(`session path: ${sessionPath.routed} of ${sessionPath.requests} routed`);
  process.stdout.write(
    `kvgate's own work in-process (decoder + session + admission + encoder, 64 in flight, no gRPC): ${fmt(sessionPath.cpuUsPerRequest, 1)} us CPU per request over ${fmtInt(sessionPath.requests)}\n`,
  );

  const profile = s.profile ? createProfileDir() : undefined;
  const servers = await startServers(pin, profile);
  const targets = {
    gate: createExtProcLoadTarget({
      address: `127.0.0.1:${servers.gate.port}`,
      channels: s.channels,
      request: (i) => benchRequest(i, 1, 'g'),
    }),
    noop: createExtProcLoadTarget({
      address: `127.0.0.1:${servers.noop.port}`,
      channels: s.channels,
      request: (i) => benchRequest(i, 1, 'n'),
    }),
  };
  try {
    process.stdout.write(await warmUp(s, servers, targets));
    process.stderr.write(`measuring ${s.levels.length} levels x ${s.rounds} rounds x ${s.roundMs} ms per server...\n`);
    const levels = await runLevels(s, servers, targets);
    const { text, figures } = levelTable(levels);
    process.stdout.write(
      `\nclosed loop: each request = request_headers + buffered request_body (${benchRequest(0).body.length} B completions JSON) + response_headers on its own stream; ${s.channels} HTTP/2 connections; ${s.rounds} interleaved rounds x ${s.roundMs} ms per level and server\n${text}\n`,
    );
    const problems = figures.filter((f) => f.gate.refused + f.gate.errors + f.noop.errors > 0);
    for (const f of problems)
      process.stdout.write(
        `WARNING c=${f.c}: gate refused ${f.gate.refused}, gate errors ${f.gate.errors}, no-op errors ${f.noop.errors} (${f.gate.firstError ?? f.noop.firstError ?? ''})\n`,
      );
    const targetsMet = verdicts(pure, figures, pin);
    process.stdout.write(
      `\n${formatTable(
        ['target', 'wanted', 'measured', 'verdict'],
        targetsMet.map((t) => [t.name, t.target, t.measured, verdict(t.ok)]),
      )}\n`,
    );
    const notes = [
      pin ? 'gate and no-op pinned to one CPU; the load generator (grpc-js, one thread) on the other' : `unpinned on ${env.cores} cores`,
      'if no-op req/s is close to gate req/s, the load generator, not the server, limits throughput; use server CPU us/req for capacity',
    ];
    writeSummary(s.summary, { bench: 'gate-decisions', quick: s.quick, targets: targetsMet, notes });
  } finally {
    targets.gate.close();
    targets.noop.close();
    await Promise.all([servers.gate.stop(), servers.noop.stop()]);
  }
  if (profile !== undefined)
    process.stdout.write(`\nprofile of the gate process over the whole run (node --cpu-prof):\n${profile.summarize(25)}\n`);
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  main(process.argv.slice(2)).catch((e: unknown) => {
    process.stderr.write(`gate-decisions: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    process.exitCode = 1;
  });
}
