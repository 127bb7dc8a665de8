/**
 * Key rotation as docs/operator-guide.md section 8 tells it, on a running topology (gate, prefill and decode sidecars
 * of two revisions, simulated vLLM workers, Envoy harness) under continuous requests, with no restart: each step
 * updates the key files, every gate and sidecar picks them up, and `kvgate_keys_loaded` /
 * `kvgate_sidecar_keys_loaded` confirm it everywhere before the next step. Not one request is refused. Then the
 * documented failure: `current` switched on the gate before the sidecars hold the new id is refused 403
 * `contract_invalid`, reason `unknown_key`, until the sidecars get the id.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { statusCommand } from '../../src/cli/status-command.js';
import { testKeyFileText } from '../../src/contract/testing.js';
import { startTopology, type Topology } from '../../testbed/demo/topology.js';
import { client, complete, eventually, metricSum, metricsOf, silent } from './failure-matrix-support.js';

type KeySpec = Parameters<typeof testKeyFileText>[0];

let t: Topology;
let dir: string;
let gateFile: string;
let sidecarFile: string;
beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'kvgate-rotation-'));
  gateFile = path.join(dir, 'gate-keys.json');
  sidecarFile = path.join(dir, 'sidecar-keys.json');
  const start = testKeyFileText({ current: 'k1', keys: { k1: 'k1' } });
  await writeFile(gateFile, start);
  await writeFile(sidecarFile, start);
  t = await startTopology({
    logger: silent,
    candidateWeight: 50,
    sidecarProbeIntervalMs: 60_000,
    keyFiles: { gate: gateFile, sidecar: sidecarFile },
  });
  await t.gate.refreshWorkerView();
}, 20_000);
afterAll(async () => {
  await t?.close();
  await rm(dir, { recursive: true, force: true });
});

/** Every process's `/metrics`: the gate's admin port and each sidecar. */
async function everyMetrics(): Promise<{ who: string; text: string; prefix: string }[]> {
  return [
    { who: 'gate', text: await metricsOf(`http://127.0.0.1:${t.gate.adminPort}`), prefix: 'kvgate_' },
    ...(await Promise.all(
      t.workers.map(async (w) => ({ who: `${w.revision}/${w.role}`, text: await metricsOf(w.sidecar.url), prefix: 'kvgate_sidecar_' })),
    )),
  ];
}

/** What the metric says a process holds: `id` or `id*` for the current one, sorted. */
function held(text: string, prefix: string): string[] {
  const ids: string[] = [];
  for (const m of text.matchAll(new RegExp(`^${prefix}keys_loaded\\{key_id="([^"]+)",current="(true|false)"\\} 1$`, 'gm')))
    ids.push(m[2] === 'true' ? `${m[1]}*` : m[1]!);
  return ids.sort();
}

/** The documented confirmation: wait until every gate and sidecar reports `want` in its keys metric. */
async function confirmEverywhere(want: string[], only?: 'sidecars'): Promise<void> {
  let last: Record<string, string[]> = {};
  const done = await eventually(async () => {
    const all = await everyMetrics();
    last = Object.fromEntries(all.map((m) => [m.who, held(m.text, m.prefix)]));
    return all.filter((m) => only === undefined || m.who !== 'gate').every((m) => held(m.text, m.prefix).join() === want.join());
  }, 8000);
  expect({ done, last }).toMatchObject({ done: true });
}

async function step(spec: KeySpec): Promise<void> {
  const text = testKeyFileText(spec);
  await Promise.all([writeFile(gateFile, text), writeFile(sidecarFile, text)]);
}

/** Requests in a loop until stopped: every status and the key id of each binding the client got back. */
function traffic() {
  const statuses: number[] = [];
  const bindingKids: string[] = [];
  let stop = false;
  const workers = Array.from({ length: 4 }, async (_, w) => {
    for (let i = 0; !stop; i++) {
      const r = await complete(t, `rotation ${w} ${i}`, 4, client('acme', `rot-${w}-${i % 8}`));
      statuses.push(r.status);
      const b = r.headers.get('x-kvgate-binding');
      if (b !== null) bindingKids.push(b.split('.')[2]!);
    }
  });
  return {
    statuses,
    bindingKids,
    /** Wait until `n` more requests have been answered. */
    async more(n: number): Promise<void> {
      const want = statuses.length + n;
      expect(await eventually(() => statuses.length >= want, 8000, 5)).toBe(true);
    },
    async end(): Promise<void> {
      stop = true;
      await Promise.all(workers);
    },
  };
}

describe('key rotation without restarts (operator guide section 8)', () => {
  it('add, switch, remove under continuous requests: every step confirmed on every process, zero refused requests', async () => {
    await confirmEverywhere(['k1*']);
    const load = traffic();
    try {
      await load.more(10);
      // 1. Add the new id; current stays on the old one.
      await step({ current: 'k1', keys: { k1: 'k1', k2: 'k2' } });
      await confirmEverywhere(['k1*', 'k2']);
      await load.more(10);
      // 2. Switch current to the new id.
      await step({ current: 'k2', keys: { k1: 'k1', k2: 'k2' } });
      await confirmEverywhere(['k1', 'k2*']);
      await load.more(10);
      const switchedAt = load.bindingKids.length;
      await load.more(10);
      expect(load.bindingKids.slice(switchedAt)).not.toContain('k1');
      // 3. Remove the old id (here at once: every request in flight was signed with k2 by now).
      await step({ current: 'k2', keys: { k2: 'k2' } });
      await confirmEverywhere(['k2*']);
      await load.more(10);
    } finally {
      await load.end();
    }
    expect(load.statuses.filter((s) => s !== 200)).toEqual([]);
    expect(load.statuses.length).toBeGreaterThanOrEqual(50);
    expect(load.bindingKids.at(-1)).toBe('k2');
    for (const m of await everyMetrics()) {
      expect({ who: m.who, applied: metricSum(m.text, `${m.prefix}keys_reloads_total`, { result: 'applied' }) }).toEqual({
        who: m.who,
        applied: 3,
      });
      expect({ who: m.who, rejected: metricSum(m.text, `${m.prefix}keys_reloads_total`, { result: 'rejected' }) }).toEqual({
        who: m.who,
        rejected: 0,
      });
    }
  }, 30_000);

  it('switching current on the gate before the sidecars hold the new id is refused: 403 contract_invalid, unknown_key', async () => {
    const decodeFailures = async () =>
      (await Promise.all(t.workers.filter((w) => w.role === 'decode').map((w) => metricsOf(w.sidecar.url)))).reduce(
        (sum, text) => sum + metricSum(text, 'kvgate_sidecar_contract_failures_total', { reason: 'unknown_key' }),
        0,
      );
    const before = await decodeFailures();
    // Step 1 skipped on the sidecars: only the gate's file gets k3, and as current.
    await writeFile(gateFile, testKeyFileText({ current: 'k3', keys: { k2: 'k2', k3: 'k3' } }));
    expect(await eventually(() => t.gate.keys.current().currentId === 'k3', 5000)).toBe(true);
    const r = await complete(t, 'too early', 4, client('acme', 'too-early'));
    expect(r.status).toBe(403);
    expect(r.json).toMatchObject({ error: { code: 'contract_invalid' } });
    expect(await decodeFailures()).toBeGreaterThan(before);
    // `kvgate status` names the gap: the gate's ids, and every sidecar that holds other ones.
    let out = '';
    expect(
      await statusCommand(['--gate', `http://127.0.0.1:${t.gate.adminPort}`], { stdout: (s) => (out += s), stderr: (s) => (out += s) }),
    ).toBe(0);
    expect(out).toMatch(
      /^keys: k3\* k2 \(keys\.file, reloads on change or SIGHUP\); last reload: applied at \S+ \(added k3; current k2 -> k3\)$/m,
    );
    expect(out.split('\n').filter((l) => l.includes("keys differ from the gate's: k2*"))).toHaveLength(t.workers.length);
    // The fix the guide gives: complete step 1 on the sidecars; the same request then goes through.
    await writeFile(sidecarFile, testKeyFileText({ current: 'k2', keys: { k2: 'k2', k3: 'k3' } }));
    await confirmEverywhere(['k2*', 'k3'], 'sidecars');
    expect((await complete(t, 'in time', 4, client('acme', 'too-early'))).status).toBe(200);
  }, 20_000);
});
