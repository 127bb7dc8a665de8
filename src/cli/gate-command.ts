/**
 * `kvgate gate --config gate.yaml`: validate everything, then serve ext_proc until SIGTERM or SIGINT (drain; a second
 * signal closes at once).
 * SIGHUP reloads the route table and a `keys.file` key ring (both are also reloaded when their file changes).
 */
import { access, constants } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { pino } from 'pino';
import { createTracing } from '../tracing.js';
import { formatIssues } from '../config/issues.js';
import { keyRingFrom } from '../contract/key-source.js';
import { loadGateConfig, type GateConfig } from '../gate/config.js';
import { readErrorReason } from '../config/read-text.js';
import { loadRouteTable } from '../policy/load.js';
import { startGate, type RunningGate } from '../gate/gate.js';

const HELP = `usage: kvgate gate --config gate.yaml

Runs the ext_proc gate (gRPC, ${'`'}envoy.service.ext_proc.v3.ExternalProcessor${'`'} + grpc.health.v1).
  --config FILE   gate settings (YAML or JSON); see README "Configuration reference"
Signals: SIGTERM or SIGINT drains (NOT_SERVING, streams in flight finish within drain.graceMs, exit 0); a second
SIGTERM or SIGINT closes at once (decided streams end OK and their requests go on; undecided ones are cancelled,
Envoy answers them 500, one audit line each); SIGHUP reloads the route table and the key file (keys.file; keys.env
and keys.devSeed are read at start only). Both are also reloaded when their file changes.
`;

/** Where the command gets its signals, and who hears that it serves (tests drive it in-process). */
export interface GateCommandIo {
  readonly signals: Pick<NodeJS.Process, 'on' | 'off'>;
  readonly onReady?: (gate: RunningGate) => void;
}

export async function gateCommand(argv: readonly string[], io: GateCommandIo = { signals: process }): Promise<number> {
  const { values } = parseArgs({ args: [...argv], options: { config: { type: 'string' }, help: { type: 'boolean' } } });
  if (values.help) {
    process.stdout.write(HELP);
    return 0;
  }
  if (values.config === undefined) {
    process.stderr.write(`kvgate gate: --config is required\n\n${HELP}`);
    return 2;
  }
  const loaded = await loadGateConfig(values.config);
  if (!loaded.ok) {
    process.stderr.write(`kvgate gate: the configuration has problems; nothing was started:\n${formatIssues(loaded.error)}\n`);
    return 2;
  }
  const config = loaded.value;
  const keys = keyRingFrom(config.keys, process.env);
  const problems = await preflight(config, keys.ok ? undefined : keys.error);
  if (problems.length > 0 || !keys.ok) {
    process.stderr.write(`kvgate gate: cannot start; nothing was started:\n${problems.join('\n')}\n`);
    return 2;
  }
  const logger = pino({ level: config.log.level, base: { component: 'gate' } });
  const tracing = await createTracing(config.tracing, 'gate');
  let gate;
  try {
    gate = await startGate(config, { logger, keys: keys.value, tracer: tracing.tracer });
  } catch (e) {
    process.stderr.write(`kvgate gate: ${(e as Error).message}\n`);
    return 2;
  }
  const running = gate;
  // Both files: an operator who sends SIGHUP after editing either expects it applied. The key reload is synchronous
  // and never throws for a bad file (it keeps the ring in use and says why).
  const onHup = (): void => {
    running.policy.reload('SIGHUP').catch((e: unknown) => logger.error({ err: e }, 'route table reload failed'));
    try {
      running.keys.reload('SIGHUP');
    } catch (e) {
      logger.error({ err: e }, 'key ring reload failed');
    }
  };
  io.signals.on('SIGHUP', onHup);
  io.onReady?.(running);
  return new Promise<number>((resolve) => {
    // SIGTERM and SIGINT (Ctrl-C) both drain: an immediate close would cancel every stream in flight, and Envoy
    // resets a client's stream whose processor was cancelled mid-response. A second signal of either kind ends the
    // drain at once: decided streams end OK (a cancel would cut their generations), undecided ones are cancelled
    // (fail closed).
    let signals = 0;
    const stop = (signal: string) => {
      signals += 1;
      const forced = signals === 2;
      if (forced) {
        // A third signal gets the default action (the process ends at once), should closing itself get stuck.
        io.signals.off('SIGTERM', onTerm);
        io.signals.off('SIGINT', onInt);
      }
      logger.info({ signal, forced }, forced ? 'second signal: closing now, undecided streams are cancelled' : 'shutting down: draining');
      const done = forced ? running.close() : running.drain();
      io.signals.off('SIGHUP', onHup);
      void done.then(() => tracing.shutdown().catch(() => undefined)).then(() => resolve(0));
    };
    const onTerm = (): void => stop('SIGTERM');
    const onInt = (): void => stop('SIGINT');
    io.signals.on('SIGTERM', onTerm);
    io.signals.on('SIGINT', onInt);
  });
}

/**
 * Everything the gate reads at start that can be missing or wrong (the key ring, the route table, the TLS files),
 * reported together, so an operator fixes them in one round instead of one failed start each. Nothing is started:
 * no pod watch, no port. The key ring and the TLS files are checked here; the route table only when one of those
 * failed, to name it in the same round: otherwise startGate loads it first of all (before any watch or port) and
 * reports it itself, and a large table is not parsed and compiled twice at every start.
 */
async function preflight(config: GateConfig, keysError: string | undefined): Promise<string[]> {
  const problems: string[] = [];
  if (keysError !== undefined) problems.push(`${config.file}: keys: ${keysError}`);
  const tls = config.tls;
  if (tls !== undefined) {
    for (const [what, file] of [
      ['cert', tls.cert],
      ['key', tls.key],
      ['clientCa', tls.clientCa],
    ] as const) {
      try {
        await access(file, constants.R_OK);
      } catch (e) {
        problems.push(
          `${config.file}: tls.${what}: cannot read ${file}: ${readErrorReason(e)}. Fix: mount the PEM file there (deploy/kubernetes/README.md, step 2), or correct tls.${what}`,
        );
      }
    }
  }
  if (problems.length === 0) return problems;
  const table = await loadRouteTable(config.policyPath);
  if (!table.ok) {
    problems.push(
      `${config.file}: policy: the route table cannot be used (policy: ${config.policy}, read as ${config.policyPath}):\n${formatIssues(table.error)}`,
    );
  }
  return problems;
}
