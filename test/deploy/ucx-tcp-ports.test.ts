/**
 * NIXL moves KV blocks through UCX. Over UCX's tcp transport (no RDMA, or UCX_TLS with tcp) every UCX TCP interface
 * listens on a port of UCX_TCP_PORT_RANGE (openucx/ucx src/uct/tcp/tcp_iface.c @9466d104; default: whatever the OS
 * picks), and either worker may dial the other (src/uct/tcp/tcp_cm.c uct_tcp_cm_ep_accept_conn: the peer with the
 * lower address connects). So three things must agree, or transfers fail with nothing naming the port:
 *   - UCX_TCP_PORT_RANGE on every vLLM container (one range for all workers),
 *   - the NetworkPolicies, which must let every worker pod reach every other on each port of it (and no other pod),
 *   - the Istio annotations, which must keep it out of the mesh proxy inbound and outbound, as single ports (Istio's
 *     injector refuses anything else: istio/istio pkg/kube/inject/validate.go @0098d99f parsePorts).
 * deploy/gie runs the same workers (deploy/kubernetes) and adds NetworkPolicies; with them in force the range must
 * stay open between workers and closed to the EPP and the gateways (also test/deploy/gie-network-policies.test.ts).
 */
import { describe, expect, it } from 'vitest';
import { admits, docs, NS, type Obj, type Pod, policiesIn } from '../support/network-policy.js';
import { envOf, parseUcxPortRange, shippedUcxPorts, vllmPodTemplates } from '../support/vllm-pods.js';

const templates = vllmPodTemplates(['deploy', 'envoy']);
const workers: Pod[] = templates.map((t) => ({ namespace: NS, labels: t.labels }));
const K8S = policiesIn('deploy/kubernetes/network-policies.yaml');
const GIE = [
  ...K8S,
  ...policiesIn('deploy/gie/network-policies.yaml'),
  ...policiesIn('deploy/gie/istio/gateway.yaml'),
  ...policiesIn('deploy/gie/envoy-gateway/gateway.yaml'),
];
const podOf = (file: string, kind: string): Pod => ({
  namespace: NS,
  labels: docs(file).find((d) => d['kind'] === kind)!['spec']['template']['metadata']['labels'],
});

/** The UCX workers one vLLM container runs: tensor-parallel processes x (NIXL's UCX workers: num_threads + 1). */
function ucxWorkers(c: Obj): number {
  const args = (c['args'] ?? []) as string[];
  const tp = Number(/^--tensor-parallel-size=(\d+)$/.exec(args.find((a) => a.startsWith('--tensor-parallel-size=')) ?? '')?.[1] ?? 1);
  const kvConfig = args.find((a) => a.startsWith('--kv-transfer-config='));
  const extra = kvConfig ? JSON.parse(kvConfig.slice('--kv-transfer-config='.length))['kv_connector_extra_config'] : undefined;
  // vllm-project/vllm nixl_connector.py @002a1057: num_threads defaults to 4; ai-dynamo/nixl ucx_backend.cpp
  // @8770b655: a threaded UCX engine runs num_threads dedicated workers plus one shared.
  return tp * (Number(extra?.['num_threads'] ?? 4) + 1);
}

/** A port list as Istio's injector parses it: comma-separated, each a single port. */
function istioPorts(value: string | undefined): number[] {
  return (value ?? '').split(',').map((p) => {
    if (!/^\s*\d+\s*$/.test(p) || Number(p) > 65535) throw new Error(`Istio refuses "${p}" in "${value}": single ports only`);
    return Number(p);
  });
}

/** Every port of the range, and its ends; throws (failing the test that asks) while the containers disagree. */
function range(): { ucx: number[]; first: number; last: number } {
  const ucx = shippedUcxPorts();
  return { ucx, first: ucx[0]!, last: ucx.at(-1)! };
}

describe('UCX TCP ports: vLLM env, NetworkPolicies and Istio annotations agree', () => {
  it('every vLLM container pins the same UCX_TCP_PORT_RANGE, large enough for its UCX workers', () => {
    expect(templates.length).toBeGreaterThanOrEqual(4); // the four StatefulSets of deploy/kubernetes/workers.yaml
    const values = templates.flatMap((t) => t.containers.map((c) => `${t.where}: ${envOf(c, 'UCX_TCP_PORT_RANGE')}`));
    expect(new Set(values.map((v) => v.replace(/^.*: /, ''))).size, values.join('\n')).toBe(1);
    const { ucx, first, last } = range();
    for (const t of templates)
      for (const c of t.containers) {
        expect(parseUcxPortRange(envOf(c, 'UCX_TCP_PORT_RANGE')!), t.where).toEqual({ first, last });
        // UCX draws ports at random until one is free, forever if none is (tcp_iface.c uct_tcp_iface_server_init):
        // keep at least twice the listeners one pod address needs.
        expect(ucx.length, `${t.where}: range size vs UCX workers`).toBeGreaterThanOrEqual(2 * ucxWorkers(c));
        expect(ucx, `${t.where}: the side channel is not in the range`).not.toContain(
          Number(envOf(c, 'VLLM_NIXL_SIDE_CHANNEL_PORT') ?? 5600),
        );
      }
  });

  for (const [name, policies] of [
    ['deploy/kubernetes', K8S],
    ['deploy/kubernetes + deploy/gie', GIE],
  ] as const) {
    it(`${name}: every worker pod reaches every other on each port of the range, both ways, and on nothing next to it`, () => {
      const { ucx, first, last } = range();
      for (const src of workers)
        for (const dst of workers) {
          const pair = `${src.labels['kvgate.io/pool']} -> ${dst.labels['kvgate.io/pool']}`;
          for (const port of ucx) expect(admits(policies, src, dst, port), `${pair} :${port}`).toBe(true);
          expect(admits(policies, src, dst, first - 1), `${pair} :${first - 1}`).toBe(false);
          expect(admits(policies, src, dst, last + 1), `${pair} :${last + 1}`).toBe(false);
        }
    });
  }

  it('no pod but a worker of this namespace reaches the range: not Envoy, the gate, the EPP, monitoring or a look-alike elsewhere', () => {
    const { first, last } = range();
    const others: [string, Pod][] = [
      ['envoy', podOf('deploy/kubernetes/envoy-deployment.yaml', 'Deployment')],
      ['gate', podOf('deploy/kubernetes/gate-deployment.yaml', 'Deployment')],
      ['epp', podOf('deploy/gie/epp.yaml', 'Deployment')],
      ['monitoring', { namespace: 'monitoring', labels: { app: 'prometheus' } }],
      ['vllm labels in another namespace', { namespace: 'elsewhere', labels: workers[0]!.labels }],
    ];
    for (const [who, src] of others)
      for (const dst of workers) for (const port of [first, last]) expect(admits(GIE, src, dst, port), `${who} -> :${port}`).toBe(false);
  });

  it('the Istio annotations keep exactly the side channel and the range out of the proxy, inbound and outbound', () => {
    const { ucx } = range();
    for (const t of templates) {
      const sideChannel = Number(envOf(t.containers[0]!, 'VLLM_NIXL_SIDE_CHANNEL_PORT') ?? 5600);
      const want = [sideChannel, ...ucx].sort((a, b) => a - b);
      for (const a of ['traffic.sidecar.istio.io/excludeInboundPorts', 'traffic.sidecar.istio.io/excludeOutboundPorts'])
        expect(
          istioPorts(t.annotations[a]).sort((x, y) => x - y),
          `${t.where} ${a}`,
        ).toEqual(want);
    }
  });

  it('the checks above refuse what would drift', () => {
    expect(() => parseUcxPortRange('0')).toThrow(/not a port range/);
    expect(() => parseUcxPortRange('5731-5700')).toThrow(/not a port range/);
    expect(() => parseUcxPortRange('5700:5731')).toThrow(/expected PORT or FIRST-LAST/);
    expect(() => istioPorts('5600,5700-5731')).toThrow(/single ports only/);
    const narrowed = structuredClone(K8S);
    for (const p of narrowed) for (const r of p['spec']['ingress']) for (const x of r['ports'] ?? []) delete x['endPort'];
    expect(admits(narrowed, workers[0]!, workers[1]!, range().last)).toBe(false);
  });
});
