/**
 * One upstream read shared by every request that can use it. A request needs evidence read no earlier than some
 * moment of its own (its arrival, the start of its transfer window, its first output); a read already in flight
 * that started at or after that moment is exactly such evidence, so it is joined instead of repeated. Under
 * concurrency this turns one read per request into one read per burst, off the worker's and the sidecar's CPU;
 * a lone request still makes its own read.
 */
export class SharedRead<T> {
  readonly #readOnce: () => Promise<T>;
  readonly #clock: () => number;
  /** The newest read in flight and when it started. */
  #inFlight: { readonly startedAt: number; readonly value: Promise<T> } | undefined;

  /** `readOnce` must not reject: failures are values of `T`. */
  constructor(readOnce: () => Promise<T>, clock: () => number = () => performance.now()) {
    this.#readOnce = readOnce;
    this.#clock = clock;
  }

  /**
   * A value read no earlier than `notBefore` (the clock's time). `signal` abandons this caller's wait, answering
   * `abandoned`, never the read others share.
   */
  read(notBefore: number, signal: AbortSignal, abandoned: T): Promise<T> {
    if (signal.aborted) return Promise.resolve(abandoned);
    const shared = this.#inFlight;
    const value = shared !== undefined && shared.startedAt >= notBefore ? shared.value : this.#start();
    return new Promise((resolve) => {
      const onAbort = (): void => resolve(abandoned);
      signal.addEventListener('abort', onAbort, { once: true });
      void value.then(resolve).finally(() => signal.removeEventListener('abort', onAbort));
    });
  }

  #start(): Promise<T> {
    const startedAt = this.#clock();
    const value = this.#readOnce().finally(() => {
      if (this.#inFlight?.value === value) this.#inFlight = undefined;
    });
    this.#inFlight = { startedAt, value };
    return value;
  }
}
