/**
 * Which fault of a load-with-faults run made a request visibly fail. The run's targets are zero for the planned
 * decode drain and for the prefill worker killed mid-leg, so each refusal or visible failure is traced to the fault
 * it touched, from what the data plane recorded:
 *
 * - **drain**: after the drain fired, a refusal with code `draining`, or any refusal/failure the public listener
 *   sent to the drained decode endpoint.
 * - **prefill kill**: after the kill fired, a refusal/failure whose prefill leg (an internal-listener request under
 *   the gate's request id, which every kvgate error body carries as `request_id`) went to the killed endpoint, on
 *   any attempt.
 *
 * Anything else (e.g. a reset on the public side with no trace of either endpoint) is not attributed to them.
 */
import type { AccessLogEntry } from '../harness/access-log.js';

export type FaultKind = 'drain' | 'prefill_kill' | 'reload';

/** A request that was not served: our id (`load-N`, the public listener's), the gate's id when known, how it ended. */
export interface UnservedRequest {
  readonly kind: 'refused' | 'failed';
  readonly id: string;
  readonly gateId?: string;
  readonly code?: string;
  readonly reason?: string;
  readonly message?: string;
  readonly endedAtMs: number;
}

export interface FiredFault {
  readonly kind: FaultKind;
  /** `ip:port` of the endpoint hit, as the route table (and the access log's upstream host) names it. */
  readonly target?: string;
  /** Unset: the fault never fired. */
  readonly firedAtMs?: number;
}

/** One line per request each fault made visibly fail (`load-N: <code or reason>: <message>`). */
export interface FaultAttribution {
  readonly drain: readonly string[];
  readonly prefillKill: readonly string[];
}

/** Attribute each unserved request to the drain and/or the prefill kill (see the file comment for the rules). */
export function attributeToFaults(
  unserved: readonly UnservedRequest[],
  faults: readonly FiredFault[],
  log: readonly AccessLogEntry[],
): FaultAttribution {
  const drain = faults.find((f) => f.kind === 'drain' && f.firedAtMs !== undefined);
  const kill = faults.find((f) => f.kind === 'prefill_kill' && f.firedAtMs !== undefined);
  const publicHost = new Map<string, string>();
  const legHosts = new Map<string, string[]>();
  for (const e of log) {
    if (e.upstreamHost === undefined) continue;
    if (e.listener === 'public') publicHost.set(e.requestId, e.upstreamHost);
    else legHosts.set(e.requestId, [...(legHosts.get(e.requestId) ?? []), e.upstreamHost]);
  }
  const line = (u: UnservedRequest): string =>
    `${u.id}: ${u.code ?? u.reason ?? 'failed'}${u.message === undefined ? '' : `: ${u.message}`}`;
  const after = (f: FiredFault | undefined, u: UnservedRequest): f is FiredFault => f !== undefined && u.endedAtMs >= f.firedAtMs!;
  return {
    drain: unserved.filter((u) => after(drain, u) && (u.code === 'draining' || publicHost.get(u.id) === drain.target)).map(line),
    prefillKill: unserved
      .filter((u) => after(kill, u) && u.gateId !== undefined && (legHosts.get(u.gateId) ?? []).includes(kill.target ?? ''))
      .map(line),
  };
}
