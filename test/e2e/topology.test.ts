/**
 * The full local topology (harness running envoy/envoy.yaml, gate, sidecars, simulated vLLM workers of two
 * revisions): what a client sees, asserted on status codes, error codes and token ids against baselines.
 */
import { readFile } from 'node:fs/promises';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { groupIdOf } from '../../src/compat/fingerprint.js';
import { gateSigned } from '../../src/contract/testing.js';
import { H } from '../../src/headers.js';
import { runDemo } from '../../testbed/demo/run-demo.js';
import { baseline, completion, firstDivergence, post, PROMPTS, sessionOn, tokenIds } from '../../testbed/demo/scenarios.js';
import { startTopology, type Topology } from '../../testbed/demo/topology.js';
import { mustLoadEnvoyConfig } from '../../testbed/harness/envoy-config.js';

const silent = pino({ level: 'silent' });

describe('kvgate demo (the README quick start)', () => {
  it('shows A-to-A, the B cohort, a refused mixed route and token parity, all checks passing', async () => {
    const lines: string[] = [];
    const { summary, topology } = await runDemo({ logger: silent, print: (l) => lines.push(l) });
    try {
      expect(summary.checks.filter((c) => !c.ok)).toEqual([]);
      expect(summary.checks.length).toBeGreaterThanOrEqual(8);
      expect(summary.parity.length).toBe(PROMPTS.length * 2);
      expect(new Set(summary.parity.map((r) => r.revision))).toEqual(new Set(['llama-a', 'llama-b']));
      expect(lines.join('\n')).toMatch(/Summary: \d+\/\d+ checks passed/);
    } finally {
      await topology.close();
    }
  });
});

describe('a worker that lies about its revision', () => {
  let t: Topology;
  beforeAll(async () => {
    t = await startTopology({
      logger: silent,
      // B's decode worker is declared as llama-b but really runs other weights (same geometry, same tokenizer).
      workerOverrides: { 'llama-b/decode': { behaveAs: { model: { revision: '0000000000000000000000000000000000000000' } } } },
    });
    await t.gate.refreshWorkerView();
  });
  afterAll(() => t.close());

  it('runs the gate port with mTLS: its own PKI in the run folder, one client certificate per listener', async () => {
    const status = (await (await fetch(`http://127.0.0.1:${String(t.gate.adminPort)}/status`)).json()) as { transport: unknown };
    expect(status.transport).toEqual({ mode: 'mtls', roles: { public: 1, internal: 1 } });
    const { kvgate_gate: pub, kvgate_gate_internal: int } = mustLoadEnvoyConfig(await readFile(t.envoyYamlPath, 'utf8')).clusters;
    expect(t.pki.dir.startsWith(t.dir)).toBe(true);
    expect(pub?.tls).toMatchObject({ caFile: t.pki.files.ca, certFile: t.pki.files.publicCert, keyFile: t.pki.files.publicKey });
    expect(int?.tls).toMatchObject({ caFile: t.pki.files.ca, certFile: t.pki.files.internalCert, keyFile: t.pki.files.internalKey });
  });

  it('is found out by its sidecar and never routed to; its revision refuses with 503 and retry-after', async () => {
    const status = t.worker('llama-b', 'decode').sidecar.status();
    expect(status.verified).toBe(false);
    expect(status.reasons.join(' ')).toMatch(/generation/);
    let refused = 0;
    let servedByA = 0;
    for (let i = 0; i < 24; i++) {
      const r = await post(`${t.publicUrl}/v1/completions`, completion(PROMPTS[0], 4), {
        'x-tenant-id': 'acme',
        'x-session-id': `liar-${i}`,
      });
      if (r.status === 503) {
        expect(r.headers.get(H.rejectReason)).toBe('no_compatible_capacity');
        expect(Number(r.headers.get('retry-after'))).toBeGreaterThan(0);
        expect(r.json.error.message).toMatch(/llama-b/);
        refused++;
      } else {
        expect(r.status).toBe(200);
        expect(r.headers.get(H.revision)).toBe('llama-a');
        servedByA++;
      }
    }
    expect(refused).toBeGreaterThan(0); // the B cohort
    expect(servedByA).toBeGreaterThan(0); // A is unaffected
    // Envoy never sent a request to the liar: every upstream host in the access log is someone else.
    const log = await t.harness.waitForAccessLog(24);
    const liar = t.worker('llama-b', 'decode').address;
    expect(log.filter((e) => e.upstreamHost !== undefined).length).toBeGreaterThan(0);
    expect(log.some((e) => e.upstreamHost === liar)).toBe(false);
  });
});

describe('a decode drain in the middle of traffic', () => {
  let t: Topology;
  beforeAll(async () => {
    t = await startTopology({ logger: silent, sim: { latency: { decodeMsPerToken: 15 } } });
  });
  afterAll(() => t.close());

  it('a decode worker refuses a contract that routes the decode to another worker of its group', async () => {
    const fingerprint = t.gate.policy.current().revisions.get('llama-a')!.fingerprint;
    const now = Date.now();
    const signed = gateSigned(
      t.keys,
      {
        requestId: 'elsewhere-1',
        groupId: groupIdOf(fingerprint, 'tenant:acme'),
        fingerprint,
        tenantScope: 'tenant:acme',
        tenant: 'acme',
        model: 'llama-3-8b',
        revision: 'llama-a',
        adapter: null,
        cacheSaltDigest: '0'.repeat(64),
        promptDigest: '0'.repeat(64),
        issuedAtMs: now,
        expiresAtMs: now + 30_000,
        decode: { cluster: 'a_decode', endpoint: '127.0.0.1:9' },
        prefill: null,
      },
      completion(PROMPTS[0], 4),
    );
    const r = await post(`http://${t.worker('llama-a', 'decode').address}/v1/completions`, signed.body, {
      'x-request-id': 'elsewhere-1',
      [H.contract]: signed.contract,
    });
    expect([r.status, r.json.error?.code]).toEqual([403, 'contract_invalid']);
    expect(r.json.error.message).toMatch(/routes its decode to 127\.0\.0\.1:9, not to this worker/);
  });

  it('lets the stream in flight finish with baseline tokens while new requests follow the fallback chain', async () => {
    const { session } = await sessionOn(t, 'llama-a');
    const body = { ...completion(PROMPTS[3], 40), stream: true };
    const streaming = fetch(`${t.publicUrl}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-tenant-id': 'acme', 'x-session-id': session },
      body: JSON.stringify(body),
    });
    const res = await streaming;
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    const first = await reader.read(); // the stream has started
    expect(first.done).toBe(false);
    // Drain A's decode worker mid-stream.
    const drain = await fetch(`${t.worker('llama-a', 'decode').sidecar.adminUrl}/kvgate/v1/drain`, { method: 'POST' });
    expect(drain.status).toBeLessThan(300);
    await t.gate.refreshWorkerView();
    const during = await post(`${t.publicUrl}/v1/completions`, completion(PROMPTS[0], 4), {
      'x-tenant-id': 'acme',
      'x-session-id': session,
    });
    expect(during.status).toBe(503);
    expect(during.headers.get(H.rejectReason)).toBe('no_compatible_capacity');
    let text = new TextDecoder().decode(first.value);
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    expect(text).toContain('data: [DONE]');
    const ids = text
      .split('\n')
      .filter((l) => l.startsWith('data: {'))
      .flatMap((l) => (JSON.parse(l.slice(6)).choices?.[0]?.token_ids ?? []) as number[]);
    // The sidecar is draining now; the baseline goes straight to the worker.
    expect(firstDivergence(ids, await baseline(t, 'llama-a', PROMPTS[3], 40))).toBe(-1);
    // B sessions are untouched by A's drain.
    const b = await sessionOn(t, 'llama-b');
    expect(firstDivergence(tokenIds(b.result), await baseline(t, 'llama-b', PROMPTS[0]))).toBe(-1);
  });
});
