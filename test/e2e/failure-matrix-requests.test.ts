/**
 * Issue 8, what the gate refuses before anything reaches a worker, through the harness running envoy/envoy.yaml with
 * fake upstreams in place of the sidecars: malformed, oversized and non-JSON bodies, wrong content types and paths;
 * and a revision whose KV uses FP8 dynamic per-block scales, which NixlConnector cannot move: served whole by a
 * `role: both` pool, never given a prefill leg, and refused at load when a table splits it into prefill and decode.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify as toYaml } from 'yaml';
import { policyCommand } from '../../src/cli/policy-command.js';
import { verifyContract } from '../../src/contract/contract.js';
import { createDevKeyRing } from '../../src/contract/keys.js';
import { startGate, type RunningGate } from '../../src/gate/gate.js';
import { H } from '../../src/headers.js';
import { fp8DynamicDescriptorInput, testDescriptorInput } from '../../src/policy/testing.js';
import { request, startFakeUpstream, type EnvoyHarness, type FakeUpstream, type HttpResult } from '../../testbed/harness/index.js';
import { silent } from './failure-matrix-support.js';
import { createDevPki } from '../../testbed/tls/dev-pki.js';
import { e2eGateConfig, shippedHarnessFor } from '../support/e2e-gate.js';

const SEED = 'failure-matrix-requests';
const keys = createDevKeyRing(SEED);
const MAX_BODY = 64 * 1024;
const MODEL = 'llama-3-8b';
const FP8_MODEL = 'llama-3-8b-fp8';

let dir: string;
let gate: RunningGate;
let harness: EnvoyHarness;
const up = {} as Record<'aPrefill' | 'aDecode' | 'fp8Both', FakeUpstream>;

/**
 * Revision A split into prefill and decode pools; revision FP8 (dynamic per-block scales) served by one `both` pool.
 * Envoy's shipped clusters are a_prefill, a_decode, b_prefill, b_decode: the both pool uses b_decode.
 */
function routeTable(fp8Split = false): Record<string, unknown> {
  const pool = (name: string, cluster: string, role: string, revision: string, address: string) => ({
    name,
    cluster,
    role,
    revision,
    endpoints: [{ address }],
  });
  return {
    version: 1,
    revisions: { 'llama-a': { descriptor: testDescriptorInput() }, 'llama-fp8': { descriptor: fp8DynamicDescriptorInput() } },
    models: {
      [MODEL]: { tenants: ['acme'], rollout: { stable: 'llama-a' } },
      [FP8_MODEL]: { tenants: ['acme'], rollout: { stable: 'llama-fp8' } },
    },
    pools: [
      pool('a-prefill', 'a_prefill', 'prefill', 'llama-a', up.aPrefill.address),
      pool('a-decode', 'a_decode', 'decode', 'llama-a', up.aDecode.address),
      ...(fp8Split
        ? [
            pool('fp8-prefill', 'b_prefill', 'prefill', 'llama-fp8', '127.0.0.1:1'),
            pool('fp8-decode', 'b_decode', 'decode', 'llama-fp8', up.fp8Both.address),
          ]
        : [pool('fp8-both', 'b_decode', 'both', 'llama-fp8', up.fp8Both.address)]),
    ],
    tenancy: { source: { header: 'x-tenant-id' }, required: true, prefixScope: 'tenant' },
    session: { header: 'x-session-id' },
    fallback: [{ refuse: { retryAfterSeconds: 1 } }],
    limits: { maxBodyBytes: MAX_BODY },
  };
}

beforeAll(async () => {
  up.aPrefill = await startFakeUpstream('a-prefill');
  up.aDecode = await startFakeUpstream('a-decode');
  up.fp8Both = await startFakeUpstream('fp8-both');
  dir = await mkdtemp(path.join(tmpdir(), 'kvgate-matrix-'));
  await writeFile(path.join(dir, 'route-table.yaml'), toYaml(routeTable()));
  const pki = await createDevPki(path.join(dir, 'tls'));
  gate = await startGate(e2eGateConfig(dir, pki, SEED), { logger: silent, keys, registry: new Registry(), defaultMetrics: false });
  harness = await shippedHarnessFor(gate, pki);
});
afterAll(async () => {
  await harness?.close();
  await gate?.close();
  for (const u of Object.values(up)) await u.close();
  await rm(dir, { recursive: true, force: true });
});

const upstreamCalls = () => Object.values(up).reduce((n, u) => n + u.requests.length, 0);

async function send(
  listener: 'public' | 'internal',
  body: string | Buffer,
  headers: Record<string, string> = {},
  opts: { path?: string; method?: string } = {},
): Promise<HttpResult> {
  const r = await request(harness.listeners[listener]!.url, {
    path: opts.path ?? '/v1/completions',
    method: opts.method ?? 'POST',
    headers: { 'content-type': 'application/json', 'x-tenant-id': 'acme', ...headers },
    body,
  });
  if ('error' in r) throw new Error(`reset: ${r.error}`);
  return r;
}

/** A kvgate refusal as Envoy's local reply: status, reason header, JSON body with the code and request id. */
function expectRefusal(r: HttpResult, status: number, code: string, message?: RegExp): void {
  expect([r.status, r.headers[H.rejectReason]], r.body).toEqual([status, code]);
  expect(r.headers['content-type']).toBe('application/json');
  const json = JSON.parse(r.body);
  expect(json.error).toMatchObject({ type: 'kvgate_error', code });
  expect(json.error.request_id).toBe(r.headers[H.requestId]);
  if (message) expect(json.error.message).toMatch(message);
}

describe('bodies the gate refuses before any worker sees them', () => {
  it('malformed, non-JSON, empty, non-UTF-8, array and wrong-type bodies are 400 bad_request, whatever the content type says', async () => {
    const cases: Array<[string, string | Buffer, Record<string, string>, RegExp]> = [
      ['truncated JSON', '{"model": ', {}, /not valid JSON/],
      ['plain text', 'tell me a story', { 'content-type': 'text/plain' }, /not valid JSON/],
      ['a form post', `model=${MODEL}&prompt=hi`, { 'content-type': 'application/x-www-form-urlencoded' }, /not valid JSON/],
      ['empty', '', {}, /has none/],
      ['not UTF-8', Buffer.from([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x7d]), {}, /not valid UTF-8/],
      ['a JSON array', JSON.stringify([{ model: MODEL, prompt: 'hi' }]), {}, /must be a JSON object/],
      ['a JSON string', JSON.stringify('hi'), {}, /must be a JSON object/],
      ['model of the wrong type', JSON.stringify({ model: 42, prompt: 'hi' }), {}, /"model" must be a non-empty string/],
      ['prompt of the wrong type', JSON.stringify({ model: MODEL, prompt: { text: 'hi' } }), {}, /"prompt" must be/],
      ['stream of the wrong type', JSON.stringify({ model: MODEL, prompt: 'hi', stream: 'yes' }), {}, /"stream" must be true or false/],
    ];
    const before = upstreamCalls();
    for (const [what, body, headers, message] of cases) {
      const r = await send('public', body, { 'x-request-id': `bad-${what.replace(/\W+/g, '-')}`, ...headers });
      // The gate's own id, not the client's (which stays in the gate's log as client_request_id).
      expect(r.headers[H.requestId], what).not.toBe(`bad-${what.replace(/\W+/g, '-')}`);
      expectRefusal(r, 400, 'bad_request', message);
    }
    expect(upstreamCalls()).toBe(before);
  });

  it('a path kvgate does not route is 400 bad_request naming the paths it does', async () => {
    const before = upstreamCalls();
    expectRefusal(
      await send('public', JSON.stringify({ model: MODEL, input: 'hi' }), {}, { path: '/v1/embeddings' }),
      400,
      'bad_request',
      /only POST \/v1\/completions and \/v1\/chat\/completions/,
    );
    // A trailing slash too: the sidecars serve the exact paths, so routing it would only be refused there (after a
    // contract was minted for it).
    expectRefusal(
      await send('public', JSON.stringify({ model: MODEL, prompt: 'hi' }), {}, { path: '/v1/completions/' }),
      400,
      'bad_request',
      /not "\/v1\/completions\/"/,
    );
    // And another method than POST with a body: the sidecars serve POST only.
    expectRefusal(
      await send('public', JSON.stringify({ model: MODEL, prompt: 'hi' }), {}, { method: 'PUT' }),
      400,
      'bad_request',
      /not PUT "\/v1\/completions"; send the request as a POST/,
    );
    expect(upstreamCalls()).toBe(before);
  });

  it('a body over limits.maxBodyBytes is 413 body_too_large JSON; over Envoy 1 MiB buffer it is Envoy own 413', async () => {
    const before = upstreamCalls();
    const big = JSON.stringify({ model: MODEL, prompt: 'x'.repeat(MAX_BODY + 10) });
    expectRefusal(await send('public', big), 413, 'body_too_large', new RegExp(`over this gateway's limit of ${MAX_BODY} bytes`));
    const huge = JSON.stringify({ model: MODEL, prompt: 'x'.repeat(1024 * 1024 + 10) });
    const r = await send('public', huge);
    expect([r.status, r.body, r.headers['content-type'], r.headers[H.rejectReason]]).toEqual([
      413,
      'Payload Too Large',
      'text/plain',
      undefined,
    ]);
    expect(harness.accessLog().at(-1)).toMatchObject({
      status: 413,
      responseCodeDetails: 'request_payload_too_large',
      upstreamHost: undefined,
    });
    expect(upstreamCalls()).toBe(before);
  });

  it('a well-formed JSON body routes whatever its content type claims (the gate reads the bytes, not the label)', async () => {
    const before = up.aDecode.requests.length;
    for (const type of ['application/json', 'application/json; charset=utf-8', 'text/plain']) {
      const r = await send('public', JSON.stringify({ model: MODEL, prompt: 'hi' }), { 'content-type': type, 'x-session-id': 's' });
      expect([type, r.status]).toEqual([type, 200]);
    }
    expect(up.aDecode.requests.length).toBe(before + 3);
  });
});

describe('FP8 dynamic per-block scales (KV the connector cannot transfer)', () => {
  it('a revision served by a both pool is routed whole: no prefill leg is stamped, the contract has none', async () => {
    const before = up.fp8Both.requests.length;
    const r = await send('public', JSON.stringify({ model: FP8_MODEL, prompt: 'hi' }), { 'x-session-id': 'fp8' });
    expect(r.status).toBe(200);
    expect(r.headers[H.revision]).toBe('llama-fp8');
    expect(up.fp8Both.requests.length).toBe(before + 1);
    const seen = up.fp8Both.requests.at(-1)!.headers;
    expect(seen[H.decodeCluster]).toBe('b_decode');
    expect(seen[H.decodeEndpoint]).toBe(up.fp8Both.address);
    expect(seen[H.prefillCluster]).toBeUndefined();
    expect(seen[H.prefillEndpoint]).toBeUndefined();
    const contract = verifyContract(String(seen[H.contract]), keys, Date.now(), { requestId: String(seen[H.requestId]) });
    expect(contract.ok && contract.value.prefill).toBe(null);
    // The transferable revision next to it does get a prefill leg: the difference is the connector rule.
    await send('public', JSON.stringify({ model: MODEL, prompt: 'hi' }), { 'x-session-id': 'a' });
    expect(up.aDecode.requests.at(-1)!.headers[H.prefillCluster]).toBe('a_prefill');
  });

  it('a hop that tries to run a prefill leg for it is refused by the gate, whichever cluster it names', async () => {
    await send('public', JSON.stringify({ model: FP8_MODEL, prompt: 'hi' }), { 'x-session-id': 'fp8-hop' });
    const seen = up.fp8Both.requests.at(-1)!.headers;
    const leg = { [H.contract]: String(seen[H.contract]), 'x-request-id': String(seen[H.requestId]) };
    const body = JSON.stringify({ model: FP8_MODEL, prompt: 'hi', max_tokens: 1, kv_transfer_params: { do_remote_decode: true } });
    const before = upstreamCalls();
    // Naming no cluster: the contract has no prefill leg.
    expectRefusal(await send('internal', body, leg), 403, 'contract_invalid', /no prefill leg/);
    // Naming revision A's prefill cluster: another group.
    expectRefusal(await send('internal', body, { ...leg, [H.prefillCluster]: 'a_prefill' }), 409, 'mixed_revision');
    // Naming the revision's own both-pool cluster: its KV still cannot be transferred, so no prefill leg may run.
    const own = await send('internal', body, { ...leg, [H.prefillCluster]: 'b_decode' });
    const routed = harness.accessLog().at(-1)!;
    expect(
      ['contract_invalid', 'incompatible_transfer'],
      `the gate accepted the hop: Envoy routed it to cluster ${String(routed.upstreamCluster)} (${own.status} ${routed.responseCodeDetails})`,
    ).toContain(own.headers[H.rejectReason]);
    expect(own.status).toBe(own.headers[H.rejectReason] === 'contract_invalid' ? 403 : 409);
    expect(upstreamCalls()).toBe(before);
  });

  it('a table that splits it into prefill and decode pools is refused at load: by kvgate policy check and by a reload', async () => {
    const file = path.join(dir, 'fp8-split.yaml');
    await writeFile(file, toYaml(routeTable(true)));
    const out: string[] = [];
    const code = await policyCommand(['check', file], { out: (s) => out.push(s), err: (s) => out.push(s) });
    expect(code).toBe(1);
    const text = out.join('');
    expect(text).toMatch(
      /error: revisions\.llama-fp8\.descriptor: revision "llama-fp8" cannot be disaggregated, but pools fp8-prefill, fp8-decode split it into prefill and decode: .*dynamic per-block/,
    );
    expect(text).toMatch(/Fix: serve revision "llama-fp8" from role: both pools only/);
    // The running gate refuses the same table on reload and keeps routing by the one in use.
    const version = gate.policy.version();
    await writeFile(path.join(dir, 'route-table.yaml'), toYaml(routeTable(true)));
    const reload = await gate.policy.reload('failure matrix: fp8 split');
    expect(reload.ok).toBe(false);
    expect(reload.message).toMatch(/cannot be disaggregated/);
    expect(gate.policy.version()).toBe(version);
    const r = await send('public', JSON.stringify({ model: FP8_MODEL, prompt: 'hi' }), { 'x-session-id': 'fp8-after' });
    expect(r.status).toBe(200);
    expect(up.fp8Both.requests.at(-1)!.headers[H.prefillCluster]).toBeUndefined();
  });
});
