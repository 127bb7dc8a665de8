/**
 * The ext_proc HTTP filter, one instance per HTTP request, following Envoy's `Filter`
 * (source/extensions/filters/http/ext_proc/ext_proc.cc, ~1.37): lazy bidi stream, per-message timer, message
 * dispatch by oneof and state, failure handling (docs/envoy-ext-proc.md §9), ImmediateResponse,
 * dynamic metadata for receiving namespaces, mode_override, override_message_timeout, and the stream lifetime of
 * the Envoy release line played (runtime-config.ts): 1.37+ closes the stream as soon as no further message can be
 * needed, 1.36 keeps it until the request ends.
 *
 * The data plane drives it per direction with `decode` / `encode` (headers plus a body reader) and `processTrailers`;
 * the phases of one direction live in ext-proc-direction.ts.
 */
import type { ExtProcFilterConfig, ProcessingMode } from './envoy-config-types.js';
import type { ExtProcClient, ExtProcStream } from './ext-proc-client.js';
import { runDirection, runTrailers, type DirectionResult } from './ext-proc-direction.js';
import { fromWireDuration } from './duration.js';
import {
  effectiveModeOverride,
  isLastResponse,
  isSupportedMode,
  receiveDynamicMetadata,
  toLocalReply,
  type LocalReply,
} from './ext-proc-effects.js';
import { has, toStruct, type WireImmediateResponse, type WireProcessingRequest, type WireProcessingResponse } from './ext-proc-messages.js';
import {
  forwardedMetadata,
  payloadMessage,
  protocolConfig,
  requestAttributes,
  type DynamicMetadata,
  type Payload,
  type StreamInfo,
} from './ext-proc-request.js';
import type { HeaderMap } from './header-map.js';
import type { AppendSemantics } from './header-mutation.js';
import type { BodyReader } from './body-reader.js';
import { createMutationChecker } from './mutation-rules.js';
import { ProcessorState, type CallbackState, type CallOutcome, type Direction } from './processor-state.js';
import {
  handleBodyResponse,
  handleHeadersResponse,
  handleTrailersResponse,
  mutateHeaders,
  type HandleResult,
  type HandlerContext,
} from './response-handlers.js';
import type { CounterScope, ExtProcCounter } from './stats.js';

export type { DirectionResult } from './ext-proc-direction.js';
export type { LocalReply } from './ext-proc-effects.js';

/** What the filter needs from the stream it sits on (Envoy's decoder/encoder callbacks + stream info). */
export interface FilterCallbacks {
  /** ext_proc's own local replies; they do not pass back through this filter. */
  sendLocalReply(reply: LocalReply): void;
  /** The HCM's 413 for a BUFFERED body over the limit; unlike ext_proc's own replies it runs the encode path. */
  sendPayloadTooLarge(direction: Direction): void;
  clearRouteCache(): void;
  readonly dynamicMetadata: DynamicMetadata;
  readonly info: StreamInfo;
  readonly bufferLimit: number;
}

export interface ExtProcFilterOptions {
  readonly config: ExtProcFilterConfig;
  readonly client: ExtProcClient;
  readonly stats: CounterScope<ExtProcCounter>;
  readonly semantics: AppendSemantics;
  readonly callbacks: FilterCallbacks;
  /** Close the stream after the last response that will be processed (Envoy 1.37+; default true). */
  readonly closeAfterLastResponse?: boolean;
  /** `send_header_raw_value` (runtime-config.ts; default true): header values in `raw_value`, else in `value`. */
  readonly sendHeaderRawValue?: boolean;
  /** FULL_DUPLEX_STREAMED: repeat the empty end_of_stream chunk once the body has ended (ext-proc-duplex.ts). */
  readonly repeatEndOfStream?: boolean;
}

type Dispatched = { kind: 'ok' } | { kind: 'spurious'; message: string } | { kind: 'error'; message: string };
type ReplyField = 'request_headers' | 'response_headers' | 'request_body' | 'response_body' | 'request_trailers' | 'response_trailers';
type Handler = (st: ProcessorState, reply: object, ctx: HandlerContext) => HandleResult;

/** Which direction's state a reply belongs to, and what it does there (Envoy's `onReceiveMessage` switch). */
const HANDLERS: Readonly<Record<string, { request: boolean; field: ReplyField; handle: Handler }>> = {
  request_headers: { request: true, field: 'request_headers', handle: handleHeadersResponse as Handler },
  response_headers: { request: false, field: 'response_headers', handle: handleHeadersResponse as Handler },
  request_body: { request: true, field: 'request_body', handle: handleBodyResponse as Handler },
  response_body: { request: false, field: 'response_body', handle: handleBodyResponse as Handler },
  request_trailers: { request: true, field: 'request_trailers', handle: handleTrailersResponse as Handler },
  response_trailers: { request: false, field: 'response_trailers', handle: handleTrailersResponse as Handler },
};

export class ExtProcFilter {
  readonly cfg: ExtProcFilterConfig;
  readonly stats: CounterScope<ExtProcCounter>;
  readonly callbacks: FilterCallbacks;
  readonly dec: ProcessorState;
  readonly enc: ProcessorState;
  readonly #client: ExtProcClient;
  readonly #ctx: HandlerContext;
  readonly #closeAfterLastResponse: boolean;
  /** FULL_DUPLEX_STREAMED: the empty end_of_stream chunk comes again after the body ended (ext-proc-duplex.ts). */
  readonly repeatEndOfStream: boolean;
  #stream: ExtProcStream | null = null;
  #complete = false;
  /** The request path will send the processor nothing more (its headers, body and trailers are through). */
  #requestSettled = false;
  #requestHeaders: HeaderMap | null = null;
  #protocolConfigSent = false;

  constructor(opts: ExtProcFilterOptions) {
    this.cfg = opts.config;
    this.stats = opts.stats;
    this.callbacks = opts.callbacks;
    this.#client = opts.client;
    this.#closeAfterLastResponse = opts.closeAfterLastResponse ?? true;
    this.repeatEndOfStream = opts.repeatEndOfStream ?? false;
    this.dec = new ProcessorState('request', opts.config.processingMode);
    this.enc = new ProcessorState('response', opts.config.processingMode);
    this.#ctx = {
      checker: createMutationChecker(opts.config.mutationRules),
      semantics: opts.semantics,
      rawValue: opts.sendHeaderRawValue ?? true,
      stats: opts.stats,
      routeCacheAction: opts.config.routeCacheAction,
      clearRouteCache: () => opts.callbacks.clearRouteCache(),
    };
  }

  /** True once the processor is out of the picture for this request (Envoy's `processing_complete_`). */
  get processingComplete(): boolean {
    return this.#complete;
  }

  /** Request path: headers (mutated in place) and the body the router should send upstream. */
  async decode(headers: HeaderMap, body: BodyReader): Promise<DirectionResult> {
    this.#requestHeaders = headers;
    const out = await runDirection(this, this.dec, headers, body);
    // Trailers still to come are the only further request-path message once the body has been dealt with.
    this.#requestSettled = out.kind === 'continue' && (out.rest === null || !this.dec.sendTrailers);
    return out;
  }

  /** Response path: `:status` and headers (mutated in place) and the body to send downstream. */
  encode(headers: HeaderMap, body: BodyReader): Promise<DirectionResult> {
    this.#closeIfResponsePathIdle();
    return runDirection(this, this.enc, headers, body);
  }

  /** Trailers that arrived after a streamed body (trailer mode SEND); mutated in place. */
  async processTrailers(direction: Direction, trailers: HeaderMap): Promise<'continue' | 'stop'> {
    const out = await runTrailers(this, direction === 'request' ? this.dec : this.enc, trailers);
    if (direction === 'request') this.#requestSettled = true;
    return out;
  }

  /** The request is over: stop timers and close the stream if it is still open. */
  onDestroy(): void {
    this.#complete = true;
    this.dec.finishCall();
    this.enc.finishCall();
    this.#closeStream(true);
    // Whoever still awaits a reply (the client went away) gives up.
    this.dec.resolve('stop');
    this.enc.resolve('stop');
  }

  /**
   * Sends one message on this direction and waits for its reply, the timer and failure paths. Returns `bypass`
   * without sending when the processor is already out of the picture.
   */
  call(st: ProcessorState, next: CallbackState, payload: Payload): Promise<CallOutcome> {
    const stream = this.#openStream();
    if (stream === null) return Promise.resolve('bypass');
    const msg = this.#frame(st, payload);
    const pending = st.startCall(next, this.cfg.messageTimeoutMs, () => this.#onMessageTimeout());
    stream.send(msg);
    this.stats.inc('stream_msgs_sent');
    return pending;
  }

  /**
   * FULL_DUPLEX_STREAMED: sends a body chunk or the trailers without waiting for a reply (`Filter::sendBodyChunk`,
   * `sendTrailers`). A pending headers reply keeps the state HeadersCallback; trailers move only an Idle state.
   */
  send(st: ProcessorState, next: CallbackState, payload: Payload): boolean {
    const stream = this.#openStream();
    if (stream === null) return false;
    const msg = this.#frame(st, payload);
    if (next === 'TrailersCallback') {
      if (st.callbackState === 'Idle') st.callbackState = next;
    } else if (st.callbackState !== 'HeadersCallback') {
      st.callbackState = next;
    }
    stream.send(msg);
    this.stats.inc('stream_msgs_sent');
    return true;
  }

  /** A reply that breaks the mode's protocol: an ext_proc error (500, or a reset once the response started). */
  protocolError(message: string): void {
    if (!this.#complete) this.#handleErrorResponse(message);
  }

  /** A message as Envoy frames it: forwarded metadata, first-message attributes and `protocol_config`. */
  #frame(st: ProcessorState, payload: Payload): WireProcessingRequest {
    const msg = payloadMessage(payload, this.#ctx.rawValue);
    msg.metadata_context = forwardedMetadata(this.cfg.forwardingNamespaces, this.callbacks.dynamicMetadata);
    if (st.direction === 'request' && !st.attributesSent && this.cfg.requestAttributes.length > 0) {
      // Envoy evaluates attributes against the stream's request headers, held or not.
      const source = payload.kind === 'request_headers' ? payload.headers : (this.#requestHeaders ?? undefined);
      if (source !== undefined) {
        const attrs = requestAttributes(this.cfg.requestAttributes, source, this.callbacks.info);
        msg.attributes = { 'envoy.filters.http.ext_proc': toStruct(attrs) };
        st.attributesSent = true;
      }
    }
    if (!this.#protocolConfigSent) {
      msg.protocol_config = protocolConfig(this.dec.bodyMode, this.enc.bodyMode);
      this.#protocolConfigSent = true;
    }
    return msg;
  }

  #openStream(): ExtProcStream | null {
    if (this.#complete) return null;
    if (this.#stream === null) {
      this.#stream = this.#client.start({
        onMessage: (m) => this.#onReceiveMessage(m),
        onGrpcError: (code, details) => this.#onGrpcError(code, details),
        onGrpcClose: () => this.#onGrpcClose(),
      });
      this.stats.inc('streams_started');
    }
    return this.#stream;
  }

  /**
   * `graceful`: Envoy's `closeStreamMaybeGraceful()` (onDestroy, the last-response and encodeHeaders closes, an
   * ImmediateResponse), which half-closes and waits under `ext_proc_graceful_grpc_close`. Everything else (message
   * timeout, spurious reply, mutation error, a stream the server already ended) is `closeStream()`: END_STREAM and
   * RST_STREAM at once whatever the guard says (ext_proc.cc, client_impl.cc `ExternalProcessorStreamImpl::close`).
   */
  #closeStream(graceful = false): void {
    if (this.#stream === null) return;
    if (this.#stream.close(graceful)) this.stats.inc('streams_closed');
    this.#stream = null;
  }

  #onReceiveMessage(msg: WireProcessingResponse): void {
    if (this.#complete) return; // messages after processing completed are ignored
    if (has(msg.override_message_timeout)) {
      // Envoy ignores every other field of a message that carries a new timeout.
      this.#onNewTimeout(msg.override_message_timeout);
      return;
    }
    // Envoy ignores mode_override when the filter is configured FULL_DUPLEX_STREAMED in either direction.
    const duplex =
      this.cfg.processingMode.request_body_mode === 'FULL_DUPLEX_STREAMED' ||
      this.cfg.processingMode.response_body_mode === 'FULL_DUPLEX_STREAMED';
    if (this.cfg.allowModeOverride && !duplex && has(msg.mode_override) && this.#inHeaderState()) {
      if (!this.#applyModeOverride(msg.mode_override)) return;
    }
    const result = this.#dispatch(msg);
    if (result.kind === 'ok') {
      this.stats.inc('stream_msgs_received');
      this.#closeIfLastResponse(msg);
    } else if (result.kind === 'spurious') {
      this.stats.inc('spurious_msgs_received');
      if (this.#failureModeAllow()) {
        this.stats.inc('failure_mode_allowed');
        this.#closeStream();
        this.#complete = true;
        this.#clearAsyncState('bypass');
      } else {
        this.#handleErrorResponse(result.message);
      }
    } else {
      this.stats.inc('stream_msgs_received');
      this.#handleErrorResponse(result.message);
    }
  }

  #dispatch(msg: WireProcessingResponse): Dispatched {
    if (msg.response === 'immediate_response') {
      if (this.cfg.disableImmediateResponse) {
        return { kind: 'spurious', message: 'unhandled immediate response due to config disabled it' };
      }
      this.#setDynamicMetadata(msg);
      this.#complete = true;
      this.dec.finishCall();
      this.enc.finishCall();
      this.#closeStream(true);
      this.#sendImmediateResponse(msg.immediate_response ?? {});
      return { kind: 'ok' };
    }
    const route = msg.response === undefined ? undefined : HANDLERS[msg.response];
    if (route === undefined) return { kind: 'spurious', message: 'unhandled message' };
    const st = route.request ? this.dec : this.enc;
    this.#setDynamicMetadata(msg);
    const r = route.handle(st, (msg[route.field] ?? {}) as object, this.#ctx);
    if (r.kind === 'ok') st.resolve('applied');
    return r.kind === 'spurious' ? { kind: 'spurious', message: r.message ?? 'spurious message' } : r;
  }

  #inHeaderState(): boolean {
    return this.dec.callbackState === 'HeadersCallback' || this.enc.callbackState === 'HeadersCallback';
  }

  /** Applies an override, or fails the request loudly when it asks for a body mode the harness cannot do. */
  #applyModeOverride(o: Partial<ProcessingMode>): boolean {
    const mode = effectiveModeOverride(o, this.cfg.processingMode);
    if (!isSupportedMode(mode)) {
      this.stats.inc('harness.unsupported_mode_override');
      this.#handleErrorResponse('kvgate harness: mode_override to an unsupported body mode');
      return false;
    }
    this.dec.setProcessingMode(mode);
    this.enc.setProcessingMode(mode);
    return true;
  }

  #setDynamicMetadata(msg: WireProcessingResponse): void {
    receiveDynamicMetadata(this.callbacks.dynamicMetadata, this.cfg.receivingNamespaces, msg.dynamic_metadata);
  }

  #onNewTimeout(d: NonNullable<WireProcessingResponse['override_message_timeout']>): void {
    const ms = fromWireDuration(d);
    if (!ms.ok || ms.value < 1 || ms.value > this.cfg.maxMessageTimeoutMs) {
      this.stats.inc('override_message_timeout_ignored');
      return;
    }
    const onTimeout = (): void => this.#onMessageTimeout();
    const restarted = this.dec.restartTimer(ms.value, onTimeout) || this.enc.restartTimer(ms.value, onTimeout);
    this.stats.inc(restarted ? 'override_message_timeout_received' : 'override_message_timeout_ignored');
  }

  /**
   * Envoy 1.37+ (`ext_proc_stream_close_optimization`) closes the stream once a reply leaves nothing more to send
   * (outside buffered body modes); 1.36 keeps it until the request ends.
   */
  #closeIfLastResponse(msg: WireProcessingResponse): void {
    if (!this.#closeAfterLastResponse) return;
    if (this.#stream !== null && isLastResponse(msg, this.dec, this.enc, this.#requestPathDone())) {
      this.#complete = true;
      this.#closeStream(true);
    }
  }

  /**
   * Envoy 1.37's `Filter::encodeHeaders` (envoyproxy/envoy#41425): "If there is no external processing configured in
   * the encoding path, closing the gRPC stream if it is still open" (`encoding_state_.noExternalProcess()`, then
   * `closeStreamMaybeGraceful()`, which also marks processing complete). Played as the fixed 1.37 line has it
   * (#45617, backported as #46836): under the `ext_proc_stream_close_optimization` guard and only once the request
   * path is done with the processor (1.37.0 closed even while a request-path reply was pending, a bug).
   */
  #closeIfResponsePathIdle(): void {
    if (!this.#closeAfterLastResponse || this.#complete || this.#stream === null) return;
    const enc = this.enc;
    if (enc.sendHeaders || enc.sendTrailers || enc.bodyMode !== 'NONE') return;
    if (!this.#requestPathDone()) return;
    this.#complete = true;
    this.#closeStream(true);
  }

  /**
   * Envoy's `Filter::failureModeAllow()` (envoyproxy/envoy#41276): under FULL_DUPLEX_STREAMED a direction that has
   * received body data fails closed whatever the config says, since Envoy drained its copy of the chunks it sent.
   */
  #failureModeAllow(): boolean {
    for (const st of [this.dec, this.enc]) {
      if (st.bodyMode === 'FULL_DUPLEX_STREAMED' && st.duplex?.bodyReceived === true) return false;
    }
    return this.cfg.failureModeAllow;
  }

  /** Envoy's decoding-side `noMoreExternalProcess()`: no reply pending and nothing more to send on the request path. */
  #requestPathDone(): boolean {
    const dec = this.dec;
    if (dec.callbackState !== 'Idle') return false;
    // FULL_DUPLEX_STREAMED: done once the processor ended the body it streams back (or answered the trailers).
    if (dec.duplex !== null && !dec.noBody) return dec.duplex.ended;
    return this.#requestSettled;
  }

  #onGrpcError(code: number, details: string): void {
    this.stats.inc('streams_failed');
    if (this.#complete) return;
    if (this.#failureModeAllow()) {
      this.#onGrpcClose();
      this.stats.inc('failure_mode_allowed');
      return;
    }
    this.#complete = true;
    this.dec.finishCall();
    this.enc.finishCall();
    this.#closeStream();
    this.#sendImmediateResponse({
      status: { code: this.cfg.statusOnError },
      details: `ext_proc_error_gRPC_error_${code}{${details}}`,
    });
  }

  /** An OK close means "carry on without me", whatever failure_mode_allow says. */
  #onGrpcClose(): void {
    if (this.#complete) return;
    this.#complete = true;
    this.stats.inc('streams_closed');
    this.#closeStream();
    this.#clearAsyncState('bypass');
  }

  #onMessageTimeout(): void {
    if (this.#complete) return;
    this.stats.inc('message_timeouts');
    this.#complete = true;
    this.#closeStream();
    if (this.#failureModeAllow()) {
      this.stats.inc('failure_mode_allowed');
      this.#clearAsyncState('bypass');
      return;
    }
    this.dec.finishCall();
    this.enc.finishCall();
    this.#sendImmediateResponse({ status: { code: 504 }, details: 'ext_proc_error_per-message_timeout_exceeded' });
  }

  #handleErrorResponse(message: string): void {
    this.#complete = true;
    this.dec.finishCall();
    this.enc.finishCall();
    this.#closeStream();
    this.#sendImmediateResponse({ status: { code: this.cfg.statusOnError }, details: message });
  }

  /** Both directions stop waiting (timers off, state Idle) and resume with `outcome`. */
  #clearAsyncState(outcome: CallOutcome): void {
    for (const st of [this.dec, this.enc]) {
      st.finishCall();
      st.resolve(outcome);
    }
  }

  #sendImmediateResponse(r: WireImmediateResponse): void {
    this.callbacks.sendLocalReply(toLocalReply(r, (m, h) => void mutateHeaders(m, h, this.#ctx, false, false)));
    this.dec.resolve('stop');
    this.enc.resolve('stop');
  }
}
