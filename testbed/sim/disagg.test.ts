/**
 * Disaggregated prefill/decode between simulated workers, driven like vLLM's toy proxy. These are the properties
 * kvgate's end-to-end tests and `kvgate verify` stand on: X-to-X equals the baseline; a wrong pairing that passes
 * vLLM's handshake silently changes tokens; a pairing the handshake catches fails (or recomputes) per policy.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { SimSettingsInput } from './config.js';
import type { SimServer } from './server.js';
import { failedTransfersIn } from '../../src/sidecar/transfer-watch.js';
import { metricValue, postJson, postSse, runDisaggregated, scrape, type HttpReply, simsForTests } from './testing.js';

const { sim, closeAll } = simsForTests();
afterEach(closeAll);

const PROMPTS = [
  'Prefill and decode workers must agree on what every cached key and value means before any block moves between them.',
  'Short prompt.',
  'The rollout moves a small cohort of new sessions to revision B while existing streams finish on revision A, and no cache is ever shared.',
];
const completion = (prompt: string, extra: Record<string, unknown> = {}) => ({
  prompt,
  max_tokens: 16,
  ignore_eos: true,
  return_token_ids: true,
  ...extra,
});
const chat = (content: string) => ({
  messages: [
    { role: 'system', content: 'Answer briefly.' },
    { role: 'user', content },
  ],
  max_tokens: 12,
  ignore_eos: true,
  return_token_ids: true,
});
const ids = (r: HttpReply): number[] => r.body.choices[0].token_ids;
const metric = async (s: SimServer, name: string, labels: Record<string, string> = {}) => metricValue(await scrape(s), name, labels);

async function baselineIds(
  d: Record<string, unknown>,
  path: '/v1/completions' | '/v1/chat/completions',
  body: Record<string, unknown>,
  s: SimSettingsInput = {},
) {
  const b = await sim(d, s);
  const r = await postJson(`${b.url}${path}`, body);
  expect(r.status).toBe(200);
  return ids(r);
}

describe('X-to-X disaggregation reproduces the baseline', () => {
  it('completions: same token ids as a non-disaggregated worker, KV pulled over NIXL', async () => {
    const [p, d] = [await sim(), await sim()];
    for (const prompt of PROMPTS) {
      const want = await baselineIds({}, '/v1/completions', completion(prompt));
      const r = await runDisaggregated(p, d, '/v1/completions', completion(prompt));
      expect(r.prefill.body.kv_transfer_params).toMatchObject({
        do_remote_prefill: true,
        do_remote_decode: false,
        remote_engine_id: p.engineId,
        remote_host: '127.0.0.1',
        remote_port: p.sideChannelPort,
        tp_size: 1,
      });
      expect(r.decode.status).toBe(200);
      expect(ids(r.decode)).toEqual(want);
      expect(r.decode.body.kv_transfer_params).toBeNull();
      expect(r.decode.body.choices[0].text.length).toBeGreaterThan(0);
    }
    expect(await metric(d, 'kvgate_sim_kv_blocks_pulled_total')).toBeGreaterThan(0);
    expect(await metric(d, 'vllm:nixl_num_failed_transfers_total')).toBe(0);
    // P freed every block once D notified.
    expect(await metric(p, 'vllm:kv_cache_usage_perc')).toBe(0);
  });

  it('chat: same token ids as the baseline', async () => {
    const [p, d] = [await sim(), await sim()];
    const body = chat('Why must a request stay in one compatibility group?');
    const want = await baselineIds({}, '/v1/chat/completions', body);
    const r = await runDisaggregated(p, d, '/v1/chat/completions', body);
    expect(ids(r.decode)).toEqual(want);
  });

  it('a streamed decode gives the same ids as the non-streamed baseline', async () => {
    const [p, d] = [await sim(), await sim()];
    const body = completion(PROMPTS[2]!);
    const pr = await postJson(`${p.url}/v1/completions`, { ...body, max_tokens: 1, kv_transfer_params: { do_remote_decode: true } });
    const { events } = await postSse(`${d.url}/v1/completions`, { ...body, stream: true, kv_transfer_params: pr.body.kv_transfer_params });
    const streamed = events.slice(0, -1).flatMap((e) => e.choices[0]?.token_ids ?? []);
    expect(streamed).toEqual(await baselineIds({}, '/v1/completions', body));
    expect(await metric(d, 'kvgate_sim_kv_blocks_pulled_total')).toBeGreaterThan(0);
  });

  it('P answers with remote_num_tokens (v5+) and transfer_mode (v7+)', async () => {
    const p = await sim({ connector: { version: 7 } });
    const d = await sim({ connector: { version: 7 } });
    const r = await runDisaggregated(p, d, '/v1/completions', completion(PROMPTS[0]!));
    expect(r.prefill.body.kv_transfer_params.remote_num_tokens).toBe(r.prefill.body.usage.prompt_tokens);
    expect(r.prefill.body.kv_transfer_params.transfer_mode).toBe('pull');
    expect(r.decode.status).toBe(200);
  });
});

describe('wrong pairings that pass the handshake corrupt tokens silently', () => {
  it('A-to-B with the same geometry and another weights revision: handshake passes, tokens differ', async () => {
    const p = await sim({ model: { revision: 'rev-a' } });
    const d = await sim({ model: { revision: 'rev-b' } });
    expect(p.compatibilityHash).toBe(d.compatibilityHash); // vLLM's hash does not cover the revision
    const body = completion(PROMPTS[0]!);
    const r = await runDisaggregated(p, d, '/v1/completions', body);
    expect(r.decode.status).toBe(200);
    expect(await metric(d, 'vllm:nixl_num_failed_transfers_total')).toBe(0);
    expect(await metric(d, 'kvgate_sim_kv_blocks_pulled_total')).toBe(Math.ceil(r.decode.body.usage.prompt_tokens / 16));
    const got = ids(r.decode);
    expect(got).not.toEqual(await baselineIds({ model: { revision: 'rev-b' } }, '/v1/completions', body));
    expect(got).not.toEqual(await baselineIds({ model: { revision: 'rev-a' } }, '/v1/completions', body));
    expect(r.decode.body.choices[0].text).toMatch(/^( [a-z]+|[.,])+$/); // still reads like text
  });

  it('a dynamic-FP8-scale prefill gives different ids (static scales do not)', async () => {
    const dyn = { kvCache: { dtype: 'fp8', scaleScheme: 'dynamic-per-block' } };
    const body = completion(PROMPTS[2]!);
    const r = await runDisaggregated(await sim(dyn), await sim(dyn), '/v1/completions', body);
    expect(r.decode.status).toBe(200);
    expect(ids(r.decode)).not.toEqual(await baselineIds(dyn, '/v1/completions', body));
    const stat = { kvCache: { dtype: 'fp8', scaleScheme: 'static-checkpoint' } };
    const s = await runDisaggregated(await sim(stat), await sim(stat), '/v1/completions', body);
    expect(ids(s.decode)).toEqual(await baselineIds(stat, '/v1/completions', body));
  });

  it('a tokenizer change on the prefill side changes the prompt the KV describes (counts and tokens)', async () => {
    const p = await sim({ tokenizer: { revision: 'tok-b' } });
    const d = await sim({ tokenizer: { revision: 'tok-a' } });
    const body = completion('def lease(ms):\n        return ms * 2 // 3  # heartbeat extension, 2024-05-01\n');
    const r = await runDisaggregated(p, d, '/v1/completions', body);
    expect(r.prefill.body.usage.prompt_tokens).not.toBe(r.decode.body.usage.prompt_tokens);
    expect(r.decode.status).toBe(200);
    expect(ids(r.decode)).not.toEqual(await baselineIds({ tokenizer: { revision: 'tok-a' } }, '/v1/completions', body));
  });

  it('a chat-template change on the prefill side changes the tokens', async () => {
    const p = await sim({ chatTemplate: { revision: 'tmpl-b' } });
    const d = await sim();
    const body = chat('Explain the lease.');
    const r = await runDisaggregated(p, d, '/v1/chat/completions', body);
    expect(r.decode.status).toBe(200);
    expect(ids(r.decode)).not.toEqual(await baselineIds({}, '/v1/chat/completions', body));
  });
});

describe('pairings the handshake catches', () => {
  const fp8 = { kvCache: { dtype: 'fp8' } };

  it('KV dtype mismatch with policy fail: the decode request ends in an error, counted', async () => {
    const p = await sim(fp8);
    const d = await sim();
    expect(p.compatibilityHash).not.toBe(d.compatibilityHash);
    const r = await runDisaggregated(p, d, '/v1/completions', completion(PROMPTS[0]!));
    expect(r.decode.status).toBe(500);
    expect(r.decode.body).toEqual({ error: { message: 'Internal server error', type: 'InternalServerError', param: null, code: 500 } });
    expect(await metric(d, 'vllm:nixl_num_failed_transfers_total')).toBe(1);
    expect(await metric(d, 'kvgate_sim_kv_load_failures_total', { reason: 'handshake_failed', policy: 'fail' })).toBe(1);
    expect(await metric(d, 'kvgate_sim_kv_blocks_pulled_total')).toBe(0);
  });

  it('KV dtype mismatch streamed with policy fail: an error event, then [DONE]', async () => {
    const p = await sim(fp8);
    const d = await sim();
    const pr = await postJson(`${p.url}/v1/completions`, {
      ...completion(PROMPTS[0]!),
      max_tokens: 1,
      kv_transfer_params: { do_remote_decode: true },
    });
    const res = await postJson(`${d.url}/v1/completions`, {
      ...completion(PROMPTS[0]!),
      stream: true,
      kv_transfer_params: pr.body.kv_transfer_params,
    });
    expect(res.status).toBe(200);
    expect(res.text).toBe(
      'data: {"error":{"message":"Internal server error","type":"InternalServerError","param":null,"code":500}}\n\ndata: [DONE]\n\n',
    );
  });

  it("KV dtype mismatch with policy recompute: completes with the decode worker's own baseline", async () => {
    const p = await sim(fp8);
    const d = await sim({}, { kvLoadFailurePolicy: 'recompute' });
    const body = completion(PROMPTS[0]!);
    const r = await runDisaggregated(p, d, '/v1/completions', body);
    expect(r.decode.status).toBe(200);
    expect(ids(r.decode)).toEqual(await baselineIds({}, '/v1/completions', body));
    expect(await metric(d, 'kvgate_sim_kv_load_failures_total', { reason: 'handshake_failed', policy: 'recompute' })).toBe(1);
  });

  it('a KV layout mismatch (HND vs NHD) fails the runtime handshake checks although the hash matches', async () => {
    const p = await sim({ kvCache: { layout: 'NHD' } });
    const d = await sim();
    expect(p.compatibilityHash).toBe(d.compatibilityHash);
    const r = await runDisaggregated(p, d, '/v1/completions', completion(PROMPTS[1]!));
    expect(r.decode.status).toBe(500);
    expect(await metric(d, 'kvgate_sim_kv_load_failures_total', { reason: 'handshake_failed', policy: 'fail' })).toBe(1);
  });

  it('a refused handshake (fault) fails the same way', async () => {
    const p = await sim();
    const d = await sim();
    p.setFaults({ handshakeRefusal: true });
    const r = await runDisaggregated(p, d, '/v1/completions', completion(PROMPTS[1]!));
    expect(r.decode.status).toBe(500);
    expect(await metric(d, 'vllm:nixl_num_failed_transfers_total')).toBe(1);
  });
});

describe('prefix cache, leases and transfer faults', () => {
  const tokenPrompt = (n: number, from = 1000) => Array.from({ length: n }, (_, i) => from + i);

  it('a partial prefix hit pulls only the missing blocks (remote_block_ids[-num_missing:])', async () => {
    const p = await sim();
    const d = await sim();
    const shared = tokenPrompt(48); // three full blocks
    const prompt = [...shared, ...tokenPrompt(20, 5000)]; // 68 tokens = 5 blocks
    await postJson(`${d.url}/v1/completions`, completion(shared as unknown as string, { max_tokens: 1 }));
    const r = await runDisaggregated(p, d, '/v1/completions', completion(prompt as unknown as string));
    expect(r.decode.status).toBe(200);
    expect(r.prefill.body.kv_transfer_params.remote_block_ids).toHaveLength(5);
    expect(await metric(d, 'kvgate_sim_kv_blocks_pulled_total')).toBe(2);
    expect(await metric(d, 'vllm:nixl_bytes_transferred_sum')).toBe(2 * 2 * 16 * 8 * 128 * 2 * 32);
    expect(ids(r.decode)).toEqual(await baselineIds({}, '/v1/completions', completion(prompt as unknown as string)));
    // A cold decode worker pulls all five.
    const cold = await sim();
    await runDisaggregated(p, cold, '/v1/completions', completion(prompt as unknown as string));
    expect(await metric(cold, 'kvgate_sim_kv_blocks_pulled_total')).toBe(5);
  });

  it('a full prefix hit reads nothing and only notifies P, which frees its blocks', async () => {
    const p = await sim();
    const d = await sim();
    const prompt = tokenPrompt(32) as unknown as string;
    await postJson(`${d.url}/v1/completions`, completion(prompt, { max_tokens: 1 }));
    const r = await runDisaggregated(p, d, '/v1/completions', completion(prompt));
    expect(r.decode.status).toBe(200);
    expect(await metric(d, 'kvgate_sim_kv_blocks_pulled_total')).toBe(0);
    expect(await metric(d, 'vllm:nixl_xfer_time_seconds_count')).toBe(0);
    expect(await metric(p, 'vllm:kv_cache_usage_perc')).toBe(0);
    expect(ids(r.decode)).toEqual(await baselineIds({}, '/v1/completions', completion(prompt)));
  });

  for (const policy of ['fail', 'recompute'] as const) {
    it(`an expired lease: the read fails (P counts the expiry) and policy ${policy} applies`, async () => {
      const p = await sim();
      const d = await sim({}, { kvLoadFailurePolicy: policy });
      const body = completion(PROMPTS[0]!);
      const pr = await postJson(`${p.url}/v1/completions`, { ...body, max_tokens: 1, kv_transfer_params: { do_remote_decode: true } });
      expect(await metric(p, 'vllm:kv_cache_usage_perc')).toBeGreaterThan(0);
      expect((await postJson(`${p.url}/admin/faults`, { expireLeasesNow: true })).status).toBe(200);
      expect(await metric(p, 'vllm:nixl_num_kv_expired_reqs_total')).toBe(1);
      expect(await metric(p, 'vllm:kv_cache_usage_perc')).toBe(0);
      const r = await postJson(`${d.url}/v1/completions`, { ...body, kv_transfer_params: pr.body.kv_transfer_params });
      expect(await metric(d, 'vllm:nixl_num_failed_transfers_total')).toBe(1);
      expect(await metric(d, 'kvgate_sim_kv_load_failures_total', { reason: 'kv_expired', policy })).toBe(1);
      if (policy === 'fail') expect(r.status).toBe(500);
      else expect(ids(r)).toEqual(await baselineIds({}, '/v1/completions', body));
    });
  }

  it("x-sim-fault lease-ms=0 makes one request's lease expire at once", async () => {
    const p = await sim();
    const d = await sim();
    const r = await runDisaggregated(p, d, '/v1/completions', completion(PROMPTS[1]!), { prefill: { 'x-sim-fault': 'lease-ms=0' } });
    expect(r.decode.status).toBe(500);
    expect(await metric(p, 'vllm:nixl_num_kv_expired_reqs_total')).toBe(1);
  });

  it('a transfer that never completes times out and counts as a failed transfer', async () => {
    const p = await sim();
    const d = await sim({}, { transferTimeoutMs: 150 });
    p.setFaults({ transferTimeout: true });
    const r = await runDisaggregated(p, d, '/v1/completions', completion(PROMPTS[1]!));
    expect(r.decode.status).toBe(500);
    expect(await metric(d, 'kvgate_sim_kv_load_failures_total', { reason: 'transfer_failed', policy: 'fail' })).toBe(1);
  });

  it('per-request faults on D: handshake-fail and transfer-timeout', async () => {
    const p = await sim();
    const d = await sim({}, { transferTimeoutMs: 100 });
    const hs = await runDisaggregated(p, d, '/v1/completions', completion(PROMPTS[1]!), { decode: { 'x-sim-fault': 'handshake-fail' } });
    expect(hs.decode.status).toBe(500);
    const to = await runDisaggregated(p, d, '/v1/completions', completion(PROMPTS[1]!), { decode: { 'x-sim-fault': 'transfer-timeout' } });
    expect(to.decode.status).toBe(500);
    expect(await metric(d, 'kvgate_sim_kv_load_failures_total', { reason: 'handshake_failed', policy: 'fail' })).toBe(1);
    expect(await metric(d, 'kvgate_sim_kv_load_failures_total', { reason: 'transfer_failed', policy: 'fail' })).toBe(1);
    const ok = await runDisaggregated(p, d, '/v1/completions', completion(PROMPTS[1]!));
    expect(ok.decode.status).toBe(200); // the faults applied to those requests only
  });

  it('a failed notification is counted and P keeps the blocks until the lease ends', async () => {
    const p = await sim();
    const d = await sim();
    p.setFaults({ notifyFailure: true });
    const r = await runDisaggregated(p, d, '/v1/completions', completion(PROMPTS[1]!));
    expect(r.decode.status).toBe(200);
    expect(await metric(d, 'vllm:nixl_num_failed_notifications_total')).toBe(1);
    expect(await metric(p, 'vllm:kv_cache_usage_perc')).toBeGreaterThan(0);
  });

  it('invalid kv_transfer_params: D logs and prefills locally (baseline tokens, nothing pulled)', async () => {
    const d = await sim();
    const body = completion(PROMPTS[0]!);
    const r = await postJson(`${d.url}/v1/completions`, {
      ...body,
      kv_transfer_params: { do_remote_prefill: true, remote_block_ids: [1] },
    });
    expect(r.status).toBe(200);
    expect(ids(r)).toEqual(await baselineIds({}, '/v1/completions', body));
    expect(await metric(d, 'kvgate_sim_kv_blocks_pulled_total')).toBe(0);
  });

  it('connector v4+ heartbeats keep the lease alive while the transfer is slow; v2 has none and loses it', async () => {
    const slow = { leaseMs: 900 }; // heartbeat every 150 ms, each extends to now + 600 ms
    const p4 = await sim({ connector: { version: 4 } }, slow);
    const d4 = await sim({ connector: { version: 4 } }, slow);
    p4.setFaults({ transferDelayMs: 1300 });
    const ok = await runDisaggregated(p4, d4, '/v1/completions', completion(PROMPTS[1]!));
    expect(ok.decode.status).toBe(200);
    expect(await metric(p4, 'vllm:nixl_num_kv_expired_reqs_total')).toBe(0);
    // Before leases P holds unread blocks for VLLM_NIXL_ABORT_REQUEST_TIMEOUT, and nothing extends it.
    const p2 = await sim({}, { ...slow, abortRequestTimeoutMs: 900 });
    const d2 = await sim({}, slow);
    p2.setFaults({ transferDelayMs: 1300 });
    const lost = await runDisaggregated(p2, d2, '/v1/completions', completion(PROMPTS[1]!));
    expect(lost.decode.status).toBe(500);
    expect(await metric(p2, 'vllm:nixl_num_kv_expired_reqs_total')).toBe(1);
  });
});

describe('data parallel: one /metrics for every engine rank', () => {
  // vLLM's API server runs one PrometheusStatLogger over every engine it manages (vllm/v1/engine/async_llm.py
  // `StatLoggerManager(engine_idxs=self.engine_core.engine_ranks_managed)` @8ef0b5f), and NixlPromMetrics binds one
  // child per engine (`create_metric_per_engine`, vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py
  // @bd33ba3): a failure on rank 1 shows on the same /metrics, as engine="1".
  it('a failed transfer on rank 1 shows as engine="1" beside engine="0", in full and filtered reads', async () => {
    const p = await sim({ kvCache: { dtype: 'fp8' } });
    const d = await sim({}, { dataParallelSize: 2 });
    for (let i = 0; i < 2; i++) {
      const r = await runDisaggregated(p, d, '/v1/completions', completion(PROMPTS[i]!));
      expect(r.decode.status).toBe(500);
    }
    const text = await scrape(d);
    expect(metricValue(text, 'vllm:nixl_num_failed_transfers_total', { engine: '0' })).toBe(1);
    expect(metricValue(text, 'vllm:nixl_num_failed_transfers_total', { engine: '1' })).toBe(1);
    expect(failedTransfersIn(text)).toBe(2);
    const filtered = await (await fetch(`${d.url}/metrics?name%5B%5D=vllm%3Anixl_num_failed_transfers_total`)).text();
    expect(failedTransfersIn(filtered)).toBe(2);
    expect(metricValue(text, 'vllm:cache_config_info', { engine: '1' })).toBe(1);
  });
});
