/**
 * How a handled request ended, for the `kvgate_sidecar_requests_total` metric and the request log line.
 */
import type { ErrorCode } from '../errors.js';

export interface Outcome {
  /**
   * `served`: answered as asked (disaggregated when the contract said so). `local`: served without a remote prefill
   * because the contract or the prefill worker said so. `recomputed`: a failed transfer was recomputed locally.
   * `refused`: a kvgate check said no before any worker call. `failed`: a worker or transfer failure.
   */
  readonly outcome: 'served' | 'local' | 'recomputed' | 'refused' | 'failed';
  readonly code?: ErrorCode;
  /** What was wrong, for the audit line of a refusal (client-safe: the same text the client received). */
  readonly reason?: string;
}
