/**
 * `npm run testbed -- demo --policy FILE`: the demo for an operator's own route table. Checks the table with the
 * product's loader (a table that cannot be used ends here, with `kvgate policy check`'s report), starts the topology
 * it describes (table-topology.ts), sends the sample traffic derived from it (table-traffic.ts) and returns the same
 * summary as the default demo.
 */
import type { Logger } from 'pino';
import type { EnvoyVersion } from '../../src/envoy/render/settings.js';
import { printFiles, quietOnceAborted, unlessAborted, type DemoSummary } from './run-demo.js';
import { planFromTable } from './table-plan.js';
import { startTableTopology, type TableTopology } from './table-topology.js';
import { tableTraffic } from './table-traffic.js';

export interface TableDemoOptions {
  readonly file: string;
  readonly logger: Logger;
  readonly print: (line: string) => void;
  readonly maxWorkersPerPool?: number;
  readonly envoyVersion?: EnvoyVersion;
  /** Say in the files block that the run folder outlives the traffic (`--keep-running`). */
  readonly keepRunning?: boolean;
  /** Stops the demo early, as `DemoOptions.signal`: everything started is stopped and the run folder removed. */
  readonly signal?: AbortSignal;
}

export type TableDemoResult =
  | { readonly ok: true; readonly summary: DemoSummary; readonly topology: TableTopology }
  | { readonly ok: false; readonly report: string };

export async function runTableDemo(opts: TableDemoOptions): Promise<TableDemoResult> {
  const p = quietOnceAborted(opts.print, opts.signal);
  const planned = await planFromTable(opts.file, opts.maxWorkersPerPool === undefined ? {} : { maxWorkersPerPool: opts.maxWorkersPerPool });
  if (!planned.ok) return planned;
  const plan = planned.plan;
  const revisions = plan.revisions.map((r) => r.name).join(', ');
  p(
    `kvgate demo: starting the local P/D topology of ${plan.file} (revisions ${revisions}; ${plan.pools.length} pools, sidecars, gate, Envoy harness)...`,
  );
  const t = await startTableTopology(plan, {
    logger: opts.logger,
    ...(opts.envoyVersion === undefined ? {} : { envoyVersion: opts.envoyVersion }),
    ...(opts.signal === undefined ? {} : { signal: opts.signal }),
  });
  try {
    printTableTopology(t, p, opts.keepRunning === true);
    const summary = await unlessAborted(tableTraffic(t, p), opts.signal);
    return { ok: true, summary, topology: t };
  } catch (e) {
    await t.close();
    throw e;
  }
}

function printTableTopology(t: TableTopology, p: (l: string) => void, keepRunning: boolean): void {
  p('');
  p(`  Envoy public listener    ${t.publicUrl}      (send requests here)`);
  p(`  Envoy internal listener  ${t.internalUrl}      (prefill legs from decode sidecars)`);
  p(`  gate ext_proc (gRPC)     127.0.0.1:${t.gate.grpcPort}   admin http://127.0.0.1:${t.gate.adminPort}/status`);
  for (const w of t.workers) {
    p(`  ${`${w.pool}/${w.index}`.padEnd(24)} ${w.revision} ${w.role}: sidecar http://${w.address}   vLLM sim ${w.sim.url}`);
  }
  if (t.plan.notes.length > 0) {
    p('');
    p('  Differences from a deployment of this table:');
    for (const n of t.plan.notes) p(`  - ${n}`);
  }
  printFiles(p, t.dir, keepRunning, [
    ['route table (runtime copy)', t.files.routeTable],
    ['envoy.yaml (rendered)', t.files.envoyYaml],
    ['gate config', t.files.gateConfig],
    ...Object.entries(t.files.descriptors).map(([r, f]): [string, string] => [`descriptor ${r}`, f]),
    ['TLS (dev PKI)', t.files.tlsDir],
  ]);
  p('');
}
