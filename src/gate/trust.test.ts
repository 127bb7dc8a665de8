import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import { createDevKeyRing } from '../contract/keys.js';
import { decide } from '../decide/decide.js';
import { createTestWorkerView, testFacts, testKeys } from '../decide/testing.js';
import { TEST_NOW_MS } from '../../test/support/clock.js';
import { clone, tableFromValue, twoRevisionTableValue } from '../policy/testing.js';
import { localGateConfig } from './testing.js';
import { startGate, type RunningGate } from './gate.js';

type Value = Record<string, any>;

/** llama-b routed on its declaration alone; every new session goes to it. */
function declaredOnlyB(): Value {
  const v = clone(twoRevisionTableValue()) as Value;
  delete v['revisions']['llama-b']['descriptor']['canaries'];
  v['revisions']['llama-b']['trust'] = 'declared-only';
  v['models']['llama-3-8b']['rollout'] = { stable: 'llama-b' };
  return v;
}

describe('trust: declared-only is loud', () => {
  let gate: RunningGate | undefined;
  let dir: string | undefined;
  afterEach(async () => {
    await gate?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
    gate = undefined;
  });

  it('a refusal after binding to a declared-only revision names the revision and its trust (the audit line carries both)', () => {
    const table = tableFromValue(declaredOnlyB());
    const view = createTestWorkerView(table, { '10.0.4.1:9090': { verified: false } });
    const d = decide(testFacts({ tenant: 'acme' }), table, view, { nowMs: TEST_NOW_MS, keys: testKeys() });
    expect(d).toMatchObject({ kind: 'refuse', code: 'no_compatible_capacity', revision: 'llama-b', trust: 'declared-only' });
  });

  it('a route to a declared-only revision carries its trust (decision lines and refusals behind the route name it)', () => {
    const table = tableFromValue(declaredOnlyB());
    const d = decide(testFacts({ tenant: 'acme' }), table, createTestWorkerView(table), { nowMs: TEST_NOW_MS, keys: testKeys() });
    expect(d).toMatchObject({ kind: 'route', group: { revision: 'llama-b' }, trust: 'declared-only' });
    const recorded = tableFromValue(twoRevisionTableValue());
    const r = decide(testFacts({ tenant: 'acme' }), recorded, createTestWorkerView(recorded), { nowMs: TEST_NOW_MS, keys: testKeys() });
    expect(r).not.toHaveProperty('trust');
  });

  it('/status lists it and kvgate_revision_trust labels it', async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'kvgate-trust-'));
    await writeFile(path.join(dir, 'route-table.json'), JSON.stringify(declaredOnlyB()));
    const registry = new Registry();
    gate = await startGate(localGateConfig(dir, 'route-table.json'), {
      logger: pino({ enabled: false }),
      keys: createDevKeyRing('x'),
      registry,
      defaultMetrics: false,
    });
    const status = gate.status() as { trust: unknown; rollout: Array<{ revision: string; trust: string }> };
    expect(status.trust).toEqual({ revisions: { 'llama-a': 'recorded', 'llama-b': 'declared-only' }, declaredOnly: ['llama-b'] });
    expect(status.rollout.find((r) => r.revision === 'llama-b')?.trust).toBe('declared-only');
    const text = await registry.metrics();
    expect(text).toContain('kvgate_revision_trust{revision="llama-b",trust="declared-only"} 1');
    expect(text).toContain('kvgate_revision_trust{revision="llama-a",trust="recorded"} 1');
  });
});
