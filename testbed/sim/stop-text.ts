/**
 * Generated text with stop strings: finds the first stop string (checked once `min_tokens` are out), truncates
 * before it, and while streaming holds back a tail that could still become a stop string.
 */
export class StopText {
  #text = '';
  #emitted = 0;
  #end: number | null = null;
  readonly #stop: readonly string[];
  readonly #holdback: number;

  constructor(stop: readonly string[], streaming: boolean) {
    this.#stop = stop.filter((s) => s !== '');
    this.#holdback = streaming ? Math.max(0, ...this.#stop.map((s) => s.length - 1)) : 0;
  }

  /** Append a token's text; returns the stop string it completed, if any. */
  push(piece: string, checkStop: boolean): string | null {
    const from = Math.max(0, this.#text.length - Math.max(0, ...this.#stop.map((s) => s.length)));
    this.#text += piece;
    if (!checkStop) return null;
    let best: { at: number; s: string } | null = null;
    for (const s of this.#stop) {
      const at = this.#text.indexOf(s, from);
      if (at >= 0 && (best === null || at < best.at)) best = { at, s };
    }
    if (best) this.#end = best.at;
    return best?.s ?? null;
  }

  /** Text that may be emitted now. */
  take(): string {
    const limit = this.#end ?? this.#text.length - this.#holdback;
    if (limit <= this.#emitted) return '';
    const piece = this.#text.slice(this.#emitted, limit);
    this.#emitted = limit;
    return piece;
  }

  /** Everything not yet emitted, at the end of generation. */
  flush(): string {
    const end = this.#end ?? this.#text.length;
    const piece = end > this.#emitted ? this.#text.slice(this.#emitted, end) : '';
    this.#emitted = Math.max(this.#emitted, end);
    return piece;
  }
}
