import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { deepMerge, loadSimConfigFile, parseSimConfig } from './config.js';
import { testDescriptor } from './testing.js';

describe('parseSimConfig', () => {
  it('fills vLLM-like defaults', () => {
    const r = parseSimConfig({ descriptor: testDescriptor(), sim: {} });
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    const s = r.value.sim;
    expect(s.host).toBe('127.0.0.1');
    expect(s.port).toBe(0);
    expect(s.kvLoadFailurePolicy).toBe('fail');
    expect(s.leaseMs).toBe(30_000);
    expect(s.enablePrefixCaching).toBe(true);
    expect(s.latency).toEqual({ prefillMsPerToken: 0, decodeMsPerToken: 0, transferMsPerBlock: 0, handshakeMs: 0 });
    expect(r.value.lies).toBe(false);
    expect(r.value.behaviour).toEqual(r.value.descriptor);
    expect(Object.isFrozen(r.value.sim)).toBe(true);
  });

  it('names the path and a fix for every problem', () => {
    const r = parseSimConfig({
      descriptor: testDescriptor(),
      sim: { leaseMs: 'long', kvLoadFailurePolicy: 'retry', latncy: {} },
    });
    expect(r.ok).toBe(false);
    if (r.ok) return;
    const m = r.error.message;
    expect(m).toMatch(/error: sim\.leaseMs: expected number, got string "long"\. Fix: write leaseMs as a number/);
    expect(m).toMatch(/error: sim\.kvLoadFailurePolicy: .*Fix: use one of: fail, recompute/);
    expect(m).toMatch(/error: sim\.latncy: unknown key "latncy"\. Fix: did you mean "latency"\?/);
  });

  it('reports descriptor problems under descriptor.*', () => {
    const d = testDescriptor() as Record<string, unknown>;
    delete d['modelDtype'];
    const r = parseSimConfig({ descriptor: d, sim: {} });
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.error.message).toMatch(/error: descriptor\.modelDtype: modelDtype is required .*Fix: add modelDtype:/);
  });

  it('merges behaveAs over the declared descriptor and flags the lie', () => {
    const r = parseSimConfig({
      descriptor: testDescriptor(),
      sim: { behaveAs: { model: { revision: 'rev-b' }, engine: { version: '0.12.0' } } },
    });
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.value.descriptor.model.revision).toBe('rev-a');
    expect(r.value.behaviour.model.revision).toBe('rev-b');
    expect(r.value.behaviour.model.path).toBe('/models/acme-llama-3-8b');
    expect(r.value.behaviour.engine.version).toBe('0.12.0');
    expect(r.value.lies).toBe(true);
  });

  it('rejects behaveAs keys the descriptor does not have', () => {
    const r = parseSimConfig({ descriptor: testDescriptor(), sim: { behaveAs: { kvCache: { dtipe: 'fp8' } } } });
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.error.message).toMatch(/error: sim\.behaveAs\.kvCache\.dtipe: unknown key "dtipe"\. Fix: did you mean "dtype"\?/);
  });

  it('refuses a max_model_len that does not fit in the KV cache, like vLLM at startup', () => {
    const r = parseSimConfig({ descriptor: testDescriptor(), sim: { maxModelLen: 4096, numGpuBlocks: 100 } });
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.error.message).toMatch(/raise sim\.numGpuBlocks to at least 256/);
  });
});

describe('loadSimConfigFile', () => {
  it('reads YAML and reports unreadable or malformed files as values', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'kvgate-sim-'));
    const good = join(dir, 'sim.yaml');
    await writeFile(good, `descriptor: ${JSON.stringify(testDescriptor())}\nsim:\n  servedModelName: llama\n  leaseMs: 1000\n`);
    const r = await loadSimConfigFile(good);
    expect(r.ok && r.value.sim.servedModelName).toBe('llama');
    const bad = join(dir, 'bad.yaml');
    await writeFile(bad, 'sim: [unclosed');
    const b = await loadSimConfigFile(bad);
    expect(b.ok).toBe(false);
    if (!b.ok) expect(b.error.message).toMatch(/not valid YAML/);
    const missing = await loadSimConfigFile(join(dir, 'nope.yaml'));
    expect(missing.ok).toBe(false);
  });
});

describe('deepMerge', () => {
  it('replaces scalars, arrays and null, and recurses into objects', () => {
    expect(deepMerge({ a: { b: 1, c: 2 }, l: [1, 2], n: { x: 1 } }, { a: { b: 3 }, l: [9], n: null })).toEqual({
      a: { b: 3, c: 2 },
      l: [9],
      n: null,
    });
  });
});
