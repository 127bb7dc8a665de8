/**
 * The seam between the gRPC stream and the decision core. The stream collects what Envoy sends into a
 * `RawRequest`; a `Decider` turns it into a decision. The composition root (src/cli) supplies the real one
 * (body parsing + route table + worker view + keys); tests supply fakes.
 */
import type { Decision } from '../decide/types.js';

export type Listener = 'public' | 'internal';

export interface RawRequest {
  readonly requestId: string;
  readonly method: string;
  readonly path: string;
  /** Lower-cased headers with every gate-owned header removed. */
  readonly headers: Readonly<Record<string, string>>;
  /** A client's `x-kvgate-binding` (signed sticky token), on any listener; removed before upstream all the same. */
  readonly bindingToken?: string;
  /** Gate-owned headers as received. Trusted only when `listener` is `internal`. */
  readonly gateOwned: Readonly<Record<string, string>>;
  /** Which Envoy listener's filter opened the stream (gRPC initial metadata `x-kvgate-listener`). */
  readonly listener: Listener;
  readonly metadata: Readonly<Record<string, Readonly<Record<string, unknown>>>>;
  /** The buffered request body; undefined for requests without one. */
  readonly body?: Uint8Array;
  /** True when Envoy sent only part of the body (BUFFERED_PARTIAL over its buffer limit). */
  readonly bodyTruncated: boolean;
}

export interface Decided {
  readonly decision: Decision;
  /** The parsed JSON body, when the decision rewrites it (cache_salt). */
  readonly body?: Readonly<Record<string, unknown>>;
  /** Called exactly once when the HTTP request ends (releases in-flight accounting). */
  readonly release?: () => void;
}

/**
 * What the stream offers a decider that must take longer than Envoy's `message_timeout` (a request waiting in the
 * fallback queue): Envoy's `override_message_timeout`, which restarts its timer for the message being answered.
 */
export interface DecideHooks {
  /** Whether `extendTimeout` can still be used for this message (Envoy honours it once per state). */
  readonly canExtendTimeout: boolean;
  /**
   * Send `override_message_timeout` of `ms` (clamped to at least 1 ms) before the answer. Returns false when it
   * could not be sent; the decider must then answer within Envoy's `message_timeout`.
   */
  extendTimeout(ms: number): boolean;
}

export interface Decider {
  /**
   * Decide one request. `signal` aborts when the stream ends (the client went away); `hooks` is absent where the
   * caller cannot extend Envoy's timer, and then the decider must not hold the request.
   */
  decide(req: RawRequest, signal: AbortSignal, hooks?: DecideHooks): Decided | Promise<Decided>;
}
