/**
 * The decode role end to end with simulated workers (prefill sim <- prefill sidecar <- decode sidecar -> decode sim),
 * the prefill leg in direct mode: tokens equal the non-disaggregated baseline, every bad contract or attestation is
 * refused before any KV is consumed, retries stay inside the group, transfer failures recompute or fail cleanly.
 */
import type { Counter } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metricValue, postJson, postSse, scrape, startTestSim } from '../../testbed/sim/testing.js';
import type { SimServer } from '../../testbed/sim/server.js';
import { createDevKeyRing } from '../contract/keys.js';
import { bound, contractFor, endpointOf, gateHeaders, sidecarConfigFor, startTestSidecar, TEST_SALT, type TestSidecar } from './testing.js';

const MODEL = '/models/acme-llama-3-8b';
const PROMPT = 'The quick brown fox jumps over the lazy dog. Kubernetes operators reconcile state.';
const CHAT = [{ role: 'user', content: 'Explain KV caches in one sentence, please.' }];

const open: { close(): Promise<void> }[] = [];
const track = <T extends { close(): Promise<void> }>(x: T): T => {
  open.push(x);
  return x;
};
afterAll(async () => {
  for (const x of open.reverse()) await x.close();
});

let prefillSim: SimServer;
let decodeSim: SimServer;
let P: TestSidecar;
let D: TestSidecar;
beforeAll(async () => {
  // Both run `--scheduling-policy priority` (the simulator refuses a priority other than 0 otherwise, as vLLM does).
  prefillSim = track(await startTestSim({}, { schedulingPolicy: 'priority' }));
  decodeSim = track(await startTestSim({}, { schedulingPolicy: 'priority' }));
  P = await startTestSidecar(sidecarConfigFor(prefillSim, 'prefill'));
  track(P.sidecar);
  D = await startTestSidecar(sidecarConfigFor(decodeSim, 'decode'));
  track(D.sidecar);
});

let n = 0;
function contract(edit: Parameters<typeof contractFor>[2] = {}, prefill: string | null = endpointOf(P.sidecar.url)) {
  return contractFor(D.config.fingerprint, prefill, { requestId: `dec-${++n}`, ...edit });
}

const completion = (extra: Record<string, unknown> = {}) => ({
  model: MODEL,
  prompt: PROMPT,
  max_tokens: 12,
  temperature: 0,
  return_token_ids: true,
  ...extra,
});
const chat = (extra: Record<string, unknown> = {}) => ({
  model: MODEL,
  messages: CHAT,
  max_tokens: 10,
  temperature: 0,
  return_token_ids: true,
  ...extra,
});

async function baseline(path: string, body: Record<string, unknown>): Promise<number[]> {
  const r = await postJson(`${decodeSim.url}${path}`, body);
  expect(r.status).toBe(200);
  // The baseline's blocks would let D skip the pull (a prefix-cache hit); forget them so D must read P's KV.
  decodeSim.resetPrefixCache();
  return r.body.choices[0].token_ids as number[];
}

const streamedIds = (events: unknown[]): number[] =>
  events.flatMap((e) =>
    typeof e === 'object' && e !== null
      ? ((e as { choices?: { token_ids?: number[] }[] }).choices ?? []).flatMap((c) => c.token_ids ?? [])
      : [],
  );

describe('decode role, disaggregated', () => {
  it('a completion through P and D gives the token ids of the non-disaggregated baseline, with KV pulled from P', async () => {
    const expected = await baseline('/v1/completions', completion());
    const pulledBefore = metricValue(await scrape(decodeSim), 'kvgate_sim_kv_blocks_pulled_total');
    const c = contract();
    const r = await postJson(`${D.sidecar.url}/v1/completions`, ...bound(c, completion()));
    expect(r.status).toBe(200);
    expect(r.body.choices[0].token_ids).toEqual(expected);
    // 19 prompt tokens, block size 16: both blocks came from P (the prefix cache was reset after the baseline).
    expect(metricValue(await scrape(decodeSim), 'kvgate_sim_kv_blocks_pulled_total') - pulledBefore).toBe(2);
    // The decode worker got the original request plus P's params, the attestation stripped.
    const sent = D.spy
      .workCalls(decodeSim.url)
      .filter((x) => x.url.endsWith('/v1/completions'))
      .at(-1)!;
    expect(sent.body).toMatchObject({
      max_tokens: 12,
      kv_transfer_params: { do_remote_prefill: true, remote_engine_id: prefillSim.engineId },
    });
    expect((sent.body as { kv_transfer_params: object }).kv_transfer_params).not.toHaveProperty('kvgate');
    expect(sent.headers['x-request-id']).toBe(c.requestId);
    expect(await scrape(D.sidecar)).toContain('kvgate_sidecar_requests_total{role="decode",outcome="served",code=""}');
  });

  it("the contract's priority reaches both workers (prefill and decode calls); the leg between the sidecars goes without it", async () => {
    const expected = await baseline('/v1/completions', completion());
    D.spy.reset();
    P.spy.reset();
    const r = await postJson(`${D.sidecar.url}/v1/completions`, ...bound(contract({ priority: -10 }), completion()));
    expect(r.status).toBe(200);
    expect(r.body.choices[0].token_ids).toEqual(expected);
    const completions = (s: TestSidecar, url: string) => s.spy.workCalls(url).filter((x) => new URL(x.url).pathname === '/v1/completions');
    const [leg] = completions(D, P.sidecar.url);
    expect(leg!.body).not.toHaveProperty('priority');
    const [prefill] = completions(P, prefillSim.url);
    expect(prefill!.body).toMatchObject({ priority: -10, max_tokens: 1 });
    const [decode] = completions(D, decodeSim.url);
    expect(decode!.body).toMatchObject({ priority: -10, max_tokens: 12 });
    // A contract without one: no priority anywhere, the bodies as before.
    D.spy.reset();
    P.spy.reset();
    expect((await postJson(`${D.sidecar.url}/v1/completions`, ...bound(contract(), completion()))).status).toBe(200);
    for (const x of [...completions(D, P.sidecar.url), ...completions(P, prefillSim.url), ...completions(D, decodeSim.url)])
      expect(x.body).not.toHaveProperty('priority');
  });

  it('a contract priority on workers without --scheduling-policy priority fails closed: the worker refuses it, nothing is served elsewhere', async () => {
    const fcfsPrefill = track(await startTestSim());
    const fcfsDecode = track(await startTestSim());
    const p = track((await startTestSidecar(sidecarConfigFor(fcfsPrefill, 'prefill'))).sidecar);
    const d = await startTestSidecar(sidecarConfigFor(fcfsDecode, 'decode'));
    track(d.sidecar);
    const c = contractFor(d.config.fingerprint, endpointOf(p.url), { requestId: `dec-${++n}`, priority: -10 });
    const r = await postJson(`${d.sidecar.url}/v1/completions`, ...bound(c, completion()));
    expect([r.status, r.body.error.code]).toEqual([400, 'bad_request']);
    expect(r.body.error.message).toMatch(/Priority scheduling is not enabled/);
    expect(d.spy.workCalls(fcfsDecode.url).filter((x) => new URL(x.url).pathname === '/v1/completions')).toEqual([]);
  });

  it("a client's own priority is still refused, with or without a contract priority, at both sidecars", async () => {
    for (const edit of [{}, { priority: -10 }]) {
      D.spy.reset();
      P.spy.reset();
      const atD = await postJson(`${D.sidecar.url}/v1/completions`, ...bound(contract(edit), completion({ priority: -10 })));
      expect([atD.status, atD.body.error.code]).toEqual([400, 'bad_request']);
      expect(atD.body.error.message).toMatch(/^priority -10 is not taken from a client/);
      const atP = await postJson(`${P.sidecar.url}/v1/completions`, ...bound(contract(edit), completion({ priority: -10 })));
      expect([atP.status, atP.body.error.code]).toEqual([400, 'bad_request']);
      expect(D.spy.workCalls(decodeSim.url)).toEqual([]);
      expect(P.spy.workCalls(prefillSim.url)).toEqual([]);
    }
  });

  it('a streamed chat through P and D streams the baseline token ids and ends with [DONE]', async () => {
    const expected = await baseline('/v1/chat/completions', chat());
    const r = await postSse(`${D.sidecar.url}/v1/chat/completions`, ...bound(contract(), chat({ stream: true })));
    expect(r.status).toBe(200);
    expect(streamedIds(r.events)).toEqual(expected);
    expect(r.events.at(-1)).toBe('[DONE]');
  });

  it("a coordinator's kv_transfer_params: null (its prefill kept no KV) is served locally, without another prefill leg", async () => {
    const expected = await baseline('/v1/completions', completion());
    P.spy.reset();
    const r = await postJson(`${D.sidecar.url}/v1/completions`, ...bound(contract(), completion({ kv_transfer_params: null })));
    expect(r.status).toBe(200);
    expect(r.body.choices[0].token_ids).toEqual(expected);
    // The contract's prefill leg was spent by the coordinator: a second one would be refused as a replay.
    expect(P.spy.calls).toEqual([]);
    const sent = D.spy
      .workCalls(decodeSim.url)
      .filter((x) => x.url.endsWith('/v1/completions'))
      .at(-1)!;
    expect(sent.body).not.toHaveProperty('kv_transfer_params');
  });

  it('a contract without a prefill leg is served locally, without calling any prefill worker', async () => {
    const expected = await baseline('/v1/completions', completion());
    P.spy.reset();
    const r = await postJson(`${D.sidecar.url}/v1/completions`, ...bound(contract({}, null), completion()));
    expect(r.status).toBe(200);
    expect(r.body.choices[0].token_ids).toEqual(expected);
    expect(P.spy.calls).toEqual([]);
  });
});

describe('decode role refusals before any KV is consumed', () => {
  async function refusedBeforeAnyCall(headers: Record<string, string>, body: Record<string, unknown> = completion()) {
    D.spy.reset();
    P.spy.reset();
    const promptTokensBefore = metricValue(await scrape(decodeSim), 'vllm:prompt_tokens_total');
    const r = await postJson(`${D.sidecar.url}/v1/completions`, body, headers);
    expect(D.spy.calls).toEqual([]);
    expect(P.spy.calls).toEqual([]);
    expect(metricValue(await scrape(decodeSim), 'vllm:prompt_tokens_total')).toBe(promptTokensBefore);
    return r;
  }

  it('a forged contract (wrong key) is 403 contract_invalid', async () => {
    const r = await refusedBeforeAnyCall(gateHeaders(contract(), createDevKeyRing('attacker')));
    expect([r.status, r.body.error.code]).toEqual([403, 'contract_invalid']);
    expect(r.body.error.message).toContain('signature does not verify');
  });

  it('an expired contract is 403 contract_invalid', async () => {
    const past = Date.now() - 120_000;
    const r = await refusedBeforeAnyCall(gateHeaders(contract({ issuedAtMs: past, expiresAtMs: past + 60_000 })));
    expect([r.status, r.body.error.code]).toEqual([403, 'contract_invalid']);
    expect(r.body.error.message).toContain('expired');
  });

  it("another revision's contract is 409 mixed_revision", async () => {
    const r = await refusedBeforeAnyCall(gateHeaders(contract({ fingerprint: '9'.repeat(64) })));
    expect([r.status, r.body.error.code]).toEqual([409, 'mixed_revision']);
    expect(await scrape(D.sidecar)).toContain('kvgate_sidecar_contract_failures_total{reason="fingerprint_mismatch"} 1');
  });

  it('a contract replayed for another request id, or client kv_transfer_params, are refused', async () => {
    const c = contract();
    const replay = await refusedBeforeAnyCall({ ...gateHeaders(c), 'x-request-id': 'someone-else' });
    expect([replay.status, replay.body.error.code]).toEqual([403, 'contract_invalid']);
    const [forgedBody, forgedHeaders] = bound(
      contract(),
      completion({ kv_transfer_params: { do_remote_prefill: true, remote_host: '10.0.0.1' } }),
    );
    const forged = await refusedBeforeAnyCall(forgedHeaders, forgedBody);
    expect([forged.status, forged.body.error.code]).toEqual([400, 'kv_params_forbidden']);
    const none = await refusedBeforeAnyCall({ 'x-request-id': 'r' });
    expect([none.status, none.body.error.code]).toEqual([403, 'contract_invalid']);
  });

  it('a client-chosen media uuid is refused before the prefill leg (a contract does not name its path)', async () => {
    const messages = [{ role: 'user', content: [{ type: 'image_url', image_url: null, uuid: 'sku-1' }] }];
    const [body, headers] = bound(contract(), completion({ messages }));
    const r = await refusedBeforeAnyCall(headers, body);
    expect([r.status, r.body.error.code]).toEqual([400, 'bad_request']);
    expect(r.body.error.message).toContain('messages[0].content[0] names its media by "uuid"');
  });

  it("a media URL the decode sidecar's config does not allow is refused before the prefill leg: neither worker fetches it", async () => {
    const messages = [{ role: 'user', content: [{ type: 'video_url', video_url: { url: 'http://169.254.169.254/latest/' } }] }];
    const [body, headers] = bound(contract(), completion({ messages }));
    const r = await refusedBeforeAnyCall(headers, body);
    expect([r.status, r.body.error.code]).toEqual([400, 'bad_request']);
    expect(r.body.error.message).toMatch(/^messages\[0\]\.content\[0\]\.video_url: its URL names an IP address/);
  });

  it("an attestation whose prompt token count this decode worker's tokenizer does not reproduce is 409 before decode", async () => {
    // Same label, but the worker's tokenizer changed, and the operator opted out of canaries (trust: declared-only):
    // only the attestation can catch it. (With the default, recorded trust, the tokenizer canary refuses it first.)
    const drifted = track(await startTestSim({}, { behaveAs: { tokenizer: { revision: 'tok-b' } } }));
    const d2 = await startTestSidecar(sidecarConfigFor(drifted, 'decode', { trust: 'declared-only' }));
    track(d2.sidecar);
    expect(d2.sidecar.status().verified).toBe(true);
    const c = contractFor(d2.config.fingerprint, endpointOf(P.sidecar.url), { requestId: 'drift-1' });
    d2.spy.reset();
    const r = await postJson(`${d2.sidecar.url}/v1/completions`, ...bound(c, completion()));
    expect([r.status, r.body.error.code]).toEqual([409, 'incompatible_transfer']);
    expect(r.body.error.message).toMatch(
      /^prefill tokenized 19 tokens, this decode worker's tokenizer gives 16: tokenizer or chat template differ/,
    );
    expect(d2.spy.workCalls(drifted.url).map((x) => new URL(x.url).pathname)).toEqual(['/tokenize']);
    expect(await scrape(d2.sidecar)).toContain('kvgate_sidecar_attestation_failures_total{reason="prompt_tokens_mismatch"} 1');
  });
});

describe('requests this worker would refuse never reach the prefill pool', () => {
  // startTestSim's max_model_len, as the sidecars' probes read it from /v1/models.
  const MAX_LEN = 2048;
  /** The request's log lines on D: its outcome and its audit lines. */
  const linesOf = (t: TestSidecar, id: string) => {
    const mine = t.lines.filter((l) => l['request_id'] === id);
    return { outcome: mine.find((l) => l['msg'] === 'request done')?.['outcome'], audits: mine.filter((l) => l['audit'] === 'refusal') };
  };

  const refusedBeforeTheLeg: [string, string, Record<string, unknown>, RegExp][] = [
    [
      'max_tokens beyond max_model_len',
      '/v1/completions',
      completion({ max_tokens: 10_000_000 }),
      /max_tokens \(10000000\) leaves no room/,
    ],
    [
      'max_completion_tokens of max_model_len',
      '/v1/chat/completions',
      chat({ max_completion_tokens: MAX_LEN }),
      /max_completion_tokens \(2048\) leaves no room/,
    ],
    ['a negative max_tokens', '/v1/completions', completion({ max_tokens: -3 }), /max_tokens must be a positive integer/],
    ['a batch of prompts', '/v1/completions', completion({ prompt: [PROMPT, `${PROMPT} again`] }), /send batches as separate requests/],
    [
      'prompt_embeds without a prompt',
      '/v1/completions',
      { model: MODEL, prompt_embeds: 'AAAA', max_tokens: 5 },
      /^prompt_embeds cannot be disaggregated/,
    ],
    // vLLM renders both as separate engine requests, each handed the one kv_transfer_params.
    ['prompt_embeds next to a prompt', '/v1/completions', completion({ prompt_embeds: 'AAAA' }), /^prompt_embeds cannot be disaggregated/],
    ['use_beam_search (completions)', '/v1/completions', completion({ use_beam_search: true }), /^use_beam_search is not served/],
    ['use_beam_search (chat)', '/v1/chat/completions', chat({ use_beam_search: 'true' }), /^use_beam_search is not served/],
    // The decode worker gets the prompt's KV, not its logits: vLLM's decode engine crashes (#50792) or prefills again.
    ['prompt_logprobs 0', '/v1/completions', completion({ prompt_logprobs: 0 }), /^prompt_logprobs 0 asks for prompt logprobs/],
    ['a chat with echo (top_logprobs defaults to 0)', '/v1/chat/completions', chat({ echo: true }), /^echo with top_logprobs 0 asks/],
    // Fields the prefill leg rewrites: the prefill worker would run what the decode worker then refuses.
    ['min_tokens above max_tokens', '/v1/completions', completion({ max_tokens: 5, min_tokens: 6 }), /^min_tokens \(6\) is above/],
    [
      'stream_options without stream',
      '/v1/chat/completions',
      chat({ stream_options: { include_usage: true } }),
      /^stream_options are taken only/,
    ],
    // ... or reads a null there, or a stream_options it cannot parse, where the prefill leg drops or rewrites the field.
    ['min_tokens null', '/v1/chat/completions', chat({ min_tokens: null }), /^min_tokens must be a non-negative integer, or absent/],
    ['n null on completions', '/v1/completions', completion({ n: null }), /^n must be 1 or absent on \/v1\/completions/],
    ['stream_options []', '/v1/chat/completions', chat({ stream_options: [] }), /^stream_options must be an object/],
    [
      'stream_options.include_usage "maybe"',
      '/v1/completions',
      completion({ stream: true, stream_options: { include_usage: 'maybe' } }),
      /^stream_options.include_usage must be true or false$/,
    ],
    ['priority -100', '/v1/completions', completion({ priority: -100 }), /^priority -100 is not taken from a client/],
    // A contract binds the prompt, not the path: a body must not prompt both paths.
    [
      'messages on the completions path',
      '/v1/completions',
      completion({ messages: [{ role: 'user', content: 'another prompt' }] }),
      /^"messages" is a prompt field of the other path/,
    ],
    [
      'prompt on the chat path',
      '/v1/chat/completions',
      chat({ prompt: 'another prompt' }),
      /^"prompt" is a prompt field of the other path/,
    ],
    [
      'truncation_side "middle"',
      '/v1/completions',
      completion({ truncate_prompt_tokens: 4, truncation_side: 'middle' }),
      /truncation_side/,
    ],
    ['truncate_prompt_tokens 0', '/v1/completions', completion({ truncate_prompt_tokens: 0 }), /truncate_prompt_tokens must be/],
    ['truncate_prompt_tokens 2.5', '/v1/completions', completion({ truncate_prompt_tokens: 2.5 }), /truncate_prompt_tokens must be/],
    [
      'truncate_prompt_tokens above max_model_len',
      '/v1/completions',
      completion({ truncate_prompt_tokens: 5000 }),
      /greater than this worker's max_model_len \(2048\)/,
    ],
    [
      'token ids that leave no room for max_tokens',
      '/v1/completions',
      completion({ prompt: Array.from({ length: 2000 }, (_, i) => 100 + (i % 50)), max_tokens: 100 }),
      /the prompt \(2000 tokens\) and max_tokens \(100\) exceed this worker's max_model_len \(2048\)/,
    ],
    [
      // Current vLLM reads a completion's null max_tokens as 16 (normalize_null_max_tokens), not as the room left.
      'token ids that leave no room for max_tokens null (16)',
      '/v1/completions',
      completion({ prompt: Array.from({ length: 2040 }, (_, i) => 100 + (i % 50)), max_tokens: null }),
      /the prompt \(2040 tokens\) and max_tokens \(16\) exceed this worker's max_model_len \(2048\)/,
    ],
    [
      'n 3 (parallel samples would share one transfer)',
      '/v1/completions',
      completion({ n: 3 }),
      /^n is 3: a disaggregated request generates one sequence/,
    ],
  ];
  for (const [name, path, body, message] of refusedBeforeTheLeg) {
    it(`${name}: 400 before the prefill leg, refused with one audit line`, async () => {
      const c = contract();
      D.spy.reset();
      P.spy.reset();
      const r = await postJson(`${D.sidecar.url}${path}`, ...bound(c, body));
      expect([r.status, r.body.error.code]).toEqual([400, 'bad_request']);
      expect(r.body.error.message).toMatch(message);
      expect(D.spy.workCalls(P.sidecar.url)).toEqual([]);
      expect(P.spy.calls).toEqual([]);
      expect(D.spy.workCalls(decodeSim.url)).toEqual([]);
      const { outcome, audits } = linesOf(D, c.requestId);
      expect(outcome).toBe('refused');
      expect(audits).toHaveLength(1);
      expect(audits[0]).toMatchObject({ code: 'bad_request' });
    });
  }

  it('a prompt that leaves no room for max_tokens as this worker counts it: refused before the decode leg', async () => {
    const c = contract();
    D.spy.reset();
    const r = await postJson(`${D.sidecar.url}/v1/completions`, ...bound(c, completion({ max_tokens: MAX_LEN - 8 })));
    expect([r.status, r.body.error.code]).toEqual([400, 'bad_request']);
    expect(r.body.error.message).toMatch(/^the prompt \(\d+ tokens\) and max_tokens \(2040\) exceed this worker's max_model_len \(2048\)/);
    // Counted on the worker, never asked to decode it; the KV the prefill leg left is then handed over in a one-token
    // decode so the prefill worker lets go of it (prefill-release.ts; vLLM 0.11 here).
    const calls = D.spy.workCalls(decodeSim.url);
    expect(calls.map((x) => new URL(x.url).pathname)).toEqual(['/tokenize', '/v1/completions']);
    expect(calls[1]!.body).toMatchObject({ max_tokens: 1, stream: false });
    const { outcome, audits } = linesOf(D, c.requestId);
    expect([outcome, audits.length]).toEqual(['refused', 1]);
  });

  it('a request that fits is still served, its prefill leg running beside the prompt count', async () => {
    const c = contract();
    D.spy.reset();
    const r = await postJson(`${D.sidecar.url}/v1/completions`, ...bound(c, completion({ max_tokens: 4 })));
    expect(r.status).toBe(200);
    expect(D.spy.workCalls(P.sidecar.url)).toHaveLength(1);
    expect(linesOf(D, c.requestId).outcome).toBe('served');
  });
});

describe('refusals are recorded on the sidecar that makes them, once', () => {
  /** The request's outcome line and audit lines on one sidecar. */
  const record = (t: TestSidecar, id: string) => {
    const mine = t.lines.filter((l) => l['request_id'] === id);
    const done = mine.find((l) => l['msg'] === 'request done');
    return {
      outcome: done?.['outcome'],
      code: done?.['code'],
      relayed: done?.['relayed'],
      audits: mine.filter((l) => l['audit'] === 'refusal').length,
    };
  };
  const fault = (t: TestSidecar, url: string, value: string) =>
    t.spy.onNext(
      (u) => u === url,
      (h) => {
        h['x-sim-fault'] = value;
      },
    );

  it('the decode worker refusing the decode leg (400) is a refusal on D with one audit line, not "served"', async () => {
    const c = contract();
    fault(D, `${decodeSim.url}/v1/completions`, 'error=400');
    const r = await postJson(`${D.sidecar.url}/v1/completions`, ...bound(c, completion()));
    expect(r.status).toBe(400);
    expect(r.body.error.message).toContain('Injected fault: HTTP 400');
    expect(record(D, c.requestId)).toEqual({ outcome: 'refused', code: 'bad_request', relayed: undefined, audits: 1 });
    expect(record(P, c.requestId)).toMatchObject({ outcome: 'served', audits: 0 });
  });

  // vLLM answers a request its model validators refuse with the pydantic error, whose `input` is the whole request.
  const quoting = (prompt: string) => ({
    error: { message: `1 validation error: Value error, bad options [type=value_error, input_value={'prompt': '${prompt}'}]`, code: 400 },
  });

  it("the decode worker's refusal is audited without its message: vLLM's quotes the prompt", async () => {
    const c = contract({}, null);
    const body = completion({ prompt: 'Heron-9d2 private prompt text' });
    D.spy.answerNext((u) => u === `${decodeSim.url}/v1/completions`, 400, quoting(String(body.prompt)));
    const r = await postJson(`${D.sidecar.url}/v1/completions`, ...bound(c, body));
    expect(r.status).toBe(400);
    expect(record(D, c.requestId)).toEqual({ outcome: 'refused', code: 'bad_request', relayed: undefined, audits: 1 });
    const audit = D.lines.find((l) => l['request_id'] === c.requestId && l['audit'] === 'refusal')!;
    expect(audit['reason']).toMatch(/^the decode worker refused the request \(HTTP 400\)/);
    expect(D.lines.filter((l) => JSON.stringify(l).includes('Heron-9d2'))).toEqual([]);
  });

  it("a prompt the decode worker's /tokenize refuses is audited without the worker's message: vLLM's quotes the prompt", async () => {
    const c = contract();
    const body = completion({ prompt: 'Heron-9d2 prompt the tokenizer refuses' });
    D.spy.answerNext((u) => u === `${decodeSim.url}/tokenize`, 400, quoting(String(body.prompt)));
    const r = await postJson(`${D.sidecar.url}/v1/completions`, ...bound(c, body));
    expect([r.status, r.body.error.code]).toEqual([400, 'bad_request']);
    expect(record(D, c.requestId)).toEqual({ outcome: 'refused', code: 'bad_request', relayed: undefined, audits: 1 });
    const audit = D.lines.find((l) => l['request_id'] === c.requestId && l['audit'] === 'refusal')!;
    expect(audit['reason']).toMatch(/^this decode worker could not tokenize the prompt \(HTTP 400\)/);
    expect(D.lines.filter((l) => JSON.stringify(l).includes('Heron-9d2'))).toEqual([]);
  });

  it('the decode worker refusing a local request (n: 2) is a refusal on D with one audit line', async () => {
    const c = contract({}, null);
    const r = await postJson(`${D.sidecar.url}/v1/completions`, ...bound(c, completion({ n: 2 })));
    expect(r.status).toBe(400);
    expect(record(D, c.requestId)).toEqual({ outcome: 'refused', code: 'bad_request', relayed: undefined, audits: 1 });
  });

  it('the prefill worker refusing the leg is audited on P; D relays it as refused without a second audit line', async () => {
    const c = contract();
    // (Not n > 1, which the simulator refuses too: the prefill leg always asks for n 1.)
    const r = await postJson(`${D.sidecar.url}/v1/completions`, ...bound(c, completion({ echo: true })));
    expect([r.status, r.body.error.code]).toEqual([400, 'bad_request']);
    expect(r.body.error.message).toMatch(/^the prefill worker refused the request \(HTTP 400\): echo is not supported/);
    expect(record(P, c.requestId)).toEqual({ outcome: 'refused', code: 'bad_request', relayed: undefined, audits: 1 });
    expect(record(D, c.requestId)).toEqual({ outcome: 'refused', code: 'bad_request', relayed: true, audits: 0 });
  });

  it('a prefill sidecar refusing the leg itself (its contract check) is relayed the same way', async () => {
    // Signed for D's group but not P's scope: P refuses 403 tenant_scope_denied and audits it.
    const scoped = await startTestSidecar(sidecarConfigFor(prefillSim, 'prefill', { tenantScopes: ['tenant:other'] }));
    track(scoped.sidecar);
    const c = contract({}, endpointOf(scoped.sidecar.url));
    const r = await postJson(`${D.sidecar.url}/v1/completions`, ...bound(c, completion()));
    expect([r.status, r.body.error.code]).toEqual([403, 'tenant_scope_denied']);
    expect(record(scoped, c.requestId)).toMatchObject({ outcome: 'refused', code: 'tenant_scope_denied', audits: 1 });
    expect(record(D, c.requestId)).toEqual({ outcome: 'refused', code: 'tenant_scope_denied', relayed: true, audits: 0 });
  });

  it('a prompt the decode worker cannot tokenize (its /tokenize answers 400) is refused on D, audited once', async () => {
    let armed = false;
    const D2 = await startTestSidecar(sidecarConfigFor(decodeSim, 'decode'), undefined, (f) => async (url, init) => {
      if (armed && url === `${decodeSim.url}/tokenize`) {
        return new Response(JSON.stringify({ error: { message: 'the prompt is not valid for this tokenizer' } }), { status: 400 });
      }
      return f(url, init);
    });
    track(D2.sidecar);
    armed = true;
    const c = contractFor(D2.config.fingerprint, endpointOf(P.sidecar.url), { requestId: 'tok-400' });
    const r = await postJson(`${D2.sidecar.url}/v1/completions`, ...bound(c, completion()));
    expect([r.status, r.body.error.code]).toEqual([400, 'bad_request']);
    expect(r.body.error.message).toContain('the prompt is not valid for this tokenizer');
    expect(record(D2, 'tok-400')).toEqual({ outcome: 'refused', code: 'bad_request', relayed: undefined, audits: 1 });
  });
});

describe('prefill leg retries', () => {
  it('a prefill worker answering 503 once is retried inside the group and the request succeeds', async () => {
    const expected = await baseline('/v1/completions', completion());
    P.spy.onNext(
      (u) => u === `${prefillSim.url}/v1/completions`,
      (h) => {
        h['x-sim-fault'] = 'error=503';
      },
    );
    D.spy.reset();
    const c = contract();
    const [body, headers] = bound(c, completion());
    const r = await postJson(`${D.sidecar.url}/v1/completions`, body, headers);
    expect(r.status).toBe(200);
    expect(r.body.choices[0].token_ids).toEqual(expected);
    const legs = D.spy.calls.filter((x) => x.url.startsWith(P.sidecar.url));
    expect(legs).toHaveLength(2);
    expect(legs[0]!.headers['x-kvgate-retry-exclude']).toBeUndefined();
    expect(legs[1]!.headers['x-kvgate-retry-exclude']).toBe(endpointOf(P.sidecar.url));
    // Both tries carry the same contract and request id: a retry never leaves the bound group or request.
    const sent = headers['x-kvgate-contract'];
    expect(legs.map((l) => [l.headers['x-kvgate-contract'], l.headers['x-request-id']])).toEqual([
      [sent, c.requestId],
      [sent, c.requestId],
    ]);
    expect(await scrape(D.sidecar)).toContain('kvgate_sidecar_prefill_retries_total{status="503"} 1');
  });

  it('a prefill worker answering 500 is not retried; the client gets a kvgate error with its message', async () => {
    P.spy.onNext(
      (u) => u === `${prefillSim.url}/v1/completions`,
      (h) => {
        h['x-sim-fault'] = 'error=500';
      },
    );
    D.spy.reset();
    const r = await postJson(`${D.sidecar.url}/v1/completions`, ...bound(contract(), completion()));
    expect([r.status, r.body.error.code]).toEqual([502, 'worker_error']);
    expect(r.body.error.message).toContain('Injected fault: HTTP 500');
    expect(D.spy.calls.filter((x) => x.url.startsWith(P.sidecar.url))).toHaveLength(1);
    expect(D.spy.workCalls(decodeSim.url).filter((x) => x.url.endsWith('/v1/completions'))).toEqual([]);
  });

  it('a prefill leg that times out is not retried (the prefill may still be running)', async () => {
    const impatient = await startTestSidecar(
      sidecarConfigFor(decodeSim, 'decode', { prefill: { via: 'direct', maxAttempts: 3, backoffMs: 1, timeoutMs: 150 } }),
    );
    track(impatient.sidecar);
    P.spy.onNext(
      (u) => u === `${prefillSim.url}/v1/completions`,
      (h) => {
        h['x-sim-fault'] = 'slow=600';
      },
    );
    const r = await postJson(
      `${impatient.sidecar.url}/v1/completions`,
      ...bound(contractFor(impatient.config.fingerprint, endpointOf(P.sidecar.url), { requestId: 'slow-p' }), completion()),
    );
    expect([r.status, r.body.error.code]).toEqual([502, 'worker_error']);
    expect(r.body.error.message).toContain('within 150 ms');
    expect(impatient.spy.calls.filter((x) => x.url.startsWith(P.sidecar.url))).toHaveLength(1);
  });

  it('via Envoy (here: straight to the prefill sidecar) a retry names the failed endpoint; exhausted retries keep the code', async () => {
    const viaEnvoy = await startTestSidecar(
      sidecarConfigFor(decodeSim, 'decode', { prefill: { via: { envoy: P.sidecar.url }, maxAttempts: 2, backoffMs: 1 } }),
    );
    track(viaEnvoy.sidecar);
    for (let i = 0; i < 2; i++)
      P.spy.onNext(
        (u) => u === `${prefillSim.url}/v1/chat/completions`,
        (h) => {
          h['x-sim-fault'] = 'error=504';
        },
      );
    const c = contractFor(viaEnvoy.config.fingerprint, '10.9.8.7:8000', { requestId: 'envoy-1' });
    const r = await postJson(`${viaEnvoy.sidecar.url}/v1/chat/completions`, ...bound(c, chat()));
    expect([r.status, r.body.error.code]).toEqual([502, 'worker_error']);
    expect(r.body.error.message).toMatch(/HTTP 504\) after 2 attempts inside the bound group: Injected fault/);
    const legs = viaEnvoy.spy.calls.filter((x) => x.url === `${P.sidecar.url}/v1/chat/completions`);
    expect(legs.map((l) => l.headers['x-kvgate-retry-exclude'])).toEqual([undefined, '10.9.8.7:8000']);
  });
});

describe('transfer failures', () => {
  const failHandshake = (t: TestSidecar) =>
    t.spy.onNext(
      (u) => u === `${decodeSim.url}/v1/completions`,
      (h) => {
        h['x-sim-fault'] = 'handshake-fail';
      },
    );

  it('onTransferFailure fail: a failed KV load before any token is a clean 502, nothing generated', async () => {
    failHandshake(D);
    const r = await postJson(`${D.sidecar.url}/v1/completions`, ...bound(contract(), completion()));
    expect([r.status, r.body.error.code]).toEqual([502, 'worker_error']);
    expect(r.body.error.message).toContain('could not load the prefilled KV');
    expect(await scrape(D.sidecar)).toContain('kvgate_sidecar_transfer_failures_total{action="fail"} 1');
    // Direct mode: the contract names one prefill endpoint, so no second leg runs anywhere else.
    expect(await scrape(D.sidecar)).not.toContain('kvgate_sidecar_prefill_reruns_total{');
  });

  it('onTransferFailure fail: a KV load the decode worker refuses as incompatible is a 409 refusal, audited once here', async () => {
    const c = contract();
    D.spy.answerNext((u) => u === `${decodeSim.url}/v1/completions`, 500, {
      error: { message: 'NIXL compatibility hash mismatch. Local: 1a, Remote: 2b.', code: 500 },
    });
    const r = await postJson(`${D.sidecar.url}/v1/completions`, ...bound(c, completion()));
    expect([r.status, r.body.error.code]).toEqual([409, 'incompatible_transfer']);
    // The gate counts it refused from the answer's x-kvgate-reject-reason and audits nothing: this line is its only one.
    const mine = D.lines.filter((l) => l['request_id'] === c.requestId);
    expect(mine.find((l) => l['msg'] === 'request done')).toMatchObject({ outcome: 'refused', code: 'incompatible_transfer' });
    const audits = mine.filter((l) => 'audit' in l);
    expect(audits).toHaveLength(1);
    expect(audits[0]).toMatchObject({ audit: 'refusal', code: 'incompatible_transfer' });
    // The client gets the engine's words; the audit line names the failure without them.
    expect(r.body.error.message).toContain('NIXL compatibility hash mismatch');
    expect(audits[0]!['reason']).toMatch(/refused to load the prefilled KV as incompatible/);
    expect(audits[0]!['reason']).not.toContain('NIXL compatibility hash mismatch');
  });

  it('onTransferFailure recompute: the same failure is recomputed locally and matches the baseline, streamed too', async () => {
    const R = await startTestSidecar(sidecarConfigFor(decodeSim, 'decode', { onTransferFailure: 'recompute' }));
    track(R.sidecar);
    const expected = await baseline('/v1/completions', completion());
    failHandshake(R);
    const r = await postJson(
      `${R.sidecar.url}/v1/completions`,
      ...bound(contractFor(R.config.fingerprint, endpointOf(P.sidecar.url), { requestId: 'rc-1' }), completion()),
    );
    expect(r.status).toBe(200);
    expect(r.body.choices[0].token_ids).toEqual(expected);
    const retried = R.spy.workCalls(decodeSim.url).filter((x) => x.url.endsWith('/v1/completions'));
    expect(retried.map((x) => 'kv_transfer_params' in (x.body as object))).toEqual([true, false]);
    failHandshake(R);
    const s = await postSse(
      `${R.sidecar.url}/v1/completions`,
      ...bound(contractFor(R.config.fingerprint, endpointOf(P.sidecar.url), { requestId: 'rc-2' }), completion({ stream: true })),
    );
    expect(s.status).toBe(200);
    expect(streamedIds(s.events)).toEqual(expected);
    expect(s.events.some((e) => typeof e === 'object' && 'error' in e)).toBe(false);
    expect(await scrape(R.sidecar)).toContain('kvgate_sidecar_transfer_failures_total{action="recompute"} 2');
  });

  it('a stream that breaks after tokens were sent ends with an SSE error event, never a silent switch', async () => {
    D.spy.onNext(
      (u) => u === `${decodeSim.url}/v1/completions`,
      (h) => {
        h['x-sim-fault'] = 'drop=3';
      },
    );
    const s = await postSse(`${D.sidecar.url}/v1/completions`, ...bound(contract(), completion({ stream: true })));
    expect(s.status).toBe(200);
    expect(streamedIds(s.events).length).toBeGreaterThan(0);
    expect(s.events.at(-2)).toMatchObject({ error: { type: 'kvgate_error', code: 'worker_error' } });
    expect(s.events.at(-1)).toBe('[DONE]');
    expect(await scrape(D.sidecar)).toContain('kvgate_sidecar_transfer_failures_total{action="after_tokens"} 1');
  });
});

describe('a failure vLLM drops from the stream (an empty error output before any token)', () => {
  // vLLM main completions (vllm-project/vllm vllm/entrypoints/openai/completion/serving.py @030ea52e) and 0.13 skip an
  // output with no text and no token ids before checking it for finish_reason "error": a KV load that fails under
  // kv_load_failure_policy fail streams nothing but [DONE] (testbed/sim flavour.ts `errorBeforeOutput`).
  it('is a failure before any token, not an empty success: onTransferFailure recompute recomputes it locally', async () => {
    const mainSim = track(await startTestSim({}, { flavour: 'main', kvLoadFailurePolicy: 'fail' }));
    const R = await startTestSidecar(sidecarConfigFor(mainSim, 'decode', { onTransferFailure: 'recompute' }));
    track(R.sidecar);
    const base = await postJson(`${mainSim.url}/v1/completions`, completion());
    mainSim.resetPrefixCache();
    R.spy.onNext(
      (u) => u === `${mainSim.url}/v1/completions`,
      (h) => {
        h['x-sim-fault'] = 'handshake-fail';
      },
    );
    const s = await postSse(
      `${R.sidecar.url}/v1/completions`,
      ...bound(contractFor(R.config.fingerprint, endpointOf(P.sidecar.url), { requestId: 'drop-1' }), completion({ stream: true })),
    );
    expect(s.status).toBe(200);
    expect(streamedIds(s.events)).toEqual(base.body.choices[0].token_ids);
    expect(await scrape(R.sidecar)).toContain('kvgate_sidecar_transfer_failures_total{action="recompute"} 1');
  });

  it('under onTransferFailure fail it is a clean 502 before any byte, not a 200 with nothing in it', async () => {
    const mainSim = track(await startTestSim({}, { flavour: 'main' }));
    const F = await startTestSidecar(sidecarConfigFor(mainSim, 'decode'));
    track(F.sidecar);
    F.spy.onNext(
      (u) => u === `${mainSim.url}/v1/completions`,
      (h) => {
        h['x-sim-fault'] = 'handshake-fail';
      },
    );
    const r = await postJson(
      `${F.sidecar.url}/v1/completions`,
      ...bound(contractFor(F.config.fingerprint, endpointOf(P.sidecar.url), { requestId: 'drop-2' }), completion({ stream: true })),
    );
    expect([r.status, r.body.error.code]).toEqual([502, 'worker_error']);
    expect(r.body.error.message).toContain('could not load the prefilled KV');
  });
});

describe('the failed-transfer counter around the first output', () => {
  it('under onTransferFailure: recompute a silent recompute is served without waiting, and counted beside the stream', async () => {
    const sim = track(await startTestSim({}, { kvLoadFailurePolicy: 'recompute', transferTimeoutMs: 200 }));
    let armed = false;
    const afterReads: string[] = [];
    const R = await startTestSidecar(
      sidecarConfigFor(sim, 'decode', { onTransferFailure: 'recompute' }),
      undefined,
      (f) => async (url, init) => {
        if (armed && url.startsWith(`${sim.url}/metrics`)) afterReads.push(url);
        return f(url, init);
      },
    );
    track(R.sidecar);
    const expected = await (async () => {
      const r = await postJson(`${sim.url}/v1/completions`, completion());
      sim.resetPrefixCache();
      return r.body.choices[0].token_ids as number[];
    })();
    armed = true;
    prefillSim.setFaults({ transferTimeout: true });
    try {
      const s = await postSse(
        `${R.sidecar.url}/v1/completions`,
        ...bound(contractFor(R.config.fingerprint, endpointOf(P.sidecar.url), { requestId: 'silent-1' }), completion({ stream: true })),
      );
      expect(s.status).toBe(200);
      expect(streamedIds(s.events)).toEqual(expected); // the worker's own prefill: the group's baseline
    } finally {
      prefillSim.setFaults({ reset: true });
    }
    await expect.poll(async () => await scrape(R.sidecar)).toContain('kvgate_sidecar_silent_recomputes_total{result="served"} 1');
    expect(afterReads).toHaveLength(2); // before the transfer, and at its first output
  });

  it('overlapping transfers do not hold their first output for the second read; a rise is still counted as unattributed', async () => {
    const sim = track(await startTestSim({}, { flavour: 'main', latency: { decodeMsPerToken: 5 } }));
    // Counter reads that start once a relay has begun (the reads at first output) wait until released; armed after
    // the startup probe, whose canaries are completions too.
    let armed = false;
    let relaying = false;
    const held: (() => void)[] = [];
    // Both prefill legs wait until both were sent, so each transfer window certainly overlaps the other.
    const legs: (() => void)[] = [];
    const O = await startTestSidecar(
      sidecarConfigFor(sim, 'decode', { probe: { intervalMs: 60_000, timeoutMs: 20_000 } }),
      undefined,
      (f) => {
        return async (url, init) => {
          if (armed && url === `${sim.url}/v1/completions` && init?.method === 'POST') relaying = true;
          if (relaying && url.startsWith(`${sim.url}/metrics?`)) await new Promise<void>((r) => held.push(r));
          if (armed && url.startsWith(P.sidecar.url)) {
            const both = new Promise<void>((r) => legs.push(r));
            if (legs.length === 2) for (const release of legs) release();
            await both;
          }
          return f(url, init);
        };
      },
    );
    track(O.sidecar);
    armed = true;
    const send = (id: string) =>
      postSse(
        `${O.sidecar.url}/v1/completions`,
        ...bound(contractFor(O.config.fingerprint, endpointOf(P.sidecar.url), { requestId: id }), completion({ stream: true })),
      );
    // Sent together, their legs held until both are out: no rise could be pinned on either transfer.
    const [a, b] = await Promise.all([send('ovl-1'), send('ovl-2')]);
    for (const s of [a, b]) {
      expect(s.status).toBe(200);
      expect(streamedIds(s.events).length).toBeGreaterThan(0);
    }
    expect(held.length).toBeGreaterThan(0); // both streams finished while their counter reads were still held
    const c = sim.registry.getSingleMetric('vllm:nixl_num_failed_transfers_total') as Counter<string>;
    c.inc({ model_name: sim.config.sim.servedModelName ?? MODEL, engine: '0' }, 1);
    held.splice(0).forEach((r) => r());
    await expect
      .poll(async () => await scrape(O.sidecar))
      .toMatch(/^kvgate_sidecar_silent_recomputes_total\{result="unattributed"\} [1-9]/m);
  });
});

describe('streaming relay', () => {
  it('passes events on as they arrive, and a client that goes away releases the request', async () => {
    const slowSim = track(await startTestSim({}, { latency: { decodeMsPerToken: 25 } }));
    const S = await startTestSidecar(sidecarConfigFor(slowSim, 'decode'));
    track(S.sidecar);
    const aborter = new AbortController();
    const [body, headers] = bound(
      contractFor(S.config.fingerprint, null, { requestId: 'stream-1' }),
      completion({ stream: true, max_tokens: 100 }),
    );
    const res = await fetch(`${S.sidecar.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
      signal: aborter.signal,
    });
    expect(res.headers.get('content-type')).toBe('text/event-stream');
    const reader = res.body!.getReader();
    const first = new TextDecoder().decode((await reader.read()).value);
    expect(first).toMatch(/^data: \{/);
    // The first event reached us while the worker is still generating 200 tokens: nothing waited for the end.
    expect(S.sidecar.status().inFlight).toBe(1);
    // Past the first output the stream is piped from the worker's socket (relay.ts pipeCommitted): a few more events
    // still come through it.
    for (let i = 0; i < 3; i++) expect(new TextDecoder().decode((await reader.read()).value)).toMatch(/^data: \{/);
    expect(metricValue(await scrape(slowSim), 'vllm:num_requests_running')).toBe(1);
    aborter.abort();
    for (let i = 0; i < 400 && S.sidecar.status().inFlight > 0; i++) await new Promise((r) => setTimeout(r, 5));
    expect(S.sidecar.status().inFlight).toBe(0);
    // ...and the client going away reaches the worker, which stops generating (its connection was closed).
    await expect.poll(async () => metricValue(await scrape(slowSim), 'vllm:num_requests_running')).toBe(0);
  });
});

describe('a 64-bit seed reaches both workers as the client wrote it', () => {
  it('the prefill leg and the decode call carry "seed": 9007199254740993, not the double it parses to', async () => {
    // The raw bodies the decode sidecar sends (the spy's own record parses them, which would round the seed again).
    const sent: { url: string; body: string }[] = [];
    const seeded = track(
      (
        await startTestSidecar(sidecarConfigFor(decodeSim, 'decode'), undefined, (f) => async (url, init) => {
          if (typeof init?.body === 'string') sent.push({ url, body: init.body });
          return f(url, init);
        })
      ).sidecar,
    );
    const c = contractFor(D.config.fingerprint, endpointOf(P.sidecar.url), { requestId: `dec-${++n}` });
    const [body, headers] = bound(c, completion({ seed: 9007199254740992 }));
    const raw = JSON.stringify(body).replace('"seed":9007199254740992', '"seed":9007199254740993');
    expect(raw).toContain('"seed":9007199254740993');
    const r = await postJson(`${seeded.url}/v1/completions`, raw, headers);
    expect(r.status, r.text).toBe(200);
    const leg = sent.find((s) => s.url === `${P.sidecar.url}/v1/completions`);
    const decode = sent.find((s) => s.url === `${decodeSim.url}/v1/completions` && s.body.includes('remote_block_ids'));
    expect(leg?.body).toContain('"seed":9007199254740993');
    expect(decode?.body).toContain('"seed":9007199254740993');
  });

  it("a tool's JSON Schema bounds, a response_format const and vllm_xargs reach both workers' bytes as the client wrote them", async () => {
    // What each simulated worker received, as text (it parses with JSON.parse, which would round these again).
    const received: { worker: 'prefill' | 'decode'; path: string; text: string }[] = [];
    const pSim = track(await startTestSim({}, {}, { onRequestText: (path, text) => received.push({ worker: 'prefill', path, text }) }));
    const dSim = track(await startTestSim({}, {}, { onRequestText: (path, text) => received.push({ worker: 'decode', path, text }) }));
    const pSide = track((await startTestSidecar(sidecarConfigFor(pSim, 'prefill'))).sidecar);
    const decoder = await startTestSidecar(sidecarConfigFor(dSim, 'decode'));
    const dSide = track(decoder.sidecar);
    // The client's text, each "@i" placeholder replaced by an integer literal no double holds.
    const literals = ['18446744073709551615', '12345678901234567891', '-9223372036854775809', '9007199254740993', '1000000000000000000001'];
    const schema = { type: 'integer', maximum: '@0', enum: ['@1', '@2'] };
    let raw = JSON.stringify(
      chat({
        tools: [{ type: 'function', function: { name: 'lookup', parameters: { type: 'object', properties: { id: schema } } } }],
        response_format: { type: 'json_schema', json_schema: { name: 'id', schema: { type: 'integer', const: '@3' } } },
        vllm_xargs: { trace: '@4' },
        cache_salt: TEST_SALT,
      }),
    );
    literals.forEach((literal, i) => {
      raw = raw.replace(`"@${i}"`, literal);
    });
    const c = contractFor(decoder.config.fingerprint, endpointOf(pSide.url), { requestId: `dec-${++n}` });
    const [, headers] = bound(c, JSON.parse(raw) as Record<string, unknown>);
    const r = await postJson(`${dSide.url}/v1/chat/completions`, raw, headers);
    expect(r.status, r.text).toBe(200);
    const text = (worker: 'prefill' | 'decode', path: string): string[] =>
      received.filter((x) => x.worker === worker && x.path === path).map((x) => x.text);
    const [prefillCall] = text('prefill', '/v1/chat/completions');
    const decodeCall = text('decode', '/v1/chat/completions').find((t) => t.includes('remote_block_ids'));
    const tokenize = text('decode', '/tokenize').find((t) => t.includes('"tools"')); // not the probe's canaries
    for (const literal of literals) {
      expect(prefillCall).toContain(literal);
      expect(decodeCall).toContain(literal);
    }
    // The decode side counts the prompt on /tokenize with the same tools the workers render.
    expect(tokenize).toContain('"maximum":18446744073709551615');
    expect(tokenize).toContain('"enum":[12345678901234567891,-9223372036854775809]');
  });
});
