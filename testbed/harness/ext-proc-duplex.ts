/**
 * One direction of the ext_proc filter under `FULL_DUPLEX_STREAMED`, as Envoy runs it (envoyproxy/envoy main,
 * 1.37.0-dev; the duplex logic is the same on 1.36: docs/envoy-ext-proc.md §14):
 * - the headers go first and are held; body chunks are sent as they arrive, also while the headers reply is
 *   pending (`Filter::onData`: "Sending body data even though header processing is still in progress"), each
 *   with `end_of_stream: false`, and Envoy drains its own copy (`handleDataFullDuplexStreamedMode`);
 * - the body ends with an empty chunk carrying `end_of_stream: true` (Envoy's HTTP/1 codec delivers the end of a
 *   message as an empty data frame with end_stream: source/common/http/http1/codec_impl.cc
 *   `ServerConnectionImpl::onMessageCompleteBase`), or, when the peer sent trailers, with a trailers message
 *   instead (the filter requires `*_trailer_mode: SEND` in this mode, config.cc `verifyProcessingModeConfig`);
 * - no message timer is armed in this direction (`ProcessorState::onStartProcessorCall`);
 * - what goes on is only what the processor streams back (response-handlers.ts, `DuplexBody`);
 * - the empty end_of_stream chunk can come a second time (harness option `duplexRepeatEndOfStream`). When ext_proc
 *   answers that last chunk with `StopIterationNoBuffer` (`handleDataStreamedModeBase`) and the stream is complete
 *   with nothing buffered, the filter manager makes an empty buffer "so that when commonContinue is called, the
 *   pipeline resumes with an empty data frame with end_stream = true" (source/common/http/filter_manager.cc
 *   `commonHandleAfterDataCallback`, envoyproxy/envoy at 00e00299). A filter ahead of ext_proc that resumes later runs
 *   that frame through ext_proc again, and ext_proc's `onData` has no guard against a second end_stream: while its
 *   stream is open it sends another empty body message with `end_of_stream: true` (ext_proc.cc, the 1.37-era copy
 *   with `closeGrpcStreamIfLastRespReceived`). envoyproxy/envoy#46355 (merged after 1.39.0) stops sending it; the
 *   reports (#46237) cover 1.35 to 1.37. Any answer but none is wrong there: a plain body answer is spurious (500
 *   under `ext_proc_fail_close_spurious_resp`, or a reset), and a `streamed_response` would inject after the end.
 */
import type { BodyReader } from './body-reader.js';
import { DuplexBody } from './duplex-body.js';
import type { Payload } from './ext-proc-request.js';
import type { HeaderMap } from './header-map.js';
import type { CallbackState, CallOutcome, ProcessorState } from './processor-state.js';

/** What the duplex runner needs of its filter (structural, because the filter imports this module). */
interface DuplexFilter {
  readonly processingComplete: boolean;
  call(st: ProcessorState, next: CallbackState, payload: Payload): Promise<CallOutcome>;
  /** Sends without waiting for a reply (`Filter::sendBodyChunk` / `sendTrailers`); false when nothing was sent. */
  send(st: ProcessorState, next: CallbackState, payload: Payload): boolean;
  /** Fails the request as an ext_proc error (500 `status_on_error`, or a reset once the response started). */
  protocolError(message: string): void;
  /** Send the empty end_of_stream chunk again once the processor ended the body (see the file comment). */
  readonly repeatEndOfStream: boolean;
}

export type DuplexResult =
  | { readonly kind: 'stop' }
  | { readonly kind: 'continue'; readonly prefix: null; readonly rest: BodyReader | null; readonly trailers: null };

/** Runs one direction in FULL_DUPLEX_STREAMED mode; resolves when Envoy would let the headers go on. */
export async function runDuplex(f: DuplexFilter, st: ProcessorState, headers: HeaderMap, body: BodyReader): Promise<DuplexResult> {
  const d = new DuplexBody();
  st.duplex = d;
  st.headers = headers;
  st.noBody = body.ended;
  if (st.sendHeaders) {
    const kind = st.direction === 'request' ? 'request_headers' : 'response_headers';
    void f.call(st, 'HeadersCallback', { kind, headers, endOfStream: st.noBody });
  } else {
    d.release(); // decodeHeaders/encodeHeaders return Continue: the headers go on at once
  }
  // shouldRemoveContentLength: the processor streams the body back, Envoy cannot vouch for a length.
  if (!f.processingComplete) headers.remove('content-length');
  // Without a body the headers reply alone lets the headers go on (response-handlers.ts).
  if (!st.noBody) void pump(f, st, body, d);
  const how = await d.released;
  st.headers = null;
  if (how === 'stop') return { kind: 'stop' };
  return { kind: 'continue', prefix: null, rest: st.noBody ? null : d.output, trailers: null };
}

/** Reads the peer's body and hands each chunk to the processor (or past it, once it is out of the picture). */
async function pump(f: DuplexFilter, st: ProcessorState, body: BodyReader, d: DuplexBody): Promise<void> {
  const kind = st.direction === 'request' ? 'request_body' : 'response_body';
  try {
    for (let c = await body.next(); c !== null; c = await body.next()) {
      d.bodyReceived = true;
      if (!forward(f, st, d, { kind, body: c, endOfStream: false })) return;
    }
  } catch {
    d.abort(); // the peer went away mid-body
    return;
  }
  d.completeBody = true;
  const trailers = body.trailers();
  if (trailers === null) {
    d.bodyReceived = true;
    forward(f, st, d, { kind, body: Buffer.alloc(0), endOfStream: true });
    if (f.repeatEndOfStream && !d.passThrough && !d.replaced) {
      // The filter manager's empty end_stream frame, run through ext_proc again by a filter ahead of it that resumes
      // after the body ended; sent only while the stream is open (after a 1.37 close, onData sees processing_complete_).
      await d.whenEnded;
      if (!f.processingComplete && !d.aborted) f.send(st, 'StreamedBodyCallback', { kind, body: Buffer.alloc(0), endOfStream: true });
    }
    return;
  }
  d.trailers = trailers;
  if (d.ended && !d.passThrough) {
    // The processor ended the body (end_of_stream) although trailers were still to come; Envoy would then pass
    // trailers after an ended stream, which its filter manager does not allow. Fail loudly rather than drop them.
    if (!f.processingComplete) f.protocolError('kvgate_harness:_streamed_response_end_of_stream_before_the_trailers');
    return;
  }
  if (f.processingComplete || d.passThrough || d.replaced || !st.sendTrailers) {
    d.end(trailers);
    return;
  }
  st.trailers = trailers;
  d.trailersSent = f.send(st, 'TrailersCallback', {
    kind: st.direction === 'request' ? 'request_trailers' : 'response_trailers',
    trailers,
  });
}

/** One peer chunk: to the processor, or past it. False when the request was abandoned. */
function forward(f: DuplexFilter, st: ProcessorState, d: DuplexBody, p: Payload & { body: Buffer; endOfStream: boolean }): boolean {
  if (d.replaced) {
    // CONTINUE_AND_REPLACE with a body: the peer's chunks are drained (`Filter::onData`, bodyReplaced()).
    if (p.endOfStream) d.end(null);
    return true;
  }
  if (f.processingComplete || d.passThrough || st.bodyMode !== 'FULL_DUPLEX_STREAMED') {
    // Processing is over (or a CONTINUE_AND_REPLACE without a body set the mode to NONE): Envoy continues the data.
    if (d.ended) return false;
    d.inject(p.body);
    if (p.endOfStream) d.end(null);
    return true;
  }
  f.send(st, 'StreamedBodyCallback', p);
  return true;
}
