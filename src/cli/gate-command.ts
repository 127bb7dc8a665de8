/**
 * `kvgate gate --config gate.yaml`: validate everything, then serve ext_proc until SIGTERM (drain) or SIGINT.
 * SIGHUP reloads the route table (it is also reloaded when the file changes).
 */
import { parseArgs } from 'node:util';
import { pino } from 'pino';
import { createTracing } from '../tracing.js';
import { formatIssues } from '../config/issues.js';
import { keyRingFrom } from '../contract/key-source.js';
import { loadGateConfig } from '../gate/config.js';
import { startGate } from '../gate/gate.js';

const HELP = `usage: kvgate gate --config gate.yaml

Runs the ext_proc gate (gRPC, ${'`'}envoy.service.ext_proc.v3.ExternalProcessor${'`'} + grpc.health.v1).
  --config FILE   gate settings (YAML or JSON); see README "Configuration reference"
Signals: SIGTERM drains (NOT_SERVING, streams in flight finish, exit), SIGHUP reloads the route table.
`;

export async function gateCommand(argv: readonly string[]): Promise<number> {
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
  if (!keys.ok) {
    process.stderr.write(`kvgate gate: ${config.file}: keys: ${keys.error}\n`);
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
  process.on('SIGHUP', () => {
    running.policy.reload('SIGHUP').catch((e: unknown) => logger.error({ err: e }, 'route table reload failed'));
  });
  return new Promise<number>((resolve) => {
    const stop = (signal: string) => {
      logger.info({ signal }, 'shutting down');
      const done = signal === 'SIGTERM' ? running.drain() : running.close();
      void done.then(() => tracing.shutdown().catch(() => undefined)).then(() => resolve(0));
    };
    process.once('SIGTERM', () => stop('SIGTERM'));
    process.once('SIGINT', () => stop('SIGINT'));
  });
}
