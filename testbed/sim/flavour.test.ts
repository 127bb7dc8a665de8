import { afterEach, describe, expect, it } from 'vitest';
import type { SimServer } from './server.js';
import { getJson, metricValue, parseLabels, postJson, postSse, scrape, startTestSim, TOY_PROXY_PREFILL_KV } from './testing.js';

const servers: SimServer[] = [];
async function sim(...args: Parameters<typeof startTestSim>): Promise<SimServer> {
  const s = await startTestSim(...args);
  servers.push(s);
  return s;
}
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()));
});

const PROMPT = 'Disaggregated serving splits prefill and decode across two pools of GPUs.';
const P_PARAMS = TOY_PROXY_PREFILL_KV;

function cacheLabels(text: string): Record<string, string> {
  const line = text.split('\n').find((l) => l.startsWith('vllm:cache_config_info{'))!;
  return parseLabels(line.slice(line.indexOf('{') + 1, line.lastIndexOf('}')));
}

describe('--api-key', () => {
  it('answers 401 {"error": "Unauthorized"} on /v1 paths without the bearer key, and leaves other paths open', async () => {
    const s = await sim({}, { apiKey: 'sk-test' });
    const none = await postJson(`${s.url}/v1/completions`, { prompt: PROMPT, max_tokens: 2 });
    expect([none.status, none.body]).toEqual([401, { error: 'Unauthorized' }]);
    expect((await getJson(`${s.url}/v1/models`)).status).toBe(401);
    expect((await postJson(`${s.url}/v1/completions`, { prompt: PROMPT, max_tokens: 2 }, { authorization: 'Bearer wrong' })).status).toBe(
      401,
    );
    expect((await postJson(`${s.url}/v1/completions`, { prompt: PROMPT, max_tokens: 2 }, { authorization: 'Bearer sk-test' })).status).toBe(
      200,
    );
    expect((await getJson(`${s.url}/version`)).status).toBe(200);
    expect((await postJson(`${s.url}/tokenize`, { prompt: PROMPT })).status).toBe(200);
  });

  it('takes the scheme in any case and the key exactly (verify_token: partition(" "), scheme.lower() == "bearer")', async () => {
    const s = await sim({}, { apiKey: 'sk-test' });
    const call = async (authorization: string) =>
      (await postJson(`${s.url}/v1/completions`, { prompt: PROMPT, max_tokens: 1 }, { authorization })).status;
    expect(await call('bearer sk-test')).toBe(200);
    expect(await call('BEARER sk-test')).toBe(200);
    expect(await call('Bearer  sk-test')).toBe(401);
    expect(await call('Bearer sk-TEST')).toBe(401);
    expect(await call('Basic sk-test')).toBe(401);
  });
});

describe('request errors per version (PR #30134 param metadata)', () => {
  const errorsOf = async (flavour: '0.11' | '0.13' | 'main') => {
    const s = await sim({}, { flavour, maxModelLen: 64, numGpuBlocks: 8 });
    const model = (await postJson(`${s.url}/v1/completions`, { model: 'gpt-9', prompt: 'hi' })).body.error;
    const tooMany = (await postJson(`${s.url}/v1/completions`, { prompt: 'hi', max_tokens: 100 })).body.error;
    const lp = (await postJson(`${s.url}/v1/completions`, { prompt: 'hi', logprobs: 25 })).body.error;
    const bad = await postJson(`${s.url}/v1/completions`, '{"prompt": ');
    return { model, tooMany, lp, bad };
  };

  it('0.11: no param on any error, messages without a parameter suffix', async () => {
    const e = await errorsOf('0.11');
    expect(e.model).toEqual({ message: 'The model `gpt-9` does not exist.', type: 'NotFoundError', param: null, code: 404 });
    expect(e.tooMany.param).toBeNull();
    expect(e.tooMany.message).toMatch(/is too large: 100\. .*\(100 > 64 - \d+\)\.$/);
    expect(e.lp).toMatchObject({ param: null, message: 'Requested sample logprobs of 25, which is greater than max allowed: 20' });
  });

  it('main: param set, VLLMValidationError appends (parameter=..., value=...); body validation is type "Bad Request"', async () => {
    const e = await errorsOf('main');
    expect(e.model).toMatchObject({ param: 'model', type: 'NotFoundError' });
    expect(e.tooMany.param).toBe('max_tokens');
    expect(e.tooMany.message).toMatch(/\(100 > 64 - \d+\)\. \(parameter=max_tokens, value=100\)$/);
    expect(e.lp).toMatchObject({
      param: 'logprobs',
      message: 'Requested sample logprobs of 25, which is greater than max allowed: 20 (parameter=logprobs, value=25)',
    });
    expect([e.bad.status, e.bad.body.error.type, e.bad.body.error.code]).toEqual([400, 'Bad Request', 400]);
  });
});

describe('data parallel', () => {
  it('names each rank <id>_dp<rank>, serves requests on every rank, and each rank has its own side channel', async () => {
    const s = await sim({}, { dataParallelSize: 2, engineId: 'eng' });
    expect(s.engineIds).toEqual(['eng_dp0', 'eng_dp1']);
    const seen = new Set<string>();
    for (let i = 0; i < 4; i++) {
      const r = await postJson(`${s.url}/v1/completions`, {
        prompt: PROMPT,
        max_tokens: 1,
        ignore_eos: true,
        kv_transfer_params: P_PARAMS,
      });
      seen.add(r.body.kv_transfer_params.remote_engine_id);
    }
    expect(seen).toEqual(new Set(['eng_dp0', 'eng_dp1']));
  });
});

describe('flavours', () => {
  it('0.11: no remote_request_id, no handshake hash, no kv_cache_layout label, recompute by default', async () => {
    const s = await sim({}, { flavour: '0.11' });
    const r = await postJson(
      `${s.url}/v1/completions`,
      { prompt: PROMPT, max_tokens: 1, ignore_eos: true, kv_transfer_params: P_PARAMS },
      { 'x-request-id': 'r1' },
    );
    expect(r.body.kv_transfer_params).not.toHaveProperty('remote_request_id');
    expect(Array.isArray(r.body.kv_transfer_params.remote_block_ids[0])).toBe(false);
    expect(cacheLabels(await scrape(s))).not.toHaveProperty('kv_cache_layout');
    expect(s.config.sim.kvLoadFailurePolicy).toBe('recompute');
  });

  it('main: per-group block ids and newer params, LBHNC layout label, fail by default, delta.reasoning only', async () => {
    const s = await sim({}, { flavour: 'main', reasoningTokens: 2 });
    const r = await postJson(`${s.url}/v1/completions`, { prompt: PROMPT, max_tokens: 1, ignore_eos: true, kv_transfer_params: P_PARAMS });
    expect(r.body.kv_transfer_params).toMatchObject({
      remote_block_ids: [expect.any(Array)],
      remote_request_id: expect.any(String),
      transfer_mode: 'pull',
    });
    expect(r.body.kv_transfer_params.remote_blocks_expiry_time).toBeGreaterThan(0);
    expect(cacheLabels(await scrape(s))['kv_cache_layout']).toBe('LBHNC');
    expect(s.config.sim.kvLoadFailurePolicy).toBe('fail');
    const chat = { messages: [{ role: 'user', content: 'Think, then answer.' }], max_tokens: 5, ignore_eos: true };
    const streamed = await postSse(`${s.url}/v1/chat/completions`, { ...chat, stream: true });
    const deltas = streamed.events.filter((e) => e !== '[DONE]').map((e) => e.choices[0]?.delta ?? {});
    const reasoning = deltas.filter((d) => 'reasoning' in d);
    expect(reasoning).toHaveLength(2);
    expect(deltas.some((d) => 'reasoning_content' in d)).toBe(false);
    expect(deltas.filter((d) => typeof d.content === 'string' && d.content !== '').length).toBe(3);
    const full = (await postJson(`${s.url}/v1/chat/completions`, chat)).body.choices[0].message;
    expect(full.reasoning).toBe(reasoning.map((d) => d.reasoning).join(''));
    expect(full).not.toHaveProperty('reasoning_content');
  });

  it('0.13 streams reasoning under both names; 0.11 under reasoning_content', async () => {
    for (const [flavour, fields] of [
      ['0.13', ['reasoning', 'reasoning_content']],
      ['0.11', ['reasoning_content']],
    ] as const) {
      const s = await sim({}, { flavour, reasoningTokens: 1 });
      const streamed = await postSse(`${s.url}/v1/chat/completions`, {
        messages: [{ role: 'user', content: 'hi' }],
        max_tokens: 3,
        ignore_eos: true,
        stream: true,
      });
      const first = streamed.events.map((e) => e.choices?.[0]?.delta).find((d) => d !== undefined && d.role === undefined);
      expect(Object.keys(first).sort()).toEqual([...fields].sort());
    }
  });

  it('reports sliding_window None for a mixed sliding-window model', async () => {
    const windowed = { architecture: { slidingWindow: 4096 } };
    expect(cacheLabels(await scrape(await sim(windowed)))['sliding_window']).toBe('4096');
    expect(cacheLabels(await scrape(await sim(windowed, { slidingWindowLayers: 'mixed' })))['sliding_window']).toBe('None');
  });
});

describe('truncate_prompt_tokens', () => {
  it('keeps the last k prompt tokens, -1 means max_model_len, and a k above it is a 400', async () => {
    const s = await sim({}, { flavour: '0.13' });
    const ids = (await postJson(`${s.url}/tokenize`, { prompt: PROMPT })).body.tokens as number[];
    const r = await postJson(`${s.url}/v1/completions`, {
      prompt: PROMPT,
      max_tokens: 1,
      truncate_prompt_tokens: 5,
      return_token_ids: true,
    });
    expect(r.body.usage.prompt_tokens).toBe(5);
    expect(r.body.choices[0].prompt_token_ids).toEqual(ids.slice(-5));
    // 0.13 has no truncation_side: "right" is ignored (an unknown field), the cut stays on the left.
    const right = await postJson(`${s.url}/v1/completions`, {
      prompt: PROMPT,
      max_tokens: 1,
      truncate_prompt_tokens: 5,
      truncation_side: 'right',
      return_token_ids: true,
    });
    expect(right.body.choices[0].prompt_token_ids).toEqual(ids.slice(-5));
    expect(
      (await postJson(`${s.url}/v1/completions`, { prompt: PROMPT, max_tokens: 1, truncate_prompt_tokens: -1 })).body.usage.prompt_tokens,
    ).toBe(ids.length);
    expect((await postJson(`${s.url}/v1/completions`, { prompt: PROMPT, max_tokens: 1, truncate_prompt_tokens: 100_000 })).status).toBe(
      400,
    );
    expect(metricValue(await scrape(s), 'vllm:prompt_tokens_total')).toBeGreaterThan(0);
  });
});
