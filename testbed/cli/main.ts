#!/usr/bin/env node
/**
 * `kvgate-testbed` - the entry point of the test support (simulated vLLM workers, the local topology with the
 * Envoy-faithful harness). Kept apart from `kvgate` so the product never loads, ships or depends on it.
 */
import { TESTBED_COMMANDS, testbedUsage } from './commands.js';

async function main(argv: readonly string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === '-h' || name === '--help' || name === 'help') {
    process.stdout.write(testbedUsage());
    return name === undefined ? 2 : 0;
  }
  const command = TESTBED_COMMANDS.find((c) => c.name === name);
  if (!command) {
    process.stderr.write(`kvgate-testbed: unknown command "${name}"\n\n${testbedUsage()}`);
    return 2;
  }
  const run = await command.load();
  return run(rest);
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
    setTimeout(() => process.exit(code), 1500).unref();
  },
  (e: unknown) => {
    process.stderr.write(`kvgate-testbed: ${e instanceof Error ? e.message : String(e)}\n`);
    process.exitCode = 1;
  },
);
