/**
 * The real handshake hash, end to end: llama-b runs vLLM main's NIXL connector (v12), which hashes the hybrid KV
 * cache manager flag, and declares it off. Each sidecar reads its worker's live hash from the ZMQ side channel (the
 * simulator serves it as vLLM does and computes it with its own factor table, not kvgate's prediction). A decode
 * worker restarted with the hybrid KV cache manager on serves another hash: its endpoint becomes unverified with both
 * hashes and the differing factor named, and no request reaches it.
 */
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { statusCommand } from '../../src/cli/status-command.js';
import { H } from '../../src/headers.js';
import { predictNixlHash } from '../../src/compat/nixl-hash.js';
import { completion, post, PROMPTS, sessionOn } from '../../testbed/demo/scenarios.js';
import { startTopology, type Topology } from '../../testbed/demo/topology.js';
import { metricValue, scrape } from '../../testbed/sim/testing.js';

const silent = pino({ level: 'silent' });
let t: Topology;
let session: string;

beforeAll(async () => {
  t = await startTopology({
    logger: silent,
    candidateWeight: 50,
    sidecarProbeIntervalMs: 60_000,
    workerViewIntervalMs: 60_000,
    revisionOverrides: { 'llama-b': { engine: { version: '0.20.1' }, connector: { version: 12 }, hybridKvCacheManager: false } },
  });
  session = (await sessionOn(t, 'llama-b')).session;
}, 60_000);
afterAll(() => t?.close());

describe("the live worker's real NIXL hash", () => {
  it('matches the prediction on honest workers; vLLM 0.11 (llama-a) has none and says so', () => {
    const predicted = predictNixlHash(t.gate.policy.current().revisions.get('llama-b')!.descriptor).hash;
    for (const role of ['prefill', 'decode'] as const) {
      const b = t.worker('llama-b', role).sidecar.status();
      expect(b.nixlHash.live, role).toEqual({ state: 'match', observed: predicted, note: null });
      expect(b.verified).toBe(true);
      const a = t.worker('llama-a', role).sidecar.status();
      expect(a.nixlHash.live.state).toBe('none');
      expect(a.nixlHash.live.note).toMatch(
        /^no handshake hash before vLLM 0\.13; canaries carry the check \(this worker declares vLLM 0\.11\.0/,
      );
    }
  });

  it('a decode worker with the hybrid KV cache manager on (declared off) is unverified, both hashes named, and no request reaches it', async () => {
    const predicted = predictNixlHash(t.gate.policy.current().revisions.get('llama-b')!.descriptor).hash;
    const w = await t.restartWorker('llama-b', 'decode', { behaveAs: { hybridKvCacheManager: true } });
    await new Promise((r) => setTimeout(r, 20));
    const status = await w.sidecar.probe();
    await t.gate.refreshWorkerView();
    expect(status.verified).toBe(false);
    const observed = status.nixlHash.live.observed!;
    expect(status.nixlHash.live.state).toBe('mismatch');
    expect(observed).toMatch(/^[0-9a-f]{64}$/);
    expect(observed).not.toBe(predicted);
    const reason = status.reasons.find((r) => r.startsWith('NIXL compatibility hash'))!;
    expect(reason).toContain(observed);
    expect(reason).toContain(predicted);
    expect(reason).toMatch(/is_hma_enabled: the worker hashes true, the descriptor declares false/);
    // The lying worker is named: by its sidecar (address, engine id from the side channel, field, both values) and,
    // from that, on the gate's /status as `kvgate status` prints it.
    expect(status.mismatch).toEqual({
      worker: { address: w.sim.url, endpoint: w.address, engineId: w.sim.engineId },
      fields: [{ field: 'nixlHash', declared: predicted, observed }],
    });
    let out = '';
    expect(await statusCommand(['--gate', `http://127.0.0.1:${t.gate.adminPort}`], { stdout: (x) => (out += x), stderr: () => {} })).toBe(
      0,
    );
    const row = out.split('\n').find((l) => l.startsWith('b-decode ')) ?? '';
    expect(row).toMatch(/\bunverified\b/);
    expect(row).toContain(`worker ${w.sim.url}, engine id ${w.sim.engineId}: nixlHash declared "${predicted}", observed "${observed}"`);
    // Only the hash tells it apart: the canaries still match.
    expect(status.reasons.filter((r) => /canary/.test(r))).toEqual([]);
    const log = t.harness.accessLog().length;
    for (let i = 0; i < 3; i++) {
      const r = await post(`${t.publicUrl}/v1/completions`, completion(PROMPTS[1], 8), { 'x-tenant-id': 'acme', 'x-session-id': session });
      if (r.status === 200) expect(r.headers.get(H.revision)).not.toBe('llama-b');
      else expect([r.status, r.json.error.code]).toEqual([503, 'no_compatible_capacity']);
    }
    const entries = (await t.harness.waitForAccessLog(log + 3)).slice(log);
    expect(entries.map((e) => e.upstreamHost).filter((h) => h === w.address)).toEqual([]);
    const pulled = metricValue(await scrape(w.sim), 'kvgate_sim_kv_blocks_pulled_total');
    expect(Number.isNaN(pulled) ? 0 : pulled).toBe(0);
  });
});
