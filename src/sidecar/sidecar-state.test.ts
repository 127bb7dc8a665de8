import { pino } from 'pino';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { exampleDescriptorInput } from '../compat/testing.js';
import { parseSidecarConfig } from './config.js';
import { createSidecarMetrics } from './metrics.js';
import { SidecarState, staleVerdictMs } from './sidecar-state.js';

function config() {
  const r = parseSidecarConfig(
    {
      role: 'decode',
      worker: 'http://127.0.0.1:8000',
      descriptor: exampleDescriptorInput(),
      keys: { devSeed: 'x' },
      nixlSideChannel: '127.0.0.1:5600',
    },
    'sidecar.yaml',
  );
  if (!r.ok) throw new Error(JSON.stringify(r.error));
  return r.value;
}

describe('the probe verdict goes stale when the probe loop stops keeping up', () => {
  it('a verified verdict older than 3 intervals + 4 timeouts no longer vouches for the worker; the next round restores it', () => {
    const cfg = config();
    let t = 1_000_000;
    const state = new SidecarState(cfg, createSidecarMetrics(new Registry()), pino({ level: 'silent' }), () => t);
    const verified = { verified: true, reasons: [], measured: {}, declaredOnly: [] };
    state.recordProbe(verified, false);
    expect(staleVerdictMs(cfg.probe)).toBe(65_000); // the defaults: 15 s interval, 5 s timeout
    t += 65_000;
    expect(state.status().verified).toBe(true);
    t += 1;
    const stale = state.status();
    expect(stale.verified).toBe(false);
    expect(stale.reasons).toEqual([
      'the last probe finished 65001 ms ago, more than 65000 ms (3 x probe.intervalMs + 4 x probe.timeoutMs): the verdict is stale, the probe loop is not keeping up',
    ]);
    state.recordProbe(verified, false);
    expect(state.status().verified).toBe(true);
  });

  it('says whether the last round found the worker down, which the launch check answers 502 rather than 409', () => {
    const state = new SidecarState(config(), createSidecarMetrics(new Registry()), pino({ level: 'silent' }), () => 0);
    const unverified = {
      verified: false,
      reasons: ['the worker is down or unreachable: connect ECONNREFUSED'],
      measured: {},
      declaredOnly: [],
    };
    state.recordProbe(unverified, true);
    expect(state.status().workerDown).toBe(true);
    state.recordProbe({ ...unverified, reasons: ['generation canary differs'] }, false);
    expect(state.status().workerDown).toBe(false);
  });
});
