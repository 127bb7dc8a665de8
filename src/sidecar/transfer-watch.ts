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
 * Pure: the counter's total in a Prometheus text, undefined when the worker does not export it
 * or a line of it is malformed. It is summed over engines: under data parallelism vLLM's API server carries one series
 * per engine rank it manages (`engine="0"`, `engine="1"`, ...; vllm-project/vllm `vllm/v1/metrics/loggers.py`
 * `per_engine_labelvalues`, `.../kv_connector/v1/nixl/stats.py` `create_metric_per_engine` @bd33ba3), and nothing in
 * an answer says which rank served a request, so a rise on any of them is a rise on this worker. Under several API
 * server processes each step's stats go to one of them only ("Return stats to only one of the front-ends",
 * `vllm/v1/core/sched/scheduler.py` `update_from_output` @b4622cf) and prometheus_client's multiprocess collector adds the
 * processes' counters up (counters carry no `pid` label there), so no failure is counted twice. Only the counter's own
 * lines are parsed: the rest of a full exposition is tens of kilobytes this check does not need, and a malformed line
 * elsewhere does not hide the counter.
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

/**
 * What the counter between two reads means for one request: nothing, this request's failure, someone's, or
 * `unverified` where the second read cannot rule a failure out, so the transfer must not pass as clean:
 * - the counter was read before and is unreadable after (no answer, or a malformed line of it);
 * - it went down. A counter falls only when it is reset, and a reset can hide a rise. vLLM resets it on a running
 *   server when data parallelism scales up: `AsyncLLM.scale_elastic_ep` builds a new `StatLoggerManager` for the new
 *   engine set, "This resets all the prometheus metrics since we unregister during initialization"
 *   (vllm-project/vllm `vllm/v1/engine/async_llm.py` @8ef0b5f; `PrometheusStatLogger` unregisters the `vllm:`
 *   collectors and registers them again at 0).
 * A worker whose counter was unreadable before gives no evidence at all (the check does not start).
 */
export function judgeRise(
  before: number | undefined,
  after: number | undefined,
  overlapped: boolean,
): 'none' | 'mine' | 'unattributed' | 'unverified' {
  if (before === undefined) return 'none';
  if (after === undefined || after < before) return 'unverified';
  if (after === before) return 'none';
  return overlapped ? 'unattributed' : 'mine';
}
