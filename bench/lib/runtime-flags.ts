/**
 * The Node flags kvgate's processes run with where they are shipped: the image's `ENTRYPOINT` (Dockerfile), which
 * every deployment in deploy/ uses (they set `args`, never `command`; test/deploy/runtime-flags.test.ts). The benches start the gate, the no-op floor
 * and the sidecars with exactly these flags, so a figure is the shipped process's, and the floor runs under the same
 * runtime settings as what it is compared with. `KVGATE_BENCH_NODE_FLAGS=none` runs them with Node's defaults
 * instead (to show what a flag does); any other value of it is a space-separated list used in their place.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { PACKAGE_ROOT } from '../../src/package-root.js';

/** Pure: the flags between `node` and the script in a Dockerfile's exec-form `ENTRYPOINT ["node", ..., "x.js"]`. */
export function entrypointNodeFlags(dockerfile: string): string[] {
  const line = dockerfile.split('\n').find((l) => /^ENTRYPOINT\s+\[/.test(l));
  if (line === undefined) throw new Error('the Dockerfile has no exec-form ENTRYPOINT [...] line');
  const argv = JSON.parse(line.slice(line.indexOf('['))) as unknown;
  if (!Array.isArray(argv) || argv[0] !== 'node' || !argv.every((a) => typeof a === 'string')) {
    throw new Error(`the Dockerfile's ENTRYPOINT does not start the product with node: ${line}`);
  }
  const script = argv.findIndex((a: string, i) => i > 0 && !a.startsWith('-'));
  if (script < 0) throw new Error(`the Dockerfile's ENTRYPOINT names no script: ${line}`);
  return argv.slice(1, script) as string[];
}

/** Where the flags in use came from, for a bench's header. */
export interface RuntimeFlags {
  readonly flags: readonly string[];
  readonly source: string;
}

let cached: RuntimeFlags | undefined;

/** The flags for kvgate's processes (and the floor) in this run. */
export function runtimeFlags(env: NodeJS.ProcessEnv = process.env): RuntimeFlags {
  if (cached !== undefined && env === process.env) return cached;
  const override = env['KVGATE_BENCH_NODE_FLAGS'];
  const found: RuntimeFlags =
    override === undefined
      ? { flags: entrypointNodeFlags(readFileSync(path.join(PACKAGE_ROOT, 'Dockerfile'), 'utf8')), source: 'the Dockerfile ENTRYPOINT' }
      : override.trim() === 'none'
        ? { flags: [], source: 'KVGATE_BENCH_NODE_FLAGS=none' }
        : { flags: override.trim().split(/\s+/), source: 'KVGATE_BENCH_NODE_FLAGS' };
  if (env === process.env) cached = found;
  return found;
}

/** One header line: which flags kvgate's processes and the floor run with. */
export function formatRuntimeFlags(r: RuntimeFlags = runtimeFlags()): string {
  const flags = r.flags.length === 0 ? "Node's defaults" : r.flags.join(' ');
  return `kvgate processes and floor run with: ${flags} (${r.source})`;
}
