/**
 * Catching a KV transfer the decode worker silently recomputed. vLLM's `kv_load_failure_policy` defaulted to
 * `recompute` until PR #34896 (2026-02-19; `vllm/config/kv_transfer.py`): on those versions a failed load is
 * prefilled again locally and the request answers 200 as if nothing happened, so `onTransferFailure` never fires.
 * What does change is the worker's `vllm:nixl_num_failed_transfers` counter (`_total` as Prometheus' Python client
 * writes it), which vLLM increments for every failed NIXL transfer.
 *
 * The decode sidecar reads that counter before a transfer (in parallel with the prefill leg) and again when the first
 * output is about to reach the client (failed-transfer-reads.ts: only the counter is asked for, and concurrent reads
 * are shared). A rise means some transfer failed in between; it is this request's when no other transfer on this
 * worker overlapped the window (`TransferWatch`). Attributed, it is refused under `onTransferFailure: fail` (before
 * any output) and served under `recompute`; unattributable rises are only counted. So when the window is already
 * overlapped at the first output, the output is not held for the second read: it runs beside the stream, and counts.
 * A worker without the counter (vLLM before its NIXL metrics) gives no evidence: nothing is refused.
 */
import { parseSampleLine } from './prometheus-text.js';

/** The counter's exposition names: prometheus_client's `_total`, and the bare name some exporters keep. */
export const FAILED_TRANSFERS = ['vllm:nixl_num_failed_transfers_total', 'vllm:nixl_num_failed_transfers'] as const;

/**
 * Pure: the counter's total (summed over engines) in a Prometheus text, undefined when the worker does not export it
 * or a line of it is malformed. Only the counter's own lines are parsed: the rest of a full exposition is tens of
 * kilobytes this check does not need, and a malformed line elsewhere does not hide the counter.
 */
export function failedTransfersIn(text: string): number | undefined {
  const totals: (number | undefined)[] = FAILED_TRANSFERS.map(() => undefined);
  let from = 0;
  while (from < text.length) {
    let to = text.indexOf('\n', from);
    if (to < 0) to = text.length;
    const i = counterLine(text, from);
    if (i >= 0) {
      const sample = parseSampleLine(text.slice(from, to).trim());
      if (!sample.ok) return undefined;
      totals[i] = (totals[i] ?? 0) + sample.value.value;
    }
    from = to + 1;
  }
  return totals.find((t) => t !== undefined);
}

/** Which counter name the line at `from` is a sample of (-1: none); the name must end at `{`, a space or a tab. */
function counterLine(text: string, from: number): number {
  return FAILED_TRANSFERS.findIndex((name) => {
    if (!text.startsWith(name, from)) return false;
    const next = text[from + name.length];
    return next === '{' || next === ' ' || next === '\t';
  });
}

/** One transfer's window, from before its prefill leg to its first output. */
export interface TransferWindow {
  /** When it began (`performance.now()`): a counter read that started earlier is no evidence about it. */
  readonly startedAt: number;
  /** True once another transfer on this worker ran during this window (a counter rise is then not attributable). */
  readonly overlapped: boolean;
  end(): void;
}

/** The transfers in flight on one decode worker, so a counter rise can be pinned on one of them or on none. */
export class TransferWatch {
  readonly #active = new Set<{ overlapped: boolean }>();

  begin(): TransferWindow {
    const w = { overlapped: this.#active.size > 0 };
    for (const other of this.#active) other.overlapped = true;
    this.#active.add(w);
    const active = this.#active;
    return {
      startedAt: performance.now(),
      get overlapped() {
        return w.overlapped;
      },
      end: () => active.delete(w),
    };
  }
}

/** What a counter rise means for one request: nothing, this request's failure, or someone's. */
export function judgeRise(before: number | undefined, after: number | undefined, overlapped: boolean): 'none' | 'mine' | 'unattributed' {
  if (before === undefined || after === undefined || after <= before) return 'none';
  return overlapped ? 'unattributed' : 'mine';
}
