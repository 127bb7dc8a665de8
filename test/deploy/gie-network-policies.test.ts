/**
 * With kvgate as an InferencePool's endpoint picker, the NetworkPolicies in force (deploy/kubernetes plus deploy/gie
 * plus the chosen gateway's file) must let the EPP poll every worker's sidecar and let the gateway's proxy reach the
 * endpoints the EPP picks, both on the sidecar port, and still nothing else there.
 *
 * The NetworkPolicy evaluator and its sources: test/support/network-policy.ts.
 *
 * Where each gateway runs its proxy pods, and their labels, is upstream's fact, recorded below with its source.
 */
import { describe, expect, it } from 'vitest';
import { admits, docs, NS, type Pod, policiesIn } from '../support/network-policy.js';
import { shippedUcxPorts } from '../support/vllm-pods.js';

const BASE = [...policiesIn('deploy/kubernetes/network-policies.yaml'), ...policiesIn('deploy/gie/network-policies.yaml')];
const workers: Pod[] = docs('deploy/kubernetes/workers.yaml')
  .filter((d) => d['kind'] === 'StatefulSet')
  .map((d) => ({ namespace: NS, labels: d['spec']['template']['metadata']['labels'] }));
const epp: Pod = {
  namespace: NS,
  labels: docs('deploy/gie/epp.yaml').find((d) => d['kind'] === 'Deployment')!['spec']['template']['metadata']['labels'],
};
const gatewayName = (dir: string): string =>
  docs(`deploy/gie/${dir}/gateway.yaml`).find((d) => d['kind'] === 'Gateway')!['metadata']['name'];

/** The gateway proxy pods each implementation runs for the example Gateway. */
const GATEWAYS: { dir: string; pod: (name: string) => Pod }[] = [
  // istio/istio manifests/charts/istio-control/istio-discovery/files/kube-gateway.yaml @03404d0f: the Deployment in
  // the Gateway's namespace, pod label gateway.networking.k8s.io/gateway-name=<Gateway name>.
  {
    dir: 'istio',
    pod: (name) => ({
      namespace: NS,
      labels: { 'gateway.networking.k8s.io/gateway-name': name, 'gateway.istio.io/managed': 'istio.io-gateway-controller' },
    }),
  },
  // envoyproxy/gateway internal/infrastructure/kubernetes/proxy/resource_provider.go @00ec57c2: the Deployment in the
  // controller's namespace (envoy-gateway-system by default), labels app.kubernetes.io/{name: envoy, component: proxy,
  // managed-by: envoy-gateway} plus the owning Gateway's name and namespace.
  {
    dir: 'envoy-gateway',
    pod: (name) => ({
      namespace: 'envoy-gateway-system',
      labels: {
        'app.kubernetes.io/name': 'envoy',
        'app.kubernetes.io/component': 'proxy',
        'app.kubernetes.io/managed-by': 'envoy-gateway',
        'gateway.envoyproxy.io/owning-gateway-name': name,
        'gateway.envoyproxy.io/owning-gateway-namespace': NS,
      },
    }),
  },
];

const SIDECAR = 9090;
/** Worker ports no gateway or EPP may reach; with both ends of vLLM's UCX TCP range (open between workers only). */
function otherPorts(): number[] {
  const ucx = shippedUcxPorts();
  return [9091, 5600, 9092, 8000, ucx[0]!, ucx.at(-1)!];
}

describe('deploy/gie: NetworkPolicies with kvgate as the endpoint picker', () => {
  it('the kustomization applies deploy/gie/network-policies.yaml', () => {
    expect(docs('deploy/gie/kustomization.yaml')[0]!['resources']).toContain('network-policies.yaml');
  });

  it("the EPP reaches every worker's sidecar port, and no other worker port", () => {
    expect(workers.length).toBeGreaterThan(0);
    for (const w of workers) {
      expect(admits(BASE, epp, w, SIDECAR), JSON.stringify(w.labels)).toBe(true);
      for (const port of otherPorts()) expect(admits(BASE, epp, w, port), `EPP -> ${port}`).toBe(false);
    }
  });

  for (const g of GATEWAYS) {
    it(`${g.dir}: the gateway's proxy reaches every worker's sidecar port, and no other worker port`, () => {
      const policies = [...BASE, ...policiesIn(`deploy/gie/${g.dir}/gateway.yaml`)];
      const proxy = g.pod(gatewayName(g.dir));
      for (const w of workers) {
        expect(admits(policies, proxy, w, SIDECAR), `${g.dir} proxy -> ${JSON.stringify(w.labels)}`).toBe(true);
        for (const port of otherPorts()) expect(admits(policies, proxy, w, port), `${g.dir} proxy -> ${port}`).toBe(false);
      }
      // The same labels elsewhere, or another pod of the gateway's namespace, get nothing.
      const w = workers[0]!;
      expect(admits(policies, { namespace: 'elsewhere', labels: proxy.labels }, w, SIDECAR)).toBe(proxy.namespace === 'elsewhere');
      expect(admits(policies, { namespace: proxy.namespace, labels: { app: 'other' } }, w, SIDECAR)).toBe(false);
    });
  }

  it("the EPP's ext_proc port is open (mTLS decides), its admin port only to the monitoring namespace", () => {
    const anyPod: Pod = { namespace: 'somewhere', labels: { app: 'x' } };
    const monitoring: Pod = { namespace: 'monitoring', labels: { app: 'prometheus' } };
    expect(admits(BASE, anyPod, epp, 9002)).toBe(true);
    expect(admits(BASE, anyPod, epp, 9003)).toBe(false);
    expect(admits(BASE, { namespace: NS, labels: { app: 'x' } }, epp, 9003)).toBe(false);
    expect(admits(BASE, monitoring, epp, 9003)).toBe(true);
  });

  it('without deploy/gie/network-policies.yaml the EPP would be refused (the gap this file closes)', () => {
    const onlyKubernetes = policiesIn('deploy/kubernetes/network-policies.yaml');
    expect(admits(onlyKubernetes, epp, workers[0]!, SIDECAR)).toBe(false);
  });
});
