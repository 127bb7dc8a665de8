/**
 * The llm-d P/D sidecar model against fake prefill and decode servers: each case is a behaviour read from
 * llm-d/llm-d-router `pkg/sidecar/proxy` (see pd-sidecar.ts for the commits and files).
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { TOY_PROXY_PREFILL_KV } from '../sim/testing.js';
import { startLlmdSidecar, type LlmdSidecar, type LlmdVersion } from './pd-sidecar.js';

interface Seen {
  path: string;
  body: Record<string, unknown>;
  requestIds: string[];
  prefiller: string | undefined;
}

interface Fake {
  host: string;
  seen: Seen[];
  close(): Promise<void>;
}

/** A server that records each request and answers with the next of `answers` (the last one repeats). */
async function fake(answers: Array<{ status: number; body: unknown }>): Promise<Fake> {
  const seen: Seen[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      seen.push({
        path: req.url ?? '',
        body: JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}') as Record<string, unknown>,
        requestIds: String(req.headers['x-request-id'] ?? '')
          .split(',')
          .map((s) => s.trim()),
        prefiller: req.headers['x-prefiller-host-port'] as string | undefined,
      });
      const a = answers[Math.min(seen.length - 1, answers.length - 1)]!;
      res.writeHead(a.status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(a.body));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    host: `127.0.0.1:${(server.address() as AddressInfo).port}`,
    seen,
    close: () =>
      new Promise<void>((r) => {
        server.close(() => r());
        server.closeAllConnections();
      }),
  };
}

const PREFILLED = { do_remote_prefill: true, do_remote_decode: false, remote_engine_id: 'e1', remote_block_ids: [1] };
const OK_PREFILL = { status: 200, body: { choices: [{ text: 'x' }], kv_transfer_params: PREFILLED } };
const DECODED = { status: 200, body: { choices: [{ text: 'decoded' }] } };

const open: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((s) => s.close()));
});

async function setup(
  prefillAnswers: Array<{ status: number; body: unknown }>,
  opts: { version?: LlmdVersion; prefillMaxRetries?: number } = {},
) {
  const prefill = await fake(prefillAnswers);
  const decoder = await fake([DECODED]);
  const llmd: LlmdSidecar = await startLlmdSidecar({ decoderUrl: `http://${decoder.host}`, prefillRetryBackoffMs: 1, ...opts });
  open.push(prefill, decoder, llmd);
  return { prefill, decoder, llmd };
}

function send(llmd: LlmdSidecar, path: string, body: unknown, prefiller: string): Promise<Response> {
  return fetch(`${llmd.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-request-id': 'gate-id', 'x-prefiller-host-port': prefiller },
    body: JSON.stringify(body),
  });
}

const CHAT = {
  model: 'm',
  messages: [{ role: 'user', content: 'hi' }],
  max_tokens: 7,
  stream: true,
  stream_options: { include_usage: true },
};

describe("llm-d's P/D sidecar, current (llm-d-router @ebab687)", () => {
  it('builds the prefill leg with every cap (min_tokens included) at 1 and hands its kv_transfer_params to decode', async () => {
    const { prefill, decoder, llmd } = await setup([OK_PREFILL]);
    // One header value that is a comma list: split, trimmed, the first taken.
    const r = await send(llmd, '/v1/chat/completions', CHAT, ` ${prefill.host}, 10.0.0.9:8000`);
    expect(r.status).toBe(200);
    expect(prefill.seen).toHaveLength(1);
    const p = prefill.seen[0]!;
    expect(p.body).toEqual({
      model: 'm',
      messages: CHAT.messages,
      max_tokens: 1,
      max_completion_tokens: 1,
      min_tokens: 1,
      stream: false,
      kv_transfer_params: { ...TOY_PROXY_PREFILL_KV },
    });
    expect(p.prefiller).toBeUndefined();
    expect(p.requestIds).toHaveLength(2);
    expect(p.requestIds[0]).toBe('gate-id');
    const d = decoder.seen.at(-1)!;
    expect(d.body).toEqual({ ...CHAT, kv_transfer_params: PREFILLED });
    expect(d.requestIds).toEqual(p.requestIds);
    expect(d.prefiller).toBeUndefined();
  });

  it('relays a 500 from the prefill host to the client and never decodes (no decode-only fallback since #1206)', async () => {
    const { prefill, decoder, llmd } = await setup([{ status: 500, body: { error: 'boom' } }]);
    const r = await send(llmd, '/v1/completions', { model: 'm', prompt: 'p', max_tokens: 4 }, prefill.host);
    expect(r.status).toBe(500);
    expect(await r.json()).toEqual({ error: 'boom' });
    expect(decoder.seen).toHaveLength(0);
    expect(llmd.prefills.map((p) => p.status)).toEqual([500]);
  });

  it('retries 502/503/504 up to prefillMaxRetries, then relays the last answer', async () => {
    const { prefill, decoder, llmd } = await setup([{ status: 503, body: { error: 'busy' } }], { prefillMaxRetries: 2 });
    const r = await send(llmd, '/v1/completions', { model: 'm', prompt: 'p', max_tokens: 4 }, prefill.host);
    expect(r.status).toBe(503);
    expect(prefill.seen).toHaveLength(3);
    expect(decoder.seen).toHaveLength(0);
    // The same request every time: the same added request id, the same body.
    expect(new Set(prefill.seen.map((s) => s.requestIds.join()))).toHaveProperty('size', 1);
  });

  it('a retried 503 that then succeeds goes on to decode; a 500 is not retried', async () => {
    const a = await setup([{ status: 503, body: {} }, OK_PREFILL], { prefillMaxRetries: 1 });
    const r = await send(a.llmd, '/v1/completions', { model: 'm', prompt: 'p' }, a.prefill.host);
    expect(r.status).toBe(200);
    expect(a.prefill.seen).toHaveLength(2);
    expect(a.decoder.seen).toHaveLength(1);
    const b = await setup([{ status: 500, body: {} }, OK_PREFILL], { prefillMaxRetries: 3 });
    expect((await send(b.llmd, '/v1/completions', { model: 'm', prompt: 'p' }, b.prefill.host)).status).toBe(500);
    expect(b.prefill.seen).toHaveLength(1);
  });

  it('an unreachable prefill host is a 502 to the client (ReverseProxy default), not a local decode', async () => {
    const { decoder, llmd } = await setup([OK_PREFILL]);
    const r = await send(llmd, '/v1/completions', { model: 'm', prompt: 'p' }, '127.0.0.1:1');
    expect(r.status).toBe(502);
    expect(decoder.seen).toHaveLength(0);
  });

  it('a prefill answer without kv_transfer_params reaches decode as kv_transfer_params: null', async () => {
    const { prefill, decoder, llmd } = await setup([{ status: 200, body: { choices: [] } }]);
    expect((await send(llmd, '/v1/completions', { model: 'm', prompt: 'p' }, prefill.host)).status).toBe(200);
    const d = decoder.seen[0]!;
    expect(Object.hasOwn(d.body, 'kv_transfer_params')).toBe(true);
    expect(d.body['kv_transfer_params']).toBeNull();
  });

  it('runs the protocol for /v1/messages and /inference/v1/generate (caps in sampling_params)', async () => {
    const { prefill, decoder, llmd } = await setup([OK_PREFILL]);
    await (await send(llmd, '/v1/messages', { model: 'm', messages: [], max_tokens: 9 }, prefill.host)).text();
    await (await send(llmd, '/inference/v1/generate', { token_ids: [1, 2] }, prefill.host)).text();
    expect(prefill.seen.map((s) => s.path)).toEqual(['/v1/messages', '/inference/v1/generate']);
    expect(prefill.seen[1]!.body['sampling_params']).toEqual({ max_tokens: 1, min_tokens: 1 });
    expect(decoder.seen[1]!.body).toEqual({ token_ids: [1, 2], kv_transfer_params: PREFILLED }); // the synthesized map is dropped
  });
});

describe("llm-d's P/D sidecar, @520af478 (before #1206)", () => {
  it('falls back to decode-only with the original body and headers on a 500, and relays 400..451', async () => {
    const a = await setup([{ status: 500, body: {} }], { version: '520af478' });
    const body = { model: 'm', prompt: 'p', max_tokens: 4 };
    expect((await send(a.llmd, '/v1/completions', body, a.prefill.host)).status).toBe(200);
    expect(a.decoder.seen).toHaveLength(1);
    expect(a.decoder.seen[0]!.body).toEqual(body);
    expect(a.decoder.seen[0]!.requestIds).toEqual(['gate-id']);
    const b = await setup([{ status: 403, body: { error: 'no' } }], { version: '520af478' });
    expect((await send(b.llmd, '/v1/completions', body, b.prefill.host)).status).toBe(403);
    expect(b.decoder.seen).toHaveLength(0);
  });

  it('caps max_tokens and max_completion_tokens only, and passes /v1/messages through without a prefill', async () => {
    const { prefill, decoder, llmd } = await setup([OK_PREFILL], { version: '520af478' });
    await (await send(llmd, '/v1/chat/completions', CHAT, prefill.host)).text();
    expect(prefill.seen[0]!.body).not.toHaveProperty('min_tokens');
    expect(prefill.seen[0]!.body).toMatchObject({ max_tokens: 1, max_completion_tokens: 1 });
    await (await send(llmd, '/v1/messages', { model: 'm', messages: [] }, prefill.host)).text();
    expect(prefill.seen).toHaveLength(1);
    expect(decoder.seen.at(-1)!.path).toBe('/v1/messages');
  });
});
