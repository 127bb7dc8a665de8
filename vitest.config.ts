import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['src/**/*.test.ts', 'testbed/**/*.test.ts', 'test/**/*.test.ts'],
    testTimeout: 20_000,
    hookTimeout: 20_000,
    pool: 'forks',
    // Two cores in CI: keep parallelism modest so timing-sensitive protocol tests stay honest.
    maxWorkers: 2,
  },
});
