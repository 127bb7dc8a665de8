/**
 * Preloaded into a server under test (`node --expose-gc --import .../gc-probe.js ...`): on SIGUSR2 it runs a full
 * garbage collection and prints the process's memory as one marked JSON line on stderr. Lets a bench separate
 * what a server retains per open stream from garbage V8 has not collected yet, without changing the server's
 * entry point (the gate still starts through `kvgate gate`).
 */
export const GC_PROBE_MARKER = 'KVGATE_BENCH_MEMORY ';

process.on('SIGUSR2', () => {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (gc !== undefined) {
    gc();
    gc(); // a second pass collects what the first one's finalizers released
  }
  const m = process.memoryUsage();
  process.stderr.write(
    `${GC_PROBE_MARKER}${JSON.stringify({ gc: gc !== undefined, rss: m.rss, heapUsed: m.heapUsed, external: m.external, arrayBuffers: m.arrayBuffers })}\n`,
  );
});
