import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { discoverModel, endpointUrl, runVerify, type VerifyOptions } from './run.js';
import type { VerifyPrompt } from './prompts.js';

interface Seen {
  readonly url: string;
  readonly headers: IncomingMessage['headers'];
  readonly body: any;
}
type Handler = (seen: Seen, res: ServerResponse) => void;

const servers: Server[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) {
    s.closeAllConnections();
    await new Promise((r) => s.close(r));
  }
});

/** A fake OpenAI endpoint on 127.0.0.1:0 that records what it was sent. */
async function fake(handler: Handler): Promise<{ url: string; seen: Seen[] }> {
  const seen: Seen[] = [];
  const server = createServer((req, res) => {
    let data = '';
    req.on('data', (c) => (data += c));
    req.on('end', () => {
      const s = { url: req.url ?? '', headers: req.headers, body: data ? JSON.parse(data) : undefined };
      seen.push(s);
      handler(s, res);
    });
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen };
}

/** Ids derived from the prompt text, so equal prompts give equal ids; `shift` changes them from position `at`. */
function idsFor(body: any, shift = 0, at = 0): number[] {
  const seed = JSON.stringify(body.prompt ?? body.messages).length;
  return Array.from({ length: body.max_tokens as number }, (_, i) => seed * 100 + i + (i >= at ? shift : 0));
}

function answer(res: ServerResponse, body: unknown, headers: Record<string, string> = {}, status = 200): void {
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(JSON.stringify(body));
}

const completionBody = (ids: number[], extra: Record<string, unknown> = {}) => ({
  choices: [{ index: 0, text: ids.map((i) => `w${i}`).join(' '), finish_reason: 'length', token_ids: ids, ...extra }],
});

const prompts: VerifyPrompt[] = [
  { id: 'a', kind: 'completion', prompt: 'one' },
  { id: 'b', kind: 'completion', prompt: 'three', maxTokens: 3 },
  { id: 'c', kind: 'chat', messages: [{ role: 'user', content: 'hi' }] },
];

function options(via: string, baseline: string, over: Partial<VerifyOptions> = {}): VerifyOptions {
  return {
    via,
    baseline,
    prompts,
    model: 'm',
    viaHeaders: { 'x-tenant-id': 'acme' },
    baselineHeaders: {},
    maxTokens: 5,
    concurrency: 2,
    timeoutMs: 2000,
    baselineSalt: 'salt-1',
    ...over,
  };
}

const honest: Handler = (s, res) => answer(res, completionBody(idsFor(s.body)), { 'x-kvgate-revision': 'rev-a', 'x-kvgate-group': 'g1' });
const plain: Handler = (s, res) => answer(res, completionBody(idsFor(s.body)));

describe('runVerify', () => {
  it('sends greedy requests with headers to via and a salted request to the baseline, and verifies equal ids', async () => {
    const via = await fake(honest);
    const base = await fake(plain);
    const done: string[] = [];
    const r = await runVerify(options(via.url, `${base.url}/v1/`), { onOutcome: (o, n, total) => done.push(`${o.id} ${n}/${total}`) });
    expect(r.verdict).toMatchObject({ verified: true, exitCode: 0, revisions: ['rev-a'], groups: ['g1'] });
    expect(r.outcomes.map((o) => o.id)).toEqual(['a', 'b', 'c']);
    expect(done).toHaveLength(3);
    expect(done.map((d) => d.split(' ')[1])).toEqual(['1/3', '2/3', '3/3']);
    expect(via.seen.map((s) => s.url).sort()).toEqual(['/v1/chat/completions', '/v1/completions', '/v1/completions']);
    expect(base.seen.map((s) => s.url).sort()).toEqual(['/v1/chat/completions', '/v1/completions', '/v1/completions']);
    for (const s of via.seen) {
      expect(s.headers['x-tenant-id']).toBe('acme');
      expect(s.body).toMatchObject({ model: 'm', temperature: 0, return_token_ids: true, return_tokens_as_token_ids: true });
      expect(s.body).not.toHaveProperty('cache_salt');
    }
    for (const s of base.seen) {
      expect(s.headers['x-tenant-id']).toBeUndefined();
      expect(s.body.cache_salt).toBe('salt-1');
    }
    expect(via.seen.find((s) => s.body.prompt === 'three')?.body.max_tokens).toBe(3);
  });

  it('sends no salt when told not to', async () => {
    const via = await fake(honest);
    const base = await fake(plain);
    await runVerify(options(via.url, base.url, { baselineSalt: null }));
    expect(base.seen.every((s) => !('cache_salt' in s.body))).toBe(true);
  });

  it('finds the first divergent position and reports it with both ids (exit 1)', async () => {
    const via = await fake((s, res) => answer(res, completionBody(idsFor(s.body, 7, 2)), { 'x-kvgate-revision': 'rev-a' }));
    const base = await fake(plain);
    const r = await runVerify(options(via.url, base.url, { prompts: [prompts[0]!] }));
    expect(r.verdict.exitCode).toBe(1);
    const c = r.outcomes[0]!.comparison;
    expect(c).toMatchObject({ kind: 'diverged', position: 2, differing: 3 });
    if (c?.kind === 'diverged') expect(c.via - c.baseline).toBe(7);
  });

  it('refuses to call a run verified when its responses were bound to different revisions', async () => {
    let n = 0;
    const via = await fake((s, res) =>
      answer(res, completionBody(idsFor(s.body)), { 'x-kvgate-revision': n++ % 2 === 0 ? 'rev-a' : 'rev-b' }),
    );
    const base = await fake(plain);
    const r = await runVerify(options(via.url, base.url, { concurrency: 1 }));
    expect(r.verdict.summary.matched).toBe(3);
    expect(r.verdict).toMatchObject({ verified: false, exitCode: 1 });
    expect(r.verdict.reasons.join()).toMatch(/different revisions \(rev-a, rev-b\)/);
  });

  it('fails loudly (exit 3) when the via endpoint returns text without token ids', async () => {
    const via = await fake((_s, res) =>
      answer(res, { choices: [{ index: 0, text: 'Paris is the capital.', finish_reason: 'length', logprobs: null }] }),
    );
    const base = await fake(plain);
    const r = await runVerify(options(via.url, base.url));
    expect(r.verdict).toMatchObject({ verified: false, exitCode: 3 });
    const o = r.outcomes[0]!;
    expect(!o.via.ok && o.via.error).toMatch(/cannot verify from text alone: the endpoint must return token ids/);
  });

  it('reports a kvgate refusal with its reason code, and an unreachable endpoint (exit 3)', async () => {
    const via = await fake((_s, res) =>
      answer(
        res,
        { error: { type: 'kvgate_error', code: 'no_compatible_capacity', message: 'no verified decode capacity for llama-b' } },
        { 'x-kvgate-reject-reason': 'no_compatible_capacity' },
        503,
      ),
    );
    const r = await runVerify(options(via.url, 'http://127.0.0.1:1', { prompts: [prompts[0]!] }));
    const o = r.outcomes[0]!;
    expect(o.via).toMatchObject({ ok: false, status: 503 });
    expect(!o.via.ok && o.via.error).toMatch(/HTTP 503: no_compatible_capacity: no verified decode capacity for llama-b/);
    expect(o.baseline).toMatchObject({ ok: false, status: null });
    expect(!o.baseline.ok && o.baseline.error).toMatch(/^http:\/\/127\.0\.0\.1:1\/v1\/completions: /);
    expect(r.verdict.exitCode).toBe(3);
  });

  it('gives up on an endpoint that does not answer within the timeout', async () => {
    const via = await fake(() => undefined); // never answers
    const base = await fake(plain);
    const r = await runVerify(options(via.url, base.url, { prompts: [prompts[0]!], timeoutMs: 100 }));
    const o = r.outcomes[0]!;
    expect(!o.via.ok && o.via.error).toMatch(/no answer within 100 ms/);
  });

  it('reads ids from logprobs when an older endpoint has no token_ids', async () => {
    const via = await fake((s, res) => {
      const ids = idsFor(s.body);
      answer(res, { choices: [{ index: 0, text: 'x', finish_reason: 'length', logprobs: { tokens: ids.map((i) => `token_id:${i}`) } }] });
    });
    const base = await fake(plain);
    const r = await runVerify(options(via.url, base.url, { prompts: [prompts[1]!] }));
    expect(r.verdict.exitCode).toBe(0);
    expect(r.outcomes[0]!.via.ok && r.outcomes[0]!.via.generated.source).toBe('logprobs');
  });
});

describe('endpointUrl', () => {
  it('accepts a base URL with or without /v1 and trailing slashes', () => {
    expect(endpointUrl('http://h:1', '/v1/completions')).toBe('http://h:1/v1/completions');
    expect(endpointUrl('http://h:1/', '/v1/completions')).toBe('http://h:1/v1/completions');
    expect(endpointUrl('http://h:1/v1/', '/v1/chat/completions')).toBe('http://h:1/v1/chat/completions');
    expect(endpointUrl('http://h:1/prefix', '/v1/models')).toBe('http://h:1/prefix/v1/models');
  });
});

describe('discoverModel', () => {
  it('picks the first base model, skipping adapters', async () => {
    const s = await fake((_s, res) =>
      answer(res, {
        object: 'list',
        data: [
          { id: 'lora-x', parent: 'base' },
          { id: 'base', parent: null },
        ],
      }),
    );
    expect(await discoverModel(s.url, {}, 1000)).toEqual({ ok: true, value: 'base' });
  });

  it('says why it could not tell', async () => {
    const s = await fake((_s, res) => answer(res, { object: 'list', data: [] }));
    expect(await discoverModel(s.url, {}, 1000)).toEqual({ ok: false, error: `${s.url}/v1/models lists no base model` });
    const e = await fake((_s, res) => answer(res, {}, {}, 500));
    expect(await discoverModel(e.url, {}, 1000)).toEqual({ ok: false, error: `${e.url}/v1/models: HTTP 500` });
  });
});
