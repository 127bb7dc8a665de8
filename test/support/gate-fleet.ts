/**
 * Gate replicas for tests that run several (a rolling restart): each an in-process gate with the e2e config
 * (e2e-gate.ts), the shared dev keys, its own registry, and its log lines (decision and audit lines included) kept in
 * memory with their times, so a test can say what each replica decided and refused, and when.
 */
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { createDevKeyRing } from '../../src/contract/keys.js';
import { type RunningGate, startGate } from '../../src/gate/gate.js';
import type { DevPki } from '../../testbed/tls/dev-pki.js';
import { e2eGateConfig } from './e2e-gate.js';

/** One parsed pino line: `time` (ms since the epoch), `msg`, and the line's fields. */
export type LogLine = Record<string, unknown> & { readonly time: number; readonly msg: string };

export interface FleetGate {
  readonly gate: RunningGate;
  /** `127.0.0.1:PORT`, as Envoy's cluster names the host. */
  readonly address: string;
  readonly lines: LogLine[];
  /** The decision lines (`log.decisions: true`): one per routed request or checked hop. */
  decisions(): LogLine[];
  /** The audit lines of refusals (`audit: 'refusal'`). */
  refusals(): LogLine[];
  /** ext_proc streams open on this gate now (`kvgate_ext_proc_streams_active`). */
  openStreams(): Promise<number>;
}

/** A gate replica on `dir`'s route table; `extra` replaces top-level config settings (e.g. `drain`). */
export async function startFleetGate(dir: string, pki: DevPki, seed: string, extra: Record<string, unknown> = {}): Promise<FleetGate> {
  const lines: LogLine[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const l of chunk.toString('utf8').split('\n')) if (l !== '') lines.push(JSON.parse(l) as LogLine);
      done();
    },
  });
  const cfg = e2eGateConfig(dir, pki, seed, { log: { level: 'info', decisions: true }, ...extra });
  const gate = await startGate(cfg, {
    logger: pino({ level: 'info' }, sink),
    keys: createDevKeyRing(seed),
    registry: new Registry(),
    defaultMetrics: false,
  });
  return {
    gate,
    address: `127.0.0.1:${gate.grpcPort}`,
    lines,
    decisions: () => lines.filter((l) => l['event'] === 'decision'),
    refusals: () => lines.filter((l) => l['audit'] === 'refusal'),
    openStreams: async () =>
      (await gate.registry.getMetricsAsJSON()).find((m) => m.name === 'kvgate_ext_proc_streams_active')?.values[0]?.value ?? 0,
  };
}
