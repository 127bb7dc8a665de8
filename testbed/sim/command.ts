/**
 * `npm run testbed -- sim --config FILE [--port N] [--side-channel-port N]`: run one simulated vLLM worker until SIGTERM or
 * SIGINT, then close both ports and exit 0. Exit 2 on usage errors, 1 when the config is invalid or a port is taken.
 * testbed/cli/commands.ts runs it as `sim`; the optional `io` argument lets tests drive it in-process.
 */
import { pino, type Logger } from 'pino';
import { loadSimConfigFile, type SimConfig } from './config.js';
import { createSimServer } from './server.js';
import { waitForSignal } from '../wait-for-signal.js';

export interface SimCommandIo {
  readonly out: (line: string) => void;
  readonly err: (line: string) => void;
  /** Resolves when the process should shut down (default: the first SIGTERM or SIGINT). */
  readonly shutdown?: Promise<string>;
  readonly logger?: Logger;
  /** Called once the worker listens (tests read the URL from it). */
  readonly onListening?: (info: { url: string; sideChannelUrl: string; engineId: string }) => void;
}

const USAGE = 'usage: npm run testbed -- sim --config FILE [--port N] [--side-channel-port N]';

export async function simCommand(argv: string[], io: SimCommandIo = defaultIo()): Promise<number> {
  const args = parseArgs(argv);
  if (typeof args === 'string') {
    io.err(`${args}\n${USAGE}`);
    return 2;
  }
  if (args.help) {
    io.out(USAGE);
    return 0;
  }
  const loaded = await loadSimConfigFile(args.config);
  if (!loaded.ok) {
    io.err(loaded.error.reason);
    return 1;
  }
  const config = withPorts(loaded.value, args.port, args.sideChannelPort);
  let server;
  try {
    server = await createSimServer(config, { logger: io.logger ?? pino({ name: 'kvgate-sim' }) });
  } catch (e) {
    io.err(`kvgate sim: cannot start: ${(e as Error).message}`);
    return 1;
  }
  io.out(
    `kvgate sim: ${config.sim.servedModelName ?? config.behaviour.model.id} (vLLM ${config.behaviour.engine.version}) ` +
      `listening on ${server.url}, NIXL side channel ${server.sideChannelUrl}, engine_id ${server.engineId}`,
  );
  io.onListening?.({ url: server.url, sideChannelUrl: server.sideChannelUrl, engineId: server.engineId });
  const signal = await (io.shutdown ?? waitForSignal());
  io.out(`kvgate sim: ${signal} received, shutting down`);
  await server.close();
  return 0;
}

interface Args {
  config: string;
  port?: number;
  sideChannelPort?: number;
  help: boolean;
}

function parseArgs(argv: string[]): Args | string {
  const out: Partial<Args> = { help: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '--help' || a === '-h') return { config: '', help: true };
    const [flag, inline] =
      a.startsWith('--') && a.includes('=') ? [a.slice(0, a.indexOf('=')), a.slice(a.indexOf('=') + 1)] : [a, undefined];
    const value = inline ?? argv[++i];
    if (value === undefined) return `missing value for ${flag}`;
    if (flag === '--config') out.config = value;
    else if (flag === '--port' || flag === '--side-channel-port') {
      const n = Number(value);
      if (!Number.isInteger(n) || n < 0 || n > 65535) return `${flag} must be a port number (0-65535), got "${value}"`;
      if (flag === '--port') out.port = n;
      else out.sideChannelPort = n;
    } else return `unknown argument "${a}"`;
  }
  if (out.config === undefined) return 'missing --config FILE';
  return out as Args;
}

function withPorts(c: SimConfig, port: number | undefined, side: number | undefined): SimConfig {
  if (port === undefined && side === undefined) return c;
  return {
    ...c,
    sim: { ...c.sim, ...(port === undefined ? {} : { port }), ...(side === undefined ? {} : { sideChannelPort: side }) },
  };
}

function defaultIo(): SimCommandIo {
  return { out: (l) => process.stdout.write(`${l}\n`), err: (l) => process.stderr.write(`${l}\n`) };
}
