/**
 * The Istio and Envoy Gateway sets route each pool to a Kubernetes Service (they cannot name a pod the way
 * envoy.yaml's ORIGINAL_DST clusters do), and deploy/kubernetes defines none in front of the workers. So every
 * Service those routes name must be in the rendered set itself and select exactly the pool's worker pods in
 * workers.yaml, on a port their sidecar listens on; a route to a Service that does not exist is a 503 for every
 * request of that pool.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { PACKAGE_ROOT } from '../../src/package-root.js';

type Doc = Record<string, any>;
const docs = (f: string): Doc[] =>
  parseAllDocuments(readFileSync(path.join(PACKAGE_ROOT, f), 'utf8'))
    .map((d) => d.toJS() as Doc)
    .filter((d) => d !== null);
const workloads = docs('deploy/kubernetes/workers.yaml').filter((d) => d['kind'] === 'StatefulSet');

/** The Services named by a file's routes: VirtualService destinations, HTTPRoute backendRefs. */
function routedServices(all: readonly Doc[]): { name: string; port: number }[] {
  const out: { name: string; port: number }[] = [];
  for (const d of all) {
    if (d['kind'] === 'VirtualService') {
      for (const r of d['spec']['http'] ?? []) {
        for (const dest of r['route'] ?? []) {
          out.push({ name: String(dest['destination']['host']).split('.')[0]!, port: dest['destination']['port']['number'] });
        }
      }
    }
    if (d['kind'] === 'HTTPRoute') {
      for (const r of d['spec']['rules'] ?? []) for (const b of r['backendRefs'] ?? []) out.push({ name: b['name'], port: b['port'] });
    }
  }
  return out;
}

describe('envoy/istio: the Services the mesh routes name', () => {
  for (const file of ['envoy/istio/routing.yaml', 'envoy/istio/envoy-gateway.yaml']) {
    it(`${file}: every routed Service is defined there and selects exactly one pool's worker pods on the sidecar's port`, () => {
      const all = docs(file);
      const services = new Map(all.filter((d) => d['kind'] === 'Service').map((d) => [d['metadata']['name'] as string, d]));
      // Envoy Gateway's catch-all points at no backend on purpose (a 500, fail closed).
      const routed = routedServices(all).filter((r) => r.name !== 'kvgate-no-such-pool');
      expect(routed.length).toBeGreaterThan(0);
      for (const r of routed) {
        const svc = services.get(r.name);
        expect(svc, `${file}: a route names Service ${r.name}, which no manifest defines`).toBeDefined();
        const port = (svc!['spec']['ports'] as Doc[]).find((p) => p['port'] === r.port);
        expect(port, `${r.name} has port ${String(r.port)}`).toBeDefined();
        const selector: Record<string, string> = svc!['spec']['selector'];
        const pods = workloads.filter((w) =>
          Object.entries(selector).every(([k, v]) => w['spec']['template']['metadata']['labels'][k] === v),
        );
        expect(
          pods.map((w) => w['metadata']['name']),
          `${r.name} selects one worker StatefulSet`,
        ).toHaveLength(1);
        const sidecar = (pods[0]!['spec']['template']['spec']['containers'] as Doc[]).find((c) => c['name'] === 'kvgate-sidecar');
        expect(
          (sidecar?.['ports'] ?? []).map((p: Doc) => p['containerPort']),
          `${r.name}: targetPort is the sidecar's`,
        ).toContain(port!['targetPort']);
      }
    });
  }
});
