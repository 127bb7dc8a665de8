/**
 * An upstream that answers without end (a lying or compromised worker, or whatever answers a decode sidecar's
 * prefill leg) is cut once its answer passes MAX_UPSTREAM_ANSWER_BYTES: the request fails as a worker error, and
 * the sidecar never holds more than that for it. Without the bound each such answer was buffered until the call's
 * timeout, so a prefill worker could grow the decode sidecars of other pods until they were killed.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postJson, startTestSim } from '../../testbed/sim/testing.js';
import type { SimServer } from '../../testbed/sim/server.js';
import type { FetchFn } from './http-io.js';
import { MAX_UPSTREAM_ANSWER_BYTES } from './http-io.js';
import { bound, contractFor, endpointOf, sidecarConfigFor, startTestSidecar, type TestSidecar } from './testing.js';

const MODEL = '/models/acme-llama-3-8b';
const completion = { model: MODEL, prompt: 'The capital of France is', max_tokens: 4, temperature: 0 };

/** A 200 answer whose body never ends (1 MiB chunks, as fast as they are read); counts the bytes it handed out. */
function endless(type: string, sent: { bytes: number; calls: number }): Response {
  const chunk = new Uint8Array(1 << 20).fill(0x20);
  const body = new ReadableStream<Uint8Array>({
    pull(controller) {
      sent.bytes += chunk.byteLength;
      controller.enqueue(chunk);
    },
  });
  return new Response(body, { status: 200, headers: { 'content-type': type } });
}

/** The sidecar's fetch, with every POST to `url` answered by `endless` once armed; `sent.calls` counts them. */
function lyingAt(url: () => string, type: string, sent: { bytes: number; calls: number }, armed: { on: boolean }) {
  return (f: FetchFn): FetchFn =>
    async (input, init) => {
      if (armed.on && input === url() && init?.method === 'POST') {
        sent.calls++;
        return endless(type, sent);
      }
      return f(input, init);
    };
}

const open: { close(): Promise<void> }[] = [];
let prefillSim: SimServer;
let decodeSim: SimServer;
beforeAll(async () => {
  prefillSim = await startTestSim();
  decodeSim = await startTestSim();
  open.push(prefillSim, decodeSim);
});
afterAll(async () => {
  for (const x of open.reverse()) await x.close();
});

async function sidecar(sim: SimServer, role: 'prefill' | 'decode', wrap: (f: FetchFn) => FetchFn): Promise<TestSidecar> {
  const t = await startTestSidecar(sidecarConfigFor(sim, role), undefined, wrap);
  open.push(t.sidecar);
  return t;
}

const errorOf = (r: { status: number; body: any }) => [r.status, r.body?.error?.code];

describe('an upstream answer without end', () => {
  it('from a prefill worker: 502 worker_error once the answer passes the limit', async () => {
    const sent = { bytes: 0, calls: 0 };
    const armed = { on: false };
    const P = await sidecar(
      prefillSim,
      'prefill',
      lyingAt(() => `${prefillSim.url}/v1/completions`, 'application/json', sent, armed),
    );
    armed.on = true;
    const c = contractFor(P.config.fingerprint, endpointOf(P.sidecar.url), { requestId: 'endless-prefill' });
    const r = await postJson(`${P.sidecar.url}/v1/completions`, ...bound(c, completion));
    expect(errorOf(r)).toEqual([502, 'worker_error']);
    expect(r.body.error.message).toContain(`longer than ${MAX_UPSTREAM_ANSWER_BYTES} bytes`);
    // Read up to the limit and not much past it (the stream runs a few chunks ahead of the reader).
    expect(sent.bytes).toBeLessThan(MAX_UPSTREAM_ANSWER_BYTES + (8 << 20));
  });

  it('on the prefill leg, from another pod: the decode sidecar fails the request instead of buffering it', async () => {
    const P = await sidecar(prefillSim, 'prefill', (f) => f);
    const sent = { bytes: 0, calls: 0 };
    const armed = { on: false };
    const D = await sidecar(
      decodeSim,
      'decode',
      lyingAt(() => `${P.sidecar.url}/v1/completions`, 'application/json', sent, armed),
    );
    armed.on = true;
    const c = contractFor(D.config.fingerprint, endpointOf(P.sidecar.url), { requestId: 'endless-leg' });
    const r = await postJson(`${D.sidecar.url}/v1/completions`, ...bound(c, completion));
    expect(errorOf(r)).toEqual([502, 'worker_error']);
    expect(r.body.error.message).toContain(`longer than ${MAX_UPSTREAM_ANSWER_BYTES} bytes`);
    // Each attempt (the leg is retried inside the group) read up to the limit and not much past it.
    expect(sent.calls).toBeGreaterThan(0);
    expect(sent.bytes).toBeLessThan(sent.calls * (MAX_UPSTREAM_ANSWER_BYTES + (8 << 20)));
  });

  it('from a decode worker, streamed or not: the request fails before anything reaches the client', async () => {
    for (const type of ['application/json', 'text/event-stream']) {
      const sent = { bytes: 0, calls: 0 };
      const armed = { on: false };
      const D = await sidecar(
        decodeSim,
        'decode',
        lyingAt(() => `${decodeSim.url}/v1/completions`, type, sent, armed),
      );
      armed.on = true;
      // A request with a prefill leg: its stream is held until the first output, which this one never sends.
      const P = await sidecar(prefillSim, 'prefill', (f) => f);
      const c = contractFor(D.config.fingerprint, endpointOf(P.sidecar.url), { requestId: `endless-decode-${type}` });
      const r = await postJson(`${D.sidecar.url}/v1/completions`, ...bound(c, { ...completion, stream: type === 'text/event-stream' }));
      expect(r.status, type).toBeGreaterThanOrEqual(500);
      expect(JSON.stringify(r.body), type).toContain(`longer than ${MAX_UPSTREAM_ANSWER_BYTES} bytes`);
      expect(sent.bytes, type).toBeLessThan(MAX_UPSTREAM_ANSWER_BYTES + (8 << 20));
    }
  });
});
