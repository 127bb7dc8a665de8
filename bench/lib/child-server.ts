/**
 * Servers under test run as child processes: their RSS and CPU time are their own (read from /proc), their event
 * loop does not share a thread with the load generator, and they can be pinned to one CPU with `taskset`.
 * The gate runs through the real CLI (`kvgate gate --config`) with a temporary config and route table, so the
 * bench measures the same wiring an operator deploys.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { runtimeFlags } from './runtime-flags.js';

/** dist/bench/lib/ -> dist/ */
const DIST = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const CLI_MAIN = path.join(DIST, 'src', 'cli', 'main.js');
export const NOOP_MAIN = path.join(DIST, 'bench', 'lib', 'noop-ext-proc-main.js');
const GC_PROBE = path.join(DIST, 'bench', 'lib', 'gc-probe.js');
const GC_PROBE_MARKER = 'KVGATE_BENCH_MEMORY ';

/** Memory after a forced full GC, as the server process itself reports it. */
export interface MemoryAfterGc {
  readonly rss: number;
  readonly heapUsed: number;
  readonly external: number;
  readonly arrayBuffers: number;
}

export interface ChildServer<Info = { port: number }> {
  readonly name: string;
  readonly pid: number;
  readonly port: number;
  /** What the child reported when it became ready (its ports, URLs). */
  readonly info: Info;
  /** Resident set size now, in bytes (VmRSS). */
  rssBytes(): number;
  /** User + system CPU time consumed so far, in ms (all threads: GC and libuv included). */
  cpuMs(): number;
  /** Force a full GC in the child and read its memory (needs `gcProbe` at spawn). */
  memoryAfterGc(timeoutMs?: number): Promise<MemoryAfterGc>;
  stop(): Promise<void>;
}

export interface SpawnOptions {
  /** Pin the child to this CPU with `taskset -c` (the one-core measurement). */
  readonly cpu?: number;
  /** Extra node flags, e.g. `--max-old-space-size`. */
  readonly nodeFlags?: readonly string[];
  readonly startTimeoutMs?: number;
  /** Preload the GC probe (`--expose-gc --import gc-probe.js`) so `memoryAfterGc` works. */
  readonly gcProbe?: boolean;
}

function readProc(pid: number, file: string): string {
  return readFileSync(`/proc/${pid}/${file}`, 'utf8');
}

/** Clock ticks per second for /proc/<pid>/stat; 100 on every Linux this runs on (CONFIG_HZ-independent USER_HZ). */
const USER_HZ = 100;

function procStats(pid: number) {
  return {
    rssBytes(): number {
      const m = /VmRSS:\s+(\d+) kB/.exec(readProc(pid, 'status'));
      return m ? Number(m[1]) * 1024 : Number.NaN;
    },
    cpuMs(): number {
      // Fields after the parenthesised command name; utime and stime are fields 14 and 15 of the whole line.
      const stat = readProc(pid, 'stat');
      const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      return ((Number(rest[11]) + Number(rest[12])) * 1000) / USER_HZ;
    },
  };
}

/**
 * Start `node ...args` (optionally pinned, optionally with the GC probe) and wait for the first stdout line that
 * `ready` accepts; that value (with a `port`) is the child's `info`.
 */
export async function spawnNodeServer<Info extends { port: number }>(
  name: string,
  args: readonly string[],
  opts: SpawnOptions,
  ready: (line: string) => Info | undefined,
  cleanup?: () => void,
): Promise<ChildServer<Info>> {
  const probe = opts.gcProbe === true ? ['--expose-gc', '--import', pathToFileURL(GC_PROBE).href] : [];
  const nodeArgs = [...probe, ...(opts.nodeFlags ?? []), ...args];
  const child: ChildProcess =
    opts.cpu === undefined
      ? spawn(process.execPath, nodeArgs, { stdio: ['ignore', 'pipe', 'pipe'] })
      : spawn('taskset', ['-c', String(opts.cpu), process.execPath, ...nodeArgs], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  const probes: ((m: MemoryAfterGc) => void)[] = [];
  createInterface({ input: child.stderr! }).on('line', (line) => {
    if (line.startsWith(GC_PROBE_MARKER)) probes.shift()?.(JSON.parse(line.slice(GC_PROBE_MARKER.length)) as MemoryAfterGc);
    else stderr = `${stderr}${line}\n`.slice(-4000);
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const info = await new Promise<Info>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`${name} did not report its port within ${opts.startTimeoutMs ?? 20_000} ms\n${stderr}`)),
      opts.startTimeoutMs ?? 20_000,
    );
    const lines = createInterface({ input: child.stdout! });
    lines.on('line', (line) => {
      const p = ready(line);
      if (p !== undefined) {
        clearTimeout(timer);
        resolve(p);
      }
    });
    void exited.then(() => {
      clearTimeout(timer);
      reject(new Error(`${name} exited before listening (code ${child.exitCode}):\n${stderr}`));
    });
  });
  child.stdout!.resume();
  const pid = child.pid!;
  const stats = procStats(pid);
  return {
    name,
    pid,
    port: info.port,
    info,
    rssBytes: stats.rssBytes,
    cpuMs: stats.cpuMs,
    memoryAfterGc(timeoutMs = 30_000) {
      if (opts.gcProbe !== true) return Promise.reject(new Error(`${name} was started without the GC probe`));
      return new Promise<MemoryAfterGc>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`${name} did not answer the memory probe`)), timeoutMs);
        probes.push((m) => {
          clearTimeout(timer);
          resolve(m);
        });
        child.kill('SIGUSR2');
      });
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGINT');
        const killer = setTimeout(() => child.kill('SIGKILL'), 5_000);
        await exited;
        clearTimeout(killer);
      }
      cleanup?.();
    },
  };
}

/** A `ready` parser for children that report themselves as one JSON object per line. */
export function jsonLine<Info>(pick: (v: Record<string, unknown>) => Info | undefined): (line: string) => Info | undefined {
  return (line) => {
    try {
      const v: unknown = JSON.parse(line);
      return v !== null && typeof v === 'object' ? pick(v as Record<string, unknown>) : undefined;
    } catch {
      return undefined;
    }
  };
}

/** `opts` with the shipped Node flags first (runtime-flags.ts): for kvgate's processes and the floor they are measured against. */
export function asShipped(opts: SpawnOptions = {}): SpawnOptions {
  return { ...opts, nodeFlags: [...runtimeFlags().flags, ...(opts.nodeFlags ?? [])] };
}

/** Start the no-op ext_proc server (the floor) in a child process, with the gate's Node flags. */
export function spawnNoopServer(opts: SpawnOptions = {}): Promise<ChildServer> {
  return spawnNodeServer(
    'no-op ext_proc',
    [NOOP_MAIN, '127.0.0.1:0'],
    asShipped(opts),
    jsonLine((v) => (typeof v['port'] === 'number' ? { port: v['port'] } : undefined)),
  );
}

/** Start `kvgate gate` (shipped Node flags) in a child process with `table` as its route table (temp files, removed on stop). */
export function spawnGate(table: Record<string, unknown>, opts: SpawnOptions = {}): Promise<ChildServer> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kvgate-bench-'));
  writeFileSync(path.join(dir, 'table.json'), JSON.stringify(table));
  const config = {
    listen: '127.0.0.1:0',
    admin: '',
    insecure: true, // the bench drives the gate with a plaintext ext_proc client on loopback
    policy: 'table.json',
    keys: { devSeed: 'kvgate-bench' },
    drain: { announceMs: 0, graceMs: 1000 },
    log: { level: 'info' },
  };
  writeFileSync(path.join(dir, 'gate.json'), JSON.stringify(config));
  const cleanup = () => rmSync(dir, { recursive: true, force: true });
  // The gate logs `{"listen":"127.0.0.1:PORT", ...}` (pino, info) once its gRPC port is bound.
  const ready = jsonLine((v) => {
    if (typeof v['listen'] !== 'string') return undefined;
    const port = Number(v['listen'].slice(v['listen'].lastIndexOf(':') + 1));
    return Number.isInteger(port) && port > 0 ? { port } : undefined;
  });
  const started = spawnNodeServer(
    'kvgate gate',
    [CLI_MAIN, 'gate', '--config', path.join(dir, 'gate.json')],
    asShipped(opts),
    ready,
    cleanup,
  );
  return started.catch((e: unknown) => {
    cleanup();
    throw e;
  });
}

/** Pin this process (the load generator) to one CPU, so server and client do not trade cores mid-run. */
export function pinSelf(cpu: number): Promise<boolean> {
  return new Promise((resolve) => {
    const p = spawn('taskset', ['-a', '-p', '-c', String(cpu), String(process.pid)], { stdio: 'ignore' });
    p.once('error', () => resolve(false));
    p.once('exit', (code) => resolve(code === 0));
  });
}
