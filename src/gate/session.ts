/**
 * The gate's session layer: one ext_proc stream = one HTTP request. A small state machine that answers every
 * ProcessingRequest with exactly one ProcessingResponse of the matching kind, in order (Envoy's ext_proc filter
 * keeps one outstanding message per direction: envoyproxy/envoy source/extensions/filters/http/ext_proc/ext_proc.cc).
 * The one extra message it may send is `override_message_timeout` (a ProcessingResponse with only that field),
 * at most once per message, before the answer, when admission holds the request in the fallback queue.
 *
 * It knows message kinds and ordering; the request's facts come from src/envoy/inbound.ts, what to stamp from
 * src/envoy/responses.ts, and the answer from the injected Admission. No sockets: the gRPC adapter in server.ts
 * feeds it messages.
 */
import { type Span, SpanKind, SpanStatusCode, trace, type Tracer } from '@opentelemetry/api';
import type { Logger } from 'pino';
import { KvgateError } from '../errors.js';
import { AUDIT_REASON_MAX, auditCut } from '../json-limits.js';
import { H } from '../headers.js';
import type { Decision, Refusal, RouteDecision } from '../decide/types.js';
import { headerFieldOf, headerValueOf, inValueField, readHeaderMap, setHeader, type ReceivedHeaders } from '../envoy/headers.js';
import { parentContext, traceHeaders } from '../trace-context.js';
import {
  answerResponse,
  fullDuplexAnswers,
  hopMutation,
  refusalResponse,
  responseHeadersMutation,
  routeMutation,
  stripForged,
  type RequestMutation,
} from '../envoy/responses.js';
import type { ResponseStampFacts } from '../envoy/stamps.js';
import { fromFilterMetadata } from '../envoy/struct.js';
import type { BodySendMode, WireCommonResponse, WireHeaderMap, WireProcessingRequest, WireProcessingResponse } from '../envoy/wire.js';
import { type Listener, toRequestFacts } from '../envoy/inbound.js';
import type { Admission } from './admission.js';
import type { Admitted, InFlightHold, WaitHooks } from './admission-types.js';
import { tenantOf } from '../decide/request-facts.js';
import type { Tenancy } from '../policy/schema.js';
import { decisionLine } from './decision-log.js';
import type { GateMetrics } from './metrics.js';
import { routedOutcome } from './routed-outcome.js';

/** GIE endpoint-picker protocol, "Destination Endpoint Served" (pkg/lwepp/metadata/consts.go @84436a96). */
const GIE_SERVED_KEY = 'x-gateway-destination-endpoint-served';

export interface SessionDeps {
  readonly admission: Admission;
  readonly logger: Logger;
  readonly metrics: GateMetrics;
  readonly newRequestId: () => string;
  readonly now: () => number;
  readonly gieHeaders: boolean;
  /** Where decision lines go (`log.decisions: true`), one per route and hop; undefined writes none. */
  readonly decisionLog?: Logger | undefined;
  /** Spans of decisions (src/tracing.ts); undefined: the API's no-op tracer (trace context is still continued). */
  readonly tracer?: Tracer | undefined;
  /**
   * The route table's `limits.maxBodyBytes`, read when a FULL_DUPLEX_STREAMED body grows: Envoy buffers nothing in
   * that mode, so the gate stops collecting (and refuses 413) once a body passes it. Default: no early stop.
   */
  readonly maxBodyBytes?: () => number;
  /** GIE mode: alternates after the pick in x-gateway-destination-endpoint (gate config envoy.gieFallbackEndpoints). */
  readonly gieFallbackEndpoints?: number;
  /**
   * The route table's current tenancy, read only to name the tenant on an audit line of a request refused before its
   * decision resolved one (a body that never came, a shutdown, a stream that failed). Undefined: such lines say null.
   */
  readonly tenancy?: () => Tenancy;
}

/** What a routed request keeps for its response phase: what to stamp, and what its outcome is counted under. One flat
 * object, as every open stream holds one. */
interface RoutedState {
  readonly groupId: string;
  readonly revision: string;
  /** Signed when the response headers are stamped, not before: the token is ~0.4 KB per open stream. */
  readonly binding: RouteDecision['pendingBinding'];
  readonly tenant: string | null;
  readonly trust?: 'declared-only';
}

/** The metadata of a stream that has none (or no longer needs it): shared, never written (only ever replaced). */
const NO_METADATA: Readonly<Record<string, Readonly<Record<string, unknown>>>> = Object.freeze({});

/** Body modes under which the gate can route: the headers are held until the body response. */
const ROUTABLE_BODY_MODES: ReadonlySet<BodySendMode> = new Set(['BUFFERED', 'BUFFERED_PARTIAL', 'FULL_DUPLEX_STREAMED']);

/** The bits of `ExtProcSession`'s yes/no states. */
const Flag = {
  servedNoted: 1,
  finished: 2,
  decided: 4,
  duplexTrailers: 8,
  duplexResponseOpen: 16,
  decidedAnswered: 32,
  valueField: 64,
  duplexResponseEnded: 128,
} as const;

/** Writes a message to the stream outside the one-answer-per-message flow (only `override_message_timeout`). */
export type SendEarly = (response: WireProcessingResponse) => void;

/** The same as an object with a `write` method (the gRPC call itself), so a stream needs no closure for it. */
export interface EarlyWriter {
  write(response: WireProcessingResponse): unknown;
}

export class ExtProcSession {
  readonly #deps: SessionDeps;
  readonly #listener: Listener;
  readonly #writer: EarlyWriter | undefined;
  /** Created only when admission parks the request (abortSignalFor), so most requests never pay for one. */
  #abort: AbortController | undefined;
  /** The message state an `override_message_timeout` was already sent for (Envoy honours one per state). */
  #extendedFor: 'request_headers' | 'request_body' | undefined;
  /** The per-request child logger, created on first use: most requests log nothing, and 10,000 open streams should
   * not each hold one. */
  #child: Logger | undefined;
  #received: ReceivedHeaders | undefined;
  #requestId = '';
  /** The client's own `x-request-id` on the public listener, cut for logs; never the request's identity. */
  #clientRequestId: string | undefined;
  #bodyMode: BodySendMode | undefined;
  #metadata: Readonly<Record<string, Readonly<Record<string, unknown>>>> = NO_METADATA;
  /** The request body so far; undefined before the first chunk and once decided (an open stream holds no body). */
  #chunks: Uint8Array[] | undefined;
  /**
   * What a routed request's response phase needs, kept instead of the whole decision once the request is bound:
   * the response headers to stamp (group, revision, binding) and what to count the outcome under (routed-outcome.ts).
   * Cleared once the response headers are answered.
   */
  #routed: RoutedState | undefined;
  /** The in-flight count this request holds (released when the stream ends; moved where GIE says it was served). */
  #hold: InFlightHold | undefined;
  /** Bytes of a FULL_DUPLEX_STREAMED body received so far. */
  #duplexBytes = 0;
  #responseBodyMode: BodySendMode | undefined;
  /**
   * The stream's yes/no states, one bit each (`Flag`) in one field rather than six: every open stream carries them.
   * Read and written through the private accessors below.
   */
  #flags = 0;

  /** The served endpoint was noted already (GIE): at most once per request. */
  get #servedNoted(): boolean {
    return (this.#flags & Flag.servedNoted) !== 0;
  }
  set #servedNoted(on: boolean) {
    this.#setFlag(Flag.servedNoted, on);
  }
  get #finished(): boolean {
    return (this.#flags & Flag.finished) !== 0;
  }
  set #finished(on: boolean) {
    this.#setFlag(Flag.finished, on);
  }
  /** A decision (or refusal) was answered: later body chunks and trailers have nothing left to decide. */
  get #decided(): boolean {
    return (this.#flags & Flag.decided) !== 0;
  }
  set #decided(on: boolean) {
    this.#setFlag(Flag.decided, on);
  }
  /** A FULL_DUPLEX_STREAMED request body ended with trailers: its streamed answer must not end the body. */
  get #duplexTrailers(): boolean {
    return (this.#flags & Flag.duplexTrailers) !== 0;
  }
  set #duplexTrailers(on: boolean) {
    this.#setFlag(Flag.duplexTrailers, on);
  }
  /** A routed response whose FULL_DUPLEX_STREAMED body is still passing through the gate (see `closableWithOk`). */
  get #duplexResponseOpen(): boolean {
    return (this.#flags & Flag.duplexResponseOpen) !== 0;
  }
  set #duplexResponseOpen(on: boolean) {
    this.#setFlag(Flag.duplexResponseOpen, on);
  }
  /**
   * Envoy sends and reads header values in `value` (`send_header_raw_value` off): every answer's header mutations are
   * moved there (`inValueField`), or Envoy would set each header to the empty string.
   */
  get #valueField(): boolean {
    return (this.#flags & Flag.valueField) !== 0;
  }
  set #valueField(on: boolean) {
    this.#setFlag(Flag.valueField, on);
  }
  /** A FULL_DUPLEX_STREAMED response body was ended (its end_of_stream chunk answered): nothing more may follow it. */
  get #duplexResponseEnded(): boolean {
    return (this.#flags & Flag.duplexResponseEnded) !== 0;
  }
  set #duplexResponseEnded(on: boolean) {
    this.#setFlag(Flag.duplexResponseEnded, on);
  }
  /** The decision's answer has been produced (unlike `#decided`, which is set as soon as deciding starts). */
  get #decidedAnswered(): boolean {
    return (this.#flags & Flag.decidedAnswered) !== 0;
  }
  set #decidedAnswered(on: boolean) {
    this.#setFlag(Flag.decidedAnswered, on);
  }
  #setFlag(flag: number, on: boolean): void {
    this.#flags = on ? this.#flags | flag : this.#flags & ~flag;
  }

  /**
   * `send` writes to the gRPC stream directly; without it the session cannot extend Envoy's message timer, so
   * admission is told it must not hold the request.
   */
  constructor(deps: SessionDeps, listener: Listener, send?: SendEarly | EarlyWriter) {
    this.#deps = deps;
    this.#listener = listener;
    this.#writer = typeof send === 'function' ? { write: send } : send;
  }

  #log(): Logger {
    this.#child ??= this.#deps.logger.child({
      request_id: this.#requestId,
      ...(this.#clientRequestId === undefined ? {} : { client_request_id: this.#clientRequestId }),
    });
    return this.#child;
  }

  get requestId(): string {
    return this.#requestId;
  }

  /**
   * The tenant an audit line names for this request: the one its decision resolved (or its route keeps), else the one
   * its held headers or metadata carry under the current tenancy (cut to the audit bound), else null. Only a tenant
   * found in the trusted source is named; an absent, ambiguous or undecodable one is null: none was established.
   */
  auditTenant(decided?: string | null): string | null {
    if (decided !== undefined) return decided === null ? null : auditCut(decided);
    if (this.#routed !== undefined) return this.#routed.tenant === null ? null : auditCut(this.#routed.tenant);
    const tenancy = this.#deps.tenancy?.();
    const held = this.#received;
    if (tenancy === undefined || held === undefined) return null;
    const found = tenantOf(
      { headers: held.headers, metadata: this.#metadata, invalidHeaders: held.invalid, sanitizedHeaders: held.sanitized },
      tenancy,
    );
    return found.kind === 'found' ? auditCut(found.tenant) : null;
  }

  /** The id the client sent on the public listener (cut for audit lines), if any. */
  get clientRequestId(): string | undefined {
    return this.#clientRequestId;
  }

  /**
   * Whether ending this stream with gRPC status OK now lets the request finish exactly as the gate decided it:
   * the decision has been answered, and the response headers it stamps (group, revision, binding) were answered
   * too or are not needed. Envoy treats an OK close as "carry on without the processor" (`Filter::onGrpcClose` in
   * envoyproxy/envoy source/extensions/filters/http/ext_proc/ext_proc.cc), so the request is never cut; a stream
   * still undecided must not close OK, or Envoy would send the request upstream unrouted.
   */
  get closableWithOk(): boolean {
    // A FULL_DUPLEX_STREAMED response body reaches the client only as the gate streams it back; Envoy has drained its
    // own copy, so an OK close mid-body would lose the chunks in flight (`ProcessorState::clearAsyncState`).
    return this.#decidedAnswered && this.#routed === undefined && !this.#duplexResponseOpen;
  }

  /**
   * A FULL_DUPLEX_STREAMED response body is passing through the gate. Neither an OK close nor any close is then
   * harmless: Envoy keeps no copy, so an OK close would let the response go on with the chunks in flight missing;
   * a drain cancels such a stream instead (the client sees a reset, never a silently shortened body).
   */
  get inDuplexResponse(): boolean {
    return this.#duplexResponseOpen;
  }

  /** Whether the decision has been answered (routed, hop or refused); then closing OK cannot leave it unrouted. */
  get decisionAnswered(): boolean {
    return this.#decidedAnswered;
  }

  /**
   * The answer to one message, or null when none is due: Envoy runs the filter in observability mode (no reply
   * allowed), or a FULL_DUPLEX_STREAMED request is still arriving (its headers and body are answered at its end).
   */
  async onMessage(msg: WireProcessingRequest): Promise<WireProcessingResponse | null> {
    return this.answerNow(msg);
  }

  /**
   * `onMessage` without a promise when none is needed: the answer itself when it is ready now (every message but one
   * admission parks), a promise of it otherwise. The stream adapter calls this, so a request that is not queued
   * costs no promise, async frame or microtask per message; a synchronous throw is what `onMessage` rejects with.
   */
  answerNow(msg: WireProcessingRequest): MaybeAsync<WireProcessingResponse | null> {
    this.#deps.metrics.messageCounts.inc(msg.request ?? 'unknown');
    if (msg.protocol_config?.request_body_mode !== undefined) this.#bodyMode = msg.protocol_config.request_body_mode;
    if (msg.protocol_config?.response_body_mode !== undefined) this.#responseBodyMode = msg.protocol_config.response_body_mode;
    if (msg.metadata_context?.filter_metadata) {
      this.#metadata = { ...this.#metadata, ...fromFilterMetadata(msg.metadata_context.filter_metadata) };
    }
    const map =
      msg.request_headers?.headers ?? msg.response_headers?.headers ?? msg.request_trailers?.trailers ?? msg.response_trailers?.trailers;
    const field = map === undefined ? undefined : headerFieldOf(map);
    if (field !== undefined) this.#valueField = field === 'value';
    const response = this.#answer(msg);
    const observed = msg.observability_mode === true;
    return isPromise(response) ? response.then((r) => this.#delivered(r, observed)) : this.#delivered(response, observed);
  }

  /** An answer as it goes out: none in observability mode, in the header field Envoy reads otherwise. */
  #delivered(response: WireProcessingResponse | null, observed: boolean): WireProcessingResponse | null {
    if (observed) return null;
    return response !== null && this.#valueField ? inValueField(response) : response;
  }

  /**
   * A FULL_DUPLEX_STREAMED body message after that body ended: left unanswered (see the `request_body` case). Bytes in
   * it would be body after the end, which nothing can forward any more: logged, never silently.
   */
  #afterDuplexEnd(direction: 'request' | 'response', chunk: Uint8Array | undefined): null {
    if (chunk !== undefined && chunk.length > 0) {
      this.#log().warn(
        { direction, bytes: chunk.length },
        `a ${direction} body chunk came after that FULL_DUPLEX_STREAMED body ended; its bytes cannot be forwarded and are dropped`,
      );
    }
    return null;
  }

  /** An answer written ahead of the one `onMessage` returns, in the header field Envoy reads. */
  #write(response: WireProcessingResponse): void {
    this.#writer?.write(this.#valueField ? inValueField(response) : response);
  }

  #answer(msg: WireProcessingRequest): MaybeAsync<WireProcessingResponse | null> {
    switch (msg.request) {
      case 'request_headers':
        // One stream carries one request. A second request_headers would be decided again, its hold replacing (and
        // never releasing) the first's; Envoy does not send one, so it is refused, fail closed.
        if (this.#requestId !== '')
          return this.#refuse(
            'request_headers',
            new KvgateError('internal', 'a second request_headers message arrived on one ext_proc stream; one stream carries one request'),
          );
        return this.#onRequestHeaders(msg.request_headers?.end_of_stream === true, msg);
      case 'request_body': {
        const chunk = msg.request_body?.body;
        if (this.#decided) {
          // FULL_DUPLEX_STREAMED: the body was decided at its end (or refused), so this is Envoy's empty end_of_stream
          // chunk come again (ext_proc sends it once more when a filter ahead of it resumes after the body ended;
          // testbed/harness/ext-proc-duplex.ts, docs/envoy-ext-proc.md section 14). No answer is the only right one: a
          // plain one is spurious there (a 500, or a reset), a streamed one would add to a body already ended.
          if (this.#bodyMode === 'FULL_DUPLEX_STREAMED') return this.#afterDuplexEnd('request', chunk);
          return { request_body: { response: {} } }; // later STREAMED chunks: nothing left to decide
        }
        if (chunk !== undefined && chunk.length > 0) {
          if (this.#chunks === undefined) this.#chunks = [chunk];
          else this.#chunks.push(chunk);
        }
        const eos = msg.request_body?.end_of_stream === true;
        if (this.#bodyMode === 'FULL_DUPLEX_STREAMED') return this.#onDuplexChunk(chunk?.length ?? 0, eos);
        // BUFFERED sends the whole body in one message; end_of_stream is false only when trailers follow.
        // BUFFERED_PARTIAL sends what it holds once its buffer is full, also with end_of_stream false, so a
        // non-final chunk there is the whole body only when it is as long as the client's content-length said. That
        // it parses as JSON proves nothing: a client can send a complete object, pad it up to the limit and put more
        // after it, which upstream would receive unchecked (and past the content-length stamped from the part).
        // An Envoy that does not announce its mode (before ~1.34) is held to the same rule: it may be streaming.
        const truncated = !eos && this.#bodyMode !== 'BUFFERED' && !this.#wholeByLength();
        return this.#decideAndAnswer('request_body', truncated);
      }
      case 'request_trailers':
        if (!this.#decided && this.#bodyMode === 'FULL_DUPLEX_STREAMED') return this.#onDuplexTrailers();
        if (!this.#decided) {
          return this.#refuse(
            'request_trailers',
            new KvgateError(
              'internal',
              'request trailers arrived before the request body was decided; configure the ext_proc filter with request_body_mode BUFFERED',
            ),
          );
        }
        return { request_trailers: {} };
      case 'response_headers': {
        // Recorded while answering: from Envoy 1.37 the stream may close right after this message (routed-outcome.ts).
        this.#duplexResponseOpen =
          this.#routed !== undefined && this.#responseBodyMode === 'FULL_DUPLEX_STREAMED' && msg.response_headers?.end_of_stream !== true;
        const routed = this.#routed;
        this.#routed = undefined; // one count and one stamp per request, whatever Envoy sends after
        if (routed !== undefined) this.#recordOutcome(routed, msg.response_headers?.headers);
        this.#noteServed();
        return { response_headers: { response: routed === undefined ? {} : responseHeadersMutation(stampFactsOf(routed)) } };
      }
      case 'response_body': {
        if (this.#responseBodyMode !== 'FULL_DUPLEX_STREAMED') return { response_body: { response: {} } };
        // The end_of_stream chunk come again (as for request bodies above): unanswered.
        if (this.#duplexResponseEnded) return this.#afterDuplexEnd('response', msg.response_body?.body);
        // Envoy drains its copy and sends the client only what comes back: every chunk is streamed back unchanged.
        const eos = msg.response_body?.end_of_stream === true;
        if (eos) {
          this.#duplexResponseOpen = false;
          this.#duplexResponseEnded = true;
        }
        const body = msg.response_body?.body ?? new Uint8Array();
        return { response_body: { response: { body_mutation: { streamed_response: { body, end_of_stream: eos } } } } };
      }
      case 'response_trailers':
        this.#duplexResponseOpen = false;
        return { response_trailers: {} };
      default:
        // Refused, not thrown: a thrown error ends the stream with gRPC INTERNAL, which Envoy turns into a bare 500
        // with no code, reason or audit line.
        return this.#refuse(
          'unknown message',
          new KvgateError(
            'internal',
            `unexpected ext_proc message kind ${auditCut(String(msg.request))}; this gate answers Envoy's ext_proc protocol v3`,
          ),
        );
    }
  }

  /**
   * FULL_DUPLEX_STREAMED trailers: the body has ended without an end_of_stream chunk (Envoy sends the trailers
   * instead, as `request_trailer_mode: SEND` is required in this mode). Decide now; the headers answer and the body,
   * as a streamed chunk that does not end the body, go out first, then the trailers answer lets the trailers follow.
   */
  async #onDuplexTrailers(): Promise<WireProcessingResponse> {
    this.#duplexTrailers = true;
    const answer = await this.#onDuplexChunk(0, true);
    if (answer === null || answer.request_body === undefined) return answer ?? { request_trailers: {} };
    this.#write(answer);
    return { request_trailers: {} };
  }

  /** A FULL_DUPLEX_STREAMED chunk: collect it; decide at the end of the body, or refuse once it is too large. */
  #onDuplexChunk(length: number, eos: boolean): MaybeAsync<WireProcessingResponse | null> {
    this.#duplexBytes += length;
    const tooLarge = this.#duplexBytes > (this.#deps.maxBodyBytes?.() ?? Number.POSITIVE_INFINITY);
    if (!eos && !tooLarge) return null;
    if (this.#writer === undefined) {
      return this.#refuse(
        'request_body',
        new KvgateError('internal', 'this gate stream cannot answer FULL_DUPLEX_STREAMED bodies; configure request_body_mode BUFFERED'),
      );
    }
    return this.#decideAndAnswer('request_body', tooLarge);
  }

  #onRequestHeaders(endOfStream: boolean, msg: WireProcessingRequest): MaybeAsync<WireProcessingResponse | null> {
    this.#received = readHeaderMap(msg.request_headers?.headers);
    const h = this.#received.headers;
    const sent = h[H.requestId];
    // On the public listener the gate mints the id: a client's could repeat another tenant's, so two requests would
    // share audit lines and the contract's request id. The client's is kept apart as client_request_id. On the
    // internal listener the id is the decode sidecar's, which the hop's contract names.
    this.#requestId = this.#listener === 'internal' && sent !== undefined && sent !== '' ? sent : this.#deps.newRequestId();
    if (this.#listener === 'public' && sent !== undefined) this.#clientRequestId = auditCut(sent);
    const forged = this.#received.forged.filter((n) => n !== H.binding);
    if (this.#listener === 'public' && forged.length > 0) {
      this.#deps.metrics.forgedHeaders.inc();
      this.#log().warn(
        { forged: forged.slice(0, 16).map((n) => auditCut(n)), count: forged.length },
        'client sent gate-owned headers; removed',
      );
    }
    if (endOfStream) return this.#decideAndAnswer('request_headers', false);
    if (this.#bodyMode !== undefined && !ROUTABLE_BODY_MODES.has(this.#bodyMode)) {
      return this.#refuse('request_headers', misconfigured(this.#bodyMode));
    }
    // FULL_DUPLEX_STREAMED: the headers stay held until the body has arrived and the request is decided.
    if (this.#bodyMode === 'FULL_DUPLEX_STREAMED') return null;
    return { request_headers: { response: stripForged(this.#received.forged) } };
  }

  #decideAndAnswer(phase: 'request_headers' | 'request_body', truncated: boolean): MaybeAsync<WireProcessingResponse> {
    this.#decided = true;
    const started = process.hrtime.bigint();
    const facts = toRequestFacts({
      requestId: this.#requestId || this.#deps.newRequestId(),
      listener: this.#listener,
      headers: this.#received ?? { headers: {}, gateOwned: {}, forged: [], invalid: [], sanitized: [] },
      metadata: this.#metadata,
      bodyTruncated: truncated,
      ...(phase === 'request_body' ? { body: concat(this.#chunks ?? []) } : {}),
    });
    const span = this.#startSpan();
    let admitted: MaybeAsync<Admitted>;
    try {
      // No signal up front: the hooks make one (abortSignalFor) only if admission parks the request.
      admitted = this.#deps.admission.admit(facts, undefined, this.#hooks(phase));
    } catch (e) {
      return this.#admitFailed(phase, span, e);
    }
    if (!isPromise(admitted)) {
      this.#abort = undefined;
      return this.#answerAdmitted(phase, admitted, span, started);
    }
    return admitted.then(
      (decided) => {
        this.#abort = undefined;
        return this.#answerAdmitted(phase, decided, span, started);
      },
      (e: unknown) => this.#admitFailed(phase, span, e),
    );
  }

  #admitFailed(phase: 'request_headers' | 'request_body', span: Span, e: unknown): WireProcessingResponse {
    this.#abort = undefined;
    span.end();
    return this.#refuse(phase, KvgateError.from(e));
  }

  /** What admission decided, answered (the decision's span ends here, queue wait included). */
  #answerAdmitted(phase: 'request_headers' | 'request_body', decided: Admitted, span: Span, started: bigint): WireProcessingResponse {
    endDecisionSpan(span, decided.decision);
    if (this.#finished) {
      // The stream ended while admission held the request (a queued client went away): nothing is sent, and
      // whatever the late decision occupied is given back at once.
      decided.hold?.release();
      return wrap(phase, {});
    }
    this.#hold = decided.hold;
    this.#decidedAnswered = true;
    const d = decided.decision;
    this.#record(d, Number(process.hrtime.bigint() - started) / 1e9);
    // Decided: hold neither the body (nor its buffer slab), nor the headers and metadata, for the life of the stream.
    const forged = this.#received?.forged ?? [];
    const body = concat(this.#chunks ?? []);
    this.#chunks = undefined;
    this.#received = undefined;
    this.#metadata = NO_METADATA;
    switch (d.kind) {
      case 'refuse':
        return { immediate_response: refusalResponse(d) };
      case 'answer':
        return { immediate_response: answerResponse(d) };
      case 'hop': {
        const m = hopMutation(d, forged);
        const common = withTraceHeaders(m.common, span);
        if (this.#duplex(phase)) return this.#sendDuplex({ ...m, common }, decided.body ?? body);
        return wrap(phase, common);
      }
      case 'route': {
        // Keep only what the response phase needs, not the decision's trace, body and contract. Kept before the
        // answer is built, so a failure building it is audited under the request's tenant.
        this.#routed = {
          groupId: d.group.id,
          revision: d.group.revision,
          binding: d.pendingBinding,
          tenant: d.group.tenant,
          ...(d.trust === undefined ? {} : { trust: d.trust }),
        };
        const m = routeMutation(d, phase === 'request_body' ? decided.body : undefined, forged, {
          gieHeaders: this.#deps.gieHeaders,
          gieFallbackEndpoints: this.#deps.gieFallbackEndpoints ?? 0,
        });
        const common = withTraceHeaders(m.common, span);
        if (this.#duplex(phase)) return this.#sendDuplex({ ...m, common }, m.common.body_mutation?.body ?? body);
        const out = wrap(phase, common);
        if (m.dynamicMetadata) out.dynamic_metadata = m.dynamicMetadata;
        return out;
      }
    }
  }

  /** The decision's span: a child of the caller's `traceparent` (client, or a decode sidecar's prefill leg), else a root. */
  #startSpan(): Span {
    const tracer = this.#deps.tracer ?? NOOP_TRACER;
    const attributes = {
      'kvgate.request_id': this.#requestId,
      'kvgate.listener': this.#listener,
      ...(this.#clientRequestId === undefined ? {} : { 'kvgate.client_request_id': this.#clientRequestId }),
    };
    return tracer.startSpan(
      this.#listener === 'internal' ? 'kvgate.gate hop' : 'kvgate.gate route',
      { kind: SpanKind.SERVER, attributes },
      parentContext(this.#received?.headers ?? {}),
    );
  }

  #duplex(phase: 'request_headers' | 'request_body'): boolean {
    return phase === 'request_body' && this.#bodyMode === 'FULL_DUPLEX_STREAMED';
  }

  /** The held headers answer goes out first, then the body answer is returned (`fullDuplexAnswers`). */
  #sendDuplex(m: RequestMutation, body: Uint8Array): WireProcessingResponse {
    const answers = fullDuplexAnswers(m, body, !this.#duplexTrailers);
    this.#write(answers.headers);
    return answers.body;
  }

  #hooks(phase: 'request_headers' | 'request_body'): WaitHooks {
    return new SessionWaitHooks(this, phase);
  }

  /** Whether `override_message_timeout` can still be sent for `phase` (WaitHooks.canExtendTimeout). */
  canExtendTimeoutFor(phase: 'request_headers' | 'request_body'): boolean {
    return this.#writer !== undefined && this.#extendedFor !== phase && !this.#finished;
  }

  /** The signal that aborts when this stream ends, for a request admission parks (WaitHooks.abortSignal). */
  abortSignalFor(): AbortSignal {
    this.#abort ??= new AbortController();
    if (this.#finished) this.#abort.abort();
    return this.#abort.signal;
  }

  /** Send `override_message_timeout` for `phase` (WaitHooks.extendTimeout); false when it cannot be sent. */
  extendTimeoutFor(phase: 'request_headers' | 'request_body', ms: number): boolean {
    if (!this.canExtendTimeoutFor(phase)) return false;
    this.#extendedFor = phase;
    const whole = Math.max(1, Math.ceil(ms));
    this.#writer!.write({ override_message_timeout: { seconds: Math.floor(whole / 1000), nanos: (whole % 1000) * 1_000_000 } });
    if (this.#deps.logger.isLevelEnabled('debug'))
      this.#log().debug({ timeout_ms: whole }, 'request queued: asked Envoy to extend its message timeout');
    return true;
  }

  #refuse(phase: 'request_headers' | 'request_body' | 'request_trailers' | 'unknown message', e: KvgateError): WireProcessingResponse {
    this.#decided = true;
    this.#decidedAnswered = true;
    this.#requestId ||= this.#deps.newRequestId(); // the refusal and its log lines name one id
    const refusal: Refusal = {
      kind: 'refuse',
      requestId: this.#requestId,
      code: e.code,
      message: e.reason,
      trace: [`${phase}: ${e.reason}`],
    };
    if (e.code === 'internal') this.#log().error({ err: e }, 'ext_proc stream failed; refusing the request (fail closed)');
    this.#record(refusal, 0);
    return { immediate_response: refusalResponse(refusal) };
  }

  #record(d: Decision, seconds: number): void {
    const revision = d.kind === 'refuse' || d.kind === 'answer' ? '' : d.group.revision;
    const code = d.kind === 'refuse' ? d.code : '';
    this.#deps.metrics.decisionCounts.inc(d.kind, code, revision);
    this.#deps.metrics.decisionSeconds.observe({ outcome: d.kind }, seconds);
    if (d.kind === 'answer') return; // the gateway's own answer (model list, health): nothing bound, nothing refused
    if (d.kind === 'refuse') {
      // The audit trail: one line per refusal; tenant, code and reason, never prompt text or secrets.
      // Client-supplied values are quoted at most 128 characters where the reason is written; the fields are cut here
      // as well, so no line carries more than a bounded amount of client text.
      this.#log().warn(
        {
          audit: 'refusal',
          code: d.code,
          tenant: this.auditTenant(d.tenant),
          reason: auditCut(d.message, AUDIT_REASON_MAX),
          listener: this.#listener,
          ...(d.revision === undefined ? {} : { revision: d.revision }),
          ...(d.trust === undefined ? {} : { trust: d.trust }),
          ...queueSkippedOf(d),
        },
        `refused: ${d.code}`,
      );
    } else if (this.#deps.decisionLog !== undefined) {
      this.#deps.decisionLog.info(
        { ...decisionLine(d, seconds), ...(this.#clientRequestId === undefined ? {} : { client_request_id: this.#clientRequestId }) },
        `${d.kind} ${d.group.revision}`,
      );
    } else if (this.#deps.logger.isLevelEnabled('debug')) {
      this.#log().debug({ outcome: d.kind, group: d.group.id, revision: d.group.revision }, 'bound');
    }
  }

  /**
   * A routed request's response came back: count it per revision, and note a refusal behind the route. The note is
   * not an audit line: the sidecar that refused wrote that one, and a refusal has exactly one (docs/security.md
   * section 9); a second with `audit` set made every routed refusal count twice in an audit query.
   */
  #recordOutcome(routed: RoutedState, headers: WireHeaderMap | undefined): void {
    // Two values, not the whole response header map (read as readHeaderMap would read them).
    const status = headerValueOf(headers, ':status');
    const o = routedOutcome(status, headerValueOf(headers, H.rejectReason));
    this.#deps.metrics.routedResponseCounts.inc(routed.revision, o.outcome, o.code);
    if (o.outcome === 'refused') {
      this.#log().warn(
        {
          event: 'upstream_refusal',
          code: o.code,
          status: status ?? null,
          revision: routed.revision,
          tenant: routed.tenant,
          ...(routed.trust === undefined ? {} : { trust: routed.trust }),
        },
        `refused behind the route: ${o.code}`,
      );
    }
  }

  /**
   * GIE: the data plane names the endpoint that served the request (`envoy.lb` / `x-gateway-destination-endpoint-
   * served` in the response's metadata_context); the in-flight count moves there if it is one kvgate listed.
   */
  #noteServed(): void {
    const served = this.#metadata['envoy.lb']?.[GIE_SERVED_KEY];
    if (typeof served !== 'string' || this.#hold === undefined || this.#servedNoted) return;
    if (this.#hold.served(served) === false)
      this.#log().warn({ served }, 'the data plane reports a served endpoint kvgate did not list; ignored');
    this.#servedNoted = true;
  }

  /** Whether the body received so far is exactly as long as the request's `content-length` (a decimal integer). */
  #wholeByLength(): boolean {
    const declared = this.#received?.headers['content-length'];
    if (declared === undefined || !/^[0-9]{1,15}$/.test(declared)) return false;
    let received = 0;
    for (const c of this.#chunks ?? []) received += c.byteLength;
    return received === Number(declared);
  }

  /** The HTTP request is over (stream ended, cancelled or failed): release accounting once. */
  finish(): void {
    if (this.#finished) return;
    this.#finished = true;
    this.#abort?.abort(); // only while a decision is in progress (a queued request whose client went away)
    this.#hold?.release();
  }
}

/**
 * The wait hooks of one decision: a two-field object with its methods on the prototype (an object literal with a
 * getter and closures cost a dictionary-mode object and two closures on every request, queued or not).
 */
class SessionWaitHooks implements WaitHooks {
  readonly #session: ExtProcSession;
  readonly #phase: 'request_headers' | 'request_body';

  constructor(session: ExtProcSession, phase: 'request_headers' | 'request_body') {
    this.#session = session;
    this.#phase = phase;
  }

  get canExtendTimeout(): boolean {
    return this.#session.canExtendTimeoutFor(this.#phase);
  }

  extendTimeout(ms: number): boolean {
    return this.#session.extendTimeoutFor(this.#phase, ms);
  }

  abortSignal(): AbortSignal {
    return this.#session.abortSignalFor();
  }
}

const stampFactsOf = (r: RoutedState): ResponseStampFacts => ({
  group: { id: r.groupId, revision: r.revision },
  binding: r.binding.token(),
});

function misconfigured(mode: string): KvgateError {
  return new KvgateError(
    'internal',
    `the Envoy ext_proc filter sends request bodies as ${mode}; kvgate needs request_body_mode BUFFERED ` +
      '(or FULL_DUPLEX_STREAMED): the routing headers must be set while Envoy still holds the request headers',
  );
}

const NOOP_TRACER = trace.getTracer('kvgate-gate');

/** Record what was decided on the span and end it (the span covers the decision, queue wait included). */
function endDecisionSpan(span: Span, d: Decision): void {
  if (span.isRecording()) {
    span.setAttribute('kvgate.outcome', d.kind);
    if (d.kind === 'refuse') {
      span.setAttribute('kvgate.code', d.code);
      span.setStatus({ code: SpanStatusCode.ERROR, message: d.code });
    } else if (d.kind === 'answer') {
      span.setAttribute('kvgate.status', d.status);
    } else {
      span.setAttributes({ 'kvgate.group': d.group.id, 'kvgate.revision': d.group.revision });
      if (d.kind === 'route') span.setAttribute('kvgate.decode_endpoint', d.decode.endpoint ?? '');
      if (d.prefill !== null) span.setAttribute('kvgate.prefill_endpoint', d.prefill.endpoint ?? '');
    }
  }
  span.end();
}

/** Stamp `traceparent` (the gate's span) on the routed request, so the sidecar's spans are its children. */
function withTraceHeaders(common: WireCommonResponse, span: Span): WireCommonResponse {
  const stamps = Object.entries(traceHeaders(span));
  if (stamps.length === 0) return common;
  const mutation = common.header_mutation ?? {};
  return {
    ...common,
    header_mutation: { ...mutation, set_headers: [...(mutation.set_headers ?? []), ...stamps.map(([k, v]) => setHeader(k, v))] },
  };
}

type MaybeAsync<T> = T | Promise<T>;

/** Whether an answer is still to come (admission parked the request, or a FULL_DUPLEX_STREAMED end was awaited). */
function isPromise<T>(v: MaybeAsync<T>): v is Promise<T> {
  return v instanceof Promise;
}

function wrap(phase: 'request_headers' | 'request_body', common: object): WireProcessingResponse {
  return phase === 'request_headers' ? { request_headers: { response: common } } : { request_body: { response: common } };
}

function concat(chunks: readonly Uint8Array[]): Uint8Array {
  if (chunks.length === 1) return chunks[0]!;
  return Buffer.concat(chunks.map((c) => Buffer.from(c.buffer, c.byteOffset, c.byteLength)));
}

/** A refusal's skipped queue step, for its audit line: `{ queueSkipped: reason }`, or nothing. */
function queueSkippedOf(d: Extract<Decision, { kind: 'refuse' }>): { queueSkipped?: string } {
  const skipped = d.fallback?.find((r) => r.skipped !== undefined)?.skipped;
  return skipped === undefined ? {} : { queueSkipped: skipped.reason };
}
