/**
 * Counters that alerts watch with `increase(...) > 0` (deploy/kubernetes/monitoring.yaml) start every label value
 * they can count at 0: a series that first appears at 1 has no earlier sample, so Prometheus' `increase()` misses the
 * first event after a process starts, which for a mixed-revision refusal or an unknown key id is the one that matters.
 */
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SimServer } from '../../testbed/sim/server.js';
import { startTestSim } from '../../testbed/sim/testing.js';
import { sidecarConfigFor, startTestSidecar } from '../../src/sidecar/testing.js';
import { ERROR_STATUS } from '../../src/errors.js';
import { createGateMetrics } from '../../src/gate/metrics.js';
import { createSidecarMetrics } from '../../src/sidecar/metrics.js';
import { ATTESTATION_REFUSAL_REASONS } from '../../src/sidecar/attestation-check.js';
import { CONTRACT_REFUSAL_REASONS } from '../../src/sidecar/contract-check.js';
import { BODY_BINDING_FAILURE_REASONS } from '../../src/contract/body-binding.js';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { stringify as toYaml } from 'yaml';
import { createDevKeyRing } from '../../src/contract/keys.js';
import { startGate } from '../../src/gate/gate.js';
import { localGateConfig } from '../../src/gate/testing.js';
import { twoRevisionTableValue } from '../../src/policy/testing.js';

async function exposition(register: (r: Registry) => unknown): Promise<string> {
  const r = new Registry();
  register(r);
  return r.metrics();
}

describe('counters that alerts watch start at 0', () => {
  it('the gate: a refusal series for every code, before any request', async () => {
    const text = await exposition(createGateMetrics);
    for (const code of Object.keys(ERROR_STATUS)) {
      expect(text).toContain(`kvgate_decisions_total{outcome="refuse",code="${code}",revision=""} 0`);
    }
  });

  it('the sidecar: every contract and attestation refusal reason, before any request', async () => {
    const text = await exposition(createSidecarMetrics);
    for (const reason of [...CONTRACT_REFUSAL_REASONS, 'wrong_endpoint', 'replayed', ...BODY_BINDING_FAILURE_REASONS]) {
      expect(text).toContain(`kvgate_sidecar_contract_failures_total{reason="${reason}"} 0`);
    }
    for (const reason of ATTESTATION_REFUSAL_REASONS) {
      expect(text).toContain(`kvgate_sidecar_attestation_failures_total{reason="${reason}"} 0`);
    }
    expect(text).toContain('kvgate_sidecar_contract_failures_total{reason="unknown_key"} 0');
  });

  it("a running gate: refusals behind a route for every revision of the table in use, a reloaded table's too", async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'kvgate-first-event-'));
    const table = path.join(dir, 'route-table.yaml');
    await writeFile(table, toYaml(twoRevisionTableValue()));
    const gate = await startGate(localGateConfig(dir, table), {
      logger: pino({ level: 'silent' }),
      keys: createDevKeyRing('x'),
      registry: new Registry(),
      defaultMetrics: false,
    });
    try {
      const refusedSeries = async (revision: string): Promise<string[]> =>
        (await gate.registry.metrics())
          .split('\n')
          .filter((l) => l.startsWith(`kvgate_routed_responses_total{revision="${revision}",outcome="refused",`));
      for (const revision of ['llama-a', 'llama-b']) {
        const lines = await refusedSeries(revision);
        for (const code of ['contract_invalid', 'attestation_invalid', 'incompatible_transfer', 'worker_unverified']) {
          expect(lines).toContain(`kvgate_routed_responses_total{revision="${revision}",outcome="refused",code="${code}"} 0`);
        }
        // A sidecar's own failure is counted as failed, not refused (routed-outcome.ts): no refused series for it.
        expect(lines.some((l) => l.includes('code="worker_error"') || l.includes('code="internal"'))).toBe(false);
      }
      expect(await refusedSeries('llama-z')).toEqual([]);
      // The reload renames a revision: its series start at 0 with the table that names it.
      await writeFile(table, toYaml(JSON.parse(JSON.stringify(twoRevisionTableValue()).replaceAll('"llama-b"', '"llama-z"'))));
      const r = await gate.policy.reload('SIGHUP');
      expect(r.ok, r.message).toBe(true);
      expect(await refusedSeries('llama-z')).toContain(
        'kvgate_routed_responses_total{revision="llama-z",outcome="refused",code="contract_invalid"} 0',
      );
    } finally {
      await gate.close();
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('a running sidecar: worker restarts under its role, both results', async () => {
    const t = await startTestSidecar(await sidecarConfigFor(sim!, 'decode'));
    try {
      const text = await (await fetch(`${t.sidecar.url}/metrics`)).text();
      expect(text).toContain('kvgate_sidecar_worker_restarts_total{role="decode",result="refused"} 0');
      expect(text).toContain('kvgate_sidecar_worker_restarts_total{role="decode",result="reverified"} 0');
    } finally {
      await t.sidecar.close();
    }
  });
});

let sim: SimServer | undefined;
beforeAll(async () => {
  sim = await startTestSim();
});
afterAll(async () => {
  await sim?.close();
});
