/**
 * How a handled request ended, for the `kvgate_sidecar_requests_total` metric and the request log line.
 */
import type { ErrorCode } from '../errors.js';

export interface Outcome {
  /**
   * `served`: answered as asked (disaggregated when the contract said so). `local`: served without a remote prefill
   * because the contract or the prefill worker said so. `recomputed`: a failed transfer was recomputed locally.
   * `refused`: a kvgate check said no before any worker call, or a worker refused the request as the client sent it
   * (`workerRefusalCode`); one audit line each, unless `relayed`. `failed`: a worker or transfer failure.
   */
  readonly outcome: 'served' | 'local' | 'recomputed' | 'refused' | 'failed';
  readonly code?: ErrorCode;
  /** What was wrong, for the audit line of a refusal (client-safe: the same text the client received). */
  readonly reason?: string;
  /**
   * A refusal another kvgate component made and audited (the prefill sidecar, or the gate's hop check), which this
   * sidecar passes on: counted `refused` and logged `relayed: true`, without a second audit line for one refusal.
   */
  readonly relayed?: boolean;
}

/**
 * How a sidecar records a worker's 4xx answer: a request the worker refused as the client sent it (400 or 422: a
 * prompt or parameter it does not take; 404: no such model; 413: too large) is `refused` with the code kvgate uses
 * for that status; anything else (401/403: the worker's key; 408/429: its own state) is not the client's doing and
 * stays a worker failure (undefined).
 */
export function workerRefusalCode(status: number): ErrorCode | undefined {
  if (status === 400 || status === 422) return 'bad_request';
  if (status === 404) return 'unknown_model';
  if (status === 413) return 'body_too_large';
  return undefined;
}

/**
 * The audit reason of a worker's refusal (`workerRefusalCode`): its status, never its message. vLLM answers a request
 * its validators refuse with the pydantic error, whose `input` is the request it refused, prompt included; the
 * client still gets that answer verbatim (its own prompt, to itself), but an audit line never holds prompt text.
 */
export function workerRefusalReason(role: 'prefill' | 'decode', status: number): string {
  return `the ${role} worker refused the request (HTTP ${status}); its answer went to the client unchanged and is not logged, since a worker's message may quote the prompt`;
}
