/**
 * What became of a request the gate routed, read from the response headers Envoy sends back on the public
 * listener (`response_header_mode: SEND` in envoy/envoy.yaml). A decode sidecar that refuses (409
 * `incompatible_transfer`, 403 `contract_invalid`, 503 `draining` ...) or fails (502 `worker_error`) answers with
 * `x-kvgate-reject-reason` (src/sidecar/http-io.ts `sendError`), and so does it when it relays a prefill side's
 * refusal; without this the gate counted every such request as a successful route.
 *
 * Why the response headers and not the sidecars' own counts: they are the one message Envoy always sends the gate
 * for a routed request on every version. From Envoy 1.37 (runtime guard
 * `envoy.reloadable_features.ext_proc_stream_close_optimization`; envoyproxy/envoy
 * source/extensions/filters/http/ext_proc/ext_proc.cc, `Filter::closeGrpcStreamIfLastRespReceived`) the stream
 * closes once the last message that will be processed is answered: with response headers SEND and the response
 * body NONE, that is the `response_headers` answer (the request body answer is not last, because the encoding side
 * still has work). So the outcome is recorded while answering that message, never at the stream's end. After an
 * `immediate_response` Envoy sets `processing_complete_` and sends nothing more, so the gate's own refusals are
 * never counted here. Polling sidecar counters instead would lose the per-request link (tenant, request id) and
 * lag by a poll interval.
 */
import type { ErrorCode } from '../errors.js';
import { isErrorCode } from '../errors.js';

export type RoutedOutcome =
  /** Below 400: the worker answered (a stream may still fail later; the sidecar's metrics count that). */
  | { readonly outcome: 'served'; readonly code: '' }
  /** A kvgate component behind the route refused, naming its code. */
  | { readonly outcome: 'refused'; readonly code: ErrorCode }
  /**
   * An error without a kvgate code (Envoy's own local reply: no healthy upstream, timeout; or the worker's), by its
   * status class, or a failure a sidecar names (`worker_error`, `internal`) with that code.
   */
  | { readonly outcome: 'failed'; readonly code: string };

/** Classify one response by its `:status` and `x-kvgate-reject-reason` (absent: undefined). */
export function routedOutcome(status: string | undefined, rejectReason: string | undefined): RoutedOutcome {
  if (rejectReason !== undefined && isErrorCode(rejectReason)) {
    // A worker or sidecar failure is not a refusal: the sidecar records it `failed` and writes no audit line, so
    // counting it `refused` would show refusals no audit line accounts for.
    if (rejectReason === 'worker_error' || rejectReason === 'internal') return { outcome: 'failed', code: rejectReason };
    return { outcome: 'refused', code: rejectReason };
  }
  const n = Number(status);
  if (Number.isInteger(n) && n > 0 && n < 400) return { outcome: 'served', code: '' };
  // A closed label set: the status class, never free text from the response.
  return { outcome: 'failed', code: Number.isInteger(n) && n >= 400 && n < 600 ? `http_${Math.floor(n / 100)}xx` : 'http_unknown' };
}
