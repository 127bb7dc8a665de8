/**
 * The decision core measured in-process on one thread, with nothing else in the way: raw request facts (body
 * bytes included, so JSON parsing and limits count) -> `decideRequest` -> a Decision with minted contract,
 * binding and cache salt. This is the figure the "5,000 decisions per second on one core" target is about,
 * and the one that attributes the gate's cost to kvgate's own logic rather than to gRPC.
 */
import type { KeyRing } from '../../src/contract/keys.js';
import { decideRequest, type RawRequestFacts } from '../../src/decide/decide-request.js';
import type { WorkerView } from '../../src/decide/worker-view.js';
import type { CompiledRouteTable } from '../../src/policy/compile.js';
import type { BenchRequest } from './requests.js';

export interface PureRun {
  readonly decisions: number;
  readonly elapsedMs: number;
  readonly nsPerDecision: number;
  readonly decisionsPerSecond: number;
  /** Decision kinds seen (`route`, `refuse:<code>`, `hop`): a bench that measures refusals must say so. */
  readonly outcomes: Readonly<Record<string, number>>;
}

/** Raw facts as src/envoy/inbound.ts builds them from an ext_proc stream (pseudo-headers included). */
export function rawFactsOf(req: BenchRequest): RawRequestFacts {
  return {
    requestId: req.requestId,
    method: req.headers[':method'] ?? 'POST',
    path: req.headers[':path'] ?? '/',
    headers: req.headers,
    metadata: {},
    body: new Uint8Array(req.body),
    bodyTruncated: false,
  };
}

export interface PureRunOptions {
  readonly table: CompiledRouteTable;
  readonly view: WorkerView;
  readonly keys: KeyRing;
  /** Pre-built facts, cycled through (building them is not part of the measured cost). */
  readonly facts: readonly RawRequestFacts[];
  readonly durationMs: number;
  readonly maxDecisions?: number;
  /** Injected clock for contract issue times; fixed so every iteration does identical work. */
  readonly nowMs?: number;
}

/** Run decisions back to back for `durationMs` (checked every 64 decisions) and report the rate. */
export function measureDecisions(opts: PureRunOptions): PureRun {
  const outcomes: Record<string, number> = {};
  // As the gate decides (admission.ts: `trace: deps.traceDecisions === true`, off unless asked): no step-by-step trace.
  const ctx = { nowMs: opts.nowMs ?? 1_700_000_000_000, keys: opts.keys, trace: false };
  const max = opts.maxDecisions ?? Number.MAX_SAFE_INTEGER;
  const n = opts.facts.length;
  let i = 0;
  const t0 = process.hrtime.bigint();
  const deadline = t0 + BigInt(Math.round(opts.durationMs * 1e6));
  let now = t0;
  while (i < max) {
    const end = Math.min(max, i + 64);
    for (; i < end; i++) {
      const d = decideRequest(opts.facts[i % n]!, opts.table, opts.view, ctx).decision;
      const key = d.kind === 'refuse' ? `refuse:${d.code}` : d.kind;
      outcomes[key] = (outcomes[key] ?? 0) + 1;
    }
    now = process.hrtime.bigint();
    if (now >= deadline) break;
  }
  const elapsedNs = Number(now - t0);
  return { decisions: i, elapsedMs: elapsedNs / 1e6, nsPerDecision: elapsedNs / i, decisionsPerSecond: (i * 1e9) / elapsedNs, outcomes };
}
