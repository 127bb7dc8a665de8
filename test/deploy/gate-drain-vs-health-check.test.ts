/**
 * A draining gate keeps answering for drain.announceMs, then refuses new streams; Envoy must have taken it out of
 * rotation by then, or the streams it still sends there fail closed (500, failure_mode_allow: false). Envoy's gRPC
 * health check ejects a host at its first non-SERVING answer (source/common/upstream/health_checker_impl.cc
 * `setUnhealthy`: only network failures wait for unhealthy_threshold), and checks run `interval` after the last
 * answer, each taking up to `timeout`: the draining gate is out within interval + timeout. Until the Envoy has sent
 * the gate cluster any traffic, the wait is `no_traffic_interval` instead (60 s unless set;
 * source/extensions/health_checkers/common/health_checker_base_impl.cc `interval`, envoyproxy/envoy @045a5b1a), so the
 * longer of the two counts. announceMs, as shipped and as defaulted, must exceed that for every shipped Envoy
 * bootstrap's gate clusters (test/e2e/gate-rolling-restart shows what happens otherwise, warm and cold).
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { parseGateConfig } from '../../src/gate/config.js';
import { PACKAGE_ROOT } from '../../src/package-root.js';

const read = (f: string) => readFileSync(path.join(PACKAGE_ROOT, f), 'utf8');
const seconds = (d: string) => Number(d.replace(/s$/, '')) * 1000;

/** Envoy's `no_traffic_interval` when a health check does not set it. */
const ENVOY_NO_TRAFFIC_DEFAULT = '60s';

/** The longer of interval and no_traffic_interval, plus timeout, of each gate cluster's health check in a bootstrap. */
function reachMs(bootstrap: string): Array<{ cluster: string; ms: number }> {
  const doc = parseYaml(read(bootstrap)) as {
    static_resources: {
      clusters: Array<{ name: string; health_checks?: Array<{ interval: string; timeout: string; no_traffic_interval?: string }> }>;
    };
  };
  return doc.static_resources.clusters
    .filter((c) => c.name.startsWith('kvgate_gate'))
    .map((c) => {
      const hc = c.health_checks?.[0];
      expect(hc, `${bootstrap}: ${c.name} has a health check`).toBeDefined();
      const wait = Math.max(seconds(hc!.interval), seconds(hc!.no_traffic_interval ?? ENVOY_NO_TRAFFIC_DEFAULT));
      return { cluster: c.name, ms: wait + seconds(hc!.timeout) };
    });
}

describe('drain.announceMs outlasts Envoy ejecting the draining gate', () => {
  it('the Kubernetes example: its gate.yaml against its envoy.yaml', () => {
    const announce = (parseYaml(read('deploy/kubernetes/config/gate.yaml')) as { drain: { announceMs: number } }).drain.announceMs;
    for (const r of reachMs('deploy/kubernetes/config/envoy.yaml')) expect(announce, r.cluster).toBeGreaterThan(r.ms);
  });

  it('the Istio gateways: the EnvoyFilter that health-checks the gate cluster, against the Kubernetes gate.yaml', () => {
    const announce = (parseYaml(read('deploy/kubernetes/config/gate.yaml')) as { drain: { announceMs: number } }).drain.announceMs;
    const filters = read('envoy/istio/ext-proc.yaml')
      .split('\n---\n')
      .map((d) => parseYaml(d) as { kind?: string; spec?: { configPatches?: Array<Record<string, any>> } })
      .filter((d) => d?.kind === 'EnvoyFilter');
    const checks = filters.flatMap((f) =>
      (f.spec?.configPatches ?? [])
        .filter((p) => p['applyTo'] === 'CLUSTER')
        .flatMap((p) => p['patch']?.['value']?.['health_checks'] ?? []),
    ) as Array<{ interval: string; timeout: string; no_traffic_interval?: string }>;
    expect(checks.length).toBeGreaterThan(0);
    for (const hc of checks) {
      const wait = Math.max(seconds(hc.interval), seconds(hc.no_traffic_interval ?? ENVOY_NO_TRAFFIC_DEFAULT));
      expect(announce).toBeGreaterThan(wait + seconds(hc.timeout));
    }
  });

  it('the default, against the plain envoy/envoy.yaml', () => {
    const cfg = parseGateConfig('policy: route-table.yaml\nkeys: { devSeed: x }\ninsecure: true\n', path.join(PACKAGE_ROOT, 'gate.yaml'));
    if (!cfg.ok) throw new Error(JSON.stringify(cfg.error));
    for (const r of reachMs('envoy/envoy.yaml')) expect(cfg.value.drain.announceMs, r.cluster).toBeGreaterThan(r.ms);
  });

  it('the GIE endpoint picker: its gate.yaml against the EPP readiness probe, which is how gateways drop a draining EPP', () => {
    // GIE gateways reach the EPP through its Service; a draining EPP leaves the Service's endpoints once the kubelet's
    // readiness probe failed failureThreshold times (Kubernetes' default 3), periodSeconds apart, and the EndpointSlice
    // change then has to reach the gateway (a margin of 2 s here).
    const drain = (parseYaml(read('deploy/gie/config/gate.yaml')) as { drain: { announceMs: number; graceMs: number } }).drain;
    const epp = parseYaml(
      read('deploy/gie/epp.yaml')
        .split('\n---\n')
        .find((d) => /kind: Deployment/.test(d))!,
    ) as {
      spec: {
        template: {
          spec: {
            terminationGracePeriodSeconds: number;
            containers: Array<{ name: string; readinessProbe: { periodSeconds?: number; failureThreshold?: number } }>;
          };
        };
      };
    };
    const pod = epp.spec.template.spec;
    const probe = pod.containers.find((c) => c.name === 'gate')!.readinessProbe;
    const ejectMs = (probe.periodSeconds ?? 10) * (probe.failureThreshold ?? 3) * 1000 + 2000;
    expect(drain.announceMs).toBeGreaterThan(ejectMs);
    expect(drain.announceMs + drain.graceMs).toBeLessThan(pod.terminationGracePeriodSeconds * 1000);
  });

  it('the Envoy Gateway alternative: its EnvoyExtensionPolicy health-checks the gate within the Kubernetes gate.yaml announce window', () => {
    const announce = (parseYaml(read('deploy/kubernetes/config/gate.yaml')) as { drain: { announceMs: number } }).drain.announceMs;
    const policy = read('envoy/istio/envoy-gateway.yaml')
      .split('\n---\n')
      .map((d) => parseYaml(d) as { kind?: string; spec?: { extProc?: Array<{ backendSettings?: { healthCheck?: unknown } }> } })
      .find((d) => d?.kind === 'EnvoyExtensionPolicy');
    const active = (policy?.spec?.extProc?.[0]?.backendSettings?.healthCheck as { active?: Record<string, unknown> } | undefined)?.active;
    // Without an active check the proxies drop a draining gate only through its readiness probe and the EndpointSlice.
    expect(active, 'backendSettings.healthCheck.active').toMatchObject({
      type: 'GRPC',
      grpc: { service: 'envoy.service.ext_proc.v3.ExternalProcessor' },
    });
    expect(announce).toBeGreaterThan(seconds(active!['interval'] as string) + seconds(active!['timeout'] as string));
  });
});
