/**
 * Pull-based access to a request or response body with backpressure: nothing is read from the socket until a
 * consumer asks, which is how Envoy's watermarks hold a body while a filter waits. A chunk that has arrived stays in
 * the reader until someone takes it, so a collector can be stopped mid-read without losing or duplicating data: a
 * filter can buffer part of a body and let the rest stream.
 */
import type { IncomingMessage } from 'node:http';
import { HeaderMap } from './header-map.js';

export class BodyReader {
  readonly #source: AsyncIterator<Buffer | Uint8Array> | undefined;
  readonly #trailers: () => HeaderMap | null;
  readonly #available: Buffer[] = [];
  #sourceDone: boolean;
  #error: unknown;
  #fill: Promise<void> | undefined;

  /** `source` undefined = no body at all (end_stream on headers). */
  constructor(source: AsyncIterable<Buffer | Uint8Array> | undefined, trailers: () => HeaderMap | null = () => null) {
    this.#source = source?.[Symbol.asyncIterator]();
    this.#trailers = trailers;
    this.#sourceDone = source === undefined;
  }

  /** A node:http message body, with its HTTP/1.1 chunked trailers. */
  static fromMessage(message: IncomingMessage, hasBody: boolean): BodyReader {
    if (!hasBody) {
      message.resume();
      return new BodyReader(undefined);
    }
    return new BodyReader(message, () => (message.rawTrailers.length === 0 ? null : HeaderMap.fromRaw(message.rawTrailers)));
  }

  /** A fixed body (local replies); an empty one is no body. */
  static fromBuffer(data: Buffer): BodyReader {
    if (data.length === 0) return new BodyReader(undefined);
    return new BodyReader(
      (async function* () {
        yield data;
      })(),
    );
  }

  /** True once the source is exhausted: the whole body has been read from the peer (taken or not). */
  get received(): boolean {
    return this.#sourceDone;
  }

  /** True once the source is exhausted and every chunk has been taken. */
  get ended(): boolean {
    return this.#sourceDone && this.#available.length === 0;
  }

  /** A chunk if one has arrived, `null` at the end, `undefined` if the caller must `wait()` first. */
  takeSync(): Buffer | null | undefined {
    const c = this.#available.shift();
    if (c !== undefined) return c;
    if (this.#error !== undefined) throw this.#error;
    return this.#sourceDone ? null : undefined;
  }

  /** Resolves when a chunk is available or the body has ended (reading one chunk from the source if needed). */
  wait(): Promise<void> {
    if (this.#available.length > 0 || this.#sourceDone || this.#source === undefined) return Promise.resolve();
    return this.#pull(this.#source);
  }

  /**
   * Reads the whole body into the reader, as Envoy's buffer filter holds a request until its end: its length once it
   * has ended within `limit` bytes, undefined as soon as more than `limit` arrived (the rest is not read). A read
   * error ends it as the body's own `next()` would report it.
   */
  async bufferAll(limit: number): Promise<number | undefined> {
    let total = 0;
    for (const c of this.#available) total += c.length;
    while (total <= limit && !this.#sourceDone && this.#source !== undefined) {
      const before = this.#available.length;
      await this.#pull(this.#source);
      for (let i = before; i < this.#available.length; i++) total += this.#available[i]!.length;
    }
    return total <= limit ? total : undefined;
  }

  /** Reads one chunk from the source into the reader (one read at a time). */
  #pull(source: AsyncIterator<Buffer | Uint8Array>): Promise<void> {
    this.#fill ??= source.next().then(
      (r) => {
        this.#fill = undefined;
        if (r.done === true) this.#sourceDone = true;
        else if (r.value.length > 0) this.#available.push(Buffer.isBuffer(r.value) ? r.value : Buffer.from(r.value));
      },
      (e: unknown) => {
        this.#fill = undefined;
        this.#sourceDone = true;
        this.#error = e ?? new Error('body read failed');
      },
    );
    return this.#fill;
  }

  /** The next chunk, or null at the end. */
  async next(): Promise<Buffer | null> {
    for (;;) {
      const c = this.takeSync();
      if (c !== undefined) return c;
      await this.wait();
    }
  }

  /** Trailers, once the body has ended (HTTP/1.1 chunked trailers; null when there are none). */
  trailers(): HeaderMap | null {
    return this.ended ? this.#trailers() : null;
  }

  /** Drains and discards the rest (a replaced body, or a request being answered locally). */
  async discard(): Promise<void> {
    try {
      while ((await this.next()) !== null) {
        // dropped
      }
    } catch {
      // the peer went away; nothing left to discard
    }
  }
}

export type CollectResult = 'end' | 'over' | 'stopped' | 'error';

/**
 * Buffers a body concurrently with a pending ext_proc call. `all` reads to the end and stops with `over` once more
 * than `limit` bytes arrived (BUFFERED: Envoy answers 413); `partial` stops with `over` at the same point but that is
 * the signal to send what it has (BUFFERED_PARTIAL; Envoy's chunk queue keeps whole chunks, so the data can exceed
 * the limit by less than one chunk).
 */
export class BodyCollector {
  readonly done: Promise<CollectResult>;
  readonly #reader: BodyReader;
  readonly #limit: number;
  readonly #chunks: Buffer[];
  #size: number;
  #stopped = false;

  constructor(reader: BodyReader, limit: number, initial: Buffer = Buffer.alloc(0)) {
    this.#reader = reader;
    this.#limit = limit;
    this.#chunks = initial.length > 0 ? [initial] : [];
    this.#size = initial.length;
    this.done = this.#loop();
  }

  /** Stops taking chunks (what has not been taken stays in the reader) and returns what was collected. */
  stop(): Buffer {
    this.#stopped = true;
    return this.data();
  }

  data(): Buffer {
    return Buffer.concat(this.#chunks);
  }

  async #loop(): Promise<CollectResult> {
    for (;;) {
      if (this.#size > this.#limit) return 'over';
      if (this.#stopped) return 'stopped';
      let c: Buffer | null | undefined;
      try {
        c = this.#reader.takeSync();
      } catch {
        return 'error';
      }
      if (c === null) return 'end';
      if (c === undefined) {
        await this.#reader.wait();
        continue;
      }
      this.#chunks.push(c);
      this.#size += c.length;
    }
  }
}
