/**
 * What the harness records per finished request, like one Envoy access-log line; tests read it through
 * `EnvoyHarness.accessLog()` to check response code details, flags and the upstream a request went to.
 */
import type { Json } from './ext-proc-messages.js';

export interface AccessLogEntry {
  readonly listener: string;
  readonly requestId: string;
  readonly method: string;
  readonly path: string;
  /** Status sent downstream; undefined when the stream was reset before a complete response. */
  readonly status: number | undefined;
  /** `%RESPONSE_CODE_DETAILS%`: `via_upstream`, or why a local reply / reset happened. */
  readonly responseCodeDetails: string;
  /** Envoy response flags: NR, NC, UH, UF, UT, DC. */
  readonly responseFlags: readonly string[];
  readonly upstreamCluster: string | undefined;
  readonly upstreamHost: string | undefined;
  /** The request's dynamic metadata at the end (only namespaces ext_proc was allowed to write). */
  readonly dynamicMetadata: Readonly<Record<string, Record<string, Json>>>;
  readonly reset: boolean;
}

/** The entries of one harness, with a way to wait for requests that are still finishing. */
export class AccessLog {
  readonly #entries: AccessLogEntry[] = [];
  readonly #waiters = new Set<() => void>();

  push(entry: AccessLogEntry): void {
    this.#entries.push(entry);
    for (const w of [...this.#waiters]) w();
  }

  entries(): readonly AccessLogEntry[] {
    return [...this.#entries];
  }

  /** Resolves once at least `n` entries exist; rejects after `timeoutMs` so a stuck request fails the test. */
  waitFor(n: number, timeoutMs: number): Promise<readonly AccessLogEntry[]> {
    return new Promise((resolve, reject) => {
      const check = (): boolean => {
        if (this.#entries.length < n) return false;
        this.#waiters.delete(check);
        clearTimeout(timer);
        resolve(this.entries());
        return true;
      };
      const timer = setTimeout(() => {
        this.#waiters.delete(check);
        reject(new Error(`waited ${timeoutMs} ms for ${n} access log entries, have ${this.#entries.length}`));
      }, timeoutMs);
      if (!check()) this.#waiters.add(check);
    });
  }
}
