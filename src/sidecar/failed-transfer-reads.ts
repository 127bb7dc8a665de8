/**
 * Reading the decode worker's failed-transfer counter cheaply enough to sit on the time-to-first-token path
 * (transfer-watch.ts says why it is read at all: once before a transfer, once when its first output is about to
 * reach the client).
 *
 * Two costs are cut, neither by reading less evidence:
 * - **Only the counter is asked for.** `GET /metrics?name[]=...` is prometheus_client's own filter
 *   (prometheus/client_python `prometheus_client/exposition.py` `_bake_output`, at 021ef04: `name[]` selects a
 *   `restricted_registry`). A vLLM full exposition is tens of kilobytes of histograms; the filtered one is a few
 *   lines. Not every vLLM answers it, so the reader learns what its worker does and never trusts an empty filter:
 *   - versions whose `/metrics` route is prometheus-fastapi-instrumentator's `expose()` (vllm-project/vllm
 *     `vllm/v1/metrics/prometheus.py` `mount_metrics` at 0fa7aac, `vllm/entrypoints/serve/instrumentator/metrics.py`
 *     `attach_router` at 02a69ad) ignore the query and send everything (trallnag/prometheus-fastapi-instrumentator
 *     `instrumentation.py` `expose` at 069ffff calls `generate_latest(registry)`): the counter is there, only no
 *     bytes are saved;
 *   - versions that leave `/metrics` to `make_asgi_app` alone honour it;
 *   - under `PROMETHEUS_MULTIPROC_DIR` (several API server processes), vLLM's registry is a bare `CollectorRegistry`
 *     with a `MultiProcessCollector` (`get_prometheus_registry`, same file), which registers no names, so a
 *     restricted registry finds no collector (client_python `prometheus_client/registry.py` `RestrictedRegistry`
 *     at 009d885) and the filtered answer is empty.
 *   A filtered answer without the counter is therefore followed at once by a full read, and the reader stops
 *   filtering for this worker (also where the worker has no counter at all: one read per check, as before). The
 *   evidence is always what a full read would have given.
 * - **Concurrent reads are shared** (shared-read.ts): a caller asks for a value read no earlier than the start of its
 *   transfer window, or than its first output.
 */
import { callUpstream, type FetchFn } from './http-io.js';
import { SharedRead } from './shared-read.js';
import { failedTransfersIn, FAILED_TRANSFERS } from './transfer-watch.js';

/** What reading the counter needs of the sidecar (structural, so this module does not import the context back). */
export interface WorkerMetricsAccess {
  readonly fetch: FetchFn;
  readonly workerUrl: string;
  readonly workerAuth: Readonly<Record<string, string>>;
  readonly timeoutMs: number;
  /** The sidecar is closing: shared reads stop. */
  readonly closed: AbortSignal;
  readonly clock?: () => number;
}

/** `?name[]=a&name[]=b`, percent-encoded as a browser would send it (prometheus_client's `parse_qs` decodes it). */
const FILTER_QUERY = FAILED_TRANSFERS.map((n) => `${encodeURIComponent('name[]')}=${encodeURIComponent(n)}`).join('&');

type Mode = 'filtered' | 'full';

export class FailedTransferReads {
  readonly #access: WorkerMetricsAccess;
  readonly #shared: SharedRead<number | undefined>;
  #mode: Mode = 'filtered';

  constructor(access: WorkerMetricsAccess) {
    this.#access = access;
    this.#shared = new SharedRead(() => this.#readOnce(), access.clock);
  }

  /** Whether reads currently ask for the counter alone (false once the worker showed it does not filter). */
  get filtering(): boolean {
    return this.#mode === 'filtered';
  }

  /**
   * The counter's total from a read that started at or after `notBefore` (`performance.now()` time), or undefined
   * when the worker did not answer or has no counter. `signal` abandons this caller's wait, not a read others share.
   */
  read(notBefore: number, signal: AbortSignal): Promise<number | undefined> {
    return this.#shared.read(notBefore, signal, undefined);
  }

  async #readOnce(): Promise<number | undefined> {
    if (this.#mode === 'filtered') {
      const filtered = await this.#get(`/metrics?${FILTER_QUERY}`);
      // No answer is no evidence, as with a full read; an answer without the counter is not trusted (see above).
      if (!filtered.answered || filtered.value !== undefined) return filtered.value;
      this.#mode = 'full';
    }
    return (await this.#get('/metrics')).value;
  }

  async #get(path: string): Promise<{ answered: boolean; value: number | undefined }> {
    const a = this.#access;
    const reply = await callUpstream(a.fetch, `${a.workerUrl}${path}`, {
      timeoutMs: a.timeoutMs,
      signal: a.closed,
      headers: { ...a.workerAuth },
    });
    if (!reply.ok || reply.value.status !== 200) return { answered: false, value: undefined };
    return { answered: true, value: failedTransfersIn(reply.value.text) };
  }
}
