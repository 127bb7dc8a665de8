/**
 * Safe by default, end to end (harness running envoy/envoy.yaml, gate, sidecars, simulated vLLM): every revision's
 * canaries are recorded (llama-b is a LoRA revision whose canaries are recorded at start under its adapter), and a
 * worker restarted as another weights revision, adapter revision, tokenizer or chat template than it declares is
 * found by its sidecar's next probe, leaves the gate's worker view, and takes no request - none of its KV is used.
 */
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { H } from '../../src/headers.js';
import { completion, post, PROMPTS, sessionOn } from '../../testbed/demo/scenarios.js';
import { startTopology, type RevisionName, type Role, type Topology } from '../../testbed/demo/topology.js';
import { metricValue, scrape } from '../../testbed/sim/testing.js';

const silent = pino({ level: 'silent' });
const ADAPTER = { id: 'acme/support-lora', revision: 'lora-r1' };
let t: Topology;
const sessions: Partial<Record<RevisionName, string>> = {};

beforeAll(async () => {
  t = await startTopology({
    logger: silent,
    candidateWeight: 50,
    sidecarProbeIntervalMs: 60_000, // probes only when a test asks: each restart below is unseen until then
    workerViewIntervalMs: 60_000,
    revisionOverrides: { 'llama-b': { adapter: ADAPTER } },
  });
  for (const r of ['llama-a', 'llama-b'] as const) sessions[r] = (await sessionOn(t, r)).session;
}, 60_000);
afterAll(() => t?.close());

/** Restart a worker as `behaveAs`, let its sidecar probe and the gate poll: what a periodic probe does. */
async function lie(revision: RevisionName, role: Role, behaveAs: Record<string, unknown>) {
  const w = await t.restartWorker(revision, role, { behaveAs });
  await new Promise((r) => setTimeout(r, 20));
  const status = await w.sidecar.probe();
  await t.gate.refreshWorkerView();
  return { w, status };
}

async function restore(revision: RevisionName, role: Role): Promise<void> {
  const w = await t.restartWorker(revision, role, { behaveAs: {} });
  await new Promise((r) => setTimeout(r, 20));
  expect((await w.sidecar.probe()).verified).toBe(true);
  await t.gate.refreshWorkerView();
}

/** Completions the worker's vLLM ran for clients (canary probes excluded: they carry no kv_transfer_params). */
async function kvUsed(revision: RevisionName, role: Role): Promise<number> {
  const text = await scrape(t.worker(revision, role).sim);
  const pulled = metricValue(text, 'kvgate_sim_kv_blocks_pulled_total');
  return Number.isNaN(pulled) ? 0 : pulled;
}

const CASES: ReadonlyArray<{ name: string; revision: RevisionName; role: Role; behaveAs: Record<string, unknown>; reason: RegExp }> = [
  {
    name: 'other weights',
    revision: 'llama-a',
    role: 'decode',
    behaveAs: { model: { revision: 'e1945c40cd546c78e41f1151f4db032b271faeaa' } },
    reason: /generation canary digest .* the worker's weights are not/,
  },
  {
    name: 'another adapter revision',
    revision: 'llama-b',
    role: 'decode',
    behaveAs: { adapter: { revision: 'lora-r2' } },
    reason: /generation canary digest .* with adapter acme\/support-lora rev lora-r1/,
  },
  {
    name: 'another tokenizer',
    revision: 'llama-a',
    role: 'prefill',
    behaveAs: { tokenizer: { revision: 'tok-changed' } },
    reason: /tokenizer canary digest/,
  },
  {
    name: 'another chat template',
    revision: 'llama-b',
    role: 'prefill',
    behaveAs: { chatTemplate: { revision: 'tmpl-other' } },
    reason: /chat template canary digest/,
  },
];

describe('recorded canaries, default configuration', () => {
  it('every worker verifies against the recorded canaries (the adapter revision under its adapter)', async () => {
    for (const w of t.workers) expect(w.sidecar.status(), `${w.revision}/${w.role}`).toMatchObject({ verified: true, trust: 'recorded' });
    const status = t.gate.status() as { trust: unknown };
    expect(status.trust).toEqual({ revisions: { 'llama-a': 'recorded', 'llama-b': 'recorded' }, declaredOnly: [] });
  });

  for (const c of CASES) {
    it(`a ${c.role} worker of ${c.revision} restarted with ${c.name} is refused before any of its KV is used`, async () => {
      // A restarted decode worker starts from zero; else the revision's decode worker must pull nothing more.
      const before = c.role === 'decode' ? 0 : await kvUsed(c.revision, 'decode');
      const { w, status } = await lie(c.revision, c.role, c.behaveAs);
      expect(status.verified).toBe(false);
      expect(status.reasons.join('\n')).toMatch(c.reason);
      const log = t.harness.accessLog().length;
      for (let i = 0; i < 3; i++) {
        const r = await post(`${t.publicUrl}/v1/completions`, completion(PROMPTS[1], 8), {
          'x-tenant-id': 'acme',
          'x-session-id': sessions[c.revision]!,
        });
        // The gate refuses (or, never, routes elsewhere): no request of this revision reaches the lying worker.
        if (r.status === 200) expect(r.headers.get(H.revision)).not.toBe(c.revision);
        else expect([r.status, r.json.error.code]).toEqual([503, 'no_compatible_capacity']);
      }
      const entries = (await t.harness.waitForAccessLog(log + 3)).slice(log);
      expect(entries.map((e) => e.upstreamHost).filter((h) => h === w.address)).toEqual([]);
      expect(await kvUsed(c.revision, 'decode')).toBe(before);
      await restore(c.revision, c.role);
      const ok = await post(`${t.publicUrl}/v1/completions`, completion(PROMPTS[1], 8), {
        'x-tenant-id': 'acme',
        'x-session-id': sessions[c.revision]!,
      });
      expect([ok.status, ok.headers.get(H.revision)], JSON.stringify(ok.json)).toEqual([200, c.revision]);
    });
  }
});
