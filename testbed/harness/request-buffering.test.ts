/**
 * What holds a request before the ext_proc filter sees it, as Envoy does:
 * - `envoy.filters.http.buffer` before ext_proc (source/extensions/filters/http/buffer/buffer_filter.cc): the filters
 *   after it see nothing of a request until its body has ended, so a client that trickles its body holds no ext_proc
 *   stream; past `max_request_bytes` the HCM answers 413; a request without a length gets the buffered one.
 * - the HCM's `request_timeout` (ConnectionManagerImpl::ActiveStream::onRequestTimeout): a request not received (and
 *   sent on) within it gets a local 408 "request timeout" and counts `downstream_rq_timeout`.
 */
import http from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { loadEnvoyConfig } from './envoy-config.js';
import { continueAll } from './fake-ext-proc.js';
import { type Scenario, scenarioYaml, startScenario } from './testing.js';

let scenario: Scenario | undefined;
afterEach(async () => {
  await scenario?.close();
  scenario = undefined;
});

const BUFFERED = { processing_mode: { request_body_mode: 'BUFFERED', response_header_mode: 'SKIP' } };
const bufferFilter = (max: number) => ({
  name: 'envoy.filters.http.buffer',
  typed_config: { '@type': 'type.googleapis.com/envoy.extensions.filters.http.buffer.v3.Buffer', max_request_bytes: max },
});

/** A chunked POST whose body is written in `parts`, `gapMs` apart; `end: false` never finishes it. */
function trickle(
  url: string,
  parts: readonly string[],
  gapMs: number,
  end = true,
): { done: Promise<{ status: number; body: string }>; req: http.ClientRequest } {
  const req = http.request(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-target-cluster': 'backend_a' },
  });
  const done = new Promise<{ status: number; body: string }>((resolve, reject) => {
    req.on('response', (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
  });
  void (async () => {
    for (const p of parts) {
      req.write(p);
      await new Promise((r) => setTimeout(r, gapMs));
    }
    if (end) req.end();
  })();
  return { done, req };
}

describe('the buffer filter before ext_proc', () => {
  it('is read from the chain; refused after ext_proc or without max_request_bytes', () => {
    const yaml = scenarioYaml({ filter: BUFFERED, filtersBefore: [bufferFilter(4096)], hcmFields: { request_timeout: '60s' } });
    const loaded = loadEnvoyConfig(yaml);
    if (!loaded.ok) throw new Error(loaded.error.message);
    expect(loaded.value.listeners[0]!.hcm).toMatchObject({ buffer: { maxRequestBytes: 4096 }, requestTimeoutMs: 60_000 });
    const noMax = loadEnvoyConfig(
      scenarioYaml({
        filter: BUFFERED,
        filtersBefore: [{ ...bufferFilter(1), typed_config: { '@type': bufferFilter(1).typed_config['@type'] } }],
      }),
    );
    expect(noMax.ok ? [] : noMax.error.message).toMatch(/max_request_bytes: required/);
  });

  it('holds a trickled body from ext_proc: no stream opens until the request is whole, then one does', async () => {
    scenario = await startScenario({ handler: continueAll, filter: BUFFERED, filtersBefore: [bufferFilter(64 * 1024)] });
    const body = JSON.stringify({ model: 'm', prompt: 'x'.repeat(200) });
    const { done } = trickle(scenario.url, [body.slice(0, 50), body.slice(50, 100), body.slice(100)], 150);
    await new Promise((r) => setTimeout(r, 250));
    expect(scenario.extProc.streams.length).toBe(0); // half the body is in: nothing reached the processor yet
    expect((await done).status).toBe(200);
    expect(scenario.extProc.streams.length).toBe(1);
    const msgs = scenario.extProc.requests();
    const headers = msgs[0]!.request_headers!.headers!.headers!;
    // maybeAddContentLength: the chunked request reaches the processor with the buffered length.
    expect(Buffer.from(headers.find((h) => h.key === 'content-length')!.raw_value!).toString()).toBe(String(body.length));
    expect(Buffer.from(msgs[1]!.request_body!.body!).toString()).toBe(body);
  });

  it('without it, the same trickled body holds an ext_proc stream from its headers on', async () => {
    scenario = await startScenario({ handler: continueAll, filter: BUFFERED });
    const { done } = trickle(scenario.url, ['{"model":', '"m","prompt":"hi"}'], 250);
    await new Promise((r) => setTimeout(r, 150));
    expect(scenario.extProc.streams.length).toBe(1);
    expect((await done).status).toBe(200);
  });

  it('answers 413 past max_request_bytes, and the processor never sees the request', async () => {
    scenario = await startScenario({ handler: continueAll, filter: BUFFERED, filtersBefore: [bufferFilter(64)] });
    const { done } = trickle(scenario.url, ['x'.repeat(50), 'x'.repeat(50)], 20);
    const r = await done;
    expect([r.status, r.body]).toEqual([413, 'Payload Too Large']);
    expect(scenario.extProc.streams.length).toBe(0);
    expect(scenario.stat('http.ingress.downstream_rq_too_large')).toBe(1);
  });
});

describe('request_timeout', () => {
  it('answers 408 to a request whose body does not end in time; with the buffer filter no ext_proc stream was held', async () => {
    scenario = await startScenario({
      handler: continueAll,
      filter: BUFFERED,
      filtersBefore: [bufferFilter(64 * 1024)],
      hcmFields: { request_timeout: '0.3s' },
    });
    const { done, req } = trickle(scenario.url, ['{"model":'], 10, false);
    const r = await done;
    req.destroy();
    expect([r.status, r.body]).toEqual([408, 'request timeout']);
    expect(scenario.stat('http.ingress.downstream_rq_timeout')).toBe(1);
    expect(scenario.extProc.streams.length).toBe(0);
  });

  it('does not cut a request that was sent on in time (the response starting disarms it)', async () => {
    scenario = await startScenario({ handler: continueAll, filter: BUFFERED, hcmFields: { request_timeout: '0.3s' } });
    const { done } = trickle(scenario.url, ['{"model":"m","prompt":"hi"}'], 10);
    expect((await done).status).toBe(200);
    await new Promise((r) => setTimeout(r, 400));
    expect(scenario.stat('http.ingress.downstream_rq_timeout')).toBe(0);
  });
});
