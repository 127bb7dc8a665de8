import { afterEach, describe, expect, it } from 'vitest';
import type { SimServer } from './server.js';
import {
  getJson,
  metricValue,
  parseLabels,
  postJson,
  postSse,
  runDisaggregated,
  scrape,
  TOY_PROXY_PREFILL_KV,
  simsForTests,
} from './testing.js';

const { sim, closeAll } = simsForTests();
afterEach(closeAll);

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

  it('guards /v2, /inference and /cohere too on main, /v1 alone on 0.13; /tokenize stays open on both', async () => {
    const status = async (s: SimServer, path: string, authorization?: string) =>
      (await postJson(`${s.url}${path}`, { token_ids: [1], sampling_params: { max_tokens: 1 } }, authorization ? { authorization } : {}))
        .status;
    const main = await sim({}, { apiKey: 'sk-test', flavour: 'main' });
    const old = await sim({}, { apiKey: 'sk-test', flavour: '0.13' });
    for (const path of ['/inference/v1/generate', '/v2/embed', '/cohere/v1/rerank']) {
      // The simulator serves none of these routes: past the key they are FastAPI's 404.
      expect([path, await status(main, path)]).toEqual([path, 401]);
      expect([path, await status(main, path, 'Bearer sk-test')]).toEqual([path, 404]);
      expect([path, await status(old, path)]).toEqual([path, 404]);
    }
    expect((await postJson(`${main.url}/tokenize`, { prompt: PROMPT })).status).toBe(200);
    expect((await getJson(`${main.url}/metrics`)).status).toBe(200);
  });
});

describe('kv_transfer_params.prompt_token_ids (PR #48145, decode-side reuse of the prefill ids)', () => {
  it('main runs a chat request on the ids it carries instead of the rendered messages; 0.13 renders the messages', async () => {
    const ids = [11, 12, 13, 14, 15];
    const chat = async (flavour: '0.13' | 'main', kv: unknown) =>
      (
        await postJson(`${(await sim({}, { flavour })).url}/v1/chat/completions`, {
          messages: [{ role: 'user', content: PROMPT }],
          max_tokens: 1,
          return_token_ids: true,
          kv_transfer_params: kv,
        })
      ).body;
    const main = await chat('main', { prompt_token_ids: ids });
    expect([main.prompt_token_ids, main.usage.prompt_tokens]).toEqual([ids, ids.length]);
    // Empty is no ids (`pop(...) or None`): the messages are rendered.
    const empty = await chat('main', { prompt_token_ids: [] });
    expect(empty.usage.prompt_tokens).toBeGreaterThan(ids.length);
    const old = await chat('0.13', { prompt_token_ids: ids });
    expect(old.prompt_token_ids).not.toEqual(ids);
    expect(old.usage.prompt_tokens).toBe(empty.usage.prompt_tokens);
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
    // P answers remote_blocks_expiry_time None: only a bidirectional D sets it (pull_scheduler.py @0050936b).
    expect(r.body.kv_transfer_params).toHaveProperty('remote_blocks_expiry_time', null);
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

describe('stream usage (should_include_usage)', () => {
  // vllm-project/vllm vllm/entrypoints/serve/utils/api_utils.py @00a5fdd2 (and vllm/entrypoints/utils.py @00fc8809,
  // inline in vllm/entrypoints/openai/serving_chat.py @003fe593): include_continuous_usage = include_usage and
  // continuous_usage_stats.
  it('continuous_usage_stats without include_usage adds no usage anywhere', async () => {
    const s = await sim({}, { flavour: 'main' });
    for (const path of ['/v1/completions', '/v1/chat/completions']) {
      const body = path.includes('chat') ? { messages: [{ role: 'user', content: 'Hi' }] } : { prompt: PROMPT };
      const r = await postSse(`${s.url}${path}`, {
        ...body,
        max_tokens: 3,
        ignore_eos: true,
        stream: true,
        stream_options: { continuous_usage_stats: true },
      });
      expect(r.events.filter((e) => e !== '[DONE]' && 'usage' in e)).toEqual([]);
    }
  });

  it('with include_usage, every chat chunk carries usage, the role chunk with completion_tokens 0', async () => {
    const s = await sim({}, { flavour: 'main' });
    const r = await postSse(`${s.url}/v1/chat/completions`, {
      messages: [{ role: 'user', content: 'Hi' }],
      max_tokens: 3,
      ignore_eos: true,
      stream: true,
      stream_options: { include_usage: true, continuous_usage_stats: true },
    });
    const chunks = r.events.filter((e) => e !== '[DONE]');
    const prompt = chunks[0].usage.prompt_tokens as number;
    expect(chunks[0].choices[0].delta).toEqual({ role: 'assistant', content: '' });
    expect(chunks[0].usage).toEqual({ prompt_tokens: prompt, completion_tokens: 0, total_tokens: prompt });
    expect(chunks.map((c) => c.usage.completion_tokens)).toEqual([0, 1, 2, 3, 3]);
  });
});

describe('a KV load failure before any output, streamed (kv_load_failure_policy fail)', () => {
  const chat = { messages: [{ role: 'user', content: PROMPT }], max_tokens: 4, ignore_eos: true, stream: true };
  const completion = { prompt: PROMPT, max_tokens: 4, ignore_eos: true, stream: true };
  const failOn = async (flavour: '0.13' | 'main' | undefined, path: '/v1/completions' | '/v1/chat/completions', body: object) => {
    const p = await sim({}, flavour ? { flavour } : {});
    const d = await sim({}, { ...(flavour ? { flavour } : {}), kvLoadFailurePolicy: 'fail' });
    const r = await runDisaggregated(p, d, path, body as Record<string, unknown>, { decode: { 'x-sim-fault': 'handshake-fail' } });
    expect(r.decode.status).toBe(200);
    return r.decode.text
      .split('\n\n')
      .filter((e) => e.startsWith('data: '))
      .map((e) => e.slice(6))
      .map((d) => (d === '[DONE]' ? d : JSON.parse(d)));
  };
  const roleOnly = { role: 'assistant', content: '' };

  it('main chat: the role chunk, then the 500 error event, then [DONE] (_raise_if_error before the empty-chunk filter)', async () => {
    const ev = await failOn('main', '/v1/chat/completions', chat);
    expect(ev).toHaveLength(3);
    expect(ev[0].choices[0].delta).toEqual(roleOnly);
    expect(ev[1].error).toMatchObject({ message: 'Internal server error', type: 'InternalServerError', code: 500 });
    expect(ev[2]).toBe('[DONE]');
  });

  it('main completions: the empty error output is dropped, the stream is only [DONE] (usage chunk when asked)', async () => {
    expect(await failOn('main', '/v1/completions', completion)).toEqual(['[DONE]']);
    const withUsage = await failOn('main', '/v1/completions', { ...completion, stream_options: { include_usage: true } });
    expect(withUsage).toHaveLength(2);
    expect(withUsage[0]).toMatchObject({ choices: [], usage: { completion_tokens: 0 } });
  });

  it('0.13: dropped in both APIs (the error check sat in the finish branch, after the empty-chunk filter)', async () => {
    const c = await failOn('0.13', '/v1/chat/completions', chat);
    expect(c).toHaveLength(2);
    expect(c[0].choices[0].delta).toEqual(roleOnly);
    expect(c[1]).toBe('[DONE]');
    expect(await failOn('0.13', '/v1/completions', completion)).toEqual(['[DONE]']);
  });

  it('no flavour (composite): an error event in both APIs, after the role chunk in chat', async () => {
    const c = await failOn(undefined, '/v1/chat/completions', chat);
    expect(c.map((e) => (e === '[DONE]' ? e : e.error ? 'error' : 'chunk'))).toEqual(['chunk', 'error', '[DONE]']);
    const t = await failOn(undefined, '/v1/completions', completion);
    expect(t.map((e) => (e === '[DONE]' ? e : e.error ? 'error' : 'chunk'))).toEqual(['error', '[DONE]']);
  });
});

describe('SIGTERM with --shutdown-timeout (PR #36666; vllm/entrypoints/serve/middleware.py @43e1530d)', () => {
  /** A streamed completion held after its first token: in flight until `release`. */
  async function heldStream(s: SimServer) {
    s.setFaults({ holdStreamAfterTokens: 1 });
    const r = await fetch(`${s.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: '/models/acme-llama-3-8b', prompt: PROMPT, max_tokens: 4, ignore_eos: true, stream: true }),
    });
    const reader = r.body!.getReader();
    const first = await reader.read();
    expect(first.done).toBe(false);
    return {
      rest: async () => {
        let text = new TextDecoder().decode(first.value);
        for (;;) {
          const c = await reader.read().catch(() => ({ done: true, value: undefined }));
          if (c.done) return text;
          text += new TextDecoder().decode(c.value);
        }
      },
    };
  }

  it('main drains: new requests get 503 (but /metrics), the generation in flight finishes, then the ports close', async () => {
    const s = await sim({}, { flavour: 'main' });
    const held = await heldStream(s);
    const done = s.shutdown(30_000);
    const health = await fetch(`${s.url}/health`);
    expect([health.status, await health.json()]).toEqual([503, { error: 'Server is unavailable. Please try again later.' }]);
    expect((await postJson(`${s.url}/v1/completions`, { model: '/models/acme-llama-3-8b', prompt: PROMPT })).status).toBe(503);
    expect((await fetch(`${s.url}/version`)).status).toBe(503);
    expect((await fetch(`${s.url}/metrics`)).status).toBe(200);
    s.setFaults({ holdStreamAfterTokens: null });
    expect(await held.rest()).toContain('data: [DONE]');
    await done;
    await expect(fetch(`${s.url}/health`)).rejects.toThrow();
  });

  it('0.13 (before the PR) and a zero timeout exit at once, cutting the generation in flight', async () => {
    for (const [flavour, timeoutMs] of [
      ['0.13', 30_000],
      ['main', 0],
    ] as const) {
      const s = await sim({}, { flavour });
      const held = await heldStream(s);
      await s.shutdown(timeoutMs);
      expect(await held.rest()).not.toContain('[DONE]');
      await expect(fetch(`${s.url}/health`)).rejects.toThrow();
    }
  });
});
