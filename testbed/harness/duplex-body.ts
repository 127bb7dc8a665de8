/**
 * One direction's body under `FULL_DUPLEX_STREAMED`. Envoy sends a copy of every chunk to the processor and drains
 * the original (`Filter::handleDataStreamedModeBase` in source/extensions/filters/http/ext_proc/ext_proc.cc), so
 * what goes on toward the upstream (or the client) is only what the processor streams back as
 * `streamed_response` chunks, injected into the filter chain (`ProcessorState::handleDuplexStreamedBodyResponse`
 * in processor_state.cc). This holds that output as a `BodyReader`, and the point at which Envoy lets the held
 * headers go on (the filter's `continueIfNecessary`, or the first injected chunk: the filter manager's
 * `injectDecodedDataToFilterChain` continues the headers first).
 *
 * Followed: envoyproxy/envoy main (1.37.0-dev, the tree with `closeGrpcStreamIfLastRespReceived`), as in
 * docs/envoy-ext-proc.md §5 and §14.
 */
import { BodyReader } from './body-reader.js';
import type { HeaderMap } from './header-map.js';

/** How the held headers were let go: `release` (carry on), `bypass` (processor gone: pass the rest), `stop`. */
export type DuplexRelease = 'release' | 'bypass' | 'stop';

export class DuplexBody {
  /** What Envoy passes on: the injected chunks, then the end (with the trailers, if the request had any). */
  readonly output: BodyReader;
  /** Resolves once, when the held headers go on (or the request is abandoned). */
  readonly released: Promise<DuplexRelease>;
  /** Resolves once the output has ended (the processor ended the body, or the request was abandoned). */
  readonly whenEnded: Promise<void>;
  /** The request was abandoned (local reply, reset). */
  aborted = false;
  /** At least one data callback happened (Envoy's `bodyReceived()`). */
  bodyReceived = false;
  /** The whole body has arrived from the peer (end of stream or trailers). */
  completeBody = false;
  /** The peer's trailers, once they arrived; sent to the processor (trailer mode SEND is required). */
  trailers: HeaderMap | null = null;
  trailersSent = false;
  /** The processor is out of the picture: remaining peer chunks pass straight through. */
  passThrough = false;
  /** CONTINUE_AND_REPLACE replaced the body: remaining peer chunks are dropped. */
  replaced = false;
  /** The processor ended the injected body (`end_of_stream` on a streamed_response) or the trailers were answered. */
  #ended = false;
  #settled = false;
  #release!: (r: DuplexRelease) => void;
  #markEnded!: () => void;
  readonly #queue: Buffer[] = [];
  #wake: (() => void) | undefined;
  #outTrailers: HeaderMap | null = null;
  #error: Error | undefined;

  constructor() {
    this.released = new Promise((resolve) => {
      this.#release = resolve;
    });
    this.whenEnded = new Promise((resolve) => {
      this.#markEnded = resolve;
    });
    this.output = new BodyReader(this.#chunks(), () => this.#outTrailers);
  }

  /** Whether the output has ended (nothing more may be injected). */
  get ended(): boolean {
    return this.#ended;
  }

  /** Lets the held headers go on, once. */
  release(how: DuplexRelease = 'release'): void {
    if (this.#settled) return;
    this.#settled = true;
    this.#release(how);
  }

  /** A chunk the processor streamed back (or a peer chunk passing through); releases the headers first. */
  inject(chunk: Buffer): void {
    if (this.#ended || chunk.length === 0) return; // Envoy injects nothing for an empty chunk
    this.release();
    this.#queue.push(chunk);
    this.#poke();
  }

  /** The output ends here, with `trailers` after it (null: none). */
  end(trailers: HeaderMap | null): void {
    this.release();
    if (this.#ended) return;
    this.#ended = true;
    this.#outTrailers = trailers;
    this.#markEnded();
    this.#poke();
  }

  /** The request is abandoned (local reply, reset): the output fails so an upstream leg stops too. */
  abort(): void {
    this.release('stop');
    this.aborted = true;
    if (this.#ended) return;
    this.#ended = true;
    this.#markEnded();
    this.#error = new Error('ext_proc full-duplex body abandoned');
    this.#poke();
  }

  #poke(): void {
    const wake = this.#wake;
    this.#wake = undefined;
    wake?.();
  }

  async *#chunks(): AsyncGenerator<Buffer> {
    for (;;) {
      const c = this.#queue.shift();
      if (c !== undefined) {
        yield c;
        continue;
      }
      if (this.#error !== undefined) throw this.#error;
      if (this.#ended) return;
      await new Promise<void>((resolve) => {
        this.#wake = resolve;
      });
    }
  }
}
