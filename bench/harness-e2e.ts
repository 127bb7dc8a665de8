/**
 * Bench: requests per second and latency end to end, client -> Envoy-faithful harness -> upstream, with kvgate's
 * gate as the harness's ext_proc server against the no-op ext_proc server, in the same run, rounds interleaved.
 *
 * Both harness instances load the shipped `envoy/envoy.yaml` (public listener: ext_proc with BUFFERED request
 * bodies, route by `x-kvgate-decode-cluster`, ORIGINAL_DST pool clusters by `x-kvgate-decode-endpoint`). The gate
 * stamps those headers; requests to the no-op instance carry them from the client, so both take the same route.
 * Upstreams are echo servers on distinct loopback addresses (127.0.0.2 ...), the gate's real endpoints.
 *
 * The harness is JavaScript standing in for Envoy (C++), so absolute figures are the harness's; the difference
 * between the two columns is what kvgate adds end to end.
 *
 * Run: npm run build && node dist/bench/harness-e2e.js [--quick] [--concurrency 1,8,64] [--round-ms 2000]
 */
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { intFlag, intListFlag, parseBenchArgs, writeSummary, type TargetResult } from './lib/args.js';
import { describeEnvironment, formatEnvironment } from './lib/bench-env.js';
import { jsonLine, spawnGate, spawnNodeServer, spawnNoopServer, type ChildServer } from './lib/child-server.js';
import { createHttpLoadTarget, type HttpBenchRequest, type HttpLoadRun, type HttpLoadTarget } from './lib/http-load.js';
import { benchRequest } from './lib/requests.js';
import { fmt, fmtInt, formatTable, summarize, verdict } from './lib/stats.js';
import { benchTableValue } from './lib/tables.js';

const HELP = `usage: node dist/bench/harness-e2e.js [options]
  --quick              one short round per level at concurrency 1 and 8 (smoke pass, noisy figures)
  --concurrency LIST   concurrent HTTP requests per level (default 1,8,64)
  --round-ms N         one measured round per path (default 2000)
  --rounds N           interleaved rounds per level and path (default 3)
  --summary FILE       write target verdicts as JSON (used by run-all)
`;

const LIB = path.join(path.dirname(fileURLToPath(import.meta.url)), 'lib');
const TARGET_P99_RATIO = 1.5;
/** Loopback addresses of the echo upstreams: 2 endpoints per pool x 4 pools. */
const HOSTS = Array.from({ length: 8 }, (_, i) => `127.0.0.${i + 2}`);

/** The bench table with the shipped envoy.yaml's cluster names and the echo upstreams as endpoints. */
export function e2eTableValue(echoPort: number): Record<string, unknown> {
  const value = benchTableValue({ models: 1, endpointsPerPool: 2, maxInFlightPerEndpoint: 10_000 });
  let next = 0;
  const pools = (value['pools'] as Record<string, unknown>[]).map((p) => {
    const [revision, role] = [String(p['revision']), String(p['role'])];
    return {
      ...p,
      cluster: `${revision.endsWith('-a') ? 'a' : 'b'}_${role}`,
      endpoints: [0, 1].map(() => ({ address: `${HOSTS[next++]}:${echoPort}`, unverified: true })),
    };
  });
  return { ...value, pools };
}

function e2eRequest(i: number, direct: { decodeEndpoints: readonly string[] } | undefined): HttpBenchRequest {
  const r = benchRequest(i, 1, direct === undefined ? 'e2e-g' : 'e2e-n');
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    'x-tenant-id': r.headers['x-tenant-id']!,
    'x-session-id': r.headers['x-session-id']!,
  };
  if (direct !== undefined) {
    // The no-op server stamps nothing: the client names the route the gate would have chosen.
    headers['x-kvgate-decode-cluster'] = 'a_decode';
    headers['x-kvgate-decode-endpoint'] = direct.decodeEndpoints[i % direct.decodeEndpoints.length]!;
  }
  return { path: '/v1/completions', headers, body: r.body };
}

interface Stack {
  readonly echo: ChildServer;
  readonly gate: ChildServer;
  readonly noop: ChildServer;
  readonly harness: ChildServer<{ port: number; gate: string; noop: string }>;
}

async function startStack(): Promise<Stack> {
  const started: ChildServer<any>[] = [];
  try {
    const echo = await spawnNodeServer(
      'echo upstreams',
      [path.join(LIB, 'echo-main.js'), ...HOSTS],
      {},
      jsonLine((v) => (typeof v['port'] === 'number' ? { port: v['port'] } : undefined)),
    );
    started.push(echo);
    const gate = await spawnGate(e2eTableValue(echo.port));
    started.push(gate);
    const noop = await spawnNoopServer();
    started.push(noop);
    const harness = await spawnNodeServer(
      'harness',
      [path.join(LIB, 'harness-main.js'), JSON.stringify({ gatePort: gate.port, noopPort: noop.port })],
      {},
      jsonLine((v) =>
        typeof v['port'] === 'number' && typeof v['gate'] === 'string' && typeof v['noop'] === 'string'
          ? { port: v['port'], gate: v['gate'], noop: v['noop'] }
          : undefined,
      ),
    );
    return { echo, gate, noop, harness };
  } catch (e) {
    await Promise.all(started.map((s) => s.stop()));
    throw e;
  }
}

function targetsFor(stack: Stack): { gate: HttpLoadTarget; noop: HttpLoadTarget } {
  const decodeEndpoints = [`${HOSTS[2]}:${stack.echo.port}`, `${HOSTS[3]}:${stack.echo.port}`]; // pool a-decode
  const upstreamAnswered = (res: { status: number; headers: Record<string, unknown>; body: Buffer }) =>
    res.status !== 200
      ? `status ${res.status}: ${String(res.headers['x-envoy-details'] ?? '')} ${res.body.toString().slice(0, 200)}`
      : res.headers['x-upstream'] === undefined
        ? 'no x-upstream header (not answered by an echo upstream)'
        : undefined;
  return {
    gate: createHttpLoadTarget({
      baseUrl: stack.harness.info.gate,
      request: (i) => e2eRequest(i, undefined),
      check: (res) =>
        upstreamAnswered(res) ?? (res.headers['x-kvgate-group'] === undefined ? 'no x-kvgate-group response header' : undefined),
    }),
    noop: createHttpLoadTarget({
      baseUrl: stack.harness.info.noop,
      request: (i) => e2eRequest(i, { decodeEndpoints }),
      check: upstreamAnswered,
    }),
  };
}

interface Figures {
  readonly good: number;
  readonly bad: number;
  readonly firstBad: string | undefined;
  readonly perSecond: number;
  readonly p50: number;
  readonly p99: number;
}

function figuresOf(runs: readonly HttpLoadRun[]): Figures {
  const lat = summarize(runs.flatMap((r) => Array.from(r.latenciesMs)));
  const elapsed = runs.reduce((a, r) => a + r.elapsedMs, 0);
  return {
    good: lat.count,
    bad: runs.reduce((a, r) => a + r.bad, 0),
    firstBad: runs.find((r) => r.firstBad)?.firstBad,
    perSecond: (lat.count * 1000) / elapsed,
    p50: lat.p50,
    p99: lat.p99,
  };
}

async function measure(
  targets: { gate: HttpLoadTarget; noop: HttpLoadTarget },
  levels: readonly number[],
  rounds: number,
  roundMs: number,
) {
  const out: { c: number; gate: Figures; noop: Figures }[] = [];
  for (const c of levels) {
    const runs = { gate: [] as HttpLoadRun[], noop: [] as HttpLoadRun[] };
    for (let r = 0; r < rounds; r++) {
      for (const k of r % 2 === 0 ? (['gate', 'noop'] as const) : (['noop', 'gate'] as const))
        runs[k].push(await targets[k].run({ concurrency: c, durationMs: roundMs }));
    }
    out.push({ c, gate: figuresOf(runs.gate), noop: figuresOf(runs.noop) });
    process.stderr.write(`  c=${c} done\n`);
  }
  return out;
}

export async function main(argv: readonly string[]): Promise<void> {
  const v = parseBenchArgs(argv, { concurrency: { type: 'string' }, 'round-ms': { type: 'string' }, rounds: { type: 'string' } }, HELP);
  const quick = v.quick === true;
  const levels = intListFlag(v.concurrency, 'concurrency', quick ? [1, 8] : [1, 8, 64]);
  const roundMs = intFlag(v['round-ms'], 'round-ms', quick ? 500 : 2000);
  const rounds = intFlag(v.rounds, 'rounds', quick ? 1 : 3);
  const env = describeEnvironment();
  process.stdout.write(
    formatEnvironment(env, 'harness-e2e: client -> harness (envoy/envoy.yaml) -> upstream, kvgate gate vs no-op ext_proc'),
  );
  process.stdout.write(
    `placement: unpinned; load generator, harness, gate or no-op, and echo upstreams are separate processes sharing ${env.cores} cores\n`,
  );
  const stack = await startStack();
  const targets = targetsFor(stack);
  try {
    for (const k of ['gate', 'noop'] as const) await targets[k].run({ concurrency: 8, durationMs: quick ? 300 : 1000 }); // warm-up
    const figures = await measure(targets, levels, rounds, roundMs);
    const rows = figures.flatMap(({ c, gate, noop }) => [
      [
        `c=${c} via kvgate`,
        fmtInt(gate.good),
        fmtInt(gate.perSecond),
        fmt(gate.p50, 3),
        fmt(gate.p99, 3),
        fmt(gate.p99 / noop.p99),
        fmtInt(gate.bad),
      ],
      [`c=${c} via no-op`, fmtInt(noop.good), fmtInt(noop.perSecond), fmt(noop.p50, 3), fmt(noop.p99, 3), '1.00', fmtInt(noop.bad)],
    ]);
    process.stdout.write(
      `\nclosed loop, HTTP/1.1 keep-alive; POST /v1/completions (${benchRequest(0).body.length} B); ${rounds} interleaved rounds x ${roundMs} ms per level and path\n`,
    );
    process.stdout.write(`${formatTable(['path', 'requests', 'req/s', 'p50 ms', 'p99 ms', 'p99 ratio', 'bad'], rows)}\n`);
    for (const f of figures.filter((x) => x.gate.bad + x.noop.bad > 0))
      process.stdout.write(
        `WARNING c=${f.c}: bad responses gate ${f.gate.bad} (${f.gate.firstBad ?? ''}), no-op ${f.noop.bad} (${f.noop.firstBad ?? ''})\n`,
      );
    const targetsMet: TargetResult[] = figures.map((f) => ({
      name: `end-to-end p99 via kvgate / via no-op at c=${f.c}`,
      target: `<= ${TARGET_P99_RATIO}x`,
      measured: `${fmt(f.gate.p99 / f.noop.p99)}x (${fmt(f.gate.p99, 2)} vs ${fmt(f.noop.p99, 2)} ms)`,
      ok: f.gate.bad === 0 ? f.gate.p99 / f.noop.p99 <= TARGET_P99_RATIO : undefined,
    }));
    process.stdout.write(
      `\n${formatTable(
        ['target', 'wanted', 'measured', 'verdict'],
        targetsMet.map((t) => [t.name, t.target, t.measured, verdict(t.ok)]),
      )}\n`,
    );
    writeSummary(v.summary, {
      bench: 'harness-e2e',
      quick,
      targets: targetsMet,
      notes: ["the harness is JavaScript standing in for Envoy; absolute figures are the harness's"],
    });
  } finally {
    targets.gate.close();
    targets.noop.close();
    await Promise.all([stack.harness.stop(), stack.gate.stop(), stack.noop.stop(), stack.echo.stop()]);
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  main(process.argv.slice(2)).catch((e: unknown) => {
    process.stderr.write(`harness-e2e: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    process.exitCode = 1;
  });
}
