/**
 * Catching a KV transfer the decode worker silently recomputed. vLLM's `kv_load_failure_policy` defaulted to
 * `recompute` until PR #34896 (2026-02-19; `vllm/config/kv_transfer.py`): on those versions a failed load is
 * prefilled again locally and the request answers 200 as if nothing happened, so `onTransferFailure` never fires.
 * What does change is the worker's `vllm:nixl_num_failed_transfers` counter (`_total` as Prometheus' Python client
 * writes it), which vLLM increments for every failed NIXL transfer.
 *
 * The decode sidecar reads that counter before a transfer (in parallel with the prefill leg) and again when the first
 * output is about to reach the client. A rise means some transfer failed in between; it is this request's when no
 * other transfer on this worker overlapped the window (`TransferWatch`). Attributed, it is refused under
 * `onTransferFailure: fail` (before any output) and served under `recompute`; unattributable rises are only counted.
 * A worker without the counter (vLLM before its NIXL metrics) gives no evidence: nothing is refused.
 */
import { callUpstream, type FetchFn } from './http-io.js';
import { parsePrometheusText, samplesNamed } from './prometheus-text.js';

/** The counter's exposition names: prometheus_client's `_total`, and the bare name some exporters keep. */
const FAILED_TRANSFERS = ['vllm:nixl_num_failed_transfers_total', 'vllm:nixl_num_failed_transfers'] as const;

/** Sum of the worker's failed-transfer counter over its engines; undefined when unreadable or absent. */
/** What reading the counter needs of the sidecar's context (structural, so this module does not import it back). */
export interface WorkerMetricsAccess {
  readonly fetch: FetchFn;
  readonly workerUrl: string;
  readonly workerAuth: Readonly<Record<string, string>>;
  readonly config: { readonly probe: { readonly timeoutMs: number } };
}

export async function readFailedTransfers(ctx: WorkerMetricsAccess, signal: AbortSignal): Promise<number | undefined> {
  const reply = await callUpstream(ctx.fetch, `${ctx.workerUrl}/metrics`, {
    timeoutMs: ctx.config.probe.timeoutMs,
    signal,
    headers: { ...ctx.workerAuth },
  });
  if (!reply.ok || reply.value.status !== 200) return undefined;
  return failedTransfersIn(reply.value.text);
}

/** Pure: the counter's total in a Prometheus text, undefined when the worker does not export it. */
export function failedTransfersIn(text: string): number | undefined {
  const parsed = parsePrometheusText(text);
  if (!parsed.ok) return undefined;
  for (const name of FAILED_TRANSFERS) {
    const samples = samplesNamed(parsed.value, name);
    if (samples.length > 0) return samples.reduce((n, s) => n + s.value, 0);
  }
  return undefined;
}

/** One transfer's window, from before its prefill leg to its first output. */
export interface TransferWindow {
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
