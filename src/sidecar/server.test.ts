/**
 * The sidecar's HTTP shell: status, health, metrics, admission (draining, capacity, body limits) and drain, and the
 * `kvgate sidecar` command's lifecycle (flags in, SIGTERM drains and exits 0).
 */
import { EventEmitter } from 'node:events';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestSim, postJson } from '../../testbed/sim/testing.js';
import type { SimServer } from '../../testbed/sim/server.js';
import { sidecarCommand } from './command.js';
import type { CompatDescriptorInput } from '../compat/descriptor.js';
import {
  bound,
  contractFor,
  gateHeaders,
  runSidecarCommand,
  sidecarConfigFor,
  startTestSidecar,
  TEST_KEYS,
  withRecordedCanaries,
  type TestSidecar,
} from './testing.js';
import { newStatusNonce, verifyStatus } from '../contract/status-signature.js';
import { rawGet } from '../../test/support/raw-http.js';

const MODEL = '/models/acme-llama-3-8b';
let sim: SimServer;
beforeAll(async () => {
  sim = await startTestSim();
});
afterAll(async () => {
  await sim.close();
});

const slowNext = (t: TestSidecar, ms: number) =>
  t.spy.onNext(
    (u) => u === `${sim.url}/v1/completions`,
    (h) => {
      h['x-sim-fault'] = `slow=${ms}`;
    },
  );

async function until(cond: () => boolean): Promise<void> {
  for (let i = 0; i < 500 && !cond(); i++) await new Promise((r) => setTimeout(r, 5));
  expect(cond()).toBe(true);
}

describe('status, health and metrics', () => {
  let t: TestSidecar;
  // The sidecar's clock is frozen here, so contracts are stamped with the same instant: a busy machine must not
  // make them "not yet valid" or expired.
  const fixedNow = Date.now();
  beforeAll(async () => {
    t = await startTestSidecar(sidecarConfigFor(sim, 'decode', { tenantScopes: ['tenant:acme'] }), () => fixedNow);
  });
  afterAll(async () => {
    await t.sidecar.close();
  });

  it('serves the status document the gate discovers', async () => {
    const s = (await (await fetch(`${t.sidecar.url}/kvgate/v1/status`)).json()) as Record<string, unknown>;
    expect(s).toMatchObject({
      role: 'decode',
      fingerprint: t.config.fingerprint,
      verified: true,
      reasons: [],
      draining: false,
      inFlight: 0,
      capacity: { maxInFlight: 256, available: 256 },
      nixlHash: { hash: sim.compatibilityHash, status: 'known' },
      connector: { verdict: 'ok' },
      engineId: null,
      tenantScopes: ['tenant:acme'],
      checkedAtMs: fixedNow,
    });
    expect((s['descriptor'] as { model: { revision: string } }).model.revision).toBe('rev-a');
    expect(s['declaredOnly']).toContain('architecture.attentionBackend');
  });

  it("signs its status for the gate's nonce over the exact bytes sent; without a nonce the same JSON comes unsigned", async () => {
    const nonce = newStatusNonce();
    const polled = await fetch(`${t.sidecar.url}/kvgate/v1/status`, { headers: { 'x-kvgate-status-nonce': nonce } });
    const bytes = Buffer.from(await polled.arrayBuffer());
    const header = polled.headers.get('x-kvgate-status-signature');
    expect(header).toMatch(/^dev-insecure\.[A-Za-z0-9_-]{43}$/);
    expect(verifyStatus(TEST_KEYS, nonce, bytes, header)).toEqual({ ok: true, value: { keyId: 'dev-insecure' } });
    expect(verifyStatus(TEST_KEYS, newStatusNonce(), bytes, header).ok).toBe(false); // bound to this poll
    const plain = await fetch(`${t.sidecar.url}/kvgate/v1/status`);
    expect(plain.headers.get('x-kvgate-status-signature')).toBeNull();
    const { requests: _a, ...signedDoc } = JSON.parse(bytes.toString('utf8')) as Record<string, unknown>;
    const { requests: _b, ...plainDoc } = (await plain.json()) as Record<string, unknown>;
    expect(plainDoc).toEqual(signedDoc);
  });

  it('refuses the Responses API with 400, one audit line and a counted refusal', async () => {
    const r = await fetch(`${t.sidecar.url}/v1/responses`, { method: 'POST', body: '{}', headers: { 'x-request-id': 'resp-1' } });
    expect([r.status, r.headers.get('x-kvgate-reject-reason')]).toEqual([400, 'bad_request']);
    const audits = t.lines.filter((l) => l['audit'] === 'refusal' && l['request_id'] === 'resp-1');
    expect(audits).toHaveLength(1);
    expect(audits[0]).toMatchObject({ code: 'bad_request', role: 'decode', tenant: null });
    expect(String(audits[0]!['reason'])).toContain('POST /v1/responses');
    const metrics = await (await fetch(`${t.sidecar.url}/metrics`)).text();
    expect(metrics).toContain('kvgate_sidecar_requests_total{role="decode",outcome="refused",code="bad_request"} 1');
  });

  it('refuses a malformed status nonce with 400 and one audit line, signing nothing', async () => {
    const r = await fetch(`${t.sidecar.url}/kvgate/v1/status`, {
      headers: { 'x-kvgate-status-nonce': 'short', 'x-request-id': 'nonce-1' },
    });
    expect([r.status, r.headers.get('x-kvgate-reject-reason'), r.headers.get('x-kvgate-status-signature')]).toEqual([
      400,
      'bad_request',
      null,
    ]);
    expect(((await r.json()) as { error: { message: string } }).error.message).toContain('x-kvgate-status-nonce must be 16 random bytes');
    const audits = t.lines.filter((l) => l['audit'] === 'refusal' && l['request_id'] === 'nonce-1');
    expect(audits).toHaveLength(1);
    expect(audits[0]).toMatchObject({ code: 'bad_request', path: '/kvgate/v1/status' });
  });

  it('refuses HTTP the parser rejects (TE with Content-Length, two lengths, a folded header) with 400 and one audit line each; nothing pipelined behind is served', async () => {
    const raw = (text: string): Promise<string> =>
      new Promise((resolve, reject) => {
        const { port } = new URL(t.sidecar.url);
        const socket = net.connect(Number(port), '127.0.0.1', () => socket.end(text));
        let out = '';
        socket.on('data', (d: Buffer) => (out += d.toString()));
        socket.on('close', () => resolve(out));
        socket.on('error', reject);
      });
    const before = t.lines.filter((l) => l['audit'] === 'refusal').length;
    const smuggled = 'GET /kvgate/v1/status HTTP/1.1\r\nHost: x\r\n\r\n';
    const attempts = [
      `POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n${smuggled}`,
      `POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nContent-Length: 40\r\n\r\nabcd${smuggled}`,
      `POST /v1/completions HTTP/1.1\r\nHost: x\r\nx-kvgate-contract: a\r\n b\r\nContent-Length: 0\r\n\r\n${smuggled}`,
    ];
    for (const a of attempts) {
      const answer = await raw(a);
      expect(answer.split('\r\n')[0], a).toBe('HTTP/1.1 400 Bad Request');
      expect(answer, a).not.toContain('"fingerprint"'); // the smuggled status request was never answered
    }
    const audits = t.lines.filter((l) => l['audit'] === 'refusal').slice(before);
    expect(audits).toHaveLength(attempts.length);
    for (const line of audits) {
      expect(line).toMatchObject({ code: 'bad_request', role: 'decode', tenant: null, remote: '127.0.0.1' });
      expect(String(line['reason'])).toMatch(/^the request is not valid HTTP\/1\.1 \(HPE_[A-Z_]+\)/);
    }
  });

  it('refuses a method or path it does not serve for requests (POST /v1/embeddings, PUT or GET /v1/completions, a trailing slash) with 400 and one audit line each', async () => {
    const before = t.lines.filter((l) => l['audit'] === 'refusal').length;
    const probes: [string, string][] = [
      ['POST', '/v1/embeddings'],
      ['PUT', '/v1/completions'],
      ['GET', '/v1/chat/completions'],
      ['POST', '/v1/completions/'],
      ['DELETE', `/${'x'.repeat(3000)}`],
    ];
    for (const [method, p] of probes) {
      const r = await fetch(`${t.sidecar.url}${p}`, { method, headers: { 'x-request-id': `probe-${method}` } });
      expect([r.status, r.headers.get('x-kvgate-reject-reason')], `${method} ${p}`).toEqual([400, 'bad_request']);
    }
    const audits = t.lines.filter((l) => l['audit'] === 'refusal').slice(before);
    expect(audits.map((l) => [l['code'], l['path'] === undefined ? undefined : String(l['path']).length <= 129])).toEqual(
      probes.map(() => ['bad_request', true]),
    );
    expect(String(audits[0]!['reason'])).toContain('POST "/v1/embeddings"');
    expect(String(audits[4]!['reason']).length).toBeLessThan(400);
  });

  it('answers unknown routes with 404, oversized and malformed bodies with kvgate errors', async () => {
    expect((await fetch(`${t.sidecar.url}/no/such/page`)).status).toBe(404);
    const c = contractFor(t.config.fingerprint, null, {}, fixedNow);
    const bad = await postJson(`${t.sidecar.url}/v1/completions`, '{not json', gateHeaders(c));
    expect([bad.status, bad.body.error.code]).toEqual([400, 'bad_request']);
    const big = await postJson(`${t.sidecar.url}/v1/completions`, ...bound(c, { model: MODEL, prompt: 'x'.repeat(9 * 1024 * 1024) }));
    expect([big.status, big.body.error.code]).toEqual([413, 'body_too_large']);
    const scope = await postJson(
      `${t.sidecar.url}/v1/completions`,
      ...bound(contractFor(t.config.fingerprint, null, { tenantScope: 'tenant:other' }, fixedNow), { model: MODEL, prompt: 'x' }),
    );
    expect([scope.status, scope.body.error.code]).toEqual([403, 'tenant_scope_denied']);
    const metrics = await (await fetch(`${t.sidecar.url}/metrics`)).text();
    expect(metrics).toContain('kvgate_sidecar_requests_total{role="decode",outcome="refused",code="body_too_large"} 1');
    expect(metrics).toContain('kvgate_sidecar_contract_failures_total{reason="tenant_scope"} 1');
  });
});

describe('admission and drain', () => {
  it('drain: the in-flight request completes, new ones are refused with 503 draining', async () => {
    const t = await startTestSidecar(sidecarConfigFor(sim, 'decode', { drainAnnounceMs: 0 }));
    try {
      slowNext(t, 1000);
      const first = postJson(
        `${t.sidecar.url}/v1/completions`,
        ...bound(contractFor(t.config.fingerprint, null, { requestId: 'slow' }), { model: MODEL, prompt: 'slow one', max_tokens: 4 }),
      );
      await until(() => t.sidecar.status().inFlight === 1);
      let drained = false;
      const draining = t.sidecar.drain().then(() => {
        drained = true;
      });
      const late = await postJson(
        `${t.sidecar.url}/v1/completions`,
        ...bound(contractFor(t.config.fingerprint, null, { requestId: 'late' }), { model: MODEL, prompt: 'late' }),
      );
      expect([late.status, late.body.error.code]).toEqual([503, 'draining']);
      expect((await fetch(`${t.sidecar.url}/healthz`)).status).toBe(503);
      expect(drained).toBe(false);
      const done = await first;
      expect(done.status).toBe(200);
      expect(done.body.choices[0].text.length).toBeGreaterThan(0);
      await draining;
      expect(t.sidecar.status()).toMatchObject({ draining: true, inFlight: 0 });
    } finally {
      await t.sidecar.close();
    }
  });

  it('announces a drain first: draining and not ready at once, admitting for drainAnnounceMs, then refusing', async () => {
    const t = await startTestSidecar(sidecarConfigFor(sim, 'decode', { drainAnnounceMs: 400 }));
    try {
      let drained = false;
      const draining = t.sidecar.drain().then(() => {
        drained = true;
      });
      // What the gate polls says draining at once, and when new requests will start being refused.
      const s = (await (await fetch(`${t.sidecar.url}/kvgate/v1/status`)).json()) as Record<string, unknown>;
      expect(s['draining']).toBe(true);
      expect(typeof s['drainAdmitsUntilMs']).toBe('number');
      expect((await fetch(`${t.sidecar.url}/healthz`)).status).toBe(503);
      // A request the gate routed before it saw the drain is still served.
      const routedBefore = await postJson(
        `${t.sidecar.url}/v1/completions`,
        ...bound(contractFor(t.config.fingerprint, null, { requestId: 'in-window' }), { model: MODEL, prompt: 'x', max_tokens: 1 }),
      );
      expect(routedBefore.status).toBe(200);
      // Nothing in flight, but the window is still open: the drain is not over yet (SIGTERM must not exit).
      expect(drained).toBe(false);
      await draining;
      expect(t.sidecar.status()).toMatchObject({ draining: true, drainAdmitsUntilMs: null, inFlight: 0 });
      const late = await postJson(
        `${t.sidecar.url}/v1/completions`,
        ...bound(contractFor(t.config.fingerprint, null, { requestId: 'after-window' }), { model: MODEL, prompt: 'x', max_tokens: 1 }),
      );
      expect([late.status, late.body.error.code]).toEqual([503, 'draining']);
    } finally {
      await t.sidecar.close();
    }
  });

  it('an undrain inside the announce window ends the drain: not draining, ready, and the drain promise settles', async () => {
    const t = await startTestSidecar(sidecarConfigFor(sim, 'decode', { drainAnnounceMs: 20_000 }));
    try {
      const draining = t.sidecar.drain();
      expect(t.sidecar.status()).toMatchObject({ draining: true });
      const u = await fetch(`${t.sidecar.adminUrl}/kvgate/v1/undrain`, { method: 'POST' });
      expect(u.status).toBe(200);
      expect(t.sidecar.status()).toMatchObject({ draining: false, drainAdmitsUntilMs: null });
      expect((await fetch(`${t.sidecar.url}/healthz`)).status).toBe(200);
      await draining; // nothing in flight and no window left: settles at once, not after 20 s
    } finally {
      await t.sidecar.close();
    }
  });

  it('undrain on the admin port admits work again; the metrics port serves /metrics and nothing else', async () => {
    const t = await startTestSidecar(sidecarConfigFor(sim, 'decode', { drainAnnounceMs: 0 }));
    try {
      expect((await fetch(`${t.sidecar.adminUrl}/kvgate/v1/drain`, { method: 'POST' })).status).toBe(202);
      const refused = await postJson(
        `${t.sidecar.url}/v1/completions`,
        ...bound(contractFor(t.config.fingerprint, null, { requestId: 'u1' }), { model: MODEL, prompt: 'x', max_tokens: 1 }),
      );
      expect([refused.status, refused.body.error.code]).toEqual([503, 'draining']);
      expect((await fetch(`${t.sidecar.url}/kvgate/v1/undrain`, { method: 'POST' })).status).toBe(400);
      const u = await fetch(`${t.sidecar.adminUrl}/kvgate/v1/undrain`, { method: 'POST' });
      expect([u.status, await u.json()]).toEqual([200, { draining: false, inFlight: 0 }]);
      const served = await postJson(
        `${t.sidecar.url}/v1/completions`,
        ...bound(contractFor(t.config.fingerprint, null, { requestId: 'u2' }), { model: MODEL, prompt: 'x', max_tokens: 1 }),
      );
      expect(served.status).toBe(200);
      expect(await (await fetch(`${t.sidecar.metricsUrl}/metrics`)).text()).toContain('kvgate_sidecar_draining 0');
      for (const p of ['/v1/completions', '/kvgate/v1/status', '/kvgate/v1/drain']) {
        expect((await fetch(`${t.sidecar.metricsUrl}${p}`, { method: p === '/kvgate/v1/status' ? 'GET' : 'POST' })).status).toBe(404);
      }
    } finally {
      await t.sidecar.close();
    }
  });

  it('closes a connection that sends no request (Node closes none: headersTimeout starts at the first byte)', async () => {
    // An in-mesh workload that reaches the port could otherwise hold any number of silent sockets, until the sidecar has
    // no file descriptor left for Envoy's connections or its own worker.
    const t = await startTestSidecar(sidecarConfigFor(sim, 'decode'), undefined, undefined, { firstRequestTimeoutMs: 100 });
    try {
      const port = Number(new URL(t.sidecar.url).port);
      const silent = net.connect(port, '127.0.0.1');
      const closed = await new Promise<boolean>((resolve) => {
        silent.on('close', () => resolve(true));
        silent.on('error', () => undefined);
      });
      expect(closed).toBe(true);
      // A connection that sends its request is served as before (its timer stops at the request).
      const answer = await rawGet(port, '/healthz');
      expect(answer).toMatch(/^HTTP\/1\.1 200 /);
    } finally {
      await t.sidecar.close();
    }
  });

  it('a replay guard full of live contracts forgets the soonest-expiring one and counts it', async () => {
    const t = await startTestSidecar(sidecarConfigFor(sim, 'decode'), undefined, undefined, { replayGuardMaxEntries: 1 });
    try {
      for (const [id, ttl] of [
        ['long', 60_000],
        ['short', 20_000],
      ] as const) {
        const now = Date.now();
        const r = await postJson(
          `${t.sidecar.url}/v1/completions`,
          ...bound(contractFor(t.config.fingerprint, null, { requestId: id, issuedAtMs: now, expiresAtMs: now + ttl }), {
            model: MODEL,
            prompt: 'x',
            max_tokens: 1,
          }),
        );
        expect(r.status, id).toBe(200);
      }
      const metrics = await t.registry.metrics();
      expect(metrics).toContain('kvgate_sidecar_replay_guard_evictions_total 1');
    } finally {
      await t.sidecar.close();
    }
  });

  it('refuses a non-loopback admin address in its config', async () => {
    await expect(sidecarConfigFor(sim, 'decode', { admin: '0.0.0.0:9092' })).rejects.toThrow(/loopback/);
  });

  it('POST /kvgate/v1/drain starts a drain; a full sidecar answers 429 with retry-after', async () => {
    const t = await startTestSidecar(sidecarConfigFor(sim, 'decode', { maxInFlight: 1, drainAnnounceMs: 0 }));
    try {
      slowNext(t, 800);
      const first = postJson(
        `${t.sidecar.url}/v1/completions`,
        ...bound(contractFor(t.config.fingerprint, null, { requestId: 'a' }), { model: MODEL, prompt: 'one', max_tokens: 2 }),
      );
      await until(() => t.sidecar.status().inFlight === 1);
      const res = await fetch(`${t.sidecar.url}/v1/completions`, {
        method: 'POST',
        headers: gateHeaders(contractFor(t.config.fingerprint, null, { requestId: 'b' })),
        body: '{}',
      });
      expect([res.status, res.headers.get('retry-after'), res.headers.get('x-kvgate-reject-reason')]).toEqual([429, '1', 'queue_full']);
      // Not on the request port: whoever reaches it must not take the worker out of service (400, audited).
      const refused = await fetch(`${t.sidecar.url}/kvgate/v1/drain`, { method: 'POST' });
      expect([refused.status, ((await refused.json()) as { error: { code: string } }).error.code]).toEqual([400, 'bad_request']);
      expect(t.sidecar.status().draining).toBe(false);
      expect(t.lines.filter((l) => l['audit'] === 'refusal' && String(l['reason']).includes('loopback admin port'))).toHaveLength(1);
      const d = await fetch(`${t.sidecar.adminUrl}/kvgate/v1/drain`, { method: 'POST' });
      expect([d.status, await d.json()]).toEqual([202, { draining: true, inFlight: 1, drainAdmitsUntilMs: null }]);
      expect((await first).status).toBe(200);
      expect(t.sidecar.status().draining).toBe(true);
    } finally {
      await t.sidecar.close();
    }
  });
});

/** A raw connection that sends `head` and the first chunk of a chunked body, and never ends it; collects what comes back. */
async function trickle(url: string, head: string): Promise<{ socket: net.Socket; answer: () => string; closed: Promise<void> }> {
  const { port } = new URL(url);
  const socket = net.connect(Number(port), '127.0.0.1');
  let answer = '';
  socket.on('data', (d: Buffer) => (answer += d.toString('utf8')));
  socket.on('error', () => undefined);
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  await new Promise((r) => socket.once('connect', r));
  socket.write(
    `POST /v1/completions HTTP/1.1\r\nhost: x\r\n${head}content-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n1\r\n{\r\n`,
  );
  return { socket, answer: () => answer, closed };
}

describe("requests that are not the gate's hold no admission slot", () => {
  it("bodies without a contract that never end are refused from their headers: no slot, no listed id, the gate's request is served", async () => {
    const t = await startTestSidecar(sidecarConfigFor(sim, 'decode', { maxInFlight: 4 }));
    const open: net.Socket[] = [];
    try {
      for (let i = 0; i < 4; i++) {
        const c = await trickle(t.sidecar.url, `x-request-id: junk-${i}\r\n`);
        open.push(c.socket);
        await until(() => c.answer().includes('\r\n\r\n'));
        expect(c.answer()).toMatch(/^HTTP\/1\.1 403 /);
        expect(c.answer()).toContain('x-kvgate-reject-reason: contract_invalid');
      }
      const s = t.sidecar.status();
      expect(s.inFlight).toBe(0);
      expect([...s.requests.inFlight, ...s.requests.received].filter((id) => id.startsWith('junk-'))).toEqual([]);
      expect(t.lines.filter((l) => l['audit'] === 'refusal' && l['code'] === 'contract_invalid')).toHaveLength(4);
      const r = await postJson(
        `${t.sidecar.url}/v1/completions`,
        ...bound(contractFor(t.config.fingerprint, null, { requestId: 'legit-1' }), { model: MODEL, prompt: 'hello there', max_tokens: 2 }),
      );
      expect(r.status).toBe(200);
      expect(t.sidecar.status().requests.received).toContain('legit-1');
    } finally {
      for (const s of open) s.destroy();
      await t.sidecar.close();
    }
  });

  it('one captured contract replayed with bodies that never end holds one slot at most: the copies are refused from their headers', async () => {
    const t = await startTestSidecar(sidecarConfigFor(sim, 'decode', { maxInFlight: 4 }));
    const open: net.Socket[] = [];
    try {
      const head = Object.entries(gateHeaders(contractFor(t.config.fingerprint, null, { requestId: 'captured' })))
        .map(([k, v]) => `${k}: ${v}\r\n`)
        .join('');
      const first = await trickle(t.sidecar.url, head);
      open.push(first.socket);
      await until(() => t.sidecar.status().inFlight === 1);
      for (let i = 0; i < 3; i++) {
        const c = await trickle(t.sidecar.url, head);
        open.push(c.socket);
        await until(() => c.answer().includes('\r\n\r\n'));
        expect(c.answer()).toMatch(/^HTTP\/1\.1 403 /);
        expect(c.answer()).toContain('x-kvgate-reject-reason: contract_invalid');
      }
      expect(t.sidecar.status().inFlight).toBe(1);
      expect(t.lines.filter((l) => l['audit'] === 'refusal' && String(l['reason']).includes('already admitted'))).toHaveLength(3);
      const r = await postJson(
        `${t.sidecar.url}/v1/completions`,
        ...bound(contractFor(t.config.fingerprint, null, { requestId: 'legit-2' }), { model: MODEL, prompt: 'hello there', max_tokens: 2 }),
      );
      expect(r.status).toBe(200);
    } finally {
      for (const s of open) s.destroy();
      await t.sidecar.close();
    }
  });

  it('a contract naming another decode endpoint is refused from its headers: no slot, no listed id', async () => {
    const t = await startTestSidecar(sidecarConfigFor(sim, 'decode', { maxInFlight: 1, advertise: '10.0.0.1:9090' }));
    const open: net.Socket[] = [];
    try {
      const c0 = contractFor(t.config.fingerprint, null, {
        requestId: 'elsewhere',
        decode: { cluster: 'decode-a', endpoint: '10.0.0.2:9090' },
      });
      const head = Object.entries(gateHeaders(c0))
        .map(([k, v]) => `${k}: ${v}\r\n`)
        .join('');
      const c = await trickle(t.sidecar.url, head);
      open.push(c.socket);
      await until(() => c.answer().includes('\r\n\r\n'));
      expect(c.answer()).toMatch(/^HTTP\/1\.1 403 /);
      expect(c.answer()).toContain('not to this worker');
      expect(t.sidecar.status().inFlight).toBe(0);
      expect(t.sidecar.status().requests.received).not.toContain('elsewhere');
    } finally {
      for (const s of open) s.destroy();
      await t.sidecar.close();
    }
  });

  it('a contracted body that does not arrive within bodyTimeoutMs is refused 408 with an audit line, and its slot freed', async () => {
    const t = await startTestSidecar(sidecarConfigFor(sim, 'decode', { maxInFlight: 1, bodyTimeoutMs: 300 }));
    try {
      const headers = gateHeaders(contractFor(t.config.fingerprint, null, { requestId: 'slow-body' }));
      const head = Object.entries(headers)
        .map(([k, v]) => `${k}: ${v}\r\n`)
        .join('');
      const c = await trickle(t.sidecar.url, head);
      await until(() => t.sidecar.status().inFlight === 1);
      expect(t.sidecar.status().requests.inFlight).toEqual(['slow-body']);
      await c.closed; // the sidecar ends the connection with its answer
      expect(c.answer()).toMatch(/^HTTP\/1\.1 408 /);
      expect(c.answer()).toContain('bodyTimeoutMs');
      expect(t.sidecar.status().inFlight).toBe(0);
      const audit = t.lines.filter((l) => l['audit'] === 'refusal');
      expect(audit).toHaveLength(1);
      expect(audit[0]).toMatchObject({ request_id: 'slow-body', code: 'bad_request', tenant: 'acme' });
      expect(String(audit[0]!['reason'])).toContain('did not arrive within 300 ms');
      const r = await postJson(
        `${t.sidecar.url}/v1/completions`,
        ...bound(contractFor(t.config.fingerprint, null, { requestId: 'after-slow' }), { model: MODEL, prompt: 'hello', max_tokens: 1 }),
      );
      expect(r.status).toBe(200);
    } finally {
      await t.sidecar.close();
    }
  });

  it('a contract claimed from its headers and refused before any work (full, a body it does not bind) is released; one served is not', async () => {
    // The claim now happens before admission and before the body: a refusal there must give the contract back, or an
    // Envoy retry of a 429/503 (or of a garbled body) to this worker would be refused as a replay.
    const t = await startTestSidecar(sidecarConfigFor(sim, 'decode', { maxInFlight: 1 }));
    const open: net.Socket[] = [];
    try {
      const holder = await trickle(
        t.sidecar.url,
        Object.entries(gateHeaders(contractFor(t.config.fingerprint, null, { requestId: 'holder' })))
          .map(([k, v]) => `${k}: ${v}\r\n`)
          .join(''),
      );
      open.push(holder.socket);
      await until(() => t.sidecar.status().inFlight === 1);
      const contract = contractFor(t.config.fingerprint, null, { requestId: 'retried' });
      const [body, headers] = bound(contract, { model: MODEL, prompt: 'hello', max_tokens: 1 });
      const full = await postJson(`${t.sidecar.url}/v1/completions`, body, headers);
      expect(full.status).toBe(429);
      holder.socket.destroy();
      await until(() => t.sidecar.status().inFlight === 0);
      const unbound = await postJson(`${t.sidecar.url}/v1/completions`, { ...body, prompt: 'another prompt' }, headers);
      expect([unbound.status, unbound.body?.error?.code]).toEqual([403, 'contract_invalid']);
      expect(JSON.stringify(unbound.body)).not.toContain('already admitted');
      const served = await postJson(`${t.sidecar.url}/v1/completions`, body, headers);
      expect(served.status).toBe(200);
      const replayed = await postJson(`${t.sidecar.url}/v1/completions`, body, headers);
      expect(replayed.status).toBe(403);
      expect(JSON.stringify(replayed.body)).toContain('already admitted');
    } finally {
      for (const s of open) s.destroy();
      await t.sidecar.close();
    }
  });
});

describe('kvgate sidecar command', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'kvgate-sidecar-cmd-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('starts from flags, serves, and on SIGTERM announces the drain, drains and exits 0', async () => {
    const descriptor = path.join(dir, 'd.json');
    await writeFile(descriptor, JSON.stringify(await withRecordedCanaries(sim.config.descriptor as CompatDescriptorInput)));
    const signals = new EventEmitter();
    let out = '';
    let ready: (url: string) => void = () => undefined;
    const url = new Promise<string>((r) => (ready = r));
    const exit = sidecarCommand(
      [
        '--role',
        'prefill',
        '--worker',
        sim.url,
        '--descriptor',
        descriptor,
        '--listen',
        '127.0.0.1:0',
        '--admin',
        '127.0.0.1:0',
        '--metrics',
        '',
        '--dev-keys',
        'cmd-test',
        '--drain-announce-ms',
        '300',
      ],
      {
        signals: signals as unknown as NodeJS.Process,
        stdout: (s) => (out += s),
        stderr: (s) => (out += s),
        env: {},
        onReady: ready,
      },
    );
    const base = await url;
    const status = (await (await fetch(`${base}/kvgate/v1/status`)).json()) as { role: string; verified: boolean };
    expect(status).toMatchObject({ role: 'prefill', verified: true });
    signals.emit('SIGTERM');
    // Announced, but still serving inside the window: the process has not exited.
    const during = (await (await fetch(`${base}/kvgate/v1/status`)).json()) as { draining: boolean; drainAdmitsUntilMs: unknown };
    expect([during.draining, typeof during.drainAdmitsUntilMs]).toEqual([true, 'number']);
    expect(await exit).toBe(0);
    await expect(fetch(`${base}/healthz`)).rejects.toThrow();
  });

  it('on SIGTERM exits within its grace period even while a probe round waits on a worker that never answers', async () => {
    // The worker answers 503 at first (the sidecar starts, unverified), then takes every call and never answers it.
    let hang = false;
    let hung: () => void = () => undefined;
    const reachedHang = new Promise<void>((r) => (hung = r));
    const worker = http.createServer((_req, res) => {
      if (!hang) return void res.writeHead(503).end('starting');
      hung();
    });
    await new Promise<void>((r) => worker.listen(0, '127.0.0.1', r));
    const config = path.join(dir, 'hung-worker.json');
    await writeFile(
      config,
      JSON.stringify({
        role: 'decode',
        worker: `http://127.0.0.1:${(worker.address() as net.AddressInfo).port}`,
        descriptor: sim.config.descriptor,
        listen: '127.0.0.1:0',
        admin: '',
        metrics: '',
        keys: { devSeed: 'cmd-test' },
        trust: 'declared-only',
        nixlSideChannel: 'unchecked',
        // A probe call may wait 10 minutes: only the drain grace (0) may bound the exit.
        probe: { intervalMs: 100, timeoutMs: 600_000 },
        drainGraceMs: 0,
        drainAnnounceMs: 0,
        log: { level: 'silent' },
      }),
    );
    const { signals, exit } = await runSidecarCommand(['--config', config]);
    try {
      hang = true;
      await reachedHang; // a probe round is now waiting on the worker
      signals.emit('SIGTERM');
      expect(await exit).toBe(0);
    } finally {
      worker.closeAllConnections();
      worker.close();
    }
  }, 20_000);

  it('prints help, and refuses bad flags with exit 2 before opening a port', async () => {
    let out = '';
    const io = {
      signals: new EventEmitter() as unknown as NodeJS.Process,
      stdout: (s: string) => (out += s),
      stderr: (s: string) => (out += s),
      env: {},
    };
    expect(await sidecarCommand(['--help'], io)).toBe(0);
    expect(out).toContain('usage: kvgate sidecar');
    out = '';
    expect(await sidecarCommand(['--role', 'sideways', '--worker', 'x', '--descriptor', path.join(dir, 'missing.yaml')], io)).toBe(2);
    expect(out).toContain('missing.yaml: error: (root): cannot read the file');
    out = '';
    const descriptor = path.join(dir, 'd2.json');
    await writeFile(descriptor, JSON.stringify(sim.config.descriptor));
    expect(await sidecarCommand(['--role', 'sideways', '--worker', 'ftp://x', '--descriptor', descriptor, '--dev-keys', 's'], io)).toBe(2);
    expect(out).toMatch(/command line: error: role: .*prefill/);
    expect(out).toContain('command line: error: worker:');
  });
});

describe('safe by default: a descriptor without recorded canaries', () => {
  it('leaves the worker unverified (recorded trust), naming each missing digest and how to record it', async () => {
    const sim = await startTestSim();
    const t = await startTestSidecar(
      sidecarConfigFor(sim, 'decode', { descriptor: { ...(sim.config.descriptor as CompatDescriptorInput), canaries: {} } }),
    );
    try {
      const s = t.sidecar.status();
      expect(s.verified).toBe(false);
      expect(s.trust).toBe('recorded');
      expect(s.reasons.filter((r) => /canary: no digest is recorded/.test(r))).toHaveLength(3);
      expect(s.reasons.join('\n')).toMatch(
        /generation canary: no digest is recorded in the descriptor \(this worker answers [0-9a-f]{64}\), so model.revision and adapter.revision cannot be checked; record it .*kvgate verify --record.*trust: declared-only/,
      );
    } finally {
      await t.sidecar.close();
      await sim.close();
    }
  });

  it('trust: declared-only verifies on the declaration, and says so on /status and on every audit line', async () => {
    const sim = await startTestSim();
    const t = await startTestSidecar(sidecarConfigFor(sim, 'decode', { trust: 'declared-only' }));
    try {
      const s = t.sidecar.status();
      expect([s.verified, s.trust]).toEqual([true, 'declared-only']);
      const r = await postJson(`${t.sidecar.url}/v1/completions`, { model: 'x', prompt: 'hi' }, { 'x-request-id': 'no-contract' });
      expect(r.status).toBe(403);
      const audit = t.lines.filter((l) => l['audit'] === 'refusal');
      expect(audit).toHaveLength(1);
      expect(audit[0]).toMatchObject({ trust: 'declared-only', code: 'contract_invalid' });
    } finally {
      await t.sidecar.close();
      await sim.close();
    }
  });
});
