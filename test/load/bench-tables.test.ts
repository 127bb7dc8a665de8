/**
 * The benches' route tables must route under the gate's own defaults (live worker view): their upstreams are echo
 * servers with no sidecar, so every endpoint carries the explicit `unverified: true`. Without it the live view routes
 * none of them, and a bench measures refusals instead of decisions (as one run did, unnoticed).
 */
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { benchTableValue, compileBenchTable } from '../../bench/lib/tables.js';
import { createDevKeyRing } from '../../src/contract/keys.js';
import { createInFlightTracker } from '../../src/decide/worker-view.js';
import { createWorkerPoller } from '../../src/gate/worker-poller.js';

describe('bench route tables', () => {
  it('every endpoint is routable in the live worker view', () => {
    const table = compileBenchTable(benchTableValue({ models: 2, endpointsPerPool: 4, maxInFlightPerEndpoint: 64 }));
    const poller = createWorkerPoller(
      { intervalMs: 1000, timeoutMs: 200, staleAfterMs: 5000 },
      {
        inFlight: createInFlightTracker(),
        logger: pino({ level: 'silent' }),
        registry: new Registry(),
        keys: () => createDevKeyRing('bench-tables'),
        table: () => table,
      },
    );
    const view = poller.viewFor(table);
    const pools = [...table.pools.keys()];
    expect(pools.length).toBeGreaterThan(0);
    for (const pool of pools) {
      const endpoints = view.endpoints(pool);
      expect(endpoints).toHaveLength(4);
      expect(endpoints.every((e) => e.verified)).toBe(true);
    }
  });
});
