/**
 * Admission like vLLM's scheduler at the level kvgate can observe: at most `maxNumSeqs` requests run, a request
 * also needs its KV blocks, and the rest wait in FIFO order (`vllm:num_requests_waiting`).
 *
 * `tryStart` allocates synchronously and returns false when the blocks are not there, so no two admissions can
 * race for the same free blocks. Callers `poke()` after freeing blocks outside a request (lease expiry, notify).
 */
export interface Admission {
  /** Give the slot back (idempotent). */
  release(): void;
}

interface Waiter {
  readonly tryStart: () => boolean;
  readonly resolve: (a: Admission) => void;
  readonly reject: (e: unknown) => void;
}

export class Scheduler {
  readonly #maxRunning: number;
  readonly #onChange: (running: number, waiting: number) => void;
  readonly #queue: Waiter[] = [];
  #running = 0;

  constructor(maxRunning: number, onChange: (running: number, waiting: number) => void = () => {}) {
    this.#maxRunning = maxRunning;
    this.#onChange = onChange;
  }

  get running(): number {
    return this.#running;
  }

  get waiting(): number {
    return this.#queue.length;
  }

  /** Wait for a slot and for `tryStart()` to succeed. Rejects with the signal's reason when aborted while waiting. */
  admit(tryStart: () => boolean, signal?: AbortSignal): Promise<Admission> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.#queue.length === 0 && this.#running < this.#maxRunning && tryStart()) {
      return Promise.resolve(this.#start());
    }
    return new Promise<Admission>((resolve, reject) => {
      const waiter: Waiter = { tryStart, resolve, reject };
      this.#queue.push(waiter);
      this.#emit();
      signal?.addEventListener(
        'abort',
        () => {
          const i = this.#queue.indexOf(waiter);
          if (i >= 0) {
            this.#queue.splice(i, 1);
            this.#emit();
            reject(signal.reason);
          }
        },
        { once: true },
      );
    });
  }

  /** Start waiting requests that now fit, in order; the head blocks the queue (no overtaking). */
  poke(): void {
    while (this.#queue.length > 0 && this.#running < this.#maxRunning) {
      const head = this.#queue[0]!;
      if (!head.tryStart()) break;
      this.#queue.shift();
      head.resolve(this.#start());
    }
    this.#emit();
  }

  #start(): Admission {
    this.#running++;
    this.#emit();
    let released = false;
    return {
      release: () => {
        if (released) return;
        released = true;
        this.#running--;
        this.poke();
      },
    };
  }

  #emit(): void {
    this.#onChange(this.#running, this.#queue.length);
  }
}
