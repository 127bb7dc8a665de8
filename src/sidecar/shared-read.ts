/**
 * One upstream read shared by every request that can use it. A request needs evidence read no earlier than some
 * moment of its own (its arrival, the start of its transfer window, its first output); a read already in flight
 * that started at or after that moment is exactly such evidence, so it is joined instead of repeated. Under
 * concurrency this turns one read per request into one read per burst, off the worker's and the sidecar's CPU;
 * a lone request still makes its own read.
 *
 * A read starts one event-loop turn after it is first asked for (`setImmediate`, after the I/O callbacks of the
 * turn), not at once. Every request that arrives in the same turn joins it (its moment is in the past, the read's
 * start is not), and the work that is on a request's critical path (the prefill leg, sent from the same callbacks)
 * goes out before it. What a read tells is unchanged: its start is taken when it really starts.
 */
export class SharedRead<T> {
  readonly #readOnce: () => Promise<T>;
  readonly #clock: () => number;
  /** The newest read, pending (`startedAt` undefined: it starts after this turn) or in flight. */
  #current: { startedAt: number | undefined; value: Promise<T> } | undefined;

  /** `readOnce` must not reject: failures are values of `T`. */
  constructor(readOnce: () => Promise<T>, clock: () => number = () => performance.now()) {
    this.#readOnce = readOnce;
    this.#clock = clock;
  }

  /**
   * A value read no earlier than `notBefore` (the clock's time, not in the future). `signal` abandons this caller's
   * wait, answering `abandoned`, never the read others share.
   */
  read(notBefore: number, signal: AbortSignal, abandoned: T): Promise<T> {
    if (signal.aborted) return Promise.resolve(abandoned);
    const current = this.#current;
    const joinable = current !== undefined && (current.startedAt === undefined || current.startedAt >= notBefore);
    const value = joinable ? current.value : this.#start();
    return new Promise((resolve) => {
      const onAbort = (): void => resolve(abandoned);
      signal.addEventListener('abort', onAbort, { once: true });
      void value.then(resolve).finally(() => signal.removeEventListener('abort', onAbort));
    });
  }

  #start(): Promise<T> {
    const entry: { startedAt: number | undefined; value?: Promise<T> } = { startedAt: undefined };
    const value = nextTurn()
      .then(() => {
        entry.startedAt = this.#clock();
        return this.#readOnce();
      })
      .finally(() => {
        if (this.#current === entry) this.#current = undefined;
      });
    this.#current = Object.assign(entry, { value });
    return value;
  }
}

/** After the I/O callbacks of this event-loop turn (other requests' arrivals among them). */
export function nextTurn(): Promise<void> {
  return new Promise((r) => setImmediate(r));
}
