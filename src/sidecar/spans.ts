/**
 * The sidecar's spans: one per request (a child of the `traceparent` the gate stamped), and a client span for each
 * call it makes on the request's behalf (the prefill leg, the worker's /tokenize and completion) whose context
 * travels as `traceparent` on that call, so the gate's hop check, the prefill sidecar and the worker continue the
 * same trace (src/trace-context.ts).
 */
import { type Context, type Span, SpanKind, SpanStatusCode, trace, type Tracer } from '@opentelemetry/api';
import { parentContext, traceHeaders } from '../trace-context.js';
import type { IncomingCall, SidecarContext } from './context.js';

/** The API's no-op tracer: spans carry the caller's context through and record nothing. */
export const NOOP_TRACER: Tracer = trace.getTracer('kvgate-sidecar');

/** The span of one request through this sidecar, and the context its calls start in. */
export function startRequestSpan(
  tracer: Tracer,
  role: string,
  headers: IncomingCall['headers'],
  requestId: string | undefined,
): { span: Span; context: Context } {
  const parent = parentContext(headers);
  const span = tracer.startSpan(
    `kvgate.sidecar ${role}`,
    { kind: SpanKind.SERVER, attributes: { 'kvgate.role': role, 'kvgate.request_id': requestId ?? '' } },
    parent,
  );
  return { span, context: trace.setSpan(parent, span) };
}

/** End a request span with its outcome. */
export function endRequestSpan(span: Span, outcome: string, code: string | undefined): void {
  if (span.isRecording()) {
    span.setAttribute('kvgate.outcome', outcome);
    if (code !== undefined) span.setAttribute('kvgate.code', code);
    if (outcome === 'refused' || outcome === 'failed') span.setStatus({ code: SpanStatusCode.ERROR, message: code ?? outcome });
  }
  span.end();
}

/**
 * Run `fn` as a client span named `name` under the request's span; `fn` gets `headers` plus this span's
 * `traceparent`. `failed` says whether the result was a failure (the span's status).
 */
export async function inChildSpan<T>(
  ctx: SidecarContext,
  call: Pick<IncomingCall, 'trace'>,
  name: string,
  headers: Record<string, string>,
  fn: (headers: Record<string, string>) => Promise<T>,
  failed: (result: T) => boolean,
): Promise<T> {
  const span = ctx.tracer.startSpan(name, { kind: SpanKind.CLIENT }, call.trace);
  try {
    const result = await fn({ ...headers, ...traceHeaders(span) });
    if (failed(result)) span.setStatus({ code: SpanStatusCode.ERROR });
    return result;
  } catch (e) {
    span.setStatus({ code: SpanStatusCode.ERROR, message: (e as Error).message });
    throw e;
  } finally {
    span.end();
  }
}
