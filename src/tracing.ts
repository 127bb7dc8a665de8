/**
 * Where spans go: nowhere by default (the API's no-op tracer; trace context is still continued and passed on), or
 * an OTLP/HTTP collector when the config names one. Composition roots (`kvgate gate`, `kvgate sidecar`) build one
 * tracer per process from their config's `tracing` block and inject it; nothing registers a global provider.
 *
 * The service name comes from `OTEL_SERVICE_NAME` (read by the SDK's default resource), so a deployment names its
 * gates and sidecars as its other services; the tracer's instrumentation name says which kvgate component it is.
 */
import { trace, type Tracer } from '@opentelemetry/api';
import { z } from 'zod';

export const TracingConfigSchema = z
  .object({
    /** OTLP/HTTP traces endpoint, e.g. http://otel-collector:4318/v1/traces. Absent: no spans are exported. */
    otlpUrl: z.string().url('must be a URL, e.g. http://otel-collector:4318/v1/traces').optional(),
    /** Extra HTTP headers for the collector (e.g. an API key). */
    headers: z.record(z.string(), z.string()).default({}),
    /** Fraction of new traces recorded (0-1); a trace the caller already sampled or dropped keeps that choice. */
    sampleRatio: z.number().min(0).max(1).default(1),
  })
  .strict()
  .default({ headers: {}, sampleRatio: 1 });

export type TracingConfig = z.infer<typeof TracingConfigSchema>;

export interface Tracing {
  readonly tracer: Tracer;
  /** Export what is buffered and stop (call on exit). */
  shutdown(): Promise<void>;
}

/**
 * The tracer for one process: no-op unless `otlpUrl` is set. The SDK and the OTLP exporter are loaded only then
 * (a dynamic import), so a process that exports no spans does not carry them (about 17 MiB resident on Node 20).
 */
export async function createTracing(config: TracingConfig, component: 'gate' | 'sidecar'): Promise<Tracing> {
  const name = `kvgate-${component}`;
  if (config.otlpUrl === undefined) return { tracer: trace.getTracer(name), shutdown: async () => undefined };
  const [{ OTLPTraceExporter }, { BasicTracerProvider, BatchSpanProcessor, ParentBasedSampler, TraceIdRatioBasedSampler }] =
    await Promise.all([import('@opentelemetry/exporter-trace-otlp-http'), import('@opentelemetry/sdk-trace-base')]);
  const provider = new BasicTracerProvider({
    sampler: new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(config.sampleRatio) }),
    spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter({ url: config.otlpUrl, headers: config.headers }))],
  });
  return { tracer: provider.getTracer(name), shutdown: () => provider.shutdown() };
}
