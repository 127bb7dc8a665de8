import { afterEach, describe, expect, it } from 'vitest';
import type { SimServer } from './server.js';
import { getJson, metricValue, parseLabels, postJson, postSse, scrape, simsForTests } from './testing.js';

const { sim, closeAll } = simsForTests();
afterEach(closeAll);

const MODEL = '/models/acme-llama-3-8b';
const PROMPT = 'Disaggregated serving splits prefill and decode across two pools of GPUs.';

describe('identity endpoints', () => {
  it('serves /health, /version and /v1/models like vLLM', async () => {
    const s = await sim({ adapter: { id: 'acme/sql-lora', revision: 'l1' } }, { servedModelName: 'llama' });
    const h = await fetch(`${s.url}/health`);
    expect([h.status, await h.text()]).toEqual([200, '']);
    expect((await getJson(`${s.url}/version`)).body).toEqual({ version: '0.11.0' });
    const models = (await getJson(`${s.url}/v1/models`)).body;
    expect(models.object).toBe('list');
    expect(models.data[0]).toMatchObject({
      id: 'llama',
      object: 'model',
      owned_by: 'vllm',
      root: MODEL,
      parent: null,
      max_model_len: 2048,
    });
    expect(models.data[0].permission[0].object).toBe('model_permission');
    expect(models.data[1]).toMatchObject({ id: 'acme/sql-lora', parent: 'llama', root: 'acme/sql-lora' });
  });

  it('a lying worker reports what it really runs in /version, /v1/models and /tokenize', async () => {
    const liar = await sim(
      {},
      { behaveAs: { engine: { version: '0.12.1' }, tokenizer: { revision: 'tok-b' }, model: { path: '/models/other' } } },
    );
    const honestB = await sim({ tokenizer: { revision: 'tok-b' } });
    const honestA = await sim();
    expect((await getJson(`${liar.url}/version`)).body.version).toBe('0.12.1');
    expect((await getJson(`${liar.url}/v1/models`)).body.data[0].root).toBe('/models/other');
    const tok = async (s: SimServer) => (await postJson(`${s.url}/tokenize`, { prompt: PROMPT })).body;
    const l = await tok(liar);
    expect(l).toEqual(await tok(honestB));
    expect(l.tokens).not.toEqual((await tok(honestA)).tokens);
    expect(l).toMatchObject({ max_model_len: 2048, count: l.tokens.length });
  });

  it('tokenizes chat with the template, honours add_generation_prompt, and detokenizes', async () => {
    const s = await sim();
    const messages = [{ role: 'user', content: 'Hello there' }];
    const gen = (await postJson(`${s.url}/tokenize`, { model: MODEL, messages })).body;
    const nogen = (await postJson(`${s.url}/tokenize`, { model: MODEL, messages, add_generation_prompt: false })).body;
    expect(gen.count).toBeGreaterThan(nogen.count);
    expect(gen.tokens.slice(0, nogen.count)).toEqual(nogen.tokens);
    const text = (await postJson(`${s.url}/detokenize`, { model: MODEL, tokens: gen.tokens })).body.prompt;
    expect(text).toContain('Hello there');
    const plain = (await postJson(`${s.url}/tokenize`, { prompt: PROMPT, add_special_tokens: false })).body.tokens;
    expect((await postJson(`${s.url}/detokenize`, { tokens: plain })).body.prompt).toBe(PROMPT);
    expect((await postJson(`${s.url}/detokenize`, { tokens: [10_000_000] })).status).toBe(400);
    expect((await postJson(`${s.url}/tokenize`, { model: 'nope', prompt: 'x' })).status).toBe(404);
  });

  it('publishes vllm:cache_config_info with vLLM labels and the live gauges', async () => {
    const s = await sim({ kvCache: { dtype: 'fp8', scaleScheme: 'dynamic-per-block', layout: 'NHD' } }, { numGpuBlocks: 300 });
    const text = await scrape(s);
    const line = text.split('\n').find((l) => l.startsWith('vllm:cache_config_info{'))!;
    expect(line.endsWith(' 1')).toBe(true);
    expect(parseLabels(line)).toMatchObject({
      block_size: '16',
      cache_dtype: 'fp8',
      enable_prefix_caching: 'True',
      num_gpu_blocks: '300',
      gpu_memory_utilization: '0.9',
      prefix_caching_hash_algo: 'sha256',
      sliding_window: 'None',
      kv_cache_layout: 'NHD',
      calculate_kv_scales: 'True',
      engine: '0',
    });
    for (const name of [
      'vllm:num_requests_running',
      'vllm:num_requests_waiting',
      'vllm:kv_cache_usage_perc',
      'vllm:prefix_cache_queries_total',
      'vllm:prefix_cache_hits_total',
      'vllm:prompt_tokens_total',
      'vllm:generation_tokens_total',
      'vllm:nixl_num_failed_transfers_total',
      'vllm:nixl_num_failed_notifications_total',
      'vllm:nixl_num_kv_expired_reqs_total',
      'vllm:nixl_xfer_time_seconds_count',
      'vllm:nixl_bytes_transferred_sum',
      'vllm:nixl_num_descriptors_count',
    ]) {
      expect(metricValue(text, name, { model_name: MODEL, engine: '0' }), name).toBe(0);
    }
  });
});

describe('errors in vLLM shape', () => {
  it('unknown model 404, long prompt 400, malformed JSON 400, bad params 400, unknown route 404', async () => {
    const s = await sim({}, { maxModelLen: 64, numGpuBlocks: 8 });
    const shape = (r: { body: any }, code: number, type: string) => {
      expect(r.body.error).toMatchObject({ type, code });
      expect(typeof r.body.error.message).toBe('string');
      expect(r.body.error).toHaveProperty('param');
    };
    const unknown = await postJson(`${s.url}/v1/completions`, { model: 'gpt-9', prompt: 'hi' });
    expect(unknown.status).toBe(404);
    shape(unknown, 404, 'NotFoundError');
    expect(unknown.body.error).toMatchObject({ message: 'The model `gpt-9` does not exist.', param: 'model' });
    const long = await postJson(`${s.url}/v1/completions`, { prompt: 'word '.repeat(100) });
    expect(long.status).toBe(400);
    shape(long, 400, 'BadRequestError');
    expect(long.body.error.message).toMatch(/maximum context length is 64 tokens/);
    const tooMany = await postJson(`${s.url}/v1/completions`, { prompt: 'hi', max_tokens: 100 });
    expect(tooMany.body.error.message).toMatch(/'max_tokens' or 'max_completion_tokens' is too large: 100/);
    // Body validation (malformed JSON, pydantic) is FastAPI's RequestValidationError: type "Bad Request".
    const json = await postJson(`${s.url}/v1/chat/completions`, '{"messages": [');
    expect(json.status).toBe(400);
    shape(json, 400, 'Bad Request');
    const missing = await postJson(`${s.url}/v1/chat/completions`, { model: MODEL });
    expect(missing.status).toBe(400);
    shape(missing, 400, 'Bad Request');
    expect(missing.body.error.message).toMatch(/messages/);
    // A null where vLLM's request model declares a plain int is refused, not read as absent (min_tokens: int = 0,
    // a completion's n: int = 1); a chat's n is int | None.
    for (const [path, body] of [
      ['/v1/completions', { prompt: 'hi', min_tokens: null }],
      ['/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }], min_tokens: null }],
      ['/v1/completions', { prompt: 'hi', n: null }],
    ] as const) {
      const r = await postJson(`${s.url}${path}`, body);
      expect(r.status, JSON.stringify(body)).toBe(400);
      shape(r, 400, 'Bad Request');
    }
    expect(
      (await postJson(`${s.url}/v1/chat/completions`, { messages: [{ role: 'user', content: 'hi' }], n: null, max_tokens: 2 })).status,
    ).toBe(200);
    const lp = await postJson(`${s.url}/v1/completions`, { prompt: 'hi', logprobs: 21 });
    expect(lp.body.error.message).toMatch(/greater than max allowed: 20/);
    expect((await getJson(`${s.url}/v2/nothing`)).body).toEqual({ detail: 'Not Found' });
    expect((await getJson(`${s.url}/v1/completions`)).status).toBe(405);
  });
});

describe('generation', () => {
  it('answers completions and chat with vLLM fields, usage and a null kv_transfer_params', async () => {
    const s = await sim();
    const c = (
      await postJson(
        `${s.url}/v1/completions`,
        { model: MODEL, prompt: PROMPT, max_tokens: 8, ignore_eos: true },
        { 'x-request-id': 'abc' },
      )
    ).body;
    expect(c).toMatchObject({ id: 'cmpl-abc', object: 'text_completion', model: MODEL, kv_transfer_params: null });
    expect(c.choices[0]).toMatchObject({ index: 0, finish_reason: 'length', stop_reason: null, logprobs: null });
    expect(c.usage.completion_tokens).toBe(8);
    expect(c.usage.total_tokens).toBe(c.usage.prompt_tokens + 8);
    expect(c.choices[0].text).toMatch(/^( [a-z]+|[.,])+$/);
    const chat = (
      await postJson(`${s.url}/v1/chat/completions`, {
        messages: [{ role: 'user', content: 'Hi' }],
        max_completion_tokens: 5,
        ignore_eos: true,
      })
    ).body;
    expect(chat).toMatchObject({ object: 'chat.completion', kv_transfer_params: null });
    expect(chat.id).toMatch(/^chatcmpl-/);
    expect(chat.choices[0].message.role).toBe('assistant');
    expect(chat.usage.completion_tokens).toBe(5);
  });

  it('reports logprobs with token ids when asked', async () => {
    const s = await sim();
    const body = { prompt: PROMPT, max_tokens: 6, ignore_eos: true, logprobs: 2, return_tokens_as_token_ids: true, return_token_ids: true };
    const c = (await postJson(`${s.url}/v1/completions`, body)).body.choices[0];
    expect(c.logprobs.tokens).toEqual(c.token_ids.map((id: number) => `token_id:${id}`));
    expect(c.logprobs.token_logprobs).toHaveLength(6);
    for (const top of c.logprobs.top_logprobs) expect(Object.keys(top).length).toBe(3);
    const chat = (
      await postJson(`${s.url}/v1/chat/completions`, {
        messages: [{ role: 'user', content: 'Hi' }],
        max_tokens: 4,
        ignore_eos: true,
        logprobs: true,
        top_logprobs: 2,
        return_token_ids: true,
      })
    ).body.choices[0];
    expect(chat.logprobs.content).toHaveLength(4);
    expect(chat.logprobs.content[0].top_logprobs).toHaveLength(2);
    expect(chat.logprobs.content[0].top_logprobs[0].token).toBe(chat.logprobs.content[0].token);
    expect(chat.logprobs.content.map((e: { bytes: number[] }) => Buffer.from(e.bytes).toString()).join('')).toBe(chat.message.content);
  });

  it('stops on a stop string and truncates before it', async () => {
    const s = await sim();
    const full = (await postJson(`${s.url}/v1/completions`, { prompt: PROMPT, max_tokens: 12, ignore_eos: true })).body.choices[0]
      .text as string;
    const stopWord = full.split(' ').filter((w) => w !== '')[3]!;
    const cut = (await postJson(`${s.url}/v1/completions`, { prompt: PROMPT, max_tokens: 12, ignore_eos: true, stop: [` ${stopWord}`] }))
      .body.choices[0];
    expect(cut.finish_reason).toBe('stop');
    expect(cut.stop_reason).toBe(` ${stopWord}`);
    expect(cut.text).toBe(full.slice(0, full.indexOf(` ${stopWord}`)));
  });

  it('ends with EOS (finish_reason stop) unless ignore_eos, and honours min_tokens', async () => {
    const s = await sim();
    const r = (await postJson(`${s.url}/v1/completions`, { prompt: PROMPT, max_tokens: 400, return_token_ids: true })).body.choices[0];
    expect(r.finish_reason).toBe('stop');
    const eos = r.token_ids[r.token_ids.length - 1];
    const m = (
      await postJson(`${s.url}/v1/completions`, {
        prompt: PROMPT,
        max_tokens: 400,
        min_tokens: r.token_ids.length + 5,
        return_token_ids: true,
      })
    ).body.choices[0];
    expect(m.token_ids.slice(0, r.token_ids.length - 1)).toEqual(r.token_ids.slice(0, -1));
    const at = m.token_ids.indexOf(eos);
    expect(at === -1 || at === m.token_ids.length - 1).toBe(true); // EOS, if any, ends the output
    expect(m.token_ids.length).toBeGreaterThanOrEqual(r.token_ids.length + 5);
  });

  it('adapter requests use the adapter (different tokens from the base model)', async () => {
    const s = await sim({ adapter: { id: 'acme/sql-lora', revision: 'l1' } });
    const ids = async (model: string) =>
      (await postJson(`${s.url}/v1/completions`, { model, prompt: PROMPT, max_tokens: 8, ignore_eos: true, return_token_ids: true })).body
        .choices[0].token_ids;
    const lora = await ids('acme/sql-lora');
    expect(lora).not.toEqual(await ids(MODEL));
    const r = (await postJson(`${s.url}/v1/completions`, { model: 'acme/sql-lora', prompt: PROMPT, max_tokens: 1 })).body;
    expect(r.model).toBe('acme/sql-lora');
  });

  it('queues requests beyond maxNumSeqs (vllm:num_requests_waiting)', async () => {
    const s = await sim({}, { maxNumSeqs: 1, latency: { decodeMsPerToken: 10 } });
    const long = { prompt: PROMPT, max_tokens: 40, ignore_eos: true };
    const a = postJson(`${s.url}/v1/completions`, long);
    const b = postJson(`${s.url}/v1/completions`, long);
    let seen = { running: 0, waiting: 0 };
    for (let i = 0; i < 200 && seen.waiting === 0; i++) {
      const text = await scrape(s);
      seen = { running: metricValue(text, 'vllm:num_requests_running'), waiting: metricValue(text, 'vllm:num_requests_waiting') };
    }
    expect(seen).toEqual({ running: 1, waiting: 1 });
    expect([(await a).status, (await b).status]).toEqual([200, 200]);
    const after = await scrape(s);
    expect(metricValue(after, 'vllm:num_requests_waiting')).toBe(0);
    expect(metricValue(after, 'vllm:generation_tokens_total')).toBe(80);
  });
});

describe('fault injection', () => {
  it('x-sim-fault error returns that status in vLLM shape; a bad header is a 400', async () => {
    const s = await sim();
    const r = await postJson(`${s.url}/v1/completions`, { prompt: 'hi' }, { 'x-sim-fault': 'error=503' });
    expect(r.status).toBe(503);
    expect(r.body.error).toMatchObject({ type: 'ServiceUnavailableError', code: 503 });
    expect((await postJson(`${s.url}/v1/completions`, { prompt: 'hi' }, { 'x-sim-fault': 'boom' })).status).toBe(400);
  });

  it('slow delays the answer by at least the requested time', async () => {
    const s = await sim();
    const t0 = performance.now();
    const r = await postJson(`${s.url}/v1/completions`, { prompt: 'hi', max_tokens: 1 }, { 'x-sim-fault': 'slow=80' });
    expect(r.status).toBe(200);
    expect(performance.now() - t0).toBeGreaterThanOrEqual(75);
  });

  it('admin faults: error rate, get/reset, and a validated body', async () => {
    const s = await sim();
    const set = await postJson(`${s.url}/admin/faults`, { errorRate: 1, errorStatus: 429 });
    expect(set.body).toMatchObject({ errorRate: 1, errorStatus: 429 });
    expect((await getJson(`${s.url}/admin/faults`)).body.errorRate).toBe(1);
    const r = await postJson(`${s.url}/v1/completions`, { prompt: 'hi' });
    expect([r.status, r.body.error.type]).toEqual([429, 'RateLimitError']);
    expect((await postJson(`${s.url}/admin/faults`, { errorRat: 1 })).status).toBe(400);
    await postJson(`${s.url}/admin/faults`, { reset: true });
    expect((await postJson(`${s.url}/v1/completions`, { prompt: 'hi', max_tokens: 1 })).status).toBe(200);
    expect(s.getFaults().errorRate).toBe(0);
  });

  it('drops a stream after N tokens (no [DONE]) and a non-streamed answer entirely', async () => {
    const s = await sim();
    const body = { prompt: PROMPT, max_tokens: 10, ignore_eos: true, stream: true };
    const res = await fetch(`${s.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-sim-fault': 'drop=3' },
      body: JSON.stringify(body),
    });
    const reader = res.body!.getReader();
    let text = '';
    let failed = false;
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        text += Buffer.from(value).toString();
      }
    } catch {
      failed = true;
    }
    expect(failed || !text.includes('[DONE]')).toBe(true);
    expect(text.split('data: ').filter((e) => e.trim() !== '')).toHaveLength(3);
    s.setFaults({ dropAfterTokens: 2 });
    await expect(
      fetch(`${s.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ prompt: PROMPT, max_tokens: 5 }),
      }),
    ).rejects.toThrow();
  });

  it('include_usage adds a final usage chunk only when asked', async () => {
    const s = await sim();
    const body = { prompt: PROMPT, max_tokens: 4, ignore_eos: true, stream: true };
    const without = await postSse(`${s.url}/v1/completions`, body);
    expect(without.events.some((e) => e !== '[DONE]' && e.usage)).toBe(false);
    const withUsage = await postSse(`${s.url}/v1/completions`, { ...body, stream_options: { include_usage: true } });
    const last = withUsage.events[withUsage.events.length - 2];
    expect(last.choices).toEqual([]);
    expect(last.usage.completion_tokens).toBe(4);
    expect(withUsage.events[withUsage.events.length - 1]).toBe('[DONE]');
  });
});
