/**
 * Counter increments summed in plain numbers on the request path and added to their prom-client counter when it is
 * collected (a scrape, or a test reading the registry). prom-client's own `inc(labels)` hashes and validates a label
 * object on every call; the gate counts three messages and a decision per request, so that cost is paid per scrape
 * instead. What a scrape reads is exact: everything counted before it is flushed first.
 */
import { Counter, type CounterConfiguration } from 'prom-client';

interface Pending {
  readonly values: readonly string[];
  n: number;
}

/** A prom-client counter (same name, help and labels) whose request-path increments are summed until collected. */
export class PendingCounter<L extends string> {
  /** The registered counter; read it as any other (its `collect` flushes what is pending). */
  readonly counter: Counter<L>;
  readonly #names: readonly L[];
  /** By first, second and third label value: no joined key, so no two label sets can ever share an entry. */
  readonly #pending = new Map<string, Map<string, Map<string, Pending>>>();
  readonly #all: Pending[] = [];

  constructor(config: Omit<CounterConfiguration<L>, 'collect'> & { readonly labelNames: readonly L[] }) {
    this.#names = config.labelNames;
    const flush = (counter: Counter<L>): void => this.#flushInto(counter);
    this.counter = new Counter<L>({
      ...config,
      collect() {
        flush(this);
      },
    });
  }

  /** Count one with these label values, in `labelNames` order (fixed arity: no array per call). */
  inc(a: string, b = '', c = ''): void {
    let byB = this.#pending.get(a);
    if (byB === undefined) {
      byB = new Map();
      this.#pending.set(a, byB);
    }
    let byC = byB.get(b);
    if (byC === undefined) {
      byC = new Map();
      byB.set(b, byC);
    }
    const p = byC.get(c);
    if (p !== undefined) {
      p.n += 1;
      return;
    }
    const fresh = { values: [a, b, c], n: 1 };
    byC.set(c, fresh);
    this.#all.push(fresh);
  }

  #flushInto(counter: Counter<L>): void {
    for (const p of this.#all) {
      if (p.n === 0) continue;
      const labels: Partial<Record<L, string>> = {};
      this.#names.forEach((name, i) => {
        labels[name] = p.values[i] ?? '';
      });
      counter.inc(labels, p.n);
      p.n = 0;
    }
  }
}
