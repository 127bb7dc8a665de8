/**
 * Issue 8, observability through the full topology: the gate's and sidecars' pino logs captured in memory (one
 * debug-level logger for the whole topology, as `kvgate demo` wires it) and the Prometheus metrics they serve.
 *
 * - the audit trail: exactly one `audit: "refusal"` line per refusal, with request id, tenant, code and reason, and no
 *   prompt text or key material anywhere in the logs;
 * - tracing: the request id the gate minted on the gate's lines and on both sidecars' lines for that request, and the
 *   client's own `x-request-id` beside it on the gate's lines as `client_request_id`;
 * - metrics: decisions by outcome, code and revision, decision latency, policy reloads, worker-view age; sidecar
 *   contract and attestation failures by reason.
 */
import { randomUUID } from 'node:crypto';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mintContract, type TransferContract } from '../../src/contract/contract.js';
import { createDevKeyRing } from '../../src/contract/keys.js';
import { completion, crossGroupHop, post, PROMPTS, type HttpResult } from '../../testbed/demo/scenarios.js';
import { TOY_PROXY_PREFILL_KV } from '../../testbed/sim/testing.js';
import { DEMO_KEY_SEED, SERVED_MODEL, startTopology, type Topology } from '../../testbed/demo/topology.js';
import { H } from '../../src/headers.js';
import {
  client,
  complete,
  counter,
  eventually,
  jsonLineSink,
  metricsOf,
  metricSum,
  topologyContractFields,
} from './failure-matrix-support.js';

type Line = Record<string, any>;
const { lines, sink } = jsonLineSink();

/** Every prompt this file sends starts with this word: no log line may contain it, not even a fragment of a prompt. */
const MARKER = 'Kestrel';
const secretPrompt = (what: string) => `${MARKER} confidential: ${what}; the merger closes on Friday.`;
/** The request id on a line, under whichever key its component uses. */
const idOf = (l: Line): unknown => l['request_id'] ?? l['requestId'];
const workerOf = (t: Topology, role: 'prefill' | 'decode') => `http://${t.worker('llama-a', role).address}`;

let t: Topology;
beforeAll(async () => {
  t = await startTopology({ logger: pino({ level: 'debug' }, sink), candidateWeight: 0, sidecarProbeIntervalMs: 60_000 });
});
afterAll(() => t.close());

function contractFields(requestId: string, edit: Partial<Omit<TransferContract, 'kind'>> = {}): Omit<TransferContract, 'kind'> {
  return topologyContractFields(t, requestId, 'llama-a', edit);
}

/** A prefill leg straight to the prefill sidecar (no gate), with the given contract. */
function directLeg(requestId: string, contract: string | undefined): Promise<HttpResult> {
  const body = {
    ...completion(secretPrompt(requestId), 1),
    kv_transfer_params: TOY_PROXY_PREFILL_KV,
  };
  return post(`${workerOf(t, 'prefill')}/v1/completions`, body, {
    'x-request-id': requestId,
    ...(contract === undefined ? {} : { [H.contract]: contract }),
  });
}

/** The id the gate minted for the request a client sent with `x-request-id: rid` (its gate lines keep `rid` apart). */
async function mintedFor(rid: string): Promise<string> {
  expect(await eventually(() => lines.some((l) => l['component'] === 'gate' && l['client_request_id'] === rid))).toBe(true);
  const minted = lines.find((l) => l['component'] === 'gate' && l['client_request_id'] === rid)!['request_id'] as string;
  expect(minted).not.toBe(rid);
  return minted;
}

describe('tracing: one request id on every hop', () => {
  it("the gate's lines (route and hop) and both sidecars' lines carry the id the gate minted", async () => {
    const rid = `obs-trace-${randomUUID()}`;
    const r = await complete(t, secretPrompt('trace'), 6, client('acme', 'trace', { 'x-request-id': rid }));
    expect(r.status).toBe(200);
    const minted = await mintedFor(rid);
    const mine = () => lines.filter((l) => idOf(l) === minted);
    expect(await eventually(() => mine().some((l) => l['worker'] === 'llama-a/decode' && l['event'] === 'request'))).toBe(true);
    const gate = mine().filter((l) => l['component'] === 'gate');
    expect(gate.map((l) => l['outcome']).sort()).toEqual(['hop', 'route']);
    expect(gate.every((l) => l['revision'] === 'llama-a' && typeof l['group'] === 'string')).toBe(true);
    for (const worker of ['llama-a/prefill', 'llama-a/decode']) {
      const own = mine().filter((l) => l['component'] === 'sidecar' && l['worker'] === worker);
      expect(
        own.map((l) => [l['event'], l['outcome']]),
        worker,
      ).toContainEqual(['request', 'served']);
    }
  });

  // The sidecars bind `requestId`, the gate `request_id`: a log query on one field misses half the hops.
  it('every component logs the request id under the same field, request_id', async () => {
    const rid = `obs-field-${randomUUID()}`;
    expect((await complete(t, secretPrompt('field'), 4, client('acme', 'field', { 'x-request-id': rid }))).status).toBe(200);
    const minted = await mintedFor(rid);
    expect(await eventually(() => lines.some((l) => idOf(l) === minted && l['worker'] === 'llama-a/decode'))).toBe(true);
    const byComponent = lines
      .filter((l) => idOf(l) === minted && ['gate', 'sidecar'].includes(l['component']))
      .map((l) => `${l['component']}/${l['worker'] ?? ''}: ${'request_id' in l ? 'request_id' : 'requestId'}`);
    expect(new Set(byComponent)).toEqual(
      new Set(['gate/: request_id', 'sidecar/llama-a/prefill: request_id', 'sidecar/llama-a/decode: request_id']),
    );
  });
});

describe('the audit trail', () => {
  /** Refusals of every kind the gate makes, each with its own request id and prompt. */
  async function refusals(): Promise<Array<{ rid: string; r: HttpResult; code: string; tenant: string | null }>> {
    const out: Array<{ rid: string; r: HttpResult; code: string; tenant: string | null }> = [];
    const send = async (code: string, tenant: string | null, body: unknown, headers: Record<string, string> = {}) => {
      const rid = `obs-refuse-${code}-${randomUUID()}`;
      const res = await fetch(`${t.publicUrl}/v1/completions`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'x-request-id': rid,
          ...(tenant === null ? {} : { 'x-tenant-id': tenant }),
          ...headers,
        },
        body: typeof body === 'string' ? body : JSON.stringify(body),
      });
      out.push({ rid, r: { status: res.status, headers: res.headers, json: await res.json() }, code, tenant });
    };
    await send('tenant_required', null, completion(secretPrompt('no tenant')));
    await send('tenant_scope_denied', 'initech', completion(secretPrompt('wrong tenant')));
    await send('unknown_model', 'acme', { ...completion(secretPrompt('unknown model')), model: 'gpt-5' });
    await send('kv_params_forbidden', 'acme', {
      ...completion(secretPrompt('forged kv params')),
      kv_transfer_params: { do_remote_prefill: true },
    });
    await send('bad_request', 'acme', `{"model": "${SERVED_MODEL}", "prompt": ${secretPrompt('unquoted prompt')}}`);
    const hop = await crossGroupHop(t, secretPrompt('cross-group hop'));
    out.push({ rid: hop.json.error.request_id, r: hop, code: 'mixed_revision', tenant: 'acme' });
    return out;
  }

  it('exactly one audit line per refusal, with request id, tenant, code and the reason the client got', async () => {
    const start = lines.length;
    const refused = await refusals();
    for (const { rid, r, code, tenant } of refused) {
      expect([r.status > 399, r.json.error?.code], rid).toEqual([true, code]);
      // The id the client got back is the gate's; the client's own (public listener) is kept as client_request_id.
      const id = r.json.error.request_id as string;
      const audit = lines.slice(start).filter((l) => l['audit'] === 'refusal' && idOf(l) === id);
      expect(audit, `${code}: ${JSON.stringify(audit)}`).toHaveLength(1);
      expect(audit[0]).toMatchObject({ component: 'gate', request_id: id, code, tenant, reason: r.json.error.message });
      if (code !== 'mixed_revision') expect(audit[0]!['client_request_id']).toBe(rid);
    }
    expect(lines.slice(start).filter((l) => l['audit'] === 'refusal')).toHaveLength(refused.length);
  });

  it('a refusal by a sidecar (a contract presented without the gate) is audited too', async () => {
    const rid = `obs-sidecar-refuse-${randomUUID()}`;
    const now = Date.now();
    const r = await directLeg(rid, mintContract(contractFields(rid, { issuedAtMs: now - 120_000, expiresAtMs: now - 60_000 }), t.keys));
    expect([r.status, r.json.error?.code]).toEqual([403, 'contract_invalid']);
    await eventually(() => lines.some((l) => l['audit'] === 'refusal' && idOf(l) === rid), 1_000);
    const audit = lines.filter((l) => l['audit'] === 'refusal' && idOf(l) === rid);
    expect(audit, JSON.stringify(lines.filter((l) => idOf(l) === rid))).toHaveLength(1);
    expect(audit[0]).toMatchObject({
      component: 'sidecar',
      worker: 'llama-a/prefill',
      code: 'contract_invalid',
      reason: r.json.error.message,
    });
    // The tenant as far as it is known: an expired contract's claims are not trusted, so null is as right as "acme".
    expect(audit[0]).toHaveProperty('tenant');
  });

  it('no log line holds prompt text or key material', async () => {
    await refusals(); // at least one of everything above, whatever ran before
    const text = lines.map((l) => JSON.stringify(l)).join('\n');
    expect(lines.length).toBeGreaterThan(10);
    const prompt = lines.filter((l) => JSON.stringify(l).includes(MARKER));
    expect(prompt.map((l) => `${l['component']} ${l['msg']}: ${String(l['reason'] ?? '').slice(0, 120)}`)).toEqual([]);
    const secrets = [t.keys.secret(t.keys.currentId)!, t.keys.saltSecret];
    for (const s of secrets)
      for (const form of [s.toString('hex'), s.toString('base64'), s.toString('base64url')]) expect(text.includes(form)).toBe(false);
    expect(text.includes(DEMO_KEY_SEED)).toBe(false);
    // Bearer tokens (contracts, attestations, bindings) are credentials too: none is logged whole.
    expect(text.match(/kvgate\.v1\.[A-Za-z0-9_-]{20,}\.[A-Za-z0-9_-]{20,}/g) ?? []).toEqual([]);
  });
});

describe('metrics', () => {
  const gateMetrics = () => metricsOf(`http://127.0.0.1:${t.gate.adminPort}`);

  it("the gate's /metrics has decisions by outcome, code and revision, their latency, policy reloads and worker-view age", async () => {
    const before = await gateMetrics();
    const decisions = (text: string, labels: Record<string, string>) => metricSum(text, 'kvgate_decisions_total', labels);
    expect((await complete(t, secretPrompt('metrics'), 4, client('acme', 'metrics'))).status).toBe(200);
    expect((await complete(t, secretPrompt('metrics'), 4, client('initech', 'metrics'))).status).toBe(403);
    await t.gate.policy.reload('observability test');
    await t.gate.refreshWorkerView();
    const after = await gateMetrics();
    expect(
      decisions(after, { outcome: 'route', code: '', revision: 'llama-a' }) -
        decisions(before, { outcome: 'route', code: '', revision: 'llama-a' }),
    ).toBe(1);
    expect(
      decisions(after, { outcome: 'hop', code: '', revision: 'llama-a' }) -
        decisions(before, { outcome: 'hop', code: '', revision: 'llama-a' }),
    ).toBe(1);
    expect(
      decisions(after, { outcome: 'refuse', code: 'tenant_scope_denied', revision: '' }) -
        decisions(before, { outcome: 'refuse', code: 'tenant_scope_denied', revision: '' }),
    ).toBe(1);
    expect(after).toContain('# TYPE kvgate_decision_duration_seconds histogram');
    for (const outcome of ['route', 'hop', 'refuse']) {
      const count = metricSum(after, 'kvgate_decision_duration_seconds_count', { outcome });
      expect(count, outcome).toBeGreaterThan(metricSum(before, 'kvgate_decision_duration_seconds_count', { outcome }));
      expect(metricSum(after, 'kvgate_decision_duration_seconds_bucket', { outcome, le: '+Inf' })).toBe(count);
    }
    expect(
      metricSum(after, 'kvgate_policy_reloads_total', { result: 'unchanged' }) -
        metricSum(before, 'kvgate_policy_reloads_total', { result: 'unchanged' }),
    ).toBe(1);
    expect(after).toMatch(/^kvgate_policy_info\{version="[0-9a-f]{12}"\} 1$/m);
    expect(after).toContain('# TYPE kvgate_worker_view_age_seconds gauge');
    const age = metricSum(after, 'kvgate_worker_view_age_seconds');
    expect(age).toBeGreaterThanOrEqual(0);
    expect(age).toBeLessThan(5); // just polled: every sidecar answered moments ago
  });

  it('the sidecars count contract failures by reason (a missing, forged or expired contract)', async () => {
    const url = workerOf(t, 'prefill');
    const reasons = ['missing', 'bad_signature', 'expired'] as const;
    const before = await Promise.all(reasons.map((reason) => counter(url, 'kvgate_sidecar_contract_failures_total', { reason })));
    const now = Date.now();
    expect((await directLeg('obs-missing', undefined)).status).toBe(403);
    expect((await directLeg('obs-forged', mintContract(contractFields('obs-forged'), createDevKeyRing('not-the-gate')))).status).toBe(403);
    expect(
      (
        await directLeg(
          'obs-expired',
          mintContract(contractFields('obs-expired', { issuedAtMs: now - 90_000, expiresAtMs: now - 30_000 }), t.keys),
        )
      ).status,
    ).toBe(403);
    const after = await Promise.all(reasons.map((reason) => counter(url, 'kvgate_sidecar_contract_failures_total', { reason })));
    expect(after.map((v, i) => v - before[i]!)).toEqual([1, 1, 1]);
  });

  it('the decode sidecar counts attestation failures by reason (a decode worker restarted with another tokenizer)', async () => {
    const url = workerOf(t, 'decode');
    const before = await counter(url, 'kvgate_sidecar_attestation_failures_total', { reason: 'prompt_tokens_mismatch' });
    await t.restartWorker('llama-a', 'decode', { behaveAs: { tokenizer: { revision: 'tok-changed' } } });
    for (let i = 0; i < 3; i++) await new Promise((resolve) => setImmediate(resolve));
    try {
      // PROMPTS[1] is 17 tokens under the declared tokenizer and 16 under `tok-changed`.
      const r = await complete(t, PROMPTS[1], 6, client('acme', 'attest'));
      expect([r.status, r.json.error?.code]).toEqual([409, 'incompatible_transfer']);
      expect(await counter(url, 'kvgate_sidecar_attestation_failures_total', { reason: 'prompt_tokens_mismatch' })).toBe(before + 1);
      expect(await metricsOf(url)).toContain('# TYPE kvgate_sidecar_attestation_failures_total counter');
    } finally {
      const w = await t.restartWorker('llama-a', 'decode', { behaveAs: {} });
      for (let i = 0; i < 3; i++) await new Promise((resolve) => setImmediate(resolve));
      expect((await w.sidecar.probe()).verified).toBe(true);
      await t.gate.refreshWorkerView();
    }
  });
});
