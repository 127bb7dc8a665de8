import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { createTracing, TracingConfigSchema } from './tracing.js';

describe('createTracing', () => {
  it('without otlpUrl: the no-op tracer, nothing to load or export', async () => {
    const t = await createTracing(TracingConfigSchema.parse(undefined), 'gate');
    const span = t.tracer.startSpan('x');
    expect(span.isRecording()).toBe(false);
    span.end();
    await t.shutdown();
  });

  it('with otlpUrl: loads the SDK on demand and exports spans to the collector over OTLP/HTTP', async () => {
    const posts: { url: string; type: string; bytes: number }[] = [];
    const collector = http.createServer((req, res) => {
      let bytes = 0;
      req.on('data', (c: Buffer) => (bytes += c.length));
      req.on('end', () => {
        posts.push({ url: req.url ?? '', type: String(req.headers['content-type']), bytes });
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      });
    });
    await new Promise<void>((r) => collector.listen(0, '127.0.0.1', () => r()));
    try {
      const url = `http://127.0.0.1:${(collector.address() as AddressInfo).port}/v1/traces`;
      const t = await createTracing(TracingConfigSchema.parse({ otlpUrl: url }), 'sidecar');
      const span = t.tracer.startSpan('kvgate test span');
      expect(span.isRecording()).toBe(true);
      span.end();
      await t.shutdown(); // flushes the batch
      expect(posts).toHaveLength(1);
      expect(posts[0]).toMatchObject({ url: '/v1/traces' });
      expect(posts[0]!.bytes).toBeGreaterThan(0);
    } finally {
      await new Promise<void>((r) => collector.close(() => r()));
    }
  });
});
