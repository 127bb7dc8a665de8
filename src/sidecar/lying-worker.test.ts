/**
 * A lying worker is named: when the live worker does not match its declaration, the sidecar's /status and every
 * refusal name the worker (its URL, the endpoint the route table lists, its NIXL engine id), each differing field and
 * both values; the worker gets no request until a probe passes again.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { predictNixlHash } from '../compat/nixl-hash.js';
import { postJson, startTestSim } from '../../testbed/sim/testing.js';
import type { SimServer } from '../../testbed/sim/server.js';
import { bound, contractFor, restartSimInPlace, sidecarConfigFor, startTestSidecar, type TestSidecar } from './testing.js';

const MAIN = { engine: { version: '0.20.1' }, connector: { version: 12 }, hybridKvCacheManager: false };
const N = 5;

const sims: SimServer[] = [];
const sidecars: TestSidecar[] = [];
afterEach(async () => {
  await Promise.all(sidecars.splice(0).map((t) => t.sidecar.close()));
  // The simulated side channel waits for an in-process peer's teardown before it closes (testbed/sim/zmq-side-channel.ts).
  await Promise.all(sims.splice(0).map((s) => s.close()));
});

const modelOf = (sim: SimServer): string =>
  sim.config.sim.servedModelName ?? sim.config.descriptor.model.path ?? sim.config.descriptor.model.id;

async function decodeSidecarBeside(sim: SimServer): Promise<TestSidecar> {
  const t = await startTestSidecar(sidecarConfigFor(sim, 'decode', { advertise: '10.0.0.7:9090' }));
  sidecars.push(t);
  return t;
}

describe('a worker that does not match its declaration', () => {
  it('is named on /status: address, endpoint, engine id, the field and both values', async () => {
    const sim = await startTestSim(MAIN, { behaveAs: { hybridKvCacheManager: true } });
    sims.push(sim);
    const t = await decodeSidecarBeside(sim);
    const s = t.sidecar.status();
    const predicted = predictNixlHash(t.config.descriptor).hash;
    expect(s.verified).toBe(false);
    expect(s.nixlHash.live.state).toBe('mismatch');
    expect(s.mismatch?.worker).toEqual({ address: sim.url, endpoint: '10.0.0.7:9090', engineId: sim.engineId });
    expect(s.mismatch?.fields).toEqual([{ field: 'nixlHash', declared: predicted, observed: s.nixlHash.live.observed }]);
    expect(s.nixlHash.live.observed).not.toBe(predicted);
  });

  it(`refuses ${N} requests in a row without one call to the worker, each refusal naming it; serves again once a probe passes`, async () => {
    const sim = await startTestSim(MAIN, { behaveAs: { hybridKvCacheManager: true } });
    sims.push(sim);
    const t = await decodeSidecarBeside(sim);
    const observed = t.sidecar.status().nixlHash.live.observed!;
    const predicted = predictNixlHash(t.config.descriptor).hash;
    t.spy.reset();
    for (let i = 0; i < N; i++) {
      const c = contractFor(t.config.fingerprint, null, { requestId: `lying-${i}` });
      const r = await postJson(`${t.sidecar.url}/v1/completions`, ...bound(c, { model: modelOf(sim), prompt: 'hello', max_tokens: 2 }));
      expect(r.status).toBe(503);
      const error = (r.body as { error: { code: string; message: string } }).error;
      expect(error.code).toBe('worker_unverified');
      expect(error.message).toContain(`worker ${sim.url} (endpoint 10.0.0.7:9090), engine id ${sim.engineId}`);
      expect(error.message).toContain(`nixlHash declared "${predicted}", observed "${observed}"`);
    }
    // No request reached the worker (probes aside, and no probe ran: the verdict stands until the next one).
    expect(t.spy.calls.filter((c) => c.url.startsWith(sim.url))).toEqual([]);
    const audit = t.lines.filter((l) => l['audit'] === 'refusal');
    expect(audit).toHaveLength(N);
    for (const line of audit) expect(String(line['reason'])).toMatch(new RegExp(`^worker ${sim.url.replace(/[.:/]/g, '\\$&')} `));

    // The operator restarts the worker with what it declares: the next probe passes and requests reach it again.
    const honest = await restartSimInPlace(sim);
    sims[0] = honest;
    const after = await t.sidecar.probe();
    expect([after.verified, after.mismatch, after.nixlHash.live.state]).toEqual([true, null, 'match']);
    t.spy.reset();
    const c = contractFor(t.config.fingerprint, null, { requestId: 'honest-1' });
    const r = await postJson(`${t.sidecar.url}/v1/completions`, ...bound(c, { model: modelOf(honest), prompt: 'hello', max_tokens: 2 }));
    expect(r.status).toBe(200);
    expect(t.spy.workCalls(honest.url).length).toBeGreaterThan(0);
  });
});
