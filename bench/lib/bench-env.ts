/**
 * Every bench prints where its figures came from (bench/README.md): Node version, CPU model, core count,
 * git commit and date. Figures without this context go stale unnoticed; with it a reader can tell whether a
 * regression is the code or the machine.
 */
import { execFileSync } from 'node:child_process';
import os from 'node:os';
import { formatRuntimeFlags } from './runtime-flags.js';

export interface BenchEnvironment {
  readonly node: string;
  readonly v8: string;
  readonly cpu: string;
  readonly cores: number;
  readonly memoryGiB: number;
  readonly platform: string;
  /** Short commit, with `+dirty` when the working tree has uncommitted changes; `unknown` outside git. */
  readonly commit: string;
  readonly date: string;
  /** Whether `taskset` can pin processes to one CPU on this machine. */
  readonly taskset: boolean;
  /** The Node flags kvgate's processes and the floors run with, and where they came from (runtime-flags.ts). */
  readonly nodeFlags: string;
}

function tryRun(cmd: string, args: readonly string[]): string | undefined {
  try {
    return execFileSync(cmd, [...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'], timeout: 5_000 }).trim();
  } catch {
    return undefined;
  }
}

function gitCommit(): string {
  const sha = tryRun('git', ['rev-parse', '--short', 'HEAD']);
  if (sha === undefined || sha === '') return 'unknown';
  // Read-only: `git status --porcelain` only reports; it changes nothing.
  const dirty = tryRun('git', ['status', '--porcelain', '--untracked-files=no']);
  return dirty ? `${sha}+dirty` : sha;
}

/** Collected once per run; cheap (two git calls and a `taskset --version`). */
export function describeEnvironment(now: () => Date = () => new Date()): BenchEnvironment {
  const cpus = os.cpus();
  return {
    node: process.version,
    v8: process.versions.v8,
    cpu: cpus[0]?.model.trim() ?? 'unknown',
    cores: cpus.length,
    memoryGiB: Math.round((os.totalmem() / 2 ** 30) * 10) / 10,
    platform: `${os.platform()} ${os.release()} ${os.arch()}`,
    commit: gitCommit(),
    date: now().toISOString(),
    taskset: tryRun('taskset', ['--version']) !== undefined,
    nodeFlags: formatRuntimeFlags(),
  };
}

/** The header block every bench prints before its figures. */
export function formatEnvironment(env: BenchEnvironment, title: string): string {
  return [
    `== ${title} ==`,
    `node ${env.node} (v8 ${env.v8}) | ${env.platform}`,
    `cpu  ${env.cpu} x ${env.cores} cores | ${env.memoryGiB} GiB | taskset ${env.taskset ? 'available' : 'not available'}`,
    `commit ${env.commit} | ${env.date}`,
    env.nodeFlags,
    '',
  ].join('\n');
}
