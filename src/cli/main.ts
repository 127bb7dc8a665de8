#!/usr/bin/env node
/**
 * `kvgate` - one binary, one subcommand per role. The composition root: each command wires the pure core to its
 * I/O adapters. Commands are imported lazily so `kvgate sidecar` never loads the gate's gRPC stack and vice versa.
 * The simulator, the demo topology and the Envoy-faithful harness are test support and live in testbed/ with
 * their own entry point (testbed/cli/main.ts); the product never imports them.
 */
import { COMMANDS, usage } from './commands.js';

async function main(argv: readonly string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === '-h' || name === '--help' || name === 'help') {
    process.stdout.write(usage());
    return name === undefined ? 2 : 0;
  }
  if (name === '--version' || name === 'version') {
    const { VERSION } = await import('../version.js');
    process.stdout.write(`kvgate ${VERSION}\n`);
    return 0;
  }
  const command = COMMANDS.find((c) => c.name === name);
  if (!command) {
    process.stderr.write(`kvgate: unknown command "${name}"\n\n${usage()}`);
    return 2;
  }
  const run = await command.load();
  try {
    return await run(rest);
  } catch (e) {
    // node:util parseArgs: an unknown or malformed flag is a usage error (exit 2, as every command's own checks), not a
    // failure of the command.
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && code.startsWith('ERR_PARSE_ARGS_')) {
      process.stderr.write(`kvgate ${name}: ${(e as Error).message}; see kvgate ${name} --help\n`);
      return 2;
    }
    throw e;
  }
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
    // A finished command must not linger on idle keep-alive sockets; the timer is unref'd, so it only fires
    // when something else still holds the event loop open.
    setTimeout(() => process.exit(code), 1500).unref();
  },
  (e: unknown) => {
    process.stderr.write(`kvgate: ${e instanceof Error ? e.message : String(e)}\n`);
    process.exitCode = 1;
  },
);
