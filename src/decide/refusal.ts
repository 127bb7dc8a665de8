/**
 * Building refusals: a refusal is a value with a code from the closed set, a message that says what, why and
 * what to do, and the trace that led to it (for `kvgate explain` and the audit log).
 */
import type { ErrorCode, KvgateError } from '../errors.js';
import { type FallbackRecord, NO_TRACE, type Refusal, type Trace } from './types.js';

export interface RefusalExtra {
  readonly retryAfterSeconds?: number;
  readonly tenant?: string | null;
  readonly fallback?: readonly FallbackRecord[];
  /** The revision the request was bound to when it was refused after binding, for the audit line. */
  readonly revision?: string;
  /** That revision's trust (`declared-only` is named on every audit line of the revision). */
  readonly trust?: 'recorded' | 'declared-only';
}

/** The trace with one more line, or none when the decision is not traced (`DecideContext.trace: false`). */
const traced = (trace: Trace | readonly string[], line: () => string): readonly string[] =>
  trace === undefined || trace === NO_TRACE ? NO_TRACE : Object.freeze([...trace, line()]);

/** A frozen refusal; the trace ends with the refusal code so `kvgate explain` output reads top to bottom. */
export function refuse(
  requestId: string,
  code: ErrorCode,
  message: string,
  trace: Trace | readonly string[],
  extra: RefusalExtra = {},
): Refusal {
  return Object.freeze({
    kind: 'refuse' as const,
    requestId,
    code,
    message,
    ...(extra.retryAfterSeconds === undefined ? {} : { retryAfterSeconds: extra.retryAfterSeconds }),
    ...(extra.tenant === undefined ? {} : { tenant: extra.tenant }),
    trace: traced(trace, () => `refused: ${code}`),
    ...(extra.fallback === undefined ? {} : { fallback: extra.fallback }),
    ...(extra.revision === undefined ? {} : { revision: extra.revision }),
    ...(extra.trust === undefined ? {} : { trust: extra.trust }),
  });
}

/** A refusal from a parser's KvgateError (e.g. `parseOpenAiBody`), keeping its code and client-safe message. */
export function refusalFromError(requestId: string, error: KvgateError, trace: Trace | readonly string[], tenant?: string | null): Refusal {
  return refuse(
    requestId,
    error.code,
    error.reason,
    traced(trace, () => `request rejected: ${error.reason}`),
    tenant === undefined ? {} : { tenant },
  );
}
