/**
 * How long a prefill worker holds the blocks of a request no decode worker read, and what frees them early, as vLLM's
 * NixlConnector does it (docs/vllm-disaggregation.md §10): a fixed abort timeout before leases, a lease from connector
 * v4; a decode request aborted before it was scheduled notifies P without reading; from PR #41269 a decode request the
 * OpenAI layer refuses before admission does the same.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { SimServer } from './server.js';
import { metricValue, postJson, scrape, TOY_PROXY_PREFILL_KV, simsForTests } from './testing.js';

const { sim, closeAll } = simsForTests();
afterEach(closeAll);

const BODY = {
  prompt: 'A prefill worker keeps these blocks for a decode worker that may never come to read them.',
  max_tokens: 8,
  ignore_eos: true,
};
const metric = async (s: SimServer, name: string, labels: Record<string, string> = {}) => metricValue(await scrape(s), name, labels);

/** The toy proxy's prefill leg: P's kv_transfer_params for a remote decode. */
async function prefill(p: SimServer): Promise<Record<string, unknown>> {
  const r = await postJson(`${p.url}/v1/completions`, { ...BODY, kv_transfer_params: { ...TOY_PROXY_PREFILL_KV }, max_tokens: 1 });
  expect(r.status).toBe(200);
  return r.body.kv_transfer_params;
}

/** Wait for a condition the servers reach by themselves (no timing assumed; bounded so a bug fails instead of hanging). */
async function until(what: string, cond: () => Promise<boolean> | boolean): Promise<void> {
  for (let i = 0; i < 2000; i++) {
    if (await cond()) return;
    await new Promise((r) => setTimeout(r, 5));
  }
  throw new Error(`never happened: ${what}`);
}

describe("P's hold on blocks no decode worker read", () => {
  it('connector v2: VLLM_NIXL_ABORT_REQUEST_TIMEOUT (480 s); connector v4+: the lease (kv_lease_duration, 30 s)', async () => {
    const p2 = await sim();
    await prefill(p2);
    expect(p2.heldKv().map((h) => h.durationMs)).toEqual([480_000]);
    const p4 = await sim({ connector: { version: 4 } });
    await prefill(p4);
    expect(p4.heldKv().map((h) => h.durationMs)).toEqual([30_000]);
  });

  it('a decode request aborted before it was scheduled notifies P, which frees the blocks; nothing is read', async () => {
    const p = await sim();
    const d = await sim(
      {},
      { maxNumSeqs: 1, latency: { prefillMsPerToken: 0, decodeMsPerToken: 5, transferMsPerBlock: 0, handshakeMs: 0 } },
    );
    const busy = new AbortController();
    const occupying = fetch(`${d.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ ...BODY, max_tokens: 1000 }),
      signal: busy.signal,
    }).catch(() => undefined);
    await until('D runs the first request', async () => (await metric(d, 'vllm:num_requests_running')) === 1);
    const params = await prefill(p);
    expect(p.heldKv()).toHaveLength(1);
    const leaving = new AbortController();
    const waiting = fetch(`${d.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ ...BODY, kv_transfer_params: params }),
      signal: leaving.signal,
    }).catch(() => undefined);
    await until('the decode request waits on D', async () => (await metric(d, 'vllm:num_requests_waiting')) === 1);
    leaving.abort();
    await waiting;
    await until('P freed the blocks', () => p.heldKv().length === 0);
    expect(await metric(d, 'kvgate_sim_kv_blocks_pulled_total')).toBe(0);
    expect(await metric(p, 'vllm:nixl_num_kv_expired_reqs_total')).toBe(0);
    busy.abort();
    await occupying;
  });

  it('main (PR #41269): a decode request the OpenAI layer refuses frees P at once, without a read; 0.13 leaves P holding', async () => {
    for (const [flavour, freed] of [
      ['main', true],
      ['0.13', false],
    ] as const) {
      const p = await sim({}, { flavour });
      const d = await sim({}, { flavour });
      const params = await prefill(p);
      const r = await postJson(`${d.url}/v1/completions`, { ...BODY, model: 'not-served-here', kv_transfer_params: params });
      expect(r.status).toBe(404);
      expect(p.heldKv().length === 0).toBe(freed);
      expect(await metric(d, 'kvgate_sim_kv_blocks_pulled_total')).toBe(0);
    }
  });

  it('a body refused before the handler (pydantic) notifies nothing, even on main', async () => {
    const p = await sim({}, { flavour: 'main' });
    const d = await sim({}, { flavour: 'main' });
    const params = await prefill(p);
    const r = await postJson(`${d.url}/v1/completions`, { ...BODY, max_tokens: 'many', kv_transfer_params: params });
    expect(r.status).toBe(400);
    expect(p.heldKv()).toHaveLength(1);
  });
});
