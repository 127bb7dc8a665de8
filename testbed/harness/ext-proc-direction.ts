/**
 * One direction of the ext_proc filter as a sequence: headers message (body held meanwhile), then the body per
 * body mode, then trailers. The order and the holding follow Envoy's `Filter::onHeaders/onData/onTrailers` and
 * `ProcessorState::handleHeadersResponse`:
 * - headers go first; while their reply is pending a BUFFERED body is buffered (413 past the buffer limit), a
 *   BUFFERED_PARTIAL body up to the limit, any other body not read at all;
 * - BUFFERED sends the whole body once, end_of_stream true unless trailers follow, and the headers stay held (and
 *   mutable) until the body reply;
 * - BUFFERED_PARTIAL sends what it has once the limit is passed or the body ends, then lets the rest stream;
 * - trailers are sent only in trailer mode SEND and only if there are trailers;
 * - FULL_DUPLEX_STREAMED runs its own sequence (ext-proc-duplex.ts).
 */
import { BodyCollector, type BodyReader } from './body-reader.js';
import { runDuplex } from './ext-proc-duplex.js';
import type { Payload } from './ext-proc-request.js';
import type { HeaderMap } from './header-map.js';
import type { CallbackState, CallOutcome, Direction, ProcessorState } from './processor-state.js';

/** What a direction needs of its filter (structural, because the filter imports this module). */
interface ExtProcFilter {
  readonly callbacks: { readonly bufferLimit: number; sendPayloadTooLarge(direction: Direction): void };
  readonly processingComplete: boolean;
  call(st: ProcessorState, next: CallbackState, payload: Payload): Promise<CallOutcome>;
  send(st: ProcessorState, next: CallbackState, payload: Payload): boolean;
  protocolError(message: string): void;
  readonly repeatEndOfStream: boolean;
}

export type DirectionResult =
  | { readonly kind: 'stop' }
  | {
      readonly kind: 'continue';
      /** Body bytes to send first (a buffered, possibly rewritten, body); null when nothing was buffered. */
      readonly prefix: Buffer | null;
      /** The rest of the body to stream after `prefix`; null when the body is complete. */
      readonly rest: BodyReader | null;
      /** Final trailers when `rest` is null; otherwise read them from `rest` and call `processTrailers`. */
      readonly trailers: HeaderMap | null;
    };

const STOP: DirectionResult = { kind: 'stop' };

export async function runDirection(f: ExtProcFilter, st: ProcessorState, headers: HeaderMap, body: BodyReader): Promise<DirectionResult> {
  if (st.bodyMode === 'FULL_DUPLEX_STREAMED' && !f.processingComplete) return runDuplex(f, st, headers, body);
  // Envoy holds the headers (and so lets a later reply mutate them) only when it sends them: `Filter::onHeaders` is
  // the one caller of `state.setHeaders`. With header mode SKIP they continue at once (upstream, or downstream), and
  // a body reply's header mutation finds none (`ProcessorState::processHeaderMutationIfAvailable`).
  st.headers = st.sendHeaders && !f.processingComplete ? headers : null;
  st.noBody = body.ended;
  let collector: BodyCollector | undefined;
  if (st.sendHeaders && !f.processingComplete) {
    const kind = st.direction === 'request' ? 'request_headers' : 'response_headers';
    const pending = f.call(st, 'HeadersCallback', { kind, headers, endOfStream: st.noBody });
    // Envoy decides this right after sending: the server saw content-length, upstream will not.
    if (!f.processingComplete && st.shouldRemoveContentLength()) headers.remove('content-length');
    if (!st.noBody && (st.bodyMode === 'BUFFERED' || st.bodyMode === 'BUFFERED_PARTIAL')) {
      collector = new BodyCollector(body, f.callbacks.bufferLimit);
    }
    const outcome = await raceOverLimit(pending, st.bodyMode === 'BUFFERED' ? collector : undefined);
    if (outcome === 'over') {
      f.callbacks.sendPayloadTooLarge(st.direction);
      return STOP;
    }
    if (outcome === 'stop') return STOP;
    if (outcome === 'bypass') return passThrough(f, st, body, collector);
  } else if (!f.processingComplete && st.shouldRemoveContentLength()) {
    headers.remove('content-length');
  }
  return afterHeaders(f, st, body, collector);
}

/** Trailers after a streamed body; in place. */
export async function runTrailers(f: ExtProcFilter, st: ProcessorState, trailers: HeaderMap): Promise<'continue' | 'stop'> {
  // FULL_DUPLEX_STREAMED: the trailers were sent with the body and answered before the body ended (ext-proc-duplex.ts).
  if (f.processingComplete || !st.sendTrailers || st.duplex !== null) return 'continue';
  st.trailers = trailers;
  const kind = st.direction === 'request' ? 'request_trailers' : 'response_trailers';
  const outcome = await f.call(st, 'TrailersCallback', { kind, trailers });
  st.trailers = null;
  return outcome === 'stop' ? 'stop' : 'continue';
}

async function raceOverLimit(pending: Promise<CallOutcome>, collector: BodyCollector | undefined): Promise<CallOutcome | 'over'> {
  if (collector === undefined) return pending;
  const over = collector.done.then((r) => (r === 'over' ? ('over' as const) : new Promise<never>(() => undefined)));
  return Promise.race([pending, over]);
}

function afterHeaders(
  f: ExtProcFilter,
  st: ProcessorState,
  body: BodyReader,
  collector: BodyCollector | undefined,
): Promise<DirectionResult> {
  if (st.bodyReplaced) {
    // CONTINUE_AND_REPLACE with a body: the original body is drained and dropped.
    collector?.stop();
    void body.discard();
    return Promise.resolve({ kind: 'continue', prefix: st.body, rest: null, trailers: null });
  }
  if (f.processingComplete || st.noBody) return passThrough(f, st, body, collector);
  if (st.bodyMode === 'BUFFERED') return buffered(f, st, body, collector);
  if (st.bodyMode === 'BUFFERED_PARTIAL') return partial(f, st, body, collector);
  return passThrough(f, st, body, collector);
}

async function passThrough(
  f: ExtProcFilter,
  st: ProcessorState,
  body: BodyReader,
  collector: BodyCollector | undefined,
): Promise<DirectionResult> {
  st.headers = null;
  const held = collector?.stop();
  const prefix = held !== undefined && held.length > 0 ? held : null;
  if (!body.ended) return { kind: 'continue', prefix, rest: body, trailers: null };
  const trailers = body.trailers();
  if (trailers !== null && (await runTrailers(f, st, trailers)) === 'stop') return STOP;
  return { kind: 'continue', prefix, rest: null, trailers };
}

async function buffered(
  f: ExtProcFilter,
  st: ProcessorState,
  body: BodyReader,
  previous: BodyCollector | undefined,
): Promise<DirectionResult> {
  const collector = new BodyCollector(body, f.callbacks.bufferLimit, previous?.stop());
  const collected = await collector.done;
  if (collected === 'over') {
    f.callbacks.sendPayloadTooLarge(st.direction);
    return STOP;
  }
  if (collected !== 'end') return STOP; // the peer went away mid-body
  st.body = collector.data();
  const trailers = body.trailers();
  const kind = st.direction === 'request' ? 'request_body' : 'response_body';
  const outcome = await f.call(st, 'BufferedBodyCallback', { kind, body: st.body, endOfStream: trailers === null });
  if (outcome === 'stop') return STOP;
  st.headers = null;
  if (trailers !== null && (await runTrailers(f, st, trailers)) === 'stop') return STOP;
  return { kind: 'continue', prefix: st.body, rest: null, trailers };
}

async function partial(
  f: ExtProcFilter,
  st: ProcessorState,
  body: BodyReader,
  previous: BodyCollector | undefined,
): Promise<DirectionResult> {
  const collector = new BodyCollector(body, f.callbacks.bufferLimit, previous?.stop());
  const collected = await collector.done;
  if (collected === 'error' || collected === 'stopped') return STOP;
  const ended = collected === 'end';
  st.body = collector.data();
  const trailers = ended ? body.trailers() : null;
  const kind = st.direction === 'request' ? 'request_body' : 'response_body';
  const outcome = await f.call(st, 'BufferedPartialBodyCallback', {
    kind,
    body: st.body,
    endOfStream: ended && trailers === null,
  });
  if (outcome === 'stop') return STOP;
  st.headers = null;
  if (!ended) return { kind: 'continue', prefix: st.body, rest: body, trailers: null };
  if (trailers !== null && (await runTrailers(f, st, trailers)) === 'stop') return STOP;
  return { kind: 'continue', prefix: st.body, rest: null, trailers };
}
