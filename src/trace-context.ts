/**
 * W3C Trace Context (https://www.w3.org/TR/trace-context/, "traceparent header" and "tracestate header") on the
 * wire, and spans through @opentelemetry/api. The gate starts or continues the client's trace, stamps its own span
 * as `traceparent` on the request it routes, and each sidecar continues from the header it receives and passes it
 * on to its worker and to the prefill leg; so one trace covers gate, decode sidecar, prefill leg, the gate's hop
 * check, prefill sidecar and the worker calls. vLLM continues the same headers into its own spans when started
 * with `--otlp-traces-endpoint` (vllm-project/vllm vllm/tracing.py `extract_trace_context`).
 *
 * Parsing is here, not in @opentelemetry/core's propagator, so the product depends only on the API package; the
 * rules are the spec's: version 00 is exactly `00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`, ids not all
 * zero, version `ff` invalid, and a higher version is read by its first four fields.
 */
import { createTraceState, ROOT_CONTEXT, type Context, type Span, type SpanContext, trace, TraceFlags } from '@opentelemetry/api';

export const TRACEPARENT = 'traceparent';
export const TRACESTATE = 'tracestate';

const TRACEPARENT_RE = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;

/** The remote span context a `traceparent` (and `tracestate`) names, or undefined when absent or invalid. */
export function parseTraceparent(traceparent: string | undefined, tracestate?: string): SpanContext | undefined {
  if (traceparent === undefined) return undefined;
  const m = TRACEPARENT_RE.exec(traceparent.trim());
  if (m === null) return undefined;
  const [, version, traceId, spanId, flags, rest] = m;
  if (version === 'ff' || (version === '00' && rest !== undefined)) return undefined;
  if (/^0+$/.test(traceId!) || /^0+$/.test(spanId!)) return undefined;
  return {
    traceId: traceId!,
    spanId: spanId!,
    traceFlags: Number.parseInt(flags!, 16) & TraceFlags.SAMPLED,
    isRemote: true,
    ...(tracestate === undefined || tracestate === '' ? {} : { traceState: createTraceState(tracestate) }),
  };
}

/** The context to start a span in: the caller's remote span when its headers carry one, else a new trace. */
export function parentContext(headers: Readonly<Record<string, string | string[] | undefined>>): Context {
  const one = (v: string | string[] | undefined) => (Array.isArray(v) ? v[0] : v);
  const sc = parseTraceparent(one(headers[TRACEPARENT]), one(headers[TRACESTATE]));
  return sc === undefined ? ROOT_CONTEXT : trace.setSpanContext(ROOT_CONTEXT, sc);
}

/** `traceparent` (and `tracestate`) naming `span` as the parent of whatever receives them; {} for an invalid span. */
export function traceHeaders(span: Span): Record<string, string> {
  const sc = span.spanContext();
  if (!trace.isSpanContextValid(sc)) return {};
  const flags = (sc.traceFlags & TraceFlags.SAMPLED).toString(16).padStart(2, '0');
  const state = sc.traceState?.serialize();
  return { [TRACEPARENT]: `00-${sc.traceId}-${sc.spanId}-${flags}`, ...(state ? { [TRACESTATE]: state } : {}) };
}
