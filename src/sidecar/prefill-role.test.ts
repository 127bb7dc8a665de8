/**
 * The prefill role against a simulated worker: contract checked, prefill run as vLLM's proxies run it, and a
 * signed attestation returned that the decode side can verify.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { promptTokenDigestOf, verifyAttestation } from '../contract/attestation.js';
import { verifyContract } from '../contract/contract.js';
import { startTestSim, postJson } from '../../testbed/sim/testing.js';
import type { SimServer } from '../../testbed/sim/server.js';
import { PREFILL_KV_PARAMS } from './openai-body.js';
import { MAX_CLAIMS } from './replay-guard.js';
import { contractFor, gateHeaders, sidecarConfigFor, startTestSidecar, TEST_KEYS, type TestSidecar, bound, TEST_SALT } from './testing.js';

const MODEL = '/models/acme-llama-3-8b';
let sim: SimServer;
let p: TestSidecar;
beforeAll(async () => {
  sim = await startTestSim();
  p = await startTestSidecar(sidecarConfigFor(sim, 'prefill', { advertise: '127.0.0.1:9999' }));
});
afterAll(async () => {
  await p.sidecar.close();
  await sim.close();
});

let n = 0;
const contract = (edit = {}) => contractFor(p.config.fingerprint, '127.0.0.1:9999', { requestId: `pre-${++n}`, ...edit });

describe('prefill role', () => {
  it('runs prefill exactly as vLLM proxies do and returns an attestation that verifies', async () => {
    const c = contract();
    p.spy.reset();
    const r = await postJson(
      `${p.sidecar.url}/v1/completions`,
      ...bound(c, {
        model: MODEL,
        prompt: 'The capital of France is',
        max_tokens: 50,
        stream: true,
        stream_options: { include_usage: true },
        min_tokens: 3,
      }),
    );
    expect(r.status).toBe(200);
    const [sent] = p.spy.workCalls(sim.url);
    expect(sent!.url).toBe(`${sim.url}/v1/completions`);
    expect(sent!.headers['x-request-id']).toBe(c.requestId);
    // As vLLM's proxies send it, plus return_token_ids so the prompt token ids can be attested.
    expect(sent!.body).toEqual({
      model: MODEL,
      prompt: 'The capital of France is',
      cache_salt: TEST_SALT,
      max_tokens: 1,
      stream: false,
      kv_transfer_params: { ...PREFILL_KV_PARAMS },
      return_token_ids: true,
    });
    const params = r.body.kv_transfer_params as Record<string, unknown>;
    expect(params).toMatchObject({ do_remote_prefill: true, remote_engine_id: sim.engineId });
    const contractValue = verifyContract(gateHeaders(c)['x-kvgate-contract']!, TEST_KEYS, Date.now());
    expect(contractValue.ok).toBe(true);
    if (!contractValue.ok) return;
    const a = verifyAttestation(params['kvgate'] as string, TEST_KEYS, Date.now(), {
      contract: contractValue.value,
      fingerprint: p.config.fingerprint,
      promptTokens: r.body.usage.prompt_tokens,
    });
    expect(a.ok).toBe(true);
    expect(a.ok && a.value).toMatchObject({
      requestId: c.requestId,
      groupId: c.groupId,
      tenantScope: 'tenant:acme',
      blockSize: 16,
      layout: 'HND',
      engineId: sim.engineId,
      promptTokens: r.body.usage.prompt_tokens,
    });
    expect(r.body.usage.prompt_tokens).toBeGreaterThan(3);
    expect(p.sidecar.status().engineId).toBe(sim.engineId);
    // The digest covers the ids the worker tokenized the prompt into (the same ids its /tokenize lists).
    const tokenized = await postJson(`${sim.url}/tokenize`, { model: MODEL, prompt: 'The capital of France is' });
    expect(a.ok && a.value.promptTokenDigest).toBe(promptTokenDigestOf(tokenized.body.tokens as number[]));
    // The client did not ask for token ids, so the answer carries none.
    expect(r.body.choices[0]).toMatchObject({ token_ids: null, prompt_token_ids: null });
  });

  it('keeps the token ids in the answer when the client asked for them, and attests the chat prompt ids', async () => {
    const c = contract();
    const messages = [{ role: 'user', content: 'Name three rivers.' }];
    const r = await postJson(`${p.sidecar.url}/v1/chat/completions`, ...bound(c, { model: MODEL, messages, return_token_ids: true }));
    expect(r.status).toBe(200);
    const ids = r.body.prompt_token_ids as number[];
    expect(ids).toHaveLength(r.body.usage.prompt_tokens);
    expect(r.body.choices[0].token_ids).toHaveLength(1);
    const tokenized = await postJson(`${sim.url}/tokenize`, { model: MODEL, messages });
    expect(tokenized.body.tokens).toEqual(ids);
    const contractValue = verifyContract(gateHeaders(c)['x-kvgate-contract']!, TEST_KEYS, Date.now());
    if (!contractValue.ok) throw new Error('contract');
    const token = (r.body.kv_transfer_params as Record<string, unknown>)['kvgate'] as string;
    const a = verifyAttestation(token, TEST_KEYS, Date.now(), {
      contract: contractValue.value,
      fingerprint: p.config.fingerprint,
      promptTokens: ids.length,
      promptTokenDigest: promptTokenDigestOf(ids),
    });
    expect(a.ok && a.value.promptTokenDigest).toBe(promptTokenDigestOf(ids));
  });

  it('accepts the exact prefill kv_transfer_params a decode sidecar sends, and refuses any other', async () => {
    const ok = await postJson(
      `${p.sidecar.url}/v1/chat/completions`,
      ...bound(contract(), { model: MODEL, messages: [{ role: 'user', content: 'hi' }], kv_transfer_params: { ...PREFILL_KV_PARAMS } }),
    );
    expect(ok.status).toBe(200);
    p.spy.reset();
    const forged = {
      ...PREFILL_KV_PARAMS,
      do_remote_decode: false,
      do_remote_prefill: true,
      remote_host: '10.1.2.3',
      remote_port: 5600,
      remote_engine_id: 'x',
      remote_block_ids: [1],
    };
    const bad = await postJson(
      `${p.sidecar.url}/v1/completions`,
      ...bound(contract(), { model: MODEL, prompt: 'x', kv_transfer_params: forged }),
    );
    expect(bad.status).toBe(400);
    expect(bad.body.error.code).toBe('kv_params_forbidden');
    expect(p.spy.workCalls(sim.url)).toEqual([]);
  });

  it('refuses a leg asking n completions before calling the worker: the prompt would be run and held n times', async () => {
    // vLLM fans n into n child requests that each compute and hold the prompt's KV for a remote decode that pulls one:
    // the other n - 1 copies stay pinned on the prefill worker until its abort timeout (480 s). And the decode side
    // would hand all its samples one transfer. (A decode sidecar refuses such a request before its leg.)
    p.spy.reset();
    const r = await postJson(
      `${p.sidecar.url}/v1/completions`,
      ...bound(contract(), { model: MODEL, prompt: 'x', n: 8, kv_transfer_params: { ...PREFILL_KV_PARAMS } }),
    );
    expect([r.status, r.body.error.code]).toEqual([400, 'bad_request']);
    expect(r.body.error.message).toMatch(/^n is 8: a disaggregated request generates one sequence/);
    expect(p.spy.workCalls(sim.url)).toEqual([]);
  });

  it('refuses a client-chosen media uuid before calling the worker, on either path, with one audit line', async () => {
    // A contract does not name its path: one minted for a completions body that also carries `messages` (which vLLM's
    // completions path ignores) binds them, and the chat path renders them. vLLM caches media by that id, unsalted.
    const messages = [
      {
        role: 'user',
        content: [
          { type: 'text', text: 'describe' },
          { type: 'image_url', image_url: null, uuid: 'sku-1' },
        ],
      },
    ];
    for (const [path, body] of [
      ['/v1/chat/completions', { model: MODEL, prompt: 'x', messages }],
      ['/v1/completions', { model: MODEL, prompt: 'x', messages }],
    ] as const) {
      p.spy.reset();
      const c = contract();
      const r = await postJson(`${p.sidecar.url}${path}`, ...bound(c, { ...body, kv_transfer_params: { ...PREFILL_KV_PARAMS } }));
      expect([r.status, r.body.error.code], path).toEqual([400, 'bad_request']);
      expect(r.body.error.message).toContain('messages[0].content[1] names its media by "uuid"');
      expect(p.spy.workCalls(sim.url)).toEqual([]);
      expect(p.lines.filter((l) => l['request_id'] === c.requestId && l['audit'] === 'refusal')).toHaveLength(1);
    }
  });

  it('refuses a media URL its own config does not allow before calling the worker, with one audit line; forwards one it allows', async () => {
    const withImage = (url: string) => ({
      model: MODEL,
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'describe' },
            { type: 'image_url', image_url: { url } },
          ],
        },
      ],
      kv_transfer_params: { ...PREFILL_KV_PARAMS },
    });
    // The default config allows no origin: its worker would fetch this from inside the mesh.
    for (const url of ['https://media.example.com/cat.png', 'http://127.0.0.1:5600/', 'https://media.example.com\\@evil.example/']) {
      p.spy.reset();
      const c = contract();
      const r = await postJson(`${p.sidecar.url}/v1/chat/completions`, ...bound(c, withImage(url)));
      expect([r.status, r.body.error.code], url).toEqual([400, 'bad_request']);
      expect(r.body.error.message).toMatch(/^messages\[0\]\.content\[1\]\.image_url: its URL /);
      expect(p.spy.workCalls(sim.url)).toEqual([]);
      expect(p.lines.filter((l) => l['request_id'] === c.requestId && l['audit'] === 'refusal')).toHaveLength(1);
    }
    // A sidecar whose config allows the origin hands the request to its worker (the check reads this sidecar's list).
    const allowing = await startTestSidecar(
      await sidecarConfigFor(sim, 'prefill', { advertise: '127.0.0.1:9999', media: { allowedOrigins: ['https://media.example.com'] } }),
    );
    try {
      const c = contractFor(allowing.config.fingerprint, '127.0.0.1:9999', { requestId: `pre-${++n}` });
      await postJson(`${allowing.sidecar.url}/v1/chat/completions`, ...bound(c, withImage('https://media.example.com/cat.png')));
      // (The simulated worker fetches no media and answers 400 itself; what counts is that the sidecar called it.)
      const [sent] = allowing.spy.workCalls(sim.url);
      expect(sent?.body).toMatchObject({ messages: withImage('https://media.example.com/cat.png').messages });
    } finally {
      await allowing.sidecar.close();
    }
  });

  it('refuses use_beam_search, prompt_embeds, prompt logprobs and a prompt field of the other path before calling the worker, with one audit line', async () => {
    for (const [path, body, message] of [
      ['/v1/completions', { model: MODEL, prompt: 'x', use_beam_search: true }, /^use_beam_search is not served/],
      ['/v1/completions', { model: MODEL, prompt: 'x', prompt_embeds: 'AAAA' }, /^prompt_embeds cannot be disaggregated/],
      ['/v1/completions', { model: MODEL, prompt: 'x', prompt_logprobs: 1 }, /^prompt_logprobs 1 asks for prompt logprobs/],
      ['/v1/completions', { model: MODEL, prompt: 'x', messages: [{ role: 'user', content: 'y' }] }, /^"messages" is a prompt field/],
      ['/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'y' }], prompt: 'x' }, /^"prompt" is a prompt field/],
    ] as const) {
      p.spy.reset();
      const c = contract();
      const r = await postJson(`${p.sidecar.url}${path}`, ...bound(c, { ...body, kv_transfer_params: { ...PREFILL_KV_PARAMS } }));
      expect([r.status, r.body.error.code], path).toEqual([400, 'bad_request']);
      expect(r.body.error.message).toMatch(message);
      expect(p.spy.workCalls(sim.url)).toEqual([]);
      expect(p.lines.filter((l) => l['request_id'] === c.requestId && l['audit'] === 'refusal')).toHaveLength(1);
    }
  });

  it('refuses a contract without a prefill leg, and one for another revision, before calling the worker', async () => {
    p.spy.reset();
    const noLeg = await postJson(
      `${p.sidecar.url}/v1/completions`,
      ...bound(contractFor(p.config.fingerprint, null, { requestId: 'pre-noleg' }), { model: MODEL, prompt: 'x' }),
    );
    expect([noLeg.status, noLeg.body.error.code]).toEqual([403, 'contract_invalid']);
    const other = await postJson(
      `${p.sidecar.url}/v1/completions`,
      ...bound(contract({ fingerprint: '0'.repeat(64) }), { model: MODEL, prompt: 'x' }),
    );
    expect([other.status, other.body.error.code]).toEqual([409, 'mixed_revision']);
    expect(p.spy.workCalls(sim.url)).toEqual([]);
  });

  it('refuses what no decode could use (a batch, a truncation vLLM refuses) before calling the worker, with one audit line', async () => {
    for (const [extra, message] of [
      [{ prompt: ['one prompt', 'and another'] }, /send batches as separate requests/],
      [{ prompt: 'x', truncate_prompt_tokens: 5000 }, /greater than this worker's max_model_len \(2048\)/],
    ] as const) {
      p.spy.reset();
      const c = contract();
      const r = await postJson(`${p.sidecar.url}/v1/completions`, ...bound(c, { model: MODEL, max_tokens: 1, ...extra }));
      expect([r.status, r.body.error.code]).toEqual([400, 'bad_request']);
      expect(r.body.error.message).toMatch(message);
      expect(p.spy.workCalls(sim.url)).toEqual([]);
      const mine = p.lines.filter((l) => l['request_id'] === c.requestId);
      expect(mine.find((l) => l['msg'] === 'request done')?.['outcome']).toBe('refused');
      expect(mine.filter((l) => l['audit'] === 'refusal')).toHaveLength(1);
    }
  });

  it("passes the worker's own error through verbatim, naming itself for retries", async () => {
    p.spy.onNext(
      (u) => u === `${sim.url}/v1/completions`,
      (h) => {
        h['x-sim-fault'] = 'error=503';
      },
    );
    const [body, headers] = bound(contract(), { model: MODEL, prompt: 'x' });
    const res = await fetch(`${p.sidecar.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
    });
    expect(res.status).toBe(503);
    expect(res.headers.get('x-kvgate-served-by')).toBe('127.0.0.1:9999');
    expect(((await res.json()) as { error: { message: string } }).error.message).toContain('Injected fault: HTTP 503');
  });

  it("records its worker's refusal (400) as its own refusal, with one audit line, and still relays the answer verbatim", async () => {
    p.spy.onNext(
      (u) => u === `${sim.url}/v1/completions`,
      (h) => {
        h['x-sim-fault'] = 'error=400';
      },
    );
    const c = contract();
    const r = await postJson(`${p.sidecar.url}/v1/completions`, ...bound(c, { model: MODEL, prompt: 'x' }));
    expect(r.status).toBe(400);
    expect(r.body.error.message).toContain('Injected fault: HTTP 400');
    const mine = p.lines.filter((l) => l['request_id'] === c.requestId);
    expect(mine.find((l) => l['msg'] === 'request done')).toMatchObject({ outcome: 'refused', code: 'bad_request' });
    const audits = mine.filter((l) => l['audit'] === 'refusal');
    expect(audits).toHaveLength(1);
    expect(String(audits[0]!['reason'])).toMatch(/^the prefill worker refused the request \(HTTP 400\)/);
  });

  it("audits its worker's refusal without the worker's message: vLLM's quotes the prompt it refused", async () => {
    // vLLM answers a request its model validators refuse with the pydantic error, whose `input` is the whole request.
    const text = 'Heron-9d2 private prompt text';
    p.spy.answerNext((u) => u === `${sim.url}/v1/completions`, 400, {
      error: { message: `1 validation error: Value error [type=value_error, input_value={'prompt': '${text}'}]`, code: 400 },
    });
    const c = contract();
    const r = await postJson(`${p.sidecar.url}/v1/completions`, ...bound(c, { model: MODEL, prompt: text }));
    // The client still gets its worker's answer verbatim: its own prompt, to itself.
    expect([r.status, String(r.body.error.message).includes(text)]).toEqual([400, true]);
    const audits = p.lines.filter((l) => l['request_id'] === c.requestId && l['audit'] === 'refusal');
    expect(audits).toHaveLength(1);
    expect(audits[0]).toMatchObject({ code: 'bad_request' });
    expect(String(audits[0]!['reason'])).toMatch(/^the prefill worker refused the request \(HTTP 400\)/);
    expect(p.lines.filter((l) => JSON.stringify(l).includes('Heron-9d2'))).toEqual([]);
  });

  it(`admits one contract at most ${MAX_CLAIMS} times, even when every attempt fails (a holder restarting one prefill without end)`, async () => {
    const c = contract();
    const [body, headers] = bound(c, { model: MODEL, prompt: 'The capital of France is' });
    p.spy.reset();
    const statuses: number[] = [];
    for (let i = 0; i <= MAX_CLAIMS; i++) {
      // Every attempt fails on the worker (a 503, as a caller that aborts mid-prefill also fails it): each is released.
      if (i < MAX_CLAIMS) p.spy.answerNext((u) => u === `${sim.url}/v1/completions`, 503, { error: { message: 'busy', code: 503 } });
      statuses.push((await postJson(`${p.sidecar.url}/v1/completions`, body, headers)).status);
    }
    expect(statuses).toEqual([...Array.from({ length: MAX_CLAIMS }, () => 503), 403]);
    expect(p.spy.workCalls(sim.url)).toHaveLength(MAX_CLAIMS);
    const last = p.lines.filter((l) => l['request_id'] === c.requestId && l['audit'] === 'refusal').at(-1);
    expect(last).toMatchObject({ code: 'contract_invalid' });
  });
});
