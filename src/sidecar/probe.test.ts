/**
 * Probing real simulated workers: a worker that matches its label is verified; one that lies (behaveAs another
 * tokenizer, vLLM version or weights revision) is unverified with the right reasons, and its sidecar refuses work.
 */
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CompatDescriptorInput } from '../compat/descriptor.js';
import { startTestSim, testDescriptor } from '../../testbed/sim/testing.js';
import type { SimServer } from '../../testbed/sim/server.js';
import { measureCanaries } from './probe.js';
import { contractFor, gateHeaders, sidecarConfigFor, startTestSidecar, type TestSidecar } from './testing.js';

const MODEL = '/models/acme-llama-3-8b';
const open: { close(): Promise<void> }[] = [];
const track = <T extends { close(): Promise<void> }>(x: T): T => {
  open.push(x);
  return x;
};
afterAll(async () => {
  for (const x of open.reverse()) await x.close();
});

/** A free loopback port in 20000-29999, below Linux's default ephemeral range (32768-60999). */
async function freePortBelowEphemeral(): Promise<number> {
  for (let i = 0; i < 100; i++) {
    const port = 20_000 + Math.floor(Math.random() * 10_000);
    const free = await new Promise<boolean>((resolve) => {
      const s = net.createServer();
      s.once('error', () => resolve(false));
      s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
    });
    if (free) return port;
  }
  throw new Error('no free port in 20000-29999');
}

let honest: SimServer;
let declared: CompatDescriptorInput;
beforeAll(async () => {
  honest = track(await startTestSim());
  const m = await measureCanaries(honest.url);
  expect(m.errors).toEqual({});
  declared = testDescriptor({ canaries: m.digests });
});

async function sidecarFor(sim: SimServer, role: 'prefill' | 'decode' = 'prefill'): Promise<TestSidecar> {
  const t = await startTestSidecar(sidecarConfigFor(sim, role, { descriptor: declared }));
  track(t.sidecar);
  return t;
}

describe('measureCanaries', () => {
  it('is deterministic for one revision and differs for another tokenizer, template or weights', async () => {
    const again = await measureCanaries(honest.url, { model: MODEL });
    expect(again.digests).toEqual(declared.canaries);
    const other = track(
      await startTestSim({ tokenizer: { revision: 'tok-b' }, chatTemplate: { revision: 'tmpl-b' }, model: { revision: 'rev-b' } }),
    );
    const d = (await measureCanaries(other.url)).digests;
    expect(d.tokenizer).not.toBe(declared.canaries!.tokenizer);
    expect(d.chatTemplate).not.toBe(declared.canaries!.chatTemplate);
    expect(d.generation).not.toBe(declared.canaries!.generation);
  });
});

describe('probing', () => {
  it('verifies a worker that matches its declared descriptor, canaries included', async () => {
    const { sidecar } = await sidecarFor(honest);
    const s = sidecar.status();
    expect(s.reasons).toEqual([]);
    expect(s.verified).toBe(true);
    expect(s.measured['canaries.generation']).toBe(declared.canaries!.generation);
    // The generation canary confirmed the weights; nothing exposes the attention backend.
    expect(s.declaredOnly).not.toContain('model.revision');
    expect(s.declaredOnly).toContain('architecture.attentionBackend');
    const health = await fetch(`${sidecar.url}/healthz`);
    expect(health.status).toBe(200);
  });

  it('a worker running another tokenizer is unverified, and its sidecar refuses with 503 worker_unverified', async () => {
    const liar = track(await startTestSim({ canaries: declared.canaries }, { behaveAs: { tokenizer: { revision: 'tok-b' } } }));
    const { sidecar, spy } = await sidecarFor(liar);
    const s = sidecar.status();
    expect(s.verified).toBe(false);
    expect(s.reasons).toEqual([
      expect.stringMatching(
        /^tokenizer canary digest [0-9a-f]{12}… differs from the declared [0-9a-f]{12}…: the worker's tokenizer is not acme\/llama-3-8b-instruct rev tok-a$/,
      ),
      // The chat and generation canaries tokenise their input with the same (wrong) tokenizer, and say so.
      expect.stringMatching(/^chat template canary digest .*\(or only the tokenizer differs/),
      expect.stringMatching(/^generation canary digest .*\(or only the tokenizer differs/),
    ]);
    spy.reset();
    const c = contractFor(s.fingerprint, '127.0.0.1:1');
    const res = await fetch(`${sidecar.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...gateHeaders(c) },
      body: JSON.stringify({ model: MODEL, prompt: 'hi' }),
    });
    expect(res.status).toBe(503);
    expect(res.headers.get('x-kvgate-reject-reason')).toBe('worker_unverified');
    const body = (await res.json()) as { error: { code: string; message: string } };
    expect(body.error).toMatchObject({ type: 'kvgate_error', code: 'worker_unverified', request_id: 'req-1' });
    expect(body.error.message).toContain('tokenizer canary digest');
    expect(spy.workCalls(liar.url)).toEqual([]);
    expect((await fetch(`${sidecar.url}/healthz`)).status).toBe(503);
  });

  it('a worker on another vLLM version or other weights is unverified with those reasons', async () => {
    const version = track(await startTestSim({ canaries: declared.canaries }, { behaveAs: { engine: { version: '0.12.0' } } }));
    expect((await sidecarFor(version)).sidecar.status().reasons).toEqual([
      'engine version: the worker reports vLLM "0.12.0" (GET /version), the descriptor declares "0.11.0"; kernels, cache format and the NIXL handshake differ between releases',
    ]);
    const weights = track(await startTestSim({ canaries: declared.canaries }, { behaveAs: { model: { revision: 'rev-b' } } }));
    const reasons = (await sidecarFor(weights)).sidecar.status().reasons;
    expect(reasons).toEqual([
      expect.stringMatching(/^generation canary digest .* the worker's weights are not acme\/llama-3-8b-instruct rev rev-a$/),
    ]);
    const layout = track(await startTestSim({ canaries: declared.canaries }, { behaveAs: { kvCache: { layout: 'NHD' } } }));
    expect((await sidecarFor(layout)).sidecar.status().reasons.join()).toContain(
      'KV cache layout: the worker\'s vllm:cache_config_info says kv_cache_layout="NHD"',
    );
  });

  it('a worker that is down is unverified with the reason, and verified once a later probe agrees', async () => {
    // The worker's port is free until the worker starts: one below the ephemeral range, which no other test's
    // port-0 listener can be handed in between (a closed ephemeral port was, and this test failed EADDRINUSE).
    const port = await freePortBelowEphemeral();
    const t = await startTestSidecar(sidecarConfigFor(honest, 'decode', { descriptor: declared, worker: `http://127.0.0.1:${port}` }));
    track(t.sidecar);
    const down = t.sidecar.status();
    expect(down.verified).toBe(false);
    expect(down.reasons).toEqual([expect.stringContaining('the worker is down or unreachable')]);
    const back = track(await startTestSim({}, { port }));
    expect(back.port).toBe(port);
    const s = await t.sidecar.probe();
    expect(s.reasons).toEqual([]);
    expect(s.verified).toBe(true);
    const metrics = await (await fetch(`${t.sidecar.url}/metrics`)).text();
    expect(metrics).toContain('kvgate_sidecar_probes_total{result="down"} 1');
    expect(metrics).toContain('kvgate_sidecar_probes_total{result="verified"} 1');
    expect(metrics).toContain('kvgate_sidecar_verified 1');
    expect(t.lines.some((l) => l['event'] === 'worker_unverified')).toBe(true);
    expect(t.lines.some((l) => l['event'] === 'worker_verified')).toBe(true);
  });
});
