/**
 * A spawned command's output and exit, collected as it runs: what the e2e tests of the testbed commands (`demo`,
 * `harness`) read to wait for a line and check how the process ended.
 */
import type { ChildProcess } from 'node:child_process';

export interface ChildOutput {
  readonly child: ChildProcess;
  /** Everything printed on stdout so far. */
  readonly out: () => string;
  /** Everything printed on stderr so far. */
  readonly err: () => string;
  readonly exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** Collect `child`'s stdout and stderr (spawned with both piped) and its exit. */
export function childOutput(child: ChildProcess): ChildOutput {
  let out = '';
  let err = '';
  child.stdout!.on('data', (b: Buffer) => (out += b.toString()));
  child.stderr!.on('data', (b: Buffer) => (err += b.toString()));
  const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  return { child, out: () => out, err: () => err, exit };
}
