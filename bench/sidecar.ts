/**
 * Bench: what kvgate's sidecars add to a disaggregated (P/D) request, against the same P/D flow without them.
 *
 * Two simulated vLLM workers (prefill P, decode D; same descriptor; 10 ms per generated token) serve both paths:
 *   direct:  the client drives P then D itself, exactly as vLLM's toy P/D proxy does (P: max_tokens 1,
 *            do_remote_decode; D: the original request plus P's kv_transfer_params);
 *   kvgate:  the client sends one request, with a gate-minted contract, to the decode sidecar, which runs the
 *            prefill leg through the prefill sidecar (direct mode), counts the prompt on D, verifies P's signed
 *            attestation, then relays D's answer.
 * Streaming and non-streaming, at concurrency 1 and 8, rounds interleaved. Reported: time to first token and
 * tokens per second per request, and kvgate's overhead in ms of TTFT and % of tokens/s.
 *
 * Run: npm run build && node dist/bench/sidecar.js [--quick] [--tokens 32] [--concurrency 1,8]
 */
import { pathToFileURL } from 'node:url';
import { createDevKeyRing } from '../src/contract/keys.js';
import { bound, contractFor } from '../src/sidecar/testing.js';
import { choiceFlag, intFlag, intListFlag, parseBenchArgs, writeSummary, type TargetResult } from './lib/args.js';
import { describeEnvironment, formatEnvironment } from './lib/bench-env.js';
import { postCompletion, type CompletionTiming } from './lib/completion-client.js';
import { startStack, stopStack, type Stack } from './lib/pd-processes.js';
import { TOY_PROXY_PREFILL_KV } from '../testbed/sim/testing.js';
import { createProfileDir } from './lib/profile-dir.js';
import { DEFAULT_PD_LATENCY, PD_KEY_SEED, PD_MODEL } from './lib/pd-stack.js';
import { measureHopFloor } from './lib/hop-floor.js';
import { fmt, fmtInt, formatTable, median, summarize, verdict } from './lib/stats.js';

const HELP = `usage: node dist/bench/sidecar.js [options]
  --quick              concurrency 1 only, one round of 3 requests per path and mode (smoke pass)
  --concurrency LIST   concurrent requests per level (default 1,8)
  --rounds N           interleaved rounds per level, mode and path (default 3)
  --tokens N           completion tokens per request (ignore_eos; default 32)
  --decode-ms N        simulated decode time per token (default ${DEFAULT_PD_LATENCY.decodeMsPerToken})
  --on-transfer-failure fail|recompute
                       the decode sidecar's onTransferFailure (default fail, the product's default). Under
                       recompute the first output is not held for the failed-transfer read, so the run shows what
                       that read costs; the targets are judged on the default
  --warmup N           requests per path before measuring, half streamed, at concurrency 4 with 4 tokens
                       each (default 200; 0 for a cold process): the figures are a long-running sidecar's,
                       with its request path compiled by V8, not a fresh process's first requests
  --profile            run both sidecars under node --cpu-prof and print what is hot in each afterwards
  --summary FILE       write target verdicts as JSON (used by run-all)
`;

const PROMPT = 'Summarise the following incident report for an on-call engineer in three bullet points. '.repeat(12);
/** Issue 17: TTFT overhead p50 at most 2 ms at concurrency 1 and 5 ms at concurrency 8 (and above). */
const targetTtftMs = (c: number): number => (c <= 1 ? 2 : 5);
const TARGET_TOKENS_PCT = 5;

type PathName = 'direct' | 'kvgate';

function requestBody(i: number, tokens: number, stream: boolean): Record<string, unknown> {
  // A distinct prompt per request: no prefix-cache hits, so every request really prefills and pulls its KV.
  return {
    model: PD_MODEL,
    prompt: `Request ${i}. ${PROMPT}`,
    max_tokens: tokens,
    ignore_eos: true,
    temperature: 0,
    stream,
    ...(stream ? { stream_options: { include_usage: true } } : {}),
  };
}

/** vLLM's toy proxy: P (max_tokens 1, do_remote_decode, not streamed), then D with P's kv_transfer_params. */
async function viaDirect(stack: Stack, id: string, body: Record<string, unknown>): Promise<CompletionTiming> {
  const t0 = performance.now();
  const pBody: Record<string, unknown> = { ...body, stream: false, max_tokens: 1, kv_transfer_params: TOY_PROXY_PREFILL_KV };
  delete pBody['stream_options'];
  const p = await postCompletion(`${stack.prefillSim.info.url}/v1/completions`, pBody, { 'x-request-id': id });
  if (p.error !== undefined) return p;
  const dStart = performance.now();
  const d = await postCompletion(
    `${stack.decodeSim.info.url}/v1/completions`,
    { ...body, kv_transfer_params: p.json?.['kv_transfer_params'] ?? null },
    { 'x-request-id': id },
  );
  return { ...d, totalMs: performance.now() - t0, ...(d.ttftMs === undefined ? {} : { ttftMs: dStart - t0 + d.ttftMs }) };
}

const keys = createDevKeyRing(PD_KEY_SEED);

/** One request to the decode sidecar with the headers the gate stamps (contract minted now, as the gate does). */
function viaKvgate(stack: Stack, id: string, body: Record<string, unknown>): Promise<CompletionTiming> {
  const contract = contractFor(
    stack.decodeSidecar.info.fingerprint,
    stack.prefillSidecar.info.endpoint,
    { requestId: id, model: PD_MODEL },
    Date.now(),
  );
  // As the gate forwards it: cache_salt written into the body, and the contract bound to that body.
  const [salted, headers] = bound(contract, body, keys);
  return postCompletion(`${stack.decodeSidecar.info.url}/v1/completions`, salted, headers);
}

/**
 * The prefill leg alone, to split the TTFT overhead between the two sidecars: the same prefill request (max_tokens
 * 1, do_remote_decode) straight to P and through the prefill sidecar (contract verified, attestation minted),
 * alternating, one at a time. Returns the p50 of each.
 */
async function prefillLegAlone(stack: Stack, n: number, ids: { n: number }): Promise<{ direct: number; sidecar: number; errors: number }> {
  const times = { direct: [] as number[], sidecar: [] as number[] };
  let errors = 0;
  for (let k = 0; k < 2 * n; k++) {
    const i = ids.n++;
    const id = `bench-prefill-${i}`;
    const body = { ...requestBody(i, 1, false), kv_transfer_params: TOY_PROXY_PREFILL_KV };
    const viaSidecar = k % 2 === 1;
    const contract = contractFor(
      stack.decodeSidecar.info.fingerprint,
      stack.prefillSidecar.info.endpoint,
      { requestId: id, model: PD_MODEL },
      Date.now(),
    );
    const r = viaSidecar
      ? await postCompletion(`${stack.prefillSidecar.info.url}/v1/completions`, ...bound(contract, body, keys))
      : await postCompletion(`${stack.prefillSim.info.url}/v1/completions`, body, { 'x-request-id': id });
    if (r.error !== undefined) errors += 1;
    else times[viaSidecar ? 'sidecar' : 'direct'].push(r.totalMs);
  }
  return { direct: median(times.direct), sidecar: median(times.sidecar), errors };
}

interface Sample extends CompletionTiming {
  readonly path: PathName;
}

async function runRound(
  stack: Stack,
  pathName: PathName,
  count: number,
  concurrency: number,
  tokens: number,
  stream: boolean,
  ids: { n: number },
): Promise<Sample[]> {
  const out: Sample[] = [];
  let started = 0;
  const worker = async () => {
    while (started < count) {
      started += 1;
      const i = ids.n++;
      const id = `bench-${pathName}-${i}`;
      const body = requestBody(i, tokens, stream);
      const r = await (pathName === 'direct' ? viaDirect(stack, id, body) : viaKvgate(stack, id, body));
      out.push({ ...r, path: pathName });
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return out;
}

/**
 * Warm-up before anything is measured: `count` requests per path, alternating streamed and not, at concurrency 4
 * with 4 tokens each, so both sidecars' request paths (and the workers') have been compiled by V8 as a long-running
 * process's are. Two warm-up requests, as before, left the first measured cell paying for compilation (its sidecar CPU
 * per request was twice the next cell's).
 */
async function warmUp(stack: Stack, count: number, ids: { n: number }): Promise<void> {
  for (let done = 0; done < count; ) {
    const n = Math.min(4, count - done);
    const stream = done % 8 === 0;
    for (const p of ['direct', 'kvgate'] as const) await runRound(stack, p, n, 4, 4, stream, ids);
    done += n;
  }
}

async function blocksPulled(stack: Stack): Promise<number> {
  try {
    const text = await (await fetch(`${stack.decodeSim.info.url}/metrics`)).text();
    const line = text.split('\n').find((l) => l.startsWith('kvgate_sim_kv_blocks_pulled_total'));
    return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(' ') + 1));
  } catch {
    return Number.NaN;
  }
}

interface Figures {
  readonly ok: number;
  readonly errors: number;
  readonly firstError: string | undefined;
  readonly wrongTokens: number;
  readonly ttftP50: number;
  readonly ttftP99: number;
  readonly totalP50: number;
  readonly totalP99: number;
  /** Median per-request tokens/s: the decode rate between first and last token when streamed, else tokens / total. */
  readonly tokensPerS: number;
  readonly blocksPerRequest: number;
  /** CPU time of both sidecar processes per request (kvgate path only; 0 on the direct path). */
  readonly sidecarCpuMsPerRequest: number;
}

function figuresOf(samples: readonly Sample[], tokens: number, blocks: number, sidecarCpuMs: number): Figures {
  const good = samples.filter((s) => s.error === undefined);
  const rate = (s: Sample) =>
    s.decodeMs !== undefined && s.decodeMs > 0 ? ((s.tokens - 1) * 1000) / s.decodeMs : (s.tokens * 1000) / s.totalMs;
  const ttft = summarize(good.flatMap((s) => (s.ttftMs === undefined ? [] : [s.ttftMs])));
  const total = summarize(good.map((s) => s.totalMs));
  return {
    ok: good.length,
    errors: samples.length - good.length,
    firstError: samples.find((s) => s.error !== undefined)?.error,
    wrongTokens: good.filter((s) => s.tokens !== tokens).length,
    ttftP50: ttft.p50,
    ttftP99: ttft.p99,
    totalP50: total.p50,
    totalP99: total.p99,
    tokensPerS: median(good.map(rate)),
    blocksPerRequest: blocks / Math.max(1, samples.length),
    sidecarCpuMsPerRequest: sidecarCpuMs / Math.max(1, samples.length),
  };
}

interface Cell {
  readonly stream: boolean;
  readonly c: number;
  readonly direct: Figures;
  readonly kvgate: Figures;
}

interface Settings {
  readonly quick: boolean;
  readonly levels: number[];
  readonly rounds: number;
  readonly tokens: number;
  readonly decodeMs: number;
  readonly onTransferFailure: 'fail' | 'recompute';
  readonly warmup: number;
  readonly profile: boolean;
  readonly summary: string | undefined;
}

async function measureCell(stack: Stack, s: Settings, stream: boolean, c: number, ids: { n: number }): Promise<Cell> {
  const samples: Record<PathName, Sample[]> = { direct: [], kvgate: [] };
  const blocks: Record<PathName, number> = { direct: 0, kvgate: 0 };
  const cpu: Record<PathName, number> = { direct: 0, kvgate: 0 };
  const sidecarCpu = () => stack.prefillSidecar.cpuMs() + stack.decodeSidecar.cpuMs();
  const perRound = s.quick ? 3 : Math.max(6, 2 * c);
  for (let r = 0; r < s.rounds; r++) {
    for (const p of r % 2 === 0 ? (['direct', 'kvgate'] as const) : (['kvgate', 'direct'] as const)) {
      const before = await blocksPulled(stack);
      const cpu0 = sidecarCpu();
      samples[p].push(...(await runRound(stack, p, perRound, c, s.tokens, stream, ids)));
      cpu[p] += sidecarCpu() - cpu0;
      blocks[p] += (await blocksPulled(stack)) - before;
    }
  }
  return {
    stream,
    c,
    direct: figuresOf(samples.direct, s.tokens, blocks.direct, cpu.direct),
    kvgate: figuresOf(samples.kvgate, s.tokens, blocks.kvgate, cpu.kvgate),
  };
}

function cellRows(cells: readonly Cell[]): string[][] {
  return cells.flatMap((cell) =>
    (['direct', 'kvgate'] as const).map((p) => {
      const f = cell[p];
      return [
        `${cell.stream ? 'stream' : 'non-stream'} c=${cell.c} ${p}`,
        fmtInt(f.ok),
        cell.stream ? fmt(f.ttftP50, 2) : '-',
        cell.stream ? fmt(f.ttftP99, 2) : '-',
        fmt(f.totalP50, 1),
        fmt(f.totalP99, 1),
        fmt(f.tokensPerS, 1),
        fmt(f.blocksPerRequest, 1),
        p === 'kvgate' ? fmt(f.sidecarCpuMsPerRequest, 2) : '-',
        fmtInt(f.errors + f.wrongTokens),
      ];
    }),
  );
}

function targetsOf(cells: readonly Cell[]): TargetResult[] {
  const out: TargetResult[] = [];
  for (const cell of cells) {
    const clean = cell.direct.errors + cell.kvgate.errors + cell.direct.wrongTokens + cell.kvgate.wrongTokens === 0;
    const label = `${cell.stream ? 'streaming' : 'non-streaming'} c=${cell.c}`;
    const pct = (100 * (cell.direct.tokensPerS - cell.kvgate.tokensPerS)) / cell.direct.tokensPerS;
    out.push({
      name: `tokens/s overhead, ${label}`,
      target: `<= ${TARGET_TOKENS_PCT}%`,
      measured: `${fmt(pct, 1)}% (${fmt(cell.kvgate.tokensPerS, 1)} vs ${fmt(cell.direct.tokensPerS, 1)} tok/s)`,
      ok: clean ? pct <= TARGET_TOKENS_PCT : undefined,
    });
    if (cell.stream) {
      const ms = cell.kvgate.ttftP50 - cell.direct.ttftP50;
      out.push({
        name: `TTFT overhead (p50), ${label}`,
        target: `<= ${targetTtftMs(cell.c)} ms`,
        measured: `${fmt(ms, 2)} ms (${fmt(cell.kvgate.ttftP50, 2)} vs ${fmt(cell.direct.ttftP50, 2)} ms)`,
        ok: clean ? ms <= targetTtftMs(cell.c) : undefined,
      });
    }
  }
  return out;
}

function settingsFrom(argv: readonly string[]): Settings {
  const v = parseBenchArgs(
    argv,
    {
      concurrency: { type: 'string' },
      rounds: { type: 'string' },
      tokens: { type: 'string' },
      'decode-ms': { type: 'string' },
      'on-transfer-failure': { type: 'string' },
      warmup: { type: 'string' },
      profile: { type: 'boolean', default: false },
    },
    HELP,
  );
  const quick = v.quick === true;
  return {
    quick,
    levels: intListFlag(v.concurrency, 'concurrency', quick ? [1] : [1, 8]),
    rounds: intFlag(v.rounds, 'rounds', quick ? 1 : 3),
    tokens: intFlag(v.tokens, 'tokens', 32),
    decodeMs: intFlag(v['decode-ms'], 'decode-ms', DEFAULT_PD_LATENCY.decodeMsPerToken),
    onTransferFailure: choiceFlag(v['on-transfer-failure'], 'on-transfer-failure', ['fail', 'recompute'] as const),
    warmup: intFlag(v.warmup, 'warmup', quick ? 4 : 200, 0),
    profile: v.profile === true,
    summary: v.summary,
  };
}

export async function main(argv: readonly string[]): Promise<void> {
  const s = settingsFrom(argv);
  const env = describeEnvironment();
  process.stdout.write(formatEnvironment(env, 'sidecar: P/D through kvgate sidecars vs P/D straight to the simulated workers'));
  const lat = { ...DEFAULT_PD_LATENCY, decodeMsPerToken: s.decodeMs };
  process.stdout.write(
    `sim latency: decode ${lat.decodeMsPerToken} ms/token, prefill ${lat.prefillMsPerToken} ms/prompt token, KV pull ${lat.transferMsPerBlock} ms/block, handshake ${lat.handshakeMs} ms; ${s.tokens} tokens per request (ignore_eos)\n`,
  );
  process.stdout.write(
    `placement: unpinned; load generator, two simulated workers and two sidecars, each its own process, sharing ${env.cores} cores\n`,
  );
  process.stdout.write(
    `decode sidecar: onTransferFailure: ${s.onTransferFailure}${s.onTransferFailure === 'fail' ? ' (the default: the first output waits for the failed-transfer read)' : ' (NOT the default: the first output is not held for the failed-transfer read; targets are judged on the default)'}\n`,
  );
  const profiles = s.profile ? { prefill: createProfileDir(), decode: createProfileDir() } : undefined;
  const stack = await startStack(s.decodeMs, s.onTransferFailure, profiles);
  try {
    const ids = { n: 0 };
    await warmUp(stack, s.warmup, ids);
    const cells: Cell[] = [];
    for (const stream of [true, false]) {
      for (const c of s.levels) {
        cells.push(await measureCell(stack, s, stream, c, ids));
        process.stderr.write(`  ${stream ? 'stream' : 'non-stream'} c=${c} done\n`);
      }
    }
    process.stdout.write(
      `\n${s.rounds} interleaved rounds per cell; tok/s = median per request (streamed: between first and last token; else tokens / total)\n`,
    );
    process.stdout.write(
      `${formatTable(['mode / path', 'requests', 'TTFT p50', 'TTFT p99', 'total p50', 'total p99', 'tok/s', 'KV blocks/req', 'sidecar CPU ms/req', 'bad'], cellRows(cells))}\n`,
    );
    for (const cell of cells) {
      for (const p of ['direct', 'kvgate'] as const) {
        const f = cell[p];
        if (f.errors + f.wrongTokens > 0)
          process.stdout.write(
            `WARNING ${cell.stream ? 'stream' : 'non-stream'} c=${cell.c} ${p}: ${f.errors} errors, ${f.wrongTokens} wrong token counts (${f.firstError ?? ''})\n`,
          );
        if (f.ok > 0 && !(f.blocksPerRequest > 0))
          process.stdout.write(
            `WARNING ${cell.stream ? 'stream' : 'non-stream'} c=${cell.c} ${p}: D pulled no KV blocks; the request was not disaggregated\n`,
          );
      }
    }
    const leg = await prefillLegAlone(stack, s.quick ? 3 : 12, ids);
    process.stdout.write(
      `\nprefill leg alone (c=1, alternating): P direct p50 ${fmt(leg.direct, 2)} ms, via the prefill sidecar p50 ${fmt(leg.sidecar, 2)} ms: the prefill sidecar adds ${fmt(leg.sidecar - leg.direct, 2)} ms of the TTFT overhead; the decode sidecar the rest${leg.errors > 0 ? ` (${leg.errors} errors)` : ''}\n`,
    );
    const hop = await measureHopFloor(s.quick ? 10 : 60);
    const held = s.onTransferFailure === 'fail';
    const floor = (held ? 3 : 2) * hop.idleMs;
    const hopLine =
      `one hop on this machine (HTTP/1.1 keep-alive round trip between two Node processes, 1.1 KB body): p50 ${fmt(hop.hotMs, 3)} ms ` +
      `back to back, ${fmt(hop.idleMs, 3)} ms after ${hop.gapMs} ms idle. Before its first token a request through kvgate makes ${held ? 'three' : 'two'} ` +
      `round trips the direct path does not (client -> decode sidecar, decode sidecar -> prefill sidecar${held ? ', the failed-transfer read under onTransferFailure: fail' : ''}): ` +
      `~${fmt(floor, 2)} ms of the c=1 TTFT overhead before any check runs`;
    process.stdout.write(`\n${hopLine}\n`);
    const targets = targetsOf(cells);
    process.stdout.write(
      `\n${formatTable(
        ['target', 'wanted', 'measured', 'verdict'],
        targets.map((t) => [t.name, t.target, t.measured, verdict(t.ok)]),
      )}\n`,
    );
    writeSummary(s.summary, {
      bench: 'sidecar',
      quick: s.quick,
      targets,
      notes: [`simulated decode ${lat.decodeMsPerToken} ms/token`, hopLine],
    });
  } finally {
    await stopStack(stack);
  }
  for (const role of ['decode', 'prefill'] as const) {
    if (profiles !== undefined)
      process.stdout.write(`\nprofile of the ${role} sidecar over the whole run (node --cpu-prof):\n${profiles[role].summarize(15)}\n`);
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  main(process.argv.slice(2)).catch((e: unknown) => {
    process.stderr.write(`sidecar: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    process.exitCode = 1;
  });
}
