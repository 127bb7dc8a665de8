import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['src/**/*.test.ts', 'testbed/**/*.test.ts', 'test/**/*.test.ts'],
    testTimeout: 20_000,
    hookTimeout: 20_000,
    pool: 'forks',
    // Two cores in CI: keep parallelism modest so timing-sensitive protocol tests stay honest.
    maxWorkers: 2,
    // Each worker process runs many test files in turn and keeps the modules they load, instead of a new process that
    // loads (and transforms) the product again for every file: importing took more time than the tests themselves
    // (267 s -> 105 s for the suite on 2 cores). What this asks of the tests: no `vi.mock` of a module another file also
    // loads (give the code a seam instead: src/gate/policy-store.ts `readText`), no process-wide state left behind
    // (servers, timers, signal handlers, process.env), and product module state that is only a cache of its inputs.
    isolate: false,
  },
});
