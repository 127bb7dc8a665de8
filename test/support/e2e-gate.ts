/**
 * The gate the end-to-end tests start, and the Envoy-faithful harness in front of it: one place for the test gate's
 * config (TLS listener on the dev PKI, no admin port, the route table next to the config, dev keys, a static worker
 * view, no drain announce) and for the harness running the shipped envoy/envoy.yaml against it over mTLS.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { stringify as toYaml } from 'yaml';
import { type GateConfig, parseGateConfig } from '../../src/gate/config.js';
import type { RunningGate } from '../../src/gate/gate.js';
import { PACKAGE_ROOT } from '../../src/package-root.js';
import { type EnvoyHarness, mustLoadEnvoyConfig, startEnvoyHarness } from '../../testbed/harness/index.js';
import { type DevPki, devGateTls, shippedEnvoyTls } from '../../testbed/tls/dev-pki.js';

/** The test gate's config, for a gate whose `route-table.yaml` is in `dir`; `extra` replaces any top-level setting. */
export function e2eGateConfig(dir: string, pki: DevPki, seed: string, extra: Record<string, unknown> = {}): GateConfig {
  const cfg = parseGateConfig(
    toYaml({
      listen: '127.0.0.1:0',
      admin: '',
      tls: devGateTls(pki),
      policy: 'route-table.yaml',
      keys: { devSeed: seed },
      workerView: { mode: 'static' },
      drain: { announceMs: 0, graceMs: 1000 },
      ...extra,
    }),
    path.join(dir, 'gate.yaml'),
  );
  if (!cfg.ok) throw new Error(JSON.stringify(cfg.error));
  return cfg.value;
}

/** The harness running the shipped envoy/envoy.yaml, its ext_proc clusters pointed at `gate` over mTLS. */
export function shippedHarnessFor(
  gate: RunningGate,
  pki: DevPki,
  options?: Parameters<typeof startEnvoyHarness>[1],
): Promise<EnvoyHarness> {
  const yaml = readFileSync(path.join(PACKAGE_ROOT, 'envoy', 'envoy.yaml'), 'utf8');
  return startEnvoyHarness(
    mustLoadEnvoyConfig(yaml, { listenerPorts: { public: 0, internal: 0 }, ...shippedEnvoyTls(pki, `127.0.0.1:${gate.grpcPort}`) }),
    options,
  );
}
