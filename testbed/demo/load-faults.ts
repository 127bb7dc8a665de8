/**
 * The faults of the load-with-faults run (load.ts), each fired once after its share of the requests: a planned
 * decode drain (the sidecar's admin port, as a preStop hook calls it), a prefill worker's vLLM killed while a decode
 * worker still has its KV to read, and a route-table reload that moves the cohort weight.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { parse as parseYaml, stringify as toYaml } from 'yaml';
import type { FaultKind } from './fault-attribution.js';
import type { Topology } from './topology.js';

/** How long the killed prefill worker's KV reads are held back (the kill comes well within it). */
const KILL_READ_DELAY_MS = 2_000;

export interface Fault {
  readonly at: number;
  readonly kind: FaultKind;
  /** The endpoint (`ip:port`, as the route table lists it) the fault hits, once it fired. */
  target?: string;
  firedAtMs?: number;
  fired: boolean;
  run(): Promise<string>;
}

/** The three faults, after 25 %, 50 % and 75 % of `n` requests. */
export function faultSchedule(t: Topology, n: number): Fault[] {
  return [
    {
      at: Math.floor(n * 0.25),
      kind: 'drain',
      fired: false,
      async run() {
        const w = t.worker('llama-a', 'decode', 1);
        this.target = w.address;
        this.firedAtMs = Date.now();
        // The admin port is loopback-only; the load runner is in the pod's place here (everything on loopback).
        await fetch(`${w.sidecar.adminUrl}/kvgate/v1/drain`, { method: 'POST' });
        return `drained decode worker llama-a #1 (${w.address})`;
      },
    },
    {
      at: Math.floor(n * 0.5),
      kind: 'prefill_kill',
      fired: false,
      async run() {
        const w = t.worker('llama-b', 'prefill', 0);
        this.target = w.address;
        this.firedAtMs = Date.now();
        // Its side channel answers block reads late first, and the kill waits for a prefill it answered: so it lands
        // while a decode worker still has its KV to read (what a crash under load does), certain even at CI size.
        w.sim.setFaults({ transferDelayMs: KILL_READ_DELAY_MS });
        await prefillAnsweredBy(t, w.address, t.harness.accessLog().length, KILL_READ_DELAY_MS);
        await w.sim.close();
        return `killed prefill worker llama-b #0 (vLLM behind ${w.address})`;
      },
    },
    {
      at: Math.floor(n * 0.75),
      kind: 'reload',
      fired: false,
      async run() {
        this.firedAtMs = Date.now();
        const table = parseYaml(await readFile(t.routeTablePath, 'utf8')) as { models: Record<string, { rollout: { weight: number } }> };
        for (const m of Object.values(table.models)) m.rollout.weight = 60;
        await writeFile(t.routeTablePath, toYaml(table));
        const r = await t.gate.policy.reload('load test');
        return `reloaded the route table (candidate weight 30% -> 60%): ${r.ok ? `applied, version ${r.version}` : `rejected: ${r.message}`}`;
      },
    },
  ];
}

/** Resolves shortly after a prefill leg to `address` answered 200 (one logged after entry `from`), or after `maxMs`. */
async function prefillAnsweredBy(t: Topology, address: string, from: number, maxMs: number): Promise<void> {
  const until = Date.now() + maxMs;
  const answered = () =>
    t.harness
      .accessLog()
      .slice(from)
      .some((e) => e.listener === 'internal' && e.upstreamHost === address && e.status === 200);
  while (!answered() && Date.now() < until) await new Promise((r) => setTimeout(r, 10));
  await new Promise((r) => setTimeout(r, 50)); // its decode side is reading the KV now
}
