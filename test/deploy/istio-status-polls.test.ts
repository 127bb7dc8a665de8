/**
 * On Istio the gate's status polls must reach the workers. The gate polls each discovered pod at its IP, and an Istio
 * sidecar sends pod-IP traffic through its PassthroughCluster without mTLS (istio/istio
 * pilot/pkg/networking/core/httproute.go @86c9f01f: a Service's virtual host lists its names and ClusterIP, never its
 * pods' IPs; istio/istio#37431). So a STRICT port, or a status rule that requires a caller principal, would refuse
 * every poll and leave every worker unverified: every request refused. Completions on the same port must stay
 * mTLS-only, which the principal-bound POST rule keeps.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { PACKAGE_ROOT } from '../../src/package-root.js';
import { loadRouteTable } from '../../src/policy/load.js';

type Doc = Record<string, any>;
const docs = (f: string): Doc[] =>
  parseAllDocuments(readFileSync(path.join(PACKAGE_ROOT, f), 'utf8'))
    .map((d) => d.toJS() as Doc)
    .filter((d) => d !== null);
const security = docs('envoy/istio/security.yaml');
const WORKER = { 'app.kubernetes.io/name': 'vllm' };

/** The ports the gate polls: every selector pool's statusPort in the Kubernetes route table. */
async function statusPorts(): Promise<number[]> {
  const t = await loadRouteTable(path.join(PACKAGE_ROOT, 'deploy', 'kubernetes', 'config', 'route-table.yaml'));
  if (!t.ok) throw new Error(JSON.stringify(t.error));
  return [...new Set([...t.value.pools.values()].map((p) => p.discovery!.kubernetes.statusPort))];
}

/** Istio's effective mTLS mode on a worker port: the workload-selector policy's port level, then its own, then the namespace's. */
function workerMode(port: number): string {
  const pas = security.filter((d) => d['kind'] === 'PeerAuthentication');
  const own = pas.find((d) => JSON.stringify(d['spec']['selector']?.['matchLabels']) === JSON.stringify(WORKER));
  const ns = pas.find((d) => d['spec']['selector'] === undefined);
  return (
    own?.['spec']['portLevelMtls']?.[port]?.['mode'] ?? own?.['spec']['mtls']?.['mode'] ?? ns?.['spec']['mtls']?.['mode'] ?? 'PERMISSIVE'
  );
}

describe('envoy/istio: the gate can read every worker status', () => {
  it('the status port is not STRICT on the workers, and nothing else of theirs is opened', async () => {
    for (const port of await statusPorts()) expect(workerMode(port), `port ${String(port)}`).not.toBe('STRICT');
    expect(workerMode(9091)).toBe('STRICT');
  });

  it('the status read needs no caller principal; completions on the same port still need a gateway principal', async () => {
    const policy = security.find((d) => d['kind'] === 'AuthorizationPolicy' && d['metadata']['name'] === 'kvgate-workers')!;
    const rules: Doc[] = policy['spec']['rules'];
    const ops = (r: Doc): Doc[] => (r['to'] ?? []).map((t: Doc) => t['operation']);
    for (const port of await statusPorts()) {
      const status = rules.filter((r) =>
        ops(r).some(
          (o) => o['ports']?.includes(String(port)) && o['paths']?.includes('/kvgate/v1/status') && o['methods']?.includes('GET'),
        ),
      );
      expect(status.length, `a rule allows GET /kvgate/v1/status on ${String(port)}`).toBeGreaterThan(0);
      expect(status.some((r) => r['from'] === undefined)).toBe(true);
      const posts = rules.filter((r) => ops(r).some((o) => o['ports']?.includes(String(port)) && o['methods']?.includes('POST')));
      expect(posts.length).toBeGreaterThan(0);
      for (const r of posts) {
        const principals = (r['from'] ?? []).flatMap((f: Doc) => f['source']?.['principals'] ?? []);
        expect(principals.length, 'a POST rule names its principals').toBeGreaterThan(0);
      }
    }
  });

  it("the gate pod's status polls bypass its Istio proxy (no REGISTRY_ONLY blackhole)", async () => {
    const gate = docs('deploy/kubernetes/gate-deployment.yaml').find((d) => d['kind'] === 'Deployment')!;
    const excluded = String(gate['spec']['template']['metadata']['annotations']['traffic.sidecar.istio.io/excludeOutboundPorts'] ?? '')
      .split(',')
      .map((p) => Number(p.trim()));
    for (const port of await statusPorts()) expect(excluded).toContain(port);
  });
});
