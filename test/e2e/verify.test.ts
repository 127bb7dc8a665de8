/**
 * `kvgate verify` against the full local topology: the honest disaggregated path through kvgate matches each
 * revision's non-disaggregated baseline token for token, and a wrong A-prefill -> B-decode pairing - which passes
 * vLLM's NIXL handshake and produces fluent text - is caught at its first divergent token.
 */
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runVerifyCommand } from '../../src/cli/verify-command.js';
import { sessionOn } from '../../testbed/demo/scenarios.js';
import { TOY_PROXY_PREFILL_KV } from '../../testbed/sim/testing.js';
import { SERVED_MODEL, startTopology, type RevisionName, type Topology } from '../../testbed/demo/topology.js';

const silent = pino({ level: 'silent' });

const PROMPTS_YAML = `
- The capital of France is
- id: long
  prompt: >-
    Disaggregated serving splits a request in two: a prefill worker computes the KV cache of the whole prompt,
    and a decode worker pulls those blocks and generates from them, one token at a time, for as long as needed.
  max_tokens: 24
- id: chat
  messages:
    - { role: system, content: You are terse. }
    - { role: user, content: Name three prime numbers. }
`;

/** Test support, not product: an HTTP server on 127.0.0.1:0 around one request handler. */
async function serve(
  handler: (body: any, req: IncomingMessage) => Promise<{ status: number; body: string }>,
): Promise<{ url: string; server: Server }> {
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    let data = '';
    req.on('data', (c) => (data += c));
    req.on('end', () => {
      handler(JSON.parse(data), req).then(
        (r) => res.writeHead(r.status, { 'content-type': 'application/json' }).end(r.body),
        (e: unknown) => res.writeHead(502, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { message: String(e) } })),
      );
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server };
}

async function postRaw(url: string, body: unknown, headers: Record<string, string>): Promise<{ status: number; text: string; json: any }> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, text, json: JSON.parse(text) };
}

/**
 * A naive P/D proxy modelled on vLLM's toy_proxy_server.py: it checks nothing. The request goes to revision A's
 * prefill worker with `do_remote_decode` (max_tokens 1, not streamed), then the ORIGINAL request plus the returned
 * `kv_transfer_params` goes to revision B's decode worker. vLLM's NIXL hash has no weights revision, so B's
 * handshake with A passes and B decodes from A's KV.
 */
function naiveProxy(t: Topology): Promise<{ url: string; server: Server }> {
  const p = t.worker('llama-a', 'prefill').sim.url;
  const d = t.worker('llama-b', 'decode').sim.url;
  return serve(async (body, req) => {
    const route = req.url ?? '/v1/completions';
    const requestId = randomUUID();
    const pre = {
      ...body,
      stream: false,
      max_tokens: 1,
      kv_transfer_params: TOY_PROXY_PREFILL_KV,
    };
    delete pre.stream_options;
    const prefill = await postRaw(`${p}${route}`, pre, { 'x-request-id': requestId });
    if (prefill.status !== 200) return { status: prefill.status, body: prefill.text };
    const decode = await postRaw(
      `${d}${route}`,
      { ...body, kv_transfer_params: prefill.json.kv_transfer_params },
      { 'x-request-id': requestId },
    );
    return { status: decode.status, body: decode.text };
  });
}

/** An endpoint that answers with text only (an older server, or a proxy that drops fields it does not know). */
function textOnly(upstream: string): Promise<{ url: string; server: Server }> {
  return serve(async (body, req) => {
    const r = await postRaw(`${upstream}${req.url ?? ''}`, body, {});
    for (const c of r.json.choices ?? []) {
      delete c.token_ids;
      c.logprobs = null;
    }
    return { status: r.status, body: JSON.stringify(r.json) };
  });
}

function capture() {
  const out: string[] = [];
  const err: string[] = [];
  return { out, err, io: { stdout: { write: (s: string) => out.push(s) }, stderr: { write: (s: string) => err.push(s), isTTY: false } } };
}

describe('kvgate verify through the local topology', () => {
  let t: Topology;
  let dir: string;
  let prompts: string;
  const extra: Server[] = [];

  beforeAll(async () => {
    t = await startTopology({ logger: silent });
    dir = await mkdtemp(path.join(tmpdir(), 'kvgate-verify-e2e-'));
    prompts = path.join(dir, 'prompts.yaml');
    await writeFile(prompts, PROMPTS_YAML);
  });
  afterAll(async () => {
    for (const s of extra) {
      s.closeAllConnections();
      await new Promise((r) => s.close(r));
    }
    await t?.close();
    await rm(dir, { recursive: true, force: true });
  });

  async function verifyRevision(revision: RevisionName) {
    const { session } = await sessionOn(t, revision);
    const c = capture();
    const code = await runVerifyCommand(
      [
        '--via',
        t.publicUrl,
        '--baseline',
        t.worker(revision, 'decode').sim.url,
        '--prompts',
        prompts,
        '--model',
        SERVED_MODEL,
        '--header',
        'x-tenant-id=acme',
        '--header',
        `x-session-id=${session}`,
        '--expect-revision',
        revision,
        '--max-tokens',
        '16',
        '--json',
      ],
      c.io,
    );
    return { code, report: JSON.parse(c.out.join('')), stderr: c.err.join('') };
  }

  for (const revision of ['llama-a', 'llama-b'] as const) {
    it(`verifies ${revision} through kvgate against its non-disaggregated decode worker`, async () => {
      const { code, report, stderr } = await verifyRevision(revision);
      expect(report.reasons).toEqual([]);
      expect(code).toBe(0);
      expect(report.verified).toBe(true);
      expect(report.bound.revisions).toEqual([revision]);
      expect(report.bound.groups).toHaveLength(1);
      expect(report.summary).toMatchObject({ prompts: 3, matched: 3, divergent: 0, failed: 0 });
      expect(report.summary.tokensCompared).toBeGreaterThan(20);
      expect(report.prompts.map((p: any) => p.kind)).toEqual(['completion', 'completion', 'chat']);
      expect(stderr).toMatch(/verify: 3\/3 /);
    });
  }

  it('catches an A-prefill -> B-decode pairing forced through a naive P/D proxy, at its first divergent token', async () => {
    const decodeB = t.worker('llama-b', 'decode').sim;
    // Pulled KV enters the decode worker's prefix cache under its own keys, as in vLLM. If B's decode worker already
    // held these prompts' blocks, the naive route would read nothing from A and decode from B's own KV, so the
    // wrong pairing would go unseen; start it from an empty cache. (The baseline side needs no reset: verify sends
    // baseline requests with a fresh cache_salt, so they never read the blocks the naive route pulls in.)
    await decodeB.resetPrefixCache();
    const proxy = await naiveProxy(t);
    extra.push(proxy.server);
    const c = capture();
    const code = await runVerifyCommand(
      ['--via', proxy.url, '--baseline', decodeB.url, '--prompts', prompts, '--model', SERVED_MODEL, '--max-tokens', '16'],
      c.io,
    );
    // Leave no A-computed blocks in B's decode worker for later tests that share this topology.
    await decodeB.resetPrefixCache();
    const text = c.out.join('');
    expect(code).toBe(1);
    expect(text).toMatch(/^p1 +completion +DIVERGED at \d+ +\d+\/\d+ +\(none\) +via \d+ != baseline \d+/m);
    expect(text).toMatch(/^long +completion +DIVERGED at \d+ /m);
    expect(text).toMatch(/^chat +chat +DIVERGED at \d+ /m);
    expect(text).toMatch(/p1: position \d+: /);
    expect(text).toMatch(/NOT VERIFIED: 3 of 3 prompts diverged from the baseline/);
  });

  it('reports the same divergence in --json with the two token ids at the first divergent position', async () => {
    const decodeB = t.worker('llama-b', 'decode').sim;
    await decodeB.resetPrefixCache(); // as above: the naive route must really pull from A
    const proxy = await naiveProxy(t);
    extra.push(proxy.server);
    const c = capture();
    const code = await runVerifyCommand(
      ['--via', proxy.url, '--baseline', decodeB.url, '--prompts', prompts, '--model', SERVED_MODEL, '--json'],
      c.io,
    );
    await decodeB.resetPrefixCache();
    expect(code).toBe(1);
    const report = JSON.parse(c.out.join(''));
    for (const p of report.prompts) {
      expect(p.result).toBe('diverged');
      const { position, via, baseline } = p.comparison;
      expect(p.via.tokenIds.slice(0, position)).toEqual(p.baseline.tokenIds.slice(0, position));
      expect([p.via.tokenIds[position], p.baseline.tokenIds[position]]).toEqual([via, baseline]);
      expect(via).not.toBe(baseline);
    }
  });

  it('keeps its baseline honest after a wrong pairing poisoned the decode worker prefix cache (fresh cache_salt)', async () => {
    const decodeB = t.worker('llama-b', 'decode').sim;
    await decodeB.resetPrefixCache(); // the naive route must really pull A's blocks (see above)
    const proxy = await naiveProxy(t);
    extra.push(proxy.server);
    const naive = capture();
    expect(
      await runVerifyCommand(
        ['--via', proxy.url, '--baseline', decodeB.url, '--prompts', prompts, '--model', SERVED_MODEL, '--max-tokens', '4'],
        naive.io,
      ),
    ).toBe(1);
    // No reset here on purpose: B's decode worker now holds A-computed blocks for these prompts (unsalted keys).
    const { session } = await sessionOn(t, 'llama-b');
    const honest = [
      '--via',
      t.publicUrl,
      '--baseline',
      decodeB.url,
      '--prompts',
      prompts,
      '--model',
      SERVED_MODEL,
      '--header',
      'x-tenant-id=acme',
      '--header',
      `x-session-id=${session}`,
      '--json',
    ];
    const salted = capture();
    expect(await runVerifyCommand(honest, salted.io)).toBe(0);
    // Without a salt the baseline reads the poisoned blocks and is no baseline at all: the honest path "diverges".
    const unsalted = capture();
    expect(await runVerifyCommand([...honest, '--baseline-salt', 'none'], unsalted.io)).toBe(1);
    const long = JSON.parse(unsalted.out.join('')).prompts.find((p: any) => p.id === 'long');
    expect(long.result).toBe('diverged');
    await decodeB.resetPrefixCache();
  });

  it('fails loudly when the via endpoint returns text without token ids', async () => {
    const decodeA = t.worker('llama-a', 'decode').sim;
    const bare = await textOnly(decodeA.url);
    extra.push(bare.server);
    const c = capture();
    const code = await runVerifyCommand(
      ['--via', bare.url, '--baseline', decodeA.url, '--prompts', prompts, '--model', SERVED_MODEL, '--max-tokens', '4'],
      c.io,
    );
    const text = c.out.join('');
    expect(code).toBe(3);
    expect(text).toMatch(/p1: via error: .*cannot verify from text alone: the endpoint must return token ids/);
    expect(text).toMatch(/NOT VERIFIED: 3 of 3 prompts could not be compared/);
    expect(text).not.toMatch(/^VERIFIED/m);
  });
});
