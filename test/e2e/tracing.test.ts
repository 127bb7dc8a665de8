/**
 * Issue 19, W3C trace context end to end: a client's `traceparent` is continued by the gate, the decode sidecar, its
 * prefill leg (through Envoy's internal listener and the gate's hop check), the prefill sidecar and every worker
 * call, all in one trace, each span the child of the one that caused it. Spans go to an in-memory exporter.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { BasicTracerProvider, InMemorySpanExporter, type ReadableSpan, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTopology, type Topology } from '../../testbed/demo/topology.js';
import { client, complete, eventually, silent } from './failure-matrix-support.js';

const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
let t: Topology;
beforeAll(async () => {
  t = await startTopology({
    logger: silent,
    candidateWeight: 0,
    tracer: provider.getTracer('kvgate-test'),
    sidecarProbeIntervalMs: 60_000,
  });
});
afterAll(async () => {
  await t.close();
  await provider.shutdown();
});

const parentOf = (s: ReadableSpan) => s.parentSpanContext?.spanId;

describe('one trace across gate, sidecars, prefill leg and worker calls', () => {
  it("continues the client's traceparent through every hop", async () => {
    const traceId = randomBytes(16).toString('hex');
    const clientSpan = randomBytes(8).toString('hex');
    const rid = `trace-${randomUUID()}`;
    const r = await complete(
      t,
      'trace me',
      4,
      client('acme', 'trace', { 'x-request-id': rid, traceparent: `00-${traceId}-${clientSpan}-01` }),
    );
    expect(r.status).toBe(200);
    const mine = () => exporter.getFinishedSpans().filter((s) => s.spanContext().traceId === traceId);
    const want = [
      'kvgate.gate route',
      'kvgate.sidecar decode',
      'kvgate.sidecar prefill leg',
      'kvgate.gate hop',
      'kvgate.sidecar prefill',
      'kvgate.sidecar worker prefill',
      'kvgate.sidecar worker tokenize',
      'kvgate.sidecar worker completion',
    ];
    expect(await eventually(() => want.every((n) => mine().some((s) => s.name === n)))).toBe(true);
    const one = (name: string) => {
      const found = mine().filter((s) => s.name === name);
      expect(found, name).toHaveLength(1);
      return found[0]!;
    };
    const route = one('kvgate.gate route');
    const decode = one('kvgate.sidecar decode');
    const leg = one('kvgate.sidecar prefill leg');
    const hop = one('kvgate.gate hop');
    const prefill = one('kvgate.sidecar prefill');
    expect(parentOf(route)).toBe(clientSpan);
    expect(parentOf(decode)).toBe(route.spanContext().spanId);
    expect(parentOf(leg)).toBe(decode.spanContext().spanId);
    expect(parentOf(hop)).toBe(leg.spanContext().spanId);
    expect(parentOf(prefill)).toBe(hop.spanContext().spanId);
    expect(parentOf(one('kvgate.sidecar worker prefill'))).toBe(prefill.spanContext().spanId);
    expect(parentOf(one('kvgate.sidecar worker tokenize'))).toBe(decode.spanContext().spanId);
    expect(parentOf(one('kvgate.sidecar worker completion'))).toBe(decode.spanContext().spanId);
    // The public listener's request id is the gate's own; the client's is kept beside it.
    expect(route.attributes).toMatchObject({ 'kvgate.client_request_id': rid, 'kvgate.outcome': 'route', 'kvgate.revision': 'llama-a' });
    expect(decode.attributes['kvgate.request_id']).toBe(route.attributes['kvgate.request_id']);
    expect(decode.attributes).toMatchObject({ 'kvgate.outcome': 'served' });
  });

  it('starts a trace when the client sent none, and the sidecars join it', async () => {
    const rid = `trace-root-${randomUUID()}`;
    expect((await complete(t, 'no trace header', 4, client('acme', 'trace-root', { 'x-request-id': rid }))).status).toBe(200);
    const route = () =>
      exporter.getFinishedSpans().find((s) => s.name === 'kvgate.gate route' && s.attributes['kvgate.client_request_id'] === rid);
    expect(await eventually(() => route() !== undefined)).toBe(true);
    expect(route()!.parentSpanContext).toBeUndefined();
    const traceId = route()!.spanContext().traceId;
    expect(
      await eventually(() =>
        exporter.getFinishedSpans().some((s) => s.name === 'kvgate.sidecar decode' && s.spanContext().traceId === traceId),
      ),
    ).toBe(true);
  });
});
