/**
 * One direction (request or response) of the ext_proc filter: which reply it is waiting for, its per-message timer,
 * the headers it holds for mutation, and the body-mode flags. Mirrors Envoy's `ProcessorState`
 * (source/extensions/filters/http/ext_proc/processor_state.{h,cc}); the awaiting side is a promise instead of
 * Envoy's pause/continue callbacks.
 */
import type { DuplexBody } from './duplex-body.js';
import type { BodySendMode, ProcessingMode } from './envoy-config-types.js';
import type { HeaderMap } from './header-map.js';

export type CallbackState =
  | 'Idle'
  | 'HeadersCallback'
  | 'BufferedBodyCallback'
  | 'BufferedPartialBodyCallback'
  | 'StreamedBodyCallback'
  | 'TrailersCallback';

/**
 * How a wait for a reply ended: `applied` (the reply was handled; carry on with the state machine),
 * `bypass` (the processor is gone for this request; continue without it), `stop` (a local reply was sent or the
 * stream reset; abandon the request).
 */
export type CallOutcome = 'applied' | 'bypass' | 'stop';

export type Direction = 'request' | 'response';

export class ProcessorState {
  readonly direction: Direction;
  callbackState: CallbackState = 'Idle';
  sendHeaders = true;
  sendTrailers = false;
  bodyMode: BodySendMode = 'NONE';
  /** Headers still held (mutable by the server); null once they have been released downstream/upstream. */
  headers: HeaderMap | null = null;
  trailers: HeaderMap | null = null;
  /** The body given to (and possibly rewritten by) the server in BUFFERED / BUFFERED_PARTIAL mode. */
  body: Buffer | null = null;
  noBody = false;
  bodyReplaced = false;
  partialBodyProcessed = false;
  attributesSent = false;
  /** The body under FULL_DUPLEX_STREAMED (duplex-body.ts); null in every other mode. */
  duplex: DuplexBody | null = null;
  #timer: NodeJS.Timeout | undefined;
  #newTimeoutReceived = false;
  #waiter: ((outcome: CallOutcome) => void) | undefined;

  constructor(direction: Direction, mode: ProcessingMode) {
    this.direction = direction;
    this.setProcessingMode(mode);
  }

  /** Headers default to SEND and trailers to SKIP, so DEFAULT means "send" for one and "skip" for the other. */
  setProcessingMode(mode: ProcessingMode): void {
    const req = this.direction === 'request';
    this.sendHeaders = (req ? mode.request_header_mode : mode.response_header_mode) !== 'SKIP';
    this.sendTrailers = (req ? mode.request_trailer_mode : mode.response_trailer_mode) === 'SEND';
    this.bodyMode = req ? mode.request_body_mode : mode.response_body_mode;
  }

  /**
   * Envoy drops content-length where it cannot keep it right if the server rewrites the body: partial/streamed
   * modes, and BUFFERED when the headers are not sent (the server has no chance to fix it).
   */
  shouldRemoveContentLength(): boolean {
    return (
      this.bodyMode === 'STREAMED' ||
      this.bodyMode === 'FULL_DUPLEX_STREAMED' ||
      this.bodyMode === 'BUFFERED_PARTIAL' ||
      (this.bodyMode === 'BUFFERED' && !this.sendHeaders)
    );
  }

  /**
   * Starts waiting for a reply: arms the per-message timer and returns the promise the caller awaits. No timer under
   * FULL_DUPLEX_STREAMED, in this direction's body mode (`ProcessorState::onStartProcessorCall`, processor_state.cc).
   */
  startCall(next: CallbackState, timeoutMs: number, onTimeout: () => void): Promise<CallOutcome> {
    this.callbackState = next;
    this.#newTimeoutReceived = false;
    if (this.bodyMode !== 'FULL_DUPLEX_STREAMED') this.#arm(timeoutMs, onTimeout);
    return new Promise((resolve) => {
      this.#waiter = resolve;
    });
  }

  /** The reply arrived (or the call was abandoned): stop the timer and go to `next`. */
  finishCall(next: CallbackState = 'Idle'): void {
    this.stopTimer();
    this.callbackState = next;
    this.#newTimeoutReceived = false;
  }

  /** Wakes whoever awaits this direction's reply (and, under FULL_DUPLEX_STREAMED, the body's output). */
  resolve(outcome: CallOutcome): void {
    const waiter = this.#waiter;
    this.#waiter = undefined;
    waiter?.(outcome);
    if (outcome === 'stop') this.duplex?.abort();
    else if (outcome === 'bypass' && this.duplex !== null) {
      // clearAsyncState: nothing is queued in this mode (the chunks sent were drained), the headers go on and the
      // rest of the body passes through unprocessed.
      this.duplex.passThrough = true;
      this.duplex.release('bypass');
      if (this.duplex.completeBody) this.duplex.end(this.duplex.trailers);
    }
  }

  /** `override_message_timeout`: restarts a running timer once per state. */
  restartTimer(timeoutMs: number, onTimeout: () => void): boolean {
    if (this.#timer === undefined || this.#newTimeoutReceived) return false;
    this.#arm(timeoutMs, onTimeout);
    this.#newTimeoutReceived = true;
    return true;
  }

  stopTimer(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  #arm(timeoutMs: number, onTimeout: () => void): void {
    this.stopTimer();
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      onTimeout();
    }, timeoutMs);
  }
}
