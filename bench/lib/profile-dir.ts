/**
 * Profiling a child process: a temporary `--cpu-prof-dir` for it, and the summary of the profile it leaves there
 * when it exits cleanly. The I/O half of cpu-profile.ts.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { formatProfileSummary, type CpuProfile } from './cpu-profile.js';

export interface ProfileDir {
  /** Node flags that make a child write its profile here on exit. */
  readonly nodeFlags: readonly string[];
  /** The summary of the profile written here (or why there is none), then the folder is removed. */
  summarize(top?: number): string;
}

export function createProfileDir(prefix = 'kvgate-prof-'): ProfileDir {
  const dir = mkdtempSync(path.join(os.tmpdir(), prefix));
  return {
    nodeFlags: ['--cpu-prof', '--cpu-prof-dir', dir],
    summarize(top = 20) {
      try {
        const file = readdirSync(dir).find((f) => f.endsWith('.cpuprofile'));
        if (file === undefined) return 'no profile was written (the process did not exit cleanly)';
        return formatProfileSummary(JSON.parse(readFileSync(path.join(dir, file), 'utf8')) as CpuProfile, top);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  };
}
