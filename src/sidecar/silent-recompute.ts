/**
 * The decode side's check, when the first output of a transferred request is about to reach the client, that its
 * worker did not silently recompute the prompt (transfer-watch.ts says how a rise of the failed-transfer counter is
 * read). Only one verdict changes the answer: a rise pinned on this request under `onTransferFailure: fail`, which
 * refuses it before any output. So the output waits for the counter only when that verdict is possible (no other
 * transfer overlapped the window, and the policy is `fail`); otherwise the read runs beside the stream and only
 * counts and logs what it finds. A counter that cannot rule a failure out (unreadable after the transfer, or reset)
 * is `unverified`: counted and logged, never taken for a clean transfer.
 */
import type { IncomingCall, SidecarContext } from './context.js';
import { judgeRise, type TransferWindow } from './transfer-watch.js';

export const SILENT_RECOMPUTE =
  'the decode worker failed to load the prefilled KV and recomputed the prompt itself (its vllm:nixl_num_failed_transfers rose; ' +
  'vLLM kv_load_failure_policy "recompute", the default before vLLM PR #34896)';

/**
 * The relay's `beforeCommit` for one transfer: resolves to a refusal message, or undefined to let the output go.
 * `silent.seen` is set when the worker recomputed this request.
 */
export function silentRecomputeCheck(
  ctx: Pick<SidecarContext, 'config' | 'metrics' | 'failedTransfers' | 'closed'>,
  call: Pick<IncomingCall, 'signal' | 'logger'>,
  failedBefore: number | undefined,
  window: TransferWindow,
  silent: { seen: boolean },
): () => Promise<string | undefined> {
  const fail = ctx.config.onTransferFailure === 'fail';
  const record = (verdict: ReturnType<typeof judgeRise>): string | undefined => {
    if (verdict === 'none') return undefined;
    if (verdict === 'unverified') {
      // Not clean, and not a failure either: counted and logged, the output goes (transfer-watch.ts `judgeRise`).
      ctx.metrics.silentRecomputes.inc({ result: 'unverified' });
      call.logger.warn(
        { event: 'silent_recompute_unverified' },
        "the worker's failed-transfer counter could not be read again, or went down (a reset), after this transfer: it may have recomputed this request",
      );
      return undefined;
    }
    if (verdict === 'unattributed') {
      ctx.metrics.silentRecomputes.inc({ result: 'unattributed' });
      call.logger.warn(
        { event: 'silent_recompute_unattributed' },
        'the worker counted a failed KV transfer while other transfers ran too; it may have recomputed this request',
      );
      return undefined;
    }
    silent.seen = true;
    ctx.metrics.silentRecomputes.inc({ result: fail ? 'refused' : 'served' });
    call.logger.warn({ event: 'silent_recompute', action: ctx.config.onTransferFailure }, SILENT_RECOMPUTE);
    return fail ? SILENT_RECOMPUTE : undefined;
  };
  return async () => {
    if (failedBefore === undefined) {
      window.end();
      return undefined;
    }
    const firstOutput = performance.now();
    if (window.overlapped || !fail) {
      // No verdict can change the answer: the output goes now, the read only counts.
      const overlapped = window.overlapped;
      window.end();
      void ctx.failedTransfers.read(firstOutput, ctx.closed).then((after) => {
        if (!ctx.closed.aborted) record(judgeRise(failedBefore, after, overlapped));
      });
      return undefined;
    }
    const after = await ctx.failedTransfers.read(firstOutput, call.signal);
    const verdict = judgeRise(failedBefore, after, window.overlapped);
    window.end(); // the KV load is over once output flows: later transfers do not blur this one
    // A caller that left has no answer to change; its abandoned read is not an unreadable counter.
    return call.signal.aborted ? undefined : record(verdict);
  };
}
