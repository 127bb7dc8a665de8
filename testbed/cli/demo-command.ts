/**
 * `kvgate demo [--keep-running]`: the README's first command. Starts the full local topology, sends the sample
 * traffic, prints what happened; exits non-zero when any expected behaviour did not happen.
 */
import { parseArgs } from 'node:util';
import { pino } from 'pino';
import { runDemo } from '../demo/run-demo.js';

const HELP = `usage: kvgate demo [--keep-running] [--log-level LEVEL]

Starts simulated vLLM workers of two revisions (prefill and decode each), their sidecars, the gate and the
Envoy-faithful harness (running envoy/envoy.yaml) on loopback, sends sample traffic and prints a summary.
  --keep-running     leave everything up for your own requests (Ctrl-C stops it)
  --log-level LEVEL  component logs to stderr (default: error)
`;

export async function demoCommand(argv: readonly string[]): Promise<number> {
  const { values } = parseArgs({
    args: [...argv],
    options: { 'keep-running': { type: 'boolean' }, 'log-level': { type: 'string' }, help: { type: 'boolean' } },
  });
  if (values.help) {
    process.stdout.write(HELP);
    return 0;
  }
  const logger = pino({ level: values['log-level'] ?? 'error' }, pino.destination(2));
  const { summary, topology } = await runDemo({ logger, print: (l) => process.stdout.write(`${l}\n`) });
  if (values['keep-running']) {
    process.stdout.write(
      `\nThe topology keeps running. Try:\n  curl -s ${topology.publicUrl}/v1/completions -H 'content-type: application/json' ` +
        `-H 'x-tenant-id: acme' -H 'x-session-id: me' -d '{"model":"llama-3-8b","prompt":"Hello","max_tokens":8}' -i\n` +
        'Ctrl-C to stop.\n',
    );
    await new Promise<void>((resolve) => {
      process.once('SIGINT', () => resolve());
      process.once('SIGTERM', () => resolve());
    });
  }
  await topology.close();
  return summary.ok ? 0 : 1;
}
