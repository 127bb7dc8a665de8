/**
 * The gate the end-to-end tests start, and the Envoy-faithful harness in front of it: one place for the test gate's
 * config (TLS listener on the dev PKI, no admin port, the route table next to the config, dev keys, a static worker
 * view, no drain announce) and for the harness running the shipped envoy/envoy.yaml against it over mTLS.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import type { Logger } from 'pino';
import { Registry } from 'prom-client';
import { stringify as toYaml } from 'yaml';
import { type GateConfig, parseGateConfig } from '../../src/gate/config.js';
import { createDevKeyRing } from '../../src/contract/keys.js';
import { type RunningGate, type StartGateDeps, startGate } from '../../src/gate/gate.js';
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

/**
 * A gate whose selector pools are found through a Kubernetes API server (testbed/kube-apiserver's `kubeConfig`), with
 * a live worker view polling every `pollMs`, and the shipped harness in front of it (or what `harness` starts, e.g. a
 * GIE data plane; `extra` replaces top-level gate settings). The caller closes both.
 */
export async function startDiscoveringGate(o: {
  readonly dir: string;
  readonly pki: DevPki;
  readonly seed: string;
  readonly kubeConfig: NonNullable<StartGateDeps['kubeConfig']>;
  readonly pollMs: number;
  readonly logger: Logger;
  readonly extra?: Record<string, unknown>;
  readonly harness?: (gate: RunningGate) => Promise<EnvoyHarness>;
}): Promise<{ gate: RunningGate; harness: EnvoyHarness }> {
  const cfg = e2eGateConfig(o.dir, o.pki, o.seed, {
    workerView: { mode: 'live', intervalMs: o.pollMs, timeoutMs: 500, staleAfterMs: 2000 },
    discovery: { staleAfterMs: 5000 },
    ...o.extra,
  });
  const gate = await startGate(cfg, {
    logger: o.logger,
    keys: createDevKeyRing(o.seed),
    registry: new Registry(),
    defaultMetrics: false,
    kubeConfig: o.kubeConfig,
    discoveryBackoff: { initialMs: 20, maxMs: 100 },
  });
  try {
    return { gate, harness: await (o.harness ?? ((g) => shippedHarnessFor(g, o.pki)))(gate) };
  } catch (e) {
    await gate.close();
    throw e;
  }
}
