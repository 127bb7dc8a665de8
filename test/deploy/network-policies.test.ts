/**
 * The example NetworkPolicies keep the trust boundaries docs/security.md states: monitoring reaches only the ports
 * that serve metrics (a worker's sidecar metrics port, the gate's admin port), never a port that serves completions,
 * ext_proc or drain; the sidecar's request port only from Envoy and the gate. And the sidecar configs put drain and
 * undrain on loopback and metrics on the port the policy opens.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { parseSidecarConfig } from '../../src/sidecar/config.js';

const read = (p: string) => readFileSync(new URL(`../../deploy/kubernetes/${p}`, import.meta.url), 'utf8');
type Peer = { podSelector?: { matchLabels: Record<string, string> }; namespaceSelector?: { matchLabels: Record<string, string> } };
type Rule = { from?: Peer[]; ports?: { port: number }[] };
const policies = parseAllDocuments(read('network-policies.yaml')).map(
  (d) => d.toJSON() as { metadata: { name: string }; spec: { ingress: Rule[] } },
);

/** The ports each kind of peer may reach under one policy. */
function portsFor(policy: string, isPeer: (p: Peer) => boolean): number[] {
  const spec = policies.find((p) => p.metadata.name === policy)!.spec;
  return spec.ingress.filter((r) => r.from?.some(isPeer)).flatMap((r) => (r.ports ?? []).map((p) => p.port));
}
const monitoring = (p: Peer) => p.namespaceSelector?.matchLabels['kubernetes.io/metadata.name'] === 'monitoring';

describe('deploy/kubernetes/network-policies.yaml', () => {
  it('lets monitoring reach only metrics ports: 9091 on workers, the admin port 9003 on the gate', () => {
    expect(portsFor('kvgate-workers', monitoring)).toEqual([9091]);
    expect(portsFor('kvgate-gate', monitoring)).toEqual([9003]);
  });

  it("opens the sidecar's request port 9090 to Envoy and the gate only", () => {
    const rules = policies
      .find((p) => p.metadata.name === 'kvgate-workers')!
      .spec.ingress.filter((r) => r.ports?.some((p) => p.port === 9090));
    const peers = rules.flatMap((r) => r.from ?? []).map((p) => p.podSelector?.matchLabels['app.kubernetes.io/name'] ?? 'other');
    expect(peers.sort()).toEqual(['kvgate-envoy', 'kvgate-gate']);
  });

  it('matches the sidecar configs: metrics on 9091, drain and undrain on loopback', () => {
    for (const role of ['decode', 'prefill']) {
      const raw = parseAllDocuments(read(`config/sidecar-${role}.yaml`))[0]!.toJSON() as Record<string, unknown>;
      const cfg = parseSidecarConfig({ ...raw, descriptorFile: undefined, descriptor: undefined, keys: { devSeed: 'x' } }, role);
      // The descriptor lives in another file; the ports are what this test is about.
      expect(raw['metrics']).toBe('0.0.0.0:9091');
      expect(raw['admin']).toMatch(/^127\.0\.0\.1:/);
      expect(cfg.ok || cfg.error.every((i) => i.path !== 'admin' && i.path !== 'metrics')).toBe(true);
    }
  });
});
