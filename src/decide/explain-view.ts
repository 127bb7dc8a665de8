/**
 * The worker view and queue view `kvgate explain` decides with: the route table's declared endpoints (verified,
 * idle), changed per endpoint by `--worker ADDR=STATE[,STATE]` flags, and queues described by `--queue-depth` and
 * `--expected-wait-ms`. No network: the point is to see what the gate would do in a situation the author describes.
 */
import { closestMatch } from '../config/issues.js';
import { err, ok, type Result } from '../errors.js';
import type { CompiledRouteTable } from '../policy/compile.js';
import type { QueueView } from './types.js';
import type { EndpointState, WorkerView } from './worker-view.js';

/** One endpoint's described state; unset fields keep the declared default. */
export interface EndpointPatch {
  readonly busy?: boolean;
  readonly inFlight?: number;
  readonly draining?: boolean;
  readonly verified?: boolean;
  /** 'unobserved' (no fingerprint seen yet) or 'foreign' (runs another group's fingerprint). */
  readonly fingerprint?: 'unobserved' | 'foreign';
}

/** The states `--worker` accepts, for help text and error messages. */
export const WORKER_STATES = ['busy', 'inflight=N', 'draining', 'unverified', 'unobserved', 'foreign'] as const;

/** Parse `ADDR=STATE[,STATE...]`, e.g. `10.0.4.1:9090=busy` or `10.0.2.1:9090=inflight=3,draining`. */
export function parseWorkerFlag(flag: string): Result<{ address: string; patch: EndpointPatch }, string> {
  const i = flag.indexOf('=');
  if (i <= 0)
    return err(`--worker ${JSON.stringify(flag)}: write ADDR=STATE, e.g. 10.0.4.1:9090=busy (states: ${WORKER_STATES.join(', ')})`);
  const address = flag.slice(0, i);
  const patch: { -readonly [K in keyof EndpointPatch]: EndpointPatch[K] } = {};
  for (const state of flag.slice(i + 1).split(',')) {
    const m = /^inflight=(\d+)$/.exec(state);
    if (m) patch.inFlight = Number(m[1]);
    else if (state === 'busy') patch.busy = true;
    else if (state === 'draining') patch.draining = true;
    else if (state === 'unverified') patch.verified = false;
    else if (state === 'unobserved' || state === 'foreign') patch.fingerprint = state;
    else {
      const guess = closestMatch(state, WORKER_STATES);
      return err(
        `--worker ${JSON.stringify(flag)}: unknown state ${JSON.stringify(state)}; ${guess === undefined ? '' : `did you mean "${guess}"? `}use ${WORKER_STATES.join(', ')}`,
      );
    }
  }
  return ok({ address, patch });
}

/** Every endpoint address the table declares, for checking `--worker` flags. */
export function declaredAddresses(table: CompiledRouteTable): Set<string> {
  return new Set([...table.pools.values()].flatMap((p) => p.endpoints.map((e) => e.address)));
}

/** The declared view with the patches applied ("busy" means at its pool's in-flight limit). */
export function createExplainWorkerView(table: CompiledRouteTable, patches: ReadonlyMap<string, EndpointPatch>): WorkerView {
  return {
    endpoints(poolName) {
      const pool = table.pools.get(poolName);
      if (pool === undefined) return [];
      return pool.endpoints.map((e): EndpointState => {
        const p = patches.get(e.address) ?? {};
        const fingerprint =
          p.fingerprint === 'unobserved' ? null : p.fingerprint === 'foreign' ? `foreign-${e.fingerprint}` : e.fingerprint;
        return {
          address: e.address,
          fingerprint,
          verified: p.verified ?? true,
          draining: p.draining ?? false,
          inFlight: p.busy === true ? pool.maxInFlightPerEndpoint : (p.inFlight ?? 0),
          observedAtMs: 0,
        };
      });
    },
  };
}

/** Every group's queue holds `depth` requests: all the live gate's queue step reads too. */
export function createExplainQueueView(depth: number): QueueView {
  return { depth: () => depth };
}
