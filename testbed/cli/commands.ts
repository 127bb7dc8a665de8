/**
 * The testbed's subcommands: what tests, the demo and the benchmarks stand on. None of this ships in the runtime
 * package or the production image; it runs from a clone (`npm start`, `npm run testbed -- <command>`).
 */
export type CommandRun = (argv: readonly string[]) => Promise<number>;

export interface TestbedCommand {
  readonly name: string;
  readonly summary: string;
  readonly load: () => Promise<CommandRun>;
}

export const TESTBED_COMMANDS: readonly TestbedCommand[] = [
  {
    name: 'demo',
    summary: 'run the full local topology with sample traffic: demo [--policy FILE] [--keep-running]',
    load: async () => {
      const { demoCommand } = await import('./demo-command.js');
      return (argv) => demoCommand(argv);
    },
  },
  {
    name: 'harness',
    summary: 'run the Envoy-faithful harness with an Envoy bootstrap until SIGTERM: harness --config envoy.yaml',
    load: async () => {
      const { harnessCommand } = await import('./harness-command.js');
      return (argv) => harnessCommand(argv);
    },
  },
  {
    name: 'sim',
    summary: 'run a simulated vLLM worker (tests, demo, benchmarks): sim --config sim.yaml',
    load: async () => {
      const { simCommand } = await import('../sim/command.js');
      return (argv) => simCommand([...argv]);
    },
  },
];

export function testbedUsage(): string {
  const width = Math.max(...TESTBED_COMMANDS.map((c) => c.name.length));
  const lines = TESTBED_COMMANDS.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`);
  return `usage: kvgate-testbed <command> [options]   (from a clone: npm run testbed -- <command>)\n\ncommands:\n${lines.join('\n')}\n`;
}
