/**
 * A prefill worker on current vLLM that drains (SIGTERM with `--shutdown-timeout`, PR #36666) answers new requests
 * 503 `{"error": "..."}` while its generations in flight finish (testbed/sim `shutdown`, flavour `main`). The prefill
 * sidecar hands that answer on as it came, so the decode side's prefill leg retries it on another prefill endpoint of
 * the same group (prefill-leg.ts retries 502, 503 and 504) instead of failing the request.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postJson, startTestSim } from '../../testbed/sim/testing.js';
import type { SimServer } from '../../testbed/sim/server.js';
import { bound, contractFor, sidecarConfigFor, startTestSidecar, type TestSidecar } from './testing.js';

const MODEL = '/models/acme-llama-3-8b';
let sim: SimServer;
let p: TestSidecar;
beforeAll(async () => {
  sim = await startTestSim({}, { flavour: 'main' });
  p = await startTestSidecar(sidecarConfigFor(sim, 'prefill', { advertise: '127.0.0.1:9999' }));
});
afterAll(async () => {
  await p.sidecar.close();
  await sim.close();
});

describe('a draining prefill worker', () => {
  it("is answered 503 with the worker's message, which the decode side's prefill leg retries", async () => {
    // A generation in flight keeps the worker draining (with none, it would close at once).
    sim.setFaults({ holdStreamAfterTokens: 1 });
    const held = await fetch(`${sim.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, prompt: 'held', max_tokens: 3, ignore_eos: true, stream: true }),
    });
    const reader = held.body!.getReader();
    expect((await reader.read()).done).toBe(false);
    const done = sim.shutdown(30_000);

    const c = contractFor(p.config.fingerprint, '127.0.0.1:9999', { requestId: 'drain-1' });
    const r = await postJson(
      `${p.sidecar.url}/v1/completions`,
      ...bound(c, { model: MODEL, prompt: 'The capital of France is', max_tokens: 8 }),
    );
    expect(r.status).toBe(503);
    expect(r.body).toEqual({ error: 'Server is unavailable. Please try again later.' });

    sim.setFaults({ holdStreamAfterTokens: null });
    while (!(await reader.read()).done);
    await done;
  });
});
