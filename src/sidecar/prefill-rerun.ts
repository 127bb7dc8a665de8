/**
 * The decode side's prefill leg as decode-role.ts runs it: timed, and run once more on another prefill endpoint of
 * the bound group when the decode worker could not load the first leg's KV before any byte reached the client.
 *
 * Why that second run is safe: it goes through Envoy's internal listener like the first, so the gate's hop check
 * verifies the contract (its group) and picks a prefill endpoint of that group other than the one excluded; the new
 * answer is attested by its prefill sidecar and checked against the contract, this worker's fingerprint and its own
 * token count exactly like the first; the decode worker's NIXL handshake checks again; and nothing had been sent to
 * the client, so it sees one answer, computed once from KV it was allowed to use.
 *
 * When it runs: a prefill worker that dies after its prefill and before the decode worker has read its blocks (a
 * crash, an OOM kill, a node loss) leaves KV that can no longer be read. Under `onTransferFailure: fail` the client
 * would get 502 `worker_error` for a fault of one worker of a group that has others. At most once per request, and
 * when the gate finds no other prefill endpoint the client gets the first failure, as without a rerun;
 * never in `direct` mode (the signed contract names one prefill endpoint, and no other may be called), never for a
 * coordinated prefill (a P/D coordinator in front ran it), never after a reported compatibility-hash mismatch (a
 * safety signal the operator must see, not a fault to route around), never under `recompute` (the worker then
 * prefills locally instead, as configured).
 */
import type { KvgateError, Result } from '../errors.js';
import { ok } from '../errors.js';
import type { SidecarConfig } from './config.js';
import type { IncomingCall, SidecarContext } from './context.js';
import type { Outcome } from './outcome.js';
import { runPrefillLeg, type PrefillLegInput } from './prefill-leg.js';
import { inChildSpan } from './spans.js';

/** Why a prefill leg ran again (the `reason` label of `kvgate_sidecar_prefill_reruns_total`). */
export const RERUN_REASONS = ['kv_load_failed', 'silent_recompute'] as const;
export type RerunReason = (typeof RERUN_REASONS)[number];

/** What decodeAfterPrefill hands back instead of an answer when the leg may and should run again. */
export interface Rerun {
  readonly rerun: RerunReason;
  readonly message: string;
  /** Answer the client with the first failure, as without a rerun (when the second leg finds no endpoint). */
  readonly answer: () => Promise<Outcome>;
}

export interface TimedLeg {
  readonly body: Record<string, unknown>;
  readonly ms: number;
  /** The prefill endpoint that answered, when its sidecar named itself (`x-kvgate-served-by`). */
  readonly servedBy: string | undefined;
}

/** Whether this request's prefill leg may run a second time at all (see the file comment). */
export function mayRerunPrefill(config: Pick<SidecarConfig, 'prefill' | 'onTransferFailure'>, coordinated: boolean): boolean {
  return !coordinated && config.prefill.via !== 'direct' && config.onTransferFailure === 'fail';
}

/**
 * Whether a KV load failure the worker reported may be answered with a second prefill: not when it says the two
 * sides are incompatible (vLLM's "NIXL compatibility hash mismatch", docs/vllm-disaggregation.md §5).
 */
export function rerunsAfter(message: string): boolean {
  return !/compatib/i.test(message);
}

/** Count and log one second run (one line per request that gets one). */
export function noteRerun(ctx: SidecarContext, call: IncomingCall, r: Rerun, excluded: readonly string[]): void {
  ctx.metrics.prefillReruns.inc({ reason: r.rerun });
  call.logger.warn(
    { event: 'prefill_rerun', reason: r.rerun, excluded, cause: r.message },
    'the decode worker could not load the prefilled KV before any output; running the prefill leg again on another prefill endpoint of the bound group',
  );
}

/** The prefill leg, timed into `kvgate_sidecar_prefill_leg_seconds`; its duration comes back for the added-TTFT figure. */
export async function timedPrefillLeg(
  ctx: SidecarContext,
  call: IncomingCall,
  input: PrefillLegInput,
): Promise<Result<TimedLeg, KvgateError>> {
  const started = performance.now();
  // The leg's traceparent reaches the gate's hop check and, through it, the prefill sidecar.
  const leg = await inChildSpan(
    ctx,
    call,
    'kvgate.sidecar prefill leg',
    input.headers,
    (headers) => runPrefillLeg(ctx, { ...input, headers }),
    (r) => !r.ok,
  );
  const ms = performance.now() - started;
  ctx.metrics.prefillLegSeconds.observe({ outcome: leg.ok ? 'ok' : 'failed' }, ms / 1000);
  return leg.ok ? ok({ ...leg.value, ms }) : leg;
}
