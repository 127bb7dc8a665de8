/**
 * `npm run testbed -- demo [--policy FILE] [--keep-running]`: the README's first command. Starts the full local
 * topology (the built-in two-revision one, or the one an operator's route table describes), sends the sample
 * traffic, prints what happened; exits non-zero when any expected behaviour did not happen, and 1 with `kvgate policy
 * check`'s report when the route table cannot be used.
 *
 * SIGINT and SIGTERM are listened for from the start, not only once it keeps running: an interrupt at any stage stops
 * everything started and removes the run folder (it holds the dev TLS private keys). Before the summary the demo
 * exits 130 / 143, as a shell reports a command ended by that signal: its checks did not run, and 0 would tell a
 * script they passed. After the summary (`--keep-running`, where a signal is the way to stop it, as for the
 * `harness` and `sim` commands, which exit 0) the exit code is the summary's. A second signal gets the default action.
 */
import { parseArgs } from 'node:util';
import { pino } from 'pino';
import { ENVOY_VERSIONS, type EnvoyVersion } from '../../src/envoy/render/settings.js';
import { runDemo, unlessAborted } from '../demo/run-demo.js';
import { runTableDemo } from '../demo/run-table-demo.js';
import { curlOf, suggestRequest } from '../demo/suggested-request.js';
import { callerFor } from '../demo/table-traffic.js';
import { SERVED_MODEL } from '../demo/topology.js';
import { userPath } from './user-path.js';

const HELP = `usage: npm run testbed -- demo [--policy FILE] [--keep-running] [--log-level LEVEL]

Starts simulated vLLM workers (prefill and decode), their sidecars, the gate and the Envoy-faithful harness on
loopback, sends sample traffic and prints a summary. Without --policy: two revisions of llama-3-8b, the harness
running envoy/envoy.yaml.
  --policy FILE              your own route table: checked like kvgate policy check (exit 1 with every issue), then
                             workers per pool from each revision's descriptor, envoy.yaml rendered from the table
                             (kvgate envoy render bootstrap), traffic for its models and tenants. FILE is not changed.
  --max-workers-per-pool N   with --policy: simulated workers per pool at most (default 2)
  --envoy VERSION            with --policy: the Envoy release to render for and play (${ENVOY_VERSIONS.join(' or ')}, default 1.37)
  --keep-running             leave everything up for your own requests (Ctrl-C stops it)
  --log-level LEVEL          component logs to stderr (default: error)

Ctrl-C (SIGINT) or SIGTERM stops it at any stage and removes its temporary folder; before the summary it then exits
130 (SIGINT) or 143 (SIGTERM), after it (--keep-running) 0 when every check passed. A second signal ends it at once.
`;

export interface DemoIo {
  readonly out: (line: string) => void;
  readonly err: (text: string) => void;
  /** Resolves when a kept-running demo should stop (besides SIGINT or SIGTERM, which always stop it). */
  readonly stop?: () => Promise<void>;
}

const OPTIONS = {
  policy: { type: 'string' },
  'max-workers-per-pool': { type: 'string' },
  envoy: { type: 'string' },
  'keep-running': { type: 'boolean' },
  'log-level': { type: 'string' },
  help: { type: 'boolean' },
} as const;

export async function demoCommand(argv: readonly string[], io: DemoIo = defaultIo()): Promise<number> {
  let values: ReturnType<typeof parseArgs<{ options: typeof OPTIONS }>>['values'];
  try {
    ({ values } = parseArgs({ args: [...argv], options: OPTIONS }));
  } catch (e) {
    io.err(`demo: ${(e as Error).message}\n\n${HELP}`);
    return 2;
  }
  if (values.help) {
    io.out(HELP);
    return 0;
  }
  const usage = usageError(values);
  if (usage !== undefined) {
    io.err(`demo: ${usage}\n\n${HELP}`);
    return 2;
  }
  const interrupt = listenForInterrupt();
  try {
    return await runAndReport(values, io, interrupt.signal);
  } catch (e) {
    const sig = interrupt.received();
    if (sig === undefined) throw e;
    io.err(`demo: interrupted (${sig}); everything it started is stopped and its temporary folder removed`);
    return sig === 'SIGINT' ? 130 : 143;
  } finally {
    interrupt.dispose();
  }
}

async function runAndReport(
  values: ReturnType<typeof parseArgs<{ options: typeof OPTIONS }>>['values'],
  io: DemoIo,
  signal: AbortSignal,
): Promise<number> {
  const logger = pino({ level: values['log-level'] ?? 'error' }, pino.destination(2));
  const keepRunning = values['keep-running'] === true;
  let ok: boolean;
  let publicUrl: string;
  let suggestion: { model: string; headers: Record<string, string> };
  let close: () => Promise<void>;
  if (values.policy === undefined) {
    const { summary, topology } = await runDemo({ logger, print: io.out, keepRunning, signal });
    ({ ok } = summary);
    publicUrl = topology.publicUrl;
    suggestion = { model: SERVED_MODEL, headers: { 'x-tenant-id': 'acme', 'x-session-id': 'me' } };
    close = () => topology.close();
  } else {
    const r = await runTableDemo({
      file: userPath(values.policy),
      logger,
      print: io.out,
      keepRunning,
      signal,
      ...(values['max-workers-per-pool'] === undefined ? {} : { maxWorkersPerPool: Number(values['max-workers-per-pool']) }),
      ...(values.envoy === undefined ? {} : { envoyVersion: values.envoy as EnvoyVersion }),
    });
    if (!r.ok) {
      io.err(`demo: the route table cannot be used (nothing was started):\n${r.report}`);
      return 1;
    }
    ok = r.summary.ok;
    publicUrl = r.topology.publicUrl;
    const table = r.topology.gate.policy.current();
    const caller = callerFor(table, [...table.models.values()][0]!);
    suggestion = { model: caller.model, headers: caller.headers('me') };
    close = () => r.topology.close();
  }
  // The summary is out: from here an interrupt ends the run with the summary's exit code.
  try {
    if (keepRunning && !signal.aborted) {
      const s = await unlessAborted(suggestRequest(publicUrl, suggestion.model, suggestion.headers), signal).catch((e: unknown) => {
        if (signal.aborted) return undefined;
        throw e;
      });
      if (s !== undefined) {
        io.out(
          `\nThe topology keeps running. Try (sent once already; it answered ${JSON.stringify(s.text)}):\n  ${curlOf(s)}\nCtrl-C to stop.`,
        );
        await Promise.race([untilAborted(signal), ...(io.stop === undefined ? [] : [io.stop()])]);
      }
    }
  } finally {
    await close();
  }
  return ok ? 0 : 1;
}

function usageError(v: { policy?: string; 'max-workers-per-pool'?: string; envoy?: string }): string | undefined {
  const n = v['max-workers-per-pool'];
  if (n !== undefined && !(/^\d+$/.test(n) && Number(n) >= 1 && Number(n) <= 16))
    return `--max-workers-per-pool must be 1-16, got ${JSON.stringify(n)}`;
  if (v.envoy !== undefined && !ENVOY_VERSIONS.includes(v.envoy as EnvoyVersion))
    return `--envoy must be ${ENVOY_VERSIONS.join(' or ')}, got ${JSON.stringify(v.envoy)}`;
  if (v.policy === undefined && (n !== undefined || v.envoy !== undefined)) return '--max-workers-per-pool and --envoy need --policy FILE';
  return undefined;
}

/**
 * The first SIGINT or SIGTERM aborts `signal` (and is remembered); both listeners are then removed, so a second
 * signal gets the default action (the process ends at once) should stopping get stuck.
 */
function listenForInterrupt(): { signal: AbortSignal; received: () => NodeJS.Signals | undefined; dispose: () => void } {
  const ac = new AbortController();
  let received: NodeJS.Signals | undefined;
  const on = (sig: NodeJS.Signals) => () => {
    dispose();
    received = sig;
    ac.abort(new Error(`interrupted by ${sig}`));
  };
  const onInt = on('SIGINT');
  const onTerm = on('SIGTERM');
  const dispose = () => {
    process.off('SIGINT', onInt);
    process.off('SIGTERM', onTerm);
  };
  process.on('SIGINT', onInt);
  process.on('SIGTERM', onTerm);
  return { signal: ac.signal, received: () => received, dispose };
}

function untilAborted(signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) resolve();
    else signal.addEventListener('abort', () => resolve(), { once: true });
  });
}

function defaultIo(): DemoIo {
  return { out: (l) => process.stdout.write(`${l}\n`), err: (t) => process.stderr.write(t.endsWith('\n') ? t : `${t}\n`) };
}
