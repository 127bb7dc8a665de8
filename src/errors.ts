/**
 * One error type for every refusal and failure kvgate reports to a person.
 *
 * The code is a closed union so that every code has exactly one HTTP status and one `x-kvgate-reject-reason`
 * (README.md, "The external contract"). The `cause` is kept for logs and never sent to clients.
 */

/** Codes a client can see (README.md refusal table) plus internal ones that map to 5xx. */
export const ERROR_STATUS = {
  bad_request: 400,
  kv_params_forbidden: 400,
  tenant_required: 401,
  tenant_scope_denied: 403,
  unknown_model: 404,
  mixed_revision: 409,
  incompatible_transfer: 409,
  body_too_large: 413,
  queue_full: 429,
  no_compatible_capacity: 503,
  queue_deadline_exceeded: 504,
  // Internal: configuration and contract problems, worker failures.
  contract_invalid: 403,
  attestation_invalid: 409,
  worker_unverified: 503,
  worker_error: 502,
  draining: 503,
  internal: 500,
} as const satisfies Record<string, number>;

export type ErrorCode = keyof typeof ERROR_STATUS;

export function isErrorCode(value: unknown): value is ErrorCode {
  return typeof value === 'string' && Object.hasOwn(ERROR_STATUS, value);
}

export function statusOf(code: ErrorCode): number {
  return ERROR_STATUS[code];
}

export class KvgateError extends Error {
  override readonly name = 'KvgateError';
  readonly code: ErrorCode;
  /** Extra, client-safe detail (e.g. `retryAfterSeconds`). */
  readonly detail: Readonly<Record<string, string | number | boolean>>;

  constructor(code: ErrorCode, message: string, options: { cause?: unknown; detail?: Record<string, string | number | boolean> } = {}) {
    super(`[${code}] ${message}`, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.detail = Object.freeze({ ...(options.detail ?? {}) });
  }

  /** The message without the `[code]` prefix, as it goes into a client-facing JSON body. */
  get reason(): string {
    return this.message.replace(/^\[[a-z_]+\] /, '');
  }

  get status(): number {
    return statusOf(this.code);
  }

  /** Normalise anything thrown into a KvgateError, keeping the original as `cause`. */
  static from(value: unknown, fallback: ErrorCode = 'internal'): KvgateError {
    if (value instanceof KvgateError) return value;
    const message = value instanceof Error ? value.message : String(value);
    return new KvgateError(fallback, message, { cause: value });
  }
}

/** The OpenAI-style JSON error body every kvgate refusal carries. */
export interface ErrorBody {
  error: { type: 'kvgate_error'; code: ErrorCode; message: string; request_id: string };
}

export function toErrorBody(code: ErrorCode, message: string, requestId: string): ErrorBody {
  return { error: { type: 'kvgate_error', code, message, request_id: requestId } };
}

/** Result type for parsers: refusals and parse failures are values, not exceptions. */
export type Result<T, E = KvgateError> = { ok: true; value: T } | { ok: false; error: E };

export const ok = <T>(value: T): { ok: true; value: T } => ({ ok: true, value });
export const err = <E>(error: E): { ok: false; error: E } => ({ ok: false, error });
