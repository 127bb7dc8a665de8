/**
 * deploy/kubernetes addresses workers by pod IP through the gate's discovery: every pool is a selector that matches
 * the pods of exactly its revision and role in workers.yaml, no Service pins a ClusterIP, and only the gate mounts a
 * service-account token, with read-only access to pods.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { PACKAGE_ROOT } from '../../src/package-root.js';
import { loadRouteTable } from '../../src/policy/load.js';

const K8S = path.join(PACKAGE_ROOT, 'deploy', 'kubernetes');
type Doc = Record<string, any>;
const docs = (f: string): Doc[] =>
  parseAllDocuments(readFileSync(path.join(K8S, f), 'utf8'))
    .map((d) => d.toJS() as Doc)
    .filter((d) => d !== null);
const all = ['workers.yaml', 'gate-deployment.yaml', 'envoy-deployment.yaml', 'rbac.yaml', 'network-policies.yaml'].flatMap(docs);
const workloads = all.filter((d) => ['Deployment', 'StatefulSet'].includes(d['kind']));

describe('deploy/kubernetes: pod-IP addressing and least privilege', () => {
  it("every pool selects exactly its revision's and role's worker pods", async () => {
    const t = await loadRouteTable(path.join(K8S, 'config', 'route-table.yaml'));
    if (!t.ok) throw new Error(JSON.stringify(t.error));
    for (const p of t.value.pools.values()) {
      expect(p.discovery, `${p.name} is found by selector`).not.toBeNull();
      expect(p.endpoints).toEqual([]);
      const k = p.discovery!.kubernetes;
      const want = { ...k.matchLabels, [k.revisionLabel]: p.revision };
      const matching = workloads.filter((w) =>
        Object.entries(want).every(([key, v]) => w['spec']['template']['metadata']['labels'][key] === v),
      );
      expect(
        matching.map((w) => w['metadata']['name']),
        p.name,
      ).toHaveLength(1);
      const ports = matching[0]!['spec']['template']['spec']['containers'].flatMap((c: Doc) =>
        (c['ports'] ?? []).map((x: Doc) => x['containerPort']),
      );
      expect(ports).toContain(k.targetPort);
      expect(k.expectedEndpoints, `${p.name}: Envoy is sized for the replicas`).toBe(matching[0]!['spec']['replicas']);
    }
  });

  it('the README and the manifest comments describe the Services that exist: none in front of the workers', () => {
    const services = all.filter((d) => d['kind'] === 'Service');
    expect(docs('workers.yaml').filter((d) => d['kind'] === 'Service')).toEqual([]);
    const row = readFileSync(path.join(K8S, 'README.md'), 'utf8')
      .split('\n')
      .find((l) => l.startsWith('| `workers.yaml` |'))!;
    expect(row).not.toMatch(/(per-worker|pool) Services/);
    // A comment that relies on a Service field no Service sets (it once named publishNotReadyAddresses).
    for (const f of ['workers.yaml', 'config/sidecar-decode.yaml', 'config/sidecar-prefill.yaml']) {
      const text = readFileSync(path.join(K8S, f), 'utf8');
      if (text.includes('publishNotReadyAddresses')) expect(services.some((s) => s['spec']['publishNotReadyAddresses'])).toBe(true);
      expect(text, f).not.toMatch(/per-worker Service ignores|pool Service \(|pod's own Service/);
    }
  });

  it('no Service pins a ClusterIP', () => {
    for (const s of all.filter((d) => d['kind'] === 'Service')) expect([undefined, 'None']).toContain(s['spec']['clusterIP']);
  });

  it('the gate alone mounts a token, and may only get/list/watch pods', () => {
    for (const sa of all.filter((d) => d['kind'] === 'ServiceAccount')) {
      expect(sa['automountServiceAccountToken'], sa['metadata']['name']).toBe(sa['metadata']['name'] === 'kvgate-gate');
    }
    for (const w of workloads) {
      const spec = w['spec']['template']['spec'];
      if (spec['serviceAccountName'] !== 'kvgate-gate') expect(spec['automountServiceAccountToken'], w['metadata']['name']).toBe(false);
    }
    const roles = all.filter((d) => d['kind'] === 'Role' || d['kind'] === 'ClusterRole');
    expect(roles.map((r) => [r['kind'], r['rules']])).toEqual([
      ['Role', [{ apiGroups: [''], resources: ['pods'], verbs: ['get', 'list', 'watch'] }]],
    ]);
    const binding = all.find((d) => d['kind'] === 'RoleBinding')!;
    expect(binding['subjects']).toEqual([{ kind: 'ServiceAccount', name: 'kvgate-gate', namespace: 'kvgate' }]);
  });
});
