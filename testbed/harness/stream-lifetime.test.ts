/**
 * The ext_proc stream's lifetime per Envoy release line (runtime-config.ts): 1.36 keeps it for the whole request,
 * 1.37 closes it after the response headers; the YAML's `layered_runtime` and the graceful close on top.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { continueAll, reply, type FakeExtProcStream } from './fake-ext-proc.js';
import type { UpstreamHandler } from './fake-upstream.js';
import { ENVOY_VERSIONS, type EnvoyVersion } from './runtime-config.js';
import { ok, request, startScenario, type Scenario } from './testing.js';

let scenario: Scenario | undefined;
afterEach(async () => {
  await scenario?.close();
  scenario = undefined;
});

const TO_A = { 'x-target-cluster': 'backend_a' };
/** Not the 200 ms default: a loaded machine must not turn these into message-timeout 504s (the lifetime is the point). */
const RELAXED = { message_timeout: '10s' };

/** An upstream that sends its headers at once and holds the body until `finish` is called. */
function heldUpstream(): { handler: UpstreamHandler; started: Promise<void>; finish(): void } {
  let finish = (): void => undefined;
  let started = (): void => undefined;
  const startedP = new Promise<void>((r) => (started = r));
  const handler: UpstreamHandler = (_req, res) =>
    new Promise<void>((done) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: first token\n\n');
      started();
      finish = () => {
        res.end('data: [DONE]\n\n');
        done();
      };
    });
  return { handler, started: startedP, finish: () => finish() };
}

/** Runs one streamed request and reports whether the ext_proc stream was still open while the body streamed. */
async function lifetimeOf(
  version: EnvoyVersion,
  extra: { runtime?: Record<string, boolean>; expectClosed?: boolean; filter?: Record<string, unknown>; body?: string } = {},
) {
  const upstream = heldUpstream();
  let stream: FakeExtProcStream | undefined;
  let endedHow: 'end' | 'cancelled' | undefined;
  scenario = await startScenario({
    handler: async (s) => {
      stream = s;
      void s.ended.then((how) => (endedHow = how));
      await continueAll(s);
    },
    upstreamHandler: upstream.handler,
    harness: { envoyVersion: version },
    filter: { ...RELAXED, ...(extra.filter ?? {}) },
    ...(extra.runtime === undefined ? {} : { runtime: extra.runtime }),
  });
  const pending = request(scenario.url, { headers: TO_A, ...(extra.body === undefined ? {} : { body: extra.body }) });
  await upstream.started;
  // While the upstream still streams: a stream that should close is awaited (bounded), one that should stay open is
  // looked at after a short pause; neither depends on how fast a loaded machine is.
  await Promise.race([stream?.ended, new Promise((r) => setTimeout(r, extra.expectClosed === true ? 5000 : 150))]);
  const openWhileStreaming = endedHow === undefined;
  upstream.finish();
  const r = ok(await pending);
  await scenario.harness.waitForAccessLog(1);
  await stream?.ended;
  return { openWhileStreaming, status: r.status, body: r.body, reset: stream?.wasCancelled() ?? false };
}

describe('ext_proc stream lifetime', () => {
  it('Envoy 1.36 keeps the stream open until the request ends', async () => {
    const l = await lifetimeOf('1.36');
    expect(l).toMatchObject({ openWhileStreaming: true, status: 200 });
    expect(l.body).toContain('[DONE]');
  });

  it('Envoy 1.37 closes it after the response_headers answer (END_STREAM then RST_STREAM)', async () => {
    const l = await lifetimeOf('1.37', { expectClosed: true });
    expect(l).toMatchObject({ openWhileStreaming: false, status: 200, reset: true });
  });

  // Envoy 1.37 (envoyproxy/envoy#41425, source/extensions/filters/http/ext_proc/ext_proc.cc `Filter::encodeHeaders`,
  // read in the public index copy that has `closeGrpcStreamIfLastRespReceived`): "If there is no external processing
  // configured in the encoding path, closing the gRPC stream if it is still open" — `encoding_state_.noExternalProcess()`
  // (processor_state.h: headers SKIP, body NONE, trailers SKIP) calls `closeStreamMaybeGraceful()` when the response
  // headers arrive. That is the only close a BUFFERED request body gets before the request ends, as
  // `isLastBodyResponse` never counts a BUFFERED body reply. Since #45617 (backported to v1.37 as #46836) it sits
  // under the `ext_proc_stream_close_optimization` guard and waits for the request path to be done with the processor.
  const BUFFERED_SKIP = { processing_mode: { request_body_mode: 'BUFFERED', response_header_mode: 'SKIP' } };
  const MODEL = JSON.stringify({ model: 'm' });

  it('Envoy 1.37 closes it when the response headers reach a response path with nothing to process', async () => {
    const l = await lifetimeOf('1.37', { filter: BUFFERED_SKIP, body: MODEL, expectClosed: true });
    expect(l).toMatchObject({ openWhileStreaming: false, status: 200, reset: true });
    expect(l.body).toContain('[DONE]');
  });

  it('Envoy 1.36 (or the guard off) keeps that stream open until the request ends', async () => {
    expect((await lifetimeOf('1.36', { filter: BUFFERED_SKIP, body: MODEL })).openWhileStreaming).toBe(true);
    await scenario?.close();
    const off = { 'envoy.reloadable_features.ext_proc_stream_close_optimization': false };
    expect((await lifetimeOf('1.37', { filter: BUFFERED_SKIP, body: MODEL, runtime: off })).openWhileStreaming).toBe(true);
  });

  it('layered_runtime can turn the 1.37 close optimisation off; on 1.36 the key changes nothing', async () => {
    const off = { 'envoy.reloadable_features.ext_proc_stream_close_optimization': false };
    expect((await lifetimeOf('1.37', { runtime: off })).openWhileStreaming).toBe(true);
    await scenario?.close();
    const on = { 'envoy.reloadable_features.ext_proc_stream_close_optimization': true };
    expect((await lifetimeOf('1.36', { runtime: on })).openWhileStreaming).toBe(true);
  });

  // Envoy 1.40.0 removed the guard and its legacy path (envoyproxy/envoy `changelogs/1.40.0.yaml` at ffd4b26c,
  // removed_config_or_runtime): a static layer that still turns it off no longer keeps the stream open.
  it('Envoy 1.40 closes it after the response headers even with the removed guard set to false', async () => {
    const off = { 'envoy.reloadable_features.ext_proc_stream_close_optimization': false };
    const l = await lifetimeOf('1.40', { runtime: off, expectClosed: true });
    expect(l).toMatchObject({ openWhileStreaming: false, status: 200, reset: true });
    expect(l.body).toContain('[DONE]');
  });

  it('ext_proc_graceful_grpc_close: a half-close the server answers, no reset', async () => {
    const graceful = { 'envoy.reloadable_features.ext_proc_graceful_grpc_close': true };
    const l = await lifetimeOf('1.37', { runtime: graceful, expectClosed: true });
    expect(l).toMatchObject({ openWhileStreaming: false, status: 200, reset: false });
  });

  it.each(ENVOY_VERSIONS)('Envoy %s: a processor that ends the stream OK mid-generation does not cut it', async (version) => {
    const upstream = heldUpstream();
    scenario = await startScenario({
      handler: async (s) => {
        for (let i = 0; i < 2; i++) {
          const m = await s.recv(); // request headers, then response headers
          if (m !== null) s.send(reply(m));
        }
        s.closeOk();
      },
      upstreamHandler: upstream.handler,
      harness: { envoyVersion: version },
      filter: RELAXED,
    });
    const pending = request(scenario.url, { headers: TO_A });
    await upstream.started;
    await new Promise((r) => setTimeout(r, 50));
    upstream.finish();
    const r = ok(await pending);
    expect(r.status).toBe(200);
    expect(r.body).toContain('[DONE]');
  });
});
