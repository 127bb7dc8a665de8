/**
 * Runs every bench in sequence, each in its own process (so one bench's pinning, heap or open sockets never leak
 * into the next), under one header (Node, CPU, cores, commit, date), then prints every target with its verdict.
 *
 *   npm run build && node dist/bench/run-all.js [--quick] [--only gate-decisions,scale] [--fail-on-miss]
 *
 * A missed target is reported, not hidden; with --fail-on-miss it also makes the exit status 1 (a bench that
 * crashes always does).
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseBenchArgs, type BenchSummary } from './lib/args.js';
import { describeEnvironment, formatEnvironment } from './lib/bench-env.js';
import { formatTable, verdict } from './lib/stats.js';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const DIST = path.resolve(HERE, '..');

interface BenchEntry {
  readonly name: string;
  /** Compiled modules the bench needs; when one is missing the bench is reported as not available. */
  readonly needs: readonly string[];
}

const BENCHES: readonly BenchEntry[] = [
  { name: 'gate-decisions', needs: ['src/cli/main.js'] },
  { name: 'scale', needs: ['src/cli/main.js'] },
  { name: 'harness-e2e', needs: ['src/cli/main.js', 'testbed/harness/index.js'] },
  { name: 'sidecar', needs: ['src/sidecar/server.js', 'testbed/sim/server.js'] },
];

const HELP = `usage: node dist/bench/run-all.js [options]
  --quick          pass --quick to every bench (a short smoke pass; CI may run this)
  --only LIST      run only these benches (${BENCHES.map((b) => b.name).join(', ')})
  --fail-on-miss   exit 1 when any target is missed
`;

function runBench(name: string, args: readonly string[]): Promise<number> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [path.join(HERE, `${name}.js`), ...args], { stdio: 'inherit' });
    child.once('error', () => resolve(1));
    child.once('exit', (code, signal) => resolve(code ?? (signal === null ? 1 : 128)));
  });
}

interface Outcome {
  readonly name: string;
  readonly status: 'ran' | 'failed' | 'not available';
  readonly summary?: BenchSummary;
  readonly seconds: number;
}

async function runOne(b: BenchEntry, quick: boolean, dir: string): Promise<Outcome> {
  const missing = b.needs.filter((m) => !existsSync(path.join(DIST, m)));
  if (missing.length > 0) {
    process.stdout.write(`\n### ${b.name}: not available (missing ${missing.join(', ')}); run npm run build first\n`);
    return { name: b.name, status: 'not available', seconds: 0 };
  }
  const file = path.join(dir, `${b.name}.json`);
  process.stdout.write(`\n### ${b.name}\n`);
  const t0 = performance.now();
  const code = await runBench(b.name, [...(quick ? ['--quick'] : []), '--summary', file]);
  const seconds = (performance.now() - t0) / 1000;
  if (code !== 0 || !existsSync(file)) return { name: b.name, status: 'failed', seconds };
  return { name: b.name, status: 'ran', summary: JSON.parse(readFileSync(file, 'utf8')) as BenchSummary, seconds };
}

function closingTable(outcomes: readonly Outcome[]): { text: string; missed: number } {
  const rows: string[][] = [];
  let missed = 0;
  for (const o of outcomes) {
    if (o.summary === undefined) {
      rows.push([
        o.name,
        '-',
        '-',
        o.status === 'failed' ? 'FAILED (see its output)' : 'not available',
        o.status === 'failed' ? 'FAILED' : 'n/a',
      ]);
      continue;
    }
    for (const t of o.summary.targets) {
      if (t.ok === false) missed += 1;
      rows.push([o.name, t.name, t.target, t.measured, verdict(t.ok)]);
    }
  }
  return { text: formatTable(['bench', 'target', 'wanted', 'measured', 'verdict'], rows), missed };
}

async function main(argv: readonly string[]): Promise<number> {
  const v = parseBenchArgs(argv, { only: { type: 'string' }, 'fail-on-miss': { type: 'boolean', default: false } }, HELP);
  const only =
    v.only === undefined
      ? undefined
      : new Set(
          String(v.only)
            .split(',')
            .map((s) => s.trim()),
        );
  const unknown = [...(only ?? [])].filter((n) => !BENCHES.some((b) => b.name === n));
  if (unknown.length > 0) {
    process.stderr.write(`unknown bench ${unknown.join(', ')}\n\n${HELP}`);
    return 2;
  }
  const quick = v.quick === true;
  process.stdout.write(
    formatEnvironment(describeEnvironment(), `kvgate benchmarks${quick ? ' (--quick: smoke pass, figures are noisy)' : ''}`),
  );
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kvgate-bench-all-'));
  const outcomes: Outcome[] = [];
  try {
    for (const b of BENCHES) if (only === undefined || only.has(b.name)) outcomes.push(await runOne(b, quick, dir));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const { text, missed } = closingTable(outcomes);
  process.stdout.write(`\n### all targets (${outcomes.map((o) => `${o.name} ${o.seconds.toFixed(0)} s`).join(', ')})\n${text}\n`);
  for (const o of outcomes) for (const n of o.summary?.notes ?? []) process.stdout.write(`note (${o.name}): ${n}\n`);
  const failed = outcomes.some((o) => o.status === 'failed');
  return failed || (v['fail-on-miss'] === true && missed > 0) ? 1 : 0;
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (e: unknown) => {
    process.stderr.write(`run-all: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    process.exitCode = 1;
  },
);
