/**
 * The one registration site for subcommands: name, one-line summary, and a lazy loader. A command is listed only
 * once it works end to end.
 */
export type CommandRun = (argv: readonly string[]) => Promise<number>;

export interface Command {
  readonly name: string;
  readonly summary: string;
  readonly load: () => Promise<CommandRun>;
}

export const COMMANDS: readonly Command[] = [
  {
    name: 'gate',
    summary: 'run the ext_proc gate: kvgate gate --config gate.yaml',
    load: async () => (await import('./gate-command.js')).gateCommand,
  },
  {
    name: 'sidecar',
    summary: 'run the worker sidecar: kvgate sidecar --config sidecar.yaml',
    load: async () => (await import('../sidecar/command.js')).sidecarCommand,
  },
  {
    name: 'policy',
    summary: 'check or diff route tables: kvgate policy check FILE | kvgate policy diff OLD NEW',
    load: async () => (await import('./policy-command.js')).policyCommand,
  },
  {
    name: 'explain',
    summary: 'dry-run one request against a route table: kvgate explain --policy FILE --request REQ.json',
    load: async () => (await import('./explain-command.js')).explainCommand,
  },
  {
    name: 'envoy',
    summary: 'generate Envoy configs from the route table: kvgate envoy render bootstrap|istio-ext-proc|... --policy FILE',
    load: async () => (await import('./envoy-command.js')).envoyCommand,
  },
  {
    name: 'verify',
    summary:
      'compare token ids through the P/D path against a non-disaggregated baseline: kvgate verify --via URL --baseline URL --prompts FILE',
    load: async () => (await import('./verify-command.js')).verifyCommand,
  },
  {
    name: 'status',
    summary: 'a running deployment at a glance: kvgate status --gate http://GATE:9003 [--json]',
    load: async () => (await import('./status-command.js')).statusCommand,
  },
  {
    name: 'fingerprint',
    summary: 'probe a worker and/or a descriptor: fingerprint, NIXL hash, canary digests',
    load: async () => (await import('./fingerprint-command.js')).fingerprintCommand,
  },
];

export function usage(): string {
  const width = Math.max(...COMMANDS.map((c) => c.name.length));
  const lines = COMMANDS.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`);
  return `usage: kvgate <command> [options]\n\ncommands:\n${lines.join('\n')}\n\nkvgate <command> --help for a command's options.\n`;
}
