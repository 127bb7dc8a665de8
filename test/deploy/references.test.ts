/**
 * Referential integrity of everything an operator applies, per documented install path.
 *
 * Each path is the set of YAML documents its install steps apply (kustomize directories expanded the way `kubectl
 * apply -k` does: resources with the kustomization's namespace, ConfigMaps generated from the files
 * `configMapGenerator` names), plus the objects the steps tell the operator to create outside these files (Secrets,
 * PVCs, Helm-installed gateways, namespaces other projects own) and the edits the steps tell the operator to make.
 * Each of those external objects and edits carries the doc and the exact words that say so: the test fails when the
 * doc no longer says it, so an object nobody is told to create cannot hide in the allow-list.
 *
 * Then every reference inside the path must resolve within it: Services and ports named by routes, Envoy clusters,
 * sidecar URLs and Istio clusters; ServiceAccounts named by pods, RoleBindings and Istio principals; ConfigMaps and
 * Secrets mounted by pods, their `items` keys and every file a config names under a mount; container ports named by
 * probes, Service targetPorts, NetworkPolicies, monitors and InferencePools; labels matched by every selector;
 * Gateways, GatewayClasses and namespaces. A broken reference is a pod stuck in ContainerCreating, a route that
 * 503s, a policy that admits nobody or a selector that selects nothing, none of which `kubectl apply` reports.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse, parseAllDocuments } from 'yaml';
import { podEndpoints } from '../../src/discovery/pods.js';
import { PACKAGE_ROOT } from '../../src/package-root.js';
import { PoolDiscoverySchema } from '../../src/policy/schema.js';
import { hostPortFlag } from '../../src/sidecar/config.js';

type Doc = Record<string, any>;
type Labels = Record<string, string>;

const read = (f: string): string => readFileSync(path.join(PACKAGE_ROOT, f), 'utf8');
const docsOf = (f: string): Doc[] =>
  parseAllDocuments(read(f))
    .map((d) => d.toJS() as Doc)
    .filter((d) => d !== null && typeof d === 'object');

/** A doc line that says the operator creates or changes something: `quote` must appear in `doc` (whitespace-folded). */
interface DocLine {
  readonly doc: string;
  readonly quote: string;
}
const fold = (s: string): string => s.replace(/\s+/g, ' ');
const docSays = (d: DocLine): boolean => fold(read(d.doc)).includes(fold(d.quote));

const CLUSTER_SCOPED = new Set(['Namespace', 'ClusterRole', 'ClusterRoleBinding', 'GatewayClass', 'CustomResourceDefinition']);

/** `kubectl apply -k dir`: resources with the kustomization's namespace, and the generated ConfigMaps/Secrets. */
function kustomize(dir: string): Doc[] {
  const k = parse(read(`${dir}/kustomization.yaml`)) as Doc;
  const ns: string | undefined = k['namespace'];
  const out: Doc[] = [];
  const withNs = (d: Doc): Doc => (ns && !CLUSTER_SCOPED.has(d['kind']) ? { ...d, metadata: { ...d['metadata'], namespace: ns } } : d);
  for (const r of (k['resources'] ?? []) as string[])
    for (const d of docsOf(`${dir}/${r}`)) out.push(withNs({ ...d, 'x-source': `${dir}/${r}` }));
  for (const [kind, key] of [
    ['ConfigMap', 'configMapGenerator'],
    ['Secret', 'secretGenerator'],
  ] as const) {
    for (const g of (k[key] ?? []) as Doc[]) {
      const data: Record<string, string> = {};
      for (const f of (g['files'] ?? []) as string[]) {
        const [name, file] = f.includes('=') ? (f.split('=', 2) as [string, string]) : [path.basename(f), f];
        data[name] = read(`${dir}/${file}`);
      }
      out.push(withNs({ apiVersion: 'v1', kind, metadata: { name: g['name'] }, data, 'x-source': `${dir}/kustomization.yaml` }));
    }
  }
  return out;
}
const fileDocs = (f: string, ns?: string): Doc[] =>
  docsOf(f).map((d) =>
    ns && !CLUSTER_SCOPED.has(d['kind']) && !d['metadata']['namespace']
      ? { ...d, metadata: { ...d['metadata'], namespace: ns }, 'x-source': f }
      : { ...d, 'x-source': f },
  );

/** An object the operator creates outside these files, or one another install creates, with the doc that says so. */
const external = (doc: Doc, says: DocLine): Doc => ({ ...doc, 'x-source': `${says.doc} ("${says.quote}")`, 'x-says': says });
/** An edit the install steps tell the operator to make before applying. */
interface Edit {
  readonly says: DocLine;
  readonly apply: (docs: Doc[]) => Doc[];
}

const NS = 'kvgate';
const ns = (name: string, says: DocLine, labels: Labels = {}): Doc =>
  external({ apiVersion: 'v1', kind: 'Namespace', metadata: { name, labels } }, says);
const secret = (name: string, keys: string[], says: DocLine): Doc =>
  external(
    { apiVersion: 'v1', kind: 'Secret', metadata: { name, namespace: NS }, data: Object.fromEntries(keys.map((k) => [k, ''])) },
    says,
  );

// Things deploy/kubernetes mounts that the operator creates (never committed).
const KUBERNETES_EXTERNAL: Doc[] = [
  secret('kvgate-keys', ['keys.json'], {
    doc: 'deploy/kubernetes/README.md',
    quote: 'kubectl -n kvgate create secret generic kvgate-keys --from-file=keys.json',
  }),
  secret('kvgate-gate-tls', ['gate.crt', 'gate.key', 'ca.crt'], {
    doc: 'deploy/kubernetes/README.md',
    quote: 'kubectl -n kvgate create secret generic kvgate-gate-tls --from-file=gate.crt --from-file=gate.key --from-file=ca.crt',
  }),
  secret('kvgate-envoy-tls', ['ca.crt', 'envoy-public.crt', 'envoy-public.key', 'envoy-internal.crt', 'envoy-internal.key'], {
    doc: 'deploy/kubernetes/README.md',
    quote:
      'kubectl -n kvgate create secret generic kvgate-envoy-tls --from-file=ca.crt --from-file=envoy-public.crt --from-file=envoy-public.key --from-file=envoy-internal.crt --from-file=envoy-internal.key',
  }),
  ...['models-llama-a', 'models-llama-b'].map((name) =>
    external(
      { apiVersion: 'v1', kind: 'PersistentVolumeClaim', metadata: { name, namespace: NS } },
      { doc: 'deploy/kubernetes/README.md', quote: '(`models-llama-a`, `models-llama-b` PVCs here)' },
    ),
  ),
  // NetworkPolicies admit the monitoring namespace; the Prometheus there is the operator's.
  ns('monitoring', {
    doc: 'deploy/kubernetes/monitoring.yaml',
    quote: 'the `monitoring` namespace (network-policies.yaml opens 9003 and 9091 to it only)',
  }),
  // The Prometheus that scrapes the monitors: some pod of that namespace.
  external(
    {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name: 'prometheus', namespace: 'monitoring' },
      spec: { template: { metadata: { labels: { app: 'prometheus' } }, spec: { containers: [{ name: 'prometheus' }] } } },
    },
    { doc: 'deploy/kubernetes/monitoring.yaml', quote: 'The Prometheus must run in' },
  ),
];

// istio/gateway Helm releases (envoy/istio/README.md "Install"). The chart names the Deployment, its ServiceAccount and
// its Service after the release and labels the pods `istio: <release without "istio-">` (istio/istio
// manifests/charts/gateway/templates/_helpers.tpl @8fb266cc: gateway.name, gateway.selectorLabels,
// gateway.serviceAccountName), with Service ports 15021, 80 and 443 (values.yaml of the same chart).
const istioGateway = (release: string): Doc[] => {
  const says = { doc: 'envoy/istio/README.md', quote: `helm install ${release}` };
  return [
    external({ apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: release, namespace: NS } }, says),
    external(
      {
        apiVersion: 'apps/v1',
        kind: 'Deployment',
        metadata: { name: release, namespace: NS },
        spec: {
          template: {
            metadata: { labels: { istio: release, app: release, 'sidecar.istio.io/inject': 'true' } },
            spec: { serviceAccountName: release, containers: [{ name: 'istio-proxy', 'x-any-port': true }] },
          },
        },
      },
      says,
    ),
    external(
      {
        apiVersion: 'v1',
        kind: 'Service',
        metadata: { name: release, namespace: NS },
        spec: {
          selector: { istio: release },
          ports: [15021, 80, 443].map((p) => ({ port: p, targetPort: p })),
        },
      },
      says,
    ),
  ];
};

// With Istio the workloads need their Istio proxies: the injector's webhook admits only pods of namespaces labelled
// istio-injection=enabled by default (istio/istio manifests/charts/istio-control/istio-discovery/templates/
// mutatingwebhook.yaml @0681dccd, `namespaceSelector.matchLabels`). Without one, the STRICT PeerAuthentication and
// the AuthorizationPolicies select pods with no proxy to enforce them, and the gate runs `insecure: true`.
const ISTIO_INJECTION: Edit = {
  says: { doc: 'envoy/istio/README.md', quote: 'kubectl label namespace kvgate istio-injection=enabled' },
  apply: (docs) =>
    docs.map((d) =>
      d['kind'] === 'Namespace' && d['metadata']['name'] === NS
        ? { ...d, metadata: { ...d['metadata'], labels: { ...d['metadata']['labels'], 'istio-injection': 'enabled' } } }
        : d,
    ),
};

/** Replace a key of a generated ConfigMap's file (an edit the steps ask for). */
function editConfig(map: string, key: string, change: (cfg: Doc) => void): (docs: Doc[]) => Doc[] {
  return (docs) =>
    docs.map((d) => {
      if (d['kind'] !== 'ConfigMap' || d['metadata']['name'] !== map) return d;
      const cfg = parse(d['data'][key]) as Doc;
      change(cfg);
      return { ...d, data: { ...d['data'], [key]: JSON.stringify(cfg) } };
    });
}
/** Replace label selectors in every NetworkPolicy (an edit the steps ask for). */
function replaceSelector(from: Labels, to: Labels[]): (docs: Doc[]) => Doc[] {
  const same = (a: Doc | undefined, b: Labels): boolean => JSON.stringify(a?.['matchLabels'] ?? {}) === JSON.stringify(b);
  return (docs) =>
    docs.map((d) => {
      if (d['kind'] !== 'NetworkPolicy') return d;
      const spec = structuredClone(d['spec']);
      for (const rule of spec['ingress'] ?? []) {
        rule['from'] = (rule['from'] ?? []).flatMap((peer: Doc) =>
          peer['podSelector'] && !peer['namespaceSelector'] && same(peer['podSelector'], from)
            ? to.map((l) => ({ podSelector: { matchLabels: l } }))
            : [peer],
        );
      }
      return { ...d, spec };
    });
}

/** Drop `--advertise` from the decode sidecars' args (the pod is the data plane's pick, not the gate's). */
const unpinDecode = (docs: Doc[]): Doc[] =>
  docs.map((d) => {
    if (d['kind'] !== 'StatefulSet' || d['spec']['template']['metadata']['labels']?.['kvgate.io/role'] !== 'decode') return d;
    const c = structuredClone(d);
    for (const x of c['spec']['template']['spec']['containers'] as Doc[]) {
      const args = (x['args'] ?? []) as string[];
      const at = args.indexOf('--advertise');
      if (at >= 0) args.splice(at, 2);
    }
    return c;
  });

const ISTIO_EDITS: Edit[] = [
  ISTIO_INJECTION,
  {
    says: {
      doc: 'envoy/istio/README.md',
      quote: 'delete `--advertise, "[$(POD_IP)]:9090"` from the args of the decode StatefulSets\' `kvgate-sidecar`',
    },
    apply: unpinDecode,
  },
  {
    says: { doc: 'envoy/istio/README.md', quote: 'delete it from `resources` in `deploy/kubernetes/kustomization.yaml`' },
    apply: (docs) => docs.filter((d) => d['x-source'] !== 'deploy/kubernetes/envoy-deployment.yaml'),
  },
  {
    says: {
      doc: 'envoy/istio/README.md',
      quote: 'set `prefill.via.envoy: http://kvgate-internal.kvgate.svc.cluster.local`',
    },
    apply: editConfig('kvgate-sidecar', 'sidecar-decode.yaml', (c) => {
      c['prefill']['via'] = { envoy: 'http://kvgate-internal.kvgate.svc.cluster.local' };
    }),
  },
  {
    says: {
      doc: 'envoy/istio/README.md',
      quote: "replace the `kvgate-envoy` selectors with the gateways' (`istio: kvgate-public`, `istio: kvgate-internal`)",
    },
    apply: replaceSelector({ 'app.kubernetes.io/name': 'kvgate-envoy' }, [{ istio: 'kvgate-public' }, { istio: 'kvgate-internal' }]),
  },
  {
    says: { doc: 'envoy/istio/README.md', quote: 'delete the NetworkPolicy `kvgate-envoy` there' },
    apply: (docs) => docs.filter((d) => !(d['kind'] === 'NetworkPolicy' && d['metadata']['name'] === 'kvgate-envoy')),
  },
  {
    says: { doc: 'envoy/istio/README.md', quote: 'Run the gate with `insecure: true` here' },
    apply: editConfig('kvgate-gate', 'gate.yaml', (c) => {
      delete c['tls'];
      c['insecure'] = true;
    }),
  },
];

const ENVOY_GATEWAY_EDITS: Edit[] = [
  {
    says: {
      doc: 'envoy/istio/README.md',
      quote: 'delete `--advertise, "[$(POD_IP)]:9090"` from the decode StatefulSets in `deploy/kubernetes/workers.yaml` here too',
    },
    apply: unpinDecode,
  },
  {
    says: { doc: 'envoy/istio/README.md', quote: 'decode sidecars must use `prefill.via: direct`' },
    apply: editConfig('kvgate-sidecar', 'sidecar-decode.yaml', (c) => {
      c['prefill']['via'] = 'direct';
    }),
  },
];

const gatewayClass = (name: string, says: DocLine): Doc =>
  external({ apiVersion: 'gateway.networking.k8s.io/v1', kind: 'GatewayClass', metadata: { name } }, says);

// GIE: deploy/gie after deploy/kubernetes (its kustomization's header) and one gateway dir (docs/gie.md step 4).
const GIE_EXTERNAL: Doc[] = [
  secret('kvgate-epp-tls', ['tls.crt', 'tls.key', 'ca.crt'], {
    doc: 'docs/gie.md',
    quote: 'Create the Secret `kvgate-epp-tls` (`tls.crt`, `tls.key`, `ca.crt`)',
  }),
];
const GIE_GATEWAYS: Record<string, Doc[]> = {
  istio: [gatewayClass('istio', { doc: 'docs/gie.md', quote: 'Enable InferencePool support in your gateway' })],
  'envoy-gateway': [
    gatewayClass('eg', { doc: 'docs/gie.md', quote: 'Envoy Gateway: enable the InferencePool extension' }),
    ns('envoy-gateway-system', {
      doc: 'docs/gie.md',
      quote: "Envoy Gateway in its controller's namespace (`envoy-gateway-system` by default",
    }),
  ],
  kgateway: [gatewayClass('kgateway', { doc: 'docs/gie.md', quote: 'kgateway: install with its inference-extension support enabled' })],
};

interface InstallPath {
  readonly name: string;
  readonly docs: Doc[];
  readonly edits: Edit[];
  /** Pods here run an Istio proxy (checked: their namespace is labelled for injection). */
  readonly mesh: boolean;
  /**
   * Who picks the decode pod: `gate` where the data plane connects to the endpoint the gate named (plain Envoy's
   * ORIGINAL_DST on x-kvgate-decode-endpoint, a GIE gateway's x-gateway-destination-endpoint), `proxy` where it
   * balances within the pool's Service itself (Istio, Envoy Gateway without GIE).
   */
  readonly decodePick: 'gate' | 'proxy';
}
const kubernetes = (): Doc[] => [...kustomize('deploy/kubernetes'), ...KUBERNETES_EXTERNAL];
const monitoring = (): Doc[] => fileDocs('deploy/kubernetes/monitoring.yaml', NS); // `kubectl apply -n kvgate -f`
const PATHS: InstallPath[] = [
  {
    name: 'plain Envoy (deploy/kubernetes + monitoring.yaml)',
    docs: [...kubernetes(), ...monitoring()],
    edits: [],
    mesh: false,
    decodePick: 'gate',
  },
  {
    name: 'Istio (deploy/kubernetes + envoy/istio)',
    docs: [
      ...kubernetes(),
      ...monitoring(),
      ...istioGateway('kvgate-public'),
      ...istioGateway('kvgate-internal'),
      ...['ext-proc', 'routing', 'destination-rules', 'security'].flatMap((f) => fileDocs(`envoy/istio/${f}.yaml`)),
    ],
    edits: ISTIO_EDITS,
    mesh: true,
    decodePick: 'proxy',
  },
  {
    name: 'Envoy Gateway (deploy/kubernetes + envoy/istio/envoy-gateway.yaml)',
    docs: [
      ...kubernetes(),
      ...monitoring(),
      ...fileDocs('envoy/istio/envoy-gateway.yaml'),
      gatewayClass('eg', { doc: 'envoy/istio/README.md', quote: 'wires the gate into Envoy Gateway' }),
      ns('envoy-gateway-system', { doc: 'envoy/istio/envoy-gateway.yaml', quote: 'Envoy Gateway runs them in ITS OWN namespace' }),
    ],
    edits: ENVOY_GATEWAY_EDITS,
    mesh: false,
    decodePick: 'proxy',
  },
  ...Object.entries(GIE_GATEWAYS).map(([gw, extra]) => ({
    name: `GIE ${gw} (deploy/kubernetes + deploy/gie + deploy/gie/${gw})`,
    docs: [...kubernetes(), ...kustomize('deploy/gie'), ...GIE_EXTERNAL, ...fileDocs(`deploy/gie/${gw}/gateway.yaml`, NS), ...extra],
    edits: [],
    mesh: false,
    decodePick: 'gate' as const,
  })),
];

// ---------------------------------------------------------------------------------------------------------------
// The model of what is running.

interface Pod {
  readonly owner: string;
  readonly namespace: string;
  readonly labels: Labels;
  readonly spec: Doc;
}
const nsOf = (d: Doc): string => d['metadata']['namespace'] ?? NS;
const selects = (sel: Labels | undefined, labels: Labels): boolean => Object.entries(sel ?? {}).every(([k, v]) => labels[k] === v);
const labelSelector = (sel: Doc | undefined): Labels => {
  expect(sel?.['matchExpressions'] ?? [], 'matchExpressions are not modelled').toEqual([]);
  return (sel?.['matchLabels'] ?? {}) as Labels;
};

class Cluster {
  readonly pods: Pod[];
  constructor(readonly docs: Doc[]) {
    this.pods = docs
      .filter((d) => ['Deployment', 'StatefulSet', 'DaemonSet'].includes(d['kind']))
      .map((d) => ({
        owner: `${d['kind']}/${d['metadata']['name']}`,
        namespace: nsOf(d),
        labels: d['spec']['template']['metadata']['labels'] ?? {},
        spec: d['spec']['template']['spec'],
      }));
    for (const g of docs.filter((d) => d['kind'] === 'Gateway' && String(d['apiVersion']).startsWith('gateway.networking.k8s.io'))) {
      const p = gatewayApiProxy(g);
      if (p) this.pods.push(p);
    }
  }
  /** The proxy pods serving a Gateway API Gateway; undefined where kvgate has not confirmed them from source. */
  proxiesOf(gatewayName: string, namespace: string): Pod[] | undefined {
    const g = this.find('Gateway', gatewayName, namespace);
    if (!g) return [];
    if (!gatewayApiProxy(g)) return undefined;
    return this.pods.filter((p) => p.owner === `Gateway/${gatewayName} proxy`);
  }
  find(kind: string, name: string, namespace?: string): Doc | undefined {
    return this.docs.find(
      (d) =>
        d['kind'] === kind &&
        d['metadata']['name'] === name &&
        (CLUSTER_SCOPED.has(kind) || namespace === undefined || nsOf(d) === namespace),
    );
  }
  namespaceLabels(name: string): Labels | undefined {
    const n = this.find('Namespace', name);
    return n ? { ...n['metadata']['labels'], 'kubernetes.io/metadata.name': name } : undefined;
  }
  podsSelected(sel: Labels, namespace?: string): Pod[] {
    return this.pods.filter((p) => (namespace === undefined || p.namespace === namespace) && selects(sel, p.labels));
  }
  /** `host` as Kubernetes DNS (`svc`, `svc.ns`, `svc.ns.svc`, `svc.ns.svc.cluster.local`) -> the Service. */
  serviceByHost(host: string, from: string): Doc | undefined {
    const m = /^([a-z0-9-]+)(?:\.([a-z0-9-]+)(?:\.svc(?:\.cluster\.local)?)?)?$/.exec(host);
    return m ? this.find('Service', m[1]!, m[2] ?? from) : undefined;
  }
}

/**
 * The pods a Gateway API controller runs for a Gateway, as deploy/gie's gateway files cite them: Istio in the
 * Gateway's namespace, labelled gateway.networking.k8s.io/gateway-name, service account <Gateway>-istio (istio/istio
 * manifests/charts/istio-control/istio-discovery/files/kube-gateway.yaml @03404d0f; GetDefaultName in
 * pilot/pkg/config/kube/gateway, deploy/gie/config/gate.yaml); Envoy Gateway in its controller's namespace
 * (envoy-gateway-system by default), labelled with the owning Gateway (envoyproxy/gateway
 * internal/infrastructure/kubernetes/proxy/resource_provider.go @00ec57c2). kgateway: not confirmed (docs/gie.md).
 */
function gatewayApiProxy(g: Doc): Pod | undefined {
  const name: string = g['metadata']['name'];
  const gns = nsOf(g);
  const spec = { containers: [{ name: 'proxy', 'x-any-port': true }] };
  if (g['spec']['gatewayClassName'] === 'istio')
    return {
      owner: `Gateway/${name} proxy`,
      namespace: gns,
      labels: { 'gateway.networking.k8s.io/gateway-name': name, 'sidecar.istio.io/inject': 'true' },
      spec: { ...spec, serviceAccountName: `${name}-istio` },
    };
  if (g['spec']['gatewayClassName'] === 'eg')
    return {
      owner: `Gateway/${name} proxy`,
      namespace: 'envoy-gateway-system',
      labels: {
        'app.kubernetes.io/name': 'envoy',
        'app.kubernetes.io/component': 'proxy',
        'gateway.envoyproxy.io/owning-gateway-name': name,
        'gateway.envoyproxy.io/owning-gateway-namespace': gns,
      },
      spec,
    };
  return undefined;
}

const containers = (spec: Doc): Doc[] => [...(spec['initContainers'] ?? []), ...(spec['containers'] ?? [])];
/** A container port by name or number; an external proxy (Helm chart) listens where its config says. */
function containerPort(pod: Pod, port: string | number, c?: Doc): boolean {
  const cs = c ? [c] : containers(pod.spec);
  return cs.some(
    (x) =>
      x['x-any-port'] === true ||
      (x['ports'] ?? []).some((p: Doc) => (typeof port === 'number' ? p['containerPort'] === port : p['name'] === port)),
  );
}

/** The UCX TCP port range a container pins, if any. */
const ucxRange = (c: Doc): string | undefined => (c['env'] ?? []).find((e: Doc) => e['name'] === 'UCX_TCP_PORT_RANGE')?.['value'];

/** The file at `file` inside container `c` of `pod`: the mounted ConfigMap or Secret key (honouring `items`). */
function fileIn(cluster: Cluster, pod: Pod, c: Doc, file: string): { ok: boolean; content?: string | undefined; why: string } {
  const mount = (c['volumeMounts'] ?? [])
    .filter((m: Doc) => file.startsWith(`${String(m['mountPath']).replace(/\/$/, '')}/`))
    .sort((a: Doc, b: Doc) => String(b['mountPath']).length - String(a['mountPath']).length)[0];
  if (!mount) return { ok: false, why: `no volume is mounted at ${path.dirname(file)}` };
  const rel = file.slice(String(mount['mountPath']).replace(/\/$/, '').length + 1);
  const vol = (pod.spec['volumes'] ?? []).find((v: Doc) => v['name'] === mount['name']);
  if (!vol) return { ok: false, why: `mount ${mount['name']} names no volume` };
  const src = vol['configMap'] ? ['ConfigMap', vol['configMap']] : vol['secret'] ? ['Secret', vol['secret']] : undefined;
  if (!src) return { ok: true, why: 'not a ConfigMap or Secret' };
  const [kind, ref] = src as [string, Doc];
  const obj = cluster.find(kind, ref['name'] ?? ref['secretName'], pod.namespace);
  if (!obj) return { ok: false, why: `${kind} ${ref['name'] ?? ref['secretName']} does not exist` };
  const data: Record<string, string> = { ...obj['data'], ...obj['stringData'] };
  const items: Doc[] | undefined = ref['items'];
  const key = items ? items.find((i) => i['path'] === rel)?.['key'] : rel;
  if (key === undefined || !(key in data)) return { ok: false, why: `${kind} ${obj['metadata']['name']} has no key for ${rel}` };
  return { ok: true, content: data[key], why: '' };
}

// ---------------------------------------------------------------------------------------------------------------
// The checks: each returns the broken references it finds.

function checkPods(cl: Cluster, out: string[]): void {
  for (const d of cl.docs.filter((x) => x['kind'] === 'StatefulSet' && x['spec']['serviceName'])) {
    const svc = d['spec']['serviceName'];
    if (!cl.find('Service', svc, nsOf(d)) && !ALLOWED_DANGLING.some((a) => a.kind === 'StatefulSet.serviceName' && docSays(a.says)))
      out.push(`StatefulSet ${d['metadata']['name']}: serviceName ${svc} is no Service`);
  }
  for (const p of cl.pods) {
    const owner = cl.docs.find((d) => `${d['kind']}/${d['metadata']['name']}` === p.owner);
    const scrapePort: string | undefined = owner?.['spec']?.['template']?.['metadata']?.['annotations']?.['prometheus.io/port'];
    if (scrapePort !== undefined && !containerPort(p, Number(scrapePort)))
      out.push(`${p.owner}: prometheus.io/port ${scrapePort} is no container port`);
    if (p.owner.endsWith(' proxy')) continue; // made by the gateway controller with its own service account
    const sa = p.spec['serviceAccountName'] ?? 'default';
    if (sa !== 'default' && !cl.find('ServiceAccount', sa, p.namespace)) out.push(`${p.owner}: ServiceAccount ${sa} does not exist`);
    for (const v of p.spec['volumes'] ?? []) {
      const cm = v['configMap'];
      const sec = v['secret'];
      const pvc = v['persistentVolumeClaim'];
      const [kind, name, items] = cm
        ? ['ConfigMap', cm['name'], cm['items']]
        : sec
          ? ['Secret', sec['secretName'], sec['items']]
          : pvc
            ? ['PersistentVolumeClaim', pvc['claimName'], undefined]
            : [undefined, undefined, undefined];
      if (!kind) continue;
      const obj = cl.find(kind, name, p.namespace);
      if (!obj) {
        if (!(cm ?? sec)?.['optional']) out.push(`${p.owner}: volume ${v['name']} names ${kind} ${name}, which nothing creates`);
        continue;
      }
      for (const it of (items ?? []) as Doc[]) {
        if (!(it['key'] in { ...obj['data'], ...obj['stringData'] })) out.push(`${p.owner}: ${kind} ${name} has no key ${it['key']}`);
      }
    }
    for (const c of containers(p.spec)) {
      for (const m of c['volumeMounts'] ?? []) {
        if (!(p.spec['volumes'] ?? []).some((v: Doc) => v['name'] === m['name']))
          out.push(`${p.owner}/${c['name']}: mount ${m['name']} names no volume`);
      }
      for (const probeName of ['readinessProbe', 'livenessProbe', 'startupProbe']) {
        const probe = c[probeName];
        if (!probe) continue;
        const port = (probe['httpGet'] ?? probe['tcpSocket'] ?? probe['grpc'])?.['port'];
        if (port !== undefined && !containerPort(p, port, c))
          out.push(`${p.owner}/${c['name']}: ${probeName} port ${port} is no container port`);
      }
    }
  }
}

function checkServices(cl: Cluster, out: string[]): void {
  for (const s of cl.docs.filter((d) => d['kind'] === 'Service')) {
    const sel: Labels | undefined = s['spec']['selector'];
    if (!sel) continue;
    const pods = cl.podsSelected(sel, nsOf(s));
    if (pods.length === 0) out.push(`Service ${s['metadata']['name']}: selector ${JSON.stringify(sel)} selects no pods`);
    for (const port of s['spec']['ports'] ?? []) {
      const t = port['targetPort'] ?? port['port'];
      for (const p of pods)
        if (!containerPort(p, t)) out.push(`Service ${s['metadata']['name']}: targetPort ${t} is no port of ${p.owner}`);
    }
  }
}

/** A Service and port that `host:port` names; a headless Service's DNS names pod IPs, so the port is a pod's. */
function checkHostPort(cl: Cluster, what: string, host: string, port: number, from: string, out: string[]): Endpoint[] {
  const svc = cl.serviceByHost(host, from);
  if (!svc) {
    out.push(`${what}: ${host} is no Service of this install`);
    return [];
  }
  const pods = cl.podsSelected(svc['spec']['selector'] ?? {}, nsOf(svc));
  if (svc['spec']['clusterIP'] === 'None') {
    if (!pods.some((p) => containerPort(p, port))) out.push(`${what}: headless ${host} has no pod listening on ${port}`);
    return pods.map((pod) => ({ pod, port }));
  }
  const sp = (svc['spec']['ports'] ?? []).find((p: Doc) => p['port'] === port);
  if (!sp) {
    out.push(`${what}: Service ${svc['metadata']['name']} has no port ${port}`);
    return [];
  }
  return pods.map((pod) => ({ pod, port: numericPort(pod, sp['targetPort'] ?? port) }));
}
interface Endpoint {
  readonly pod: Pod;
  readonly port: number | undefined;
}
function numericPort(pod: Pod, port: string | number): number | undefined {
  if (typeof port === 'number') return port;
  for (const c of containers(pod.spec)) for (const p of c['ports'] ?? []) if (p['name'] === port) return p['containerPort'];
  return undefined;
}

// NetworkPolicy semantics (kubernetes/website content/en/docs/concepts/services-networking/network-policies.md, as in
// test/deploy/gie-network-policies.test.ts): a pod selected by some Ingress policy admits only what a rule of those
// policies allows; a peer with only podSelector means pods of the policy's namespace, with only namespaceSelector
// every pod of the matching namespaces, with both the pods matching both; a rule without ports allows every port.
function admits(cl: Cluster, src: Pod, dst: Pod, port: number): boolean {
  const policies = cl.docs.filter(
    (p) =>
      p['kind'] === 'NetworkPolicy' &&
      nsOf(p) === dst.namespace &&
      selects(labelSelector(p['spec']['podSelector']), dst.labels) &&
      (p['spec']['policyTypes'] ?? ['Ingress']).includes('Ingress'),
  );
  if (policies.length === 0) return true;
  const srcNs = cl.namespaceLabels(src.namespace) ?? { 'kubernetes.io/metadata.name': src.namespace };
  return policies.some((p) =>
    (p['spec']['ingress'] ?? []).some(
      (rule: Doc) =>
        (rule['from'] === undefined ||
          rule['from'].some(
            (peer: Doc) =>
              (peer['namespaceSelector'] ? selects(labelSelector(peer['namespaceSelector']), srcNs) : src.namespace === nsOf(p)) &&
              (peer['podSelector'] ? selects(labelSelector(peer['podSelector']), src.labels) : true),
          )) &&
        (rule['ports'] === undefined || rule['ports'].some((x: Doc) => x['port'] === port || numericPort(dst, x['port']) === port)),
    ),
  );
}
/** `srcs` open connections to `dsts` (the config says so): every one must pass the NetworkPolicies. */
function reach(cl: Cluster, what: string, srcs: readonly Pod[], dsts: readonly Endpoint[], out: string[]): void {
  if (srcs.length === 0) out.push(`${what}: no pod of this install makes this connection`);
  for (const s of srcs)
    for (const d of dsts) {
      if (d.port === undefined) out.push(`${what}: ${d.pod.owner} has no such port`);
      else if (!admits(cl, s, d.pod, d.port)) out.push(`${what}: NetworkPolicy drops ${s.owner} -> ${d.pod.owner}:${d.port}`);
    }
}

function checkSelectors(cl: Cluster, mesh: boolean, out: string[]): void {
  for (const d of cl.docs) {
    const kind: string = d['kind'];
    const name = `${kind} ${d['metadata']['name']}`;
    const n = nsOf(d);
    if (kind === 'PodDisruptionBudget' && cl.podsSelected(labelSelector(d['spec']['selector']), n).length === 0)
      out.push(`${name}: selects no pods`);
    if (kind === 'NetworkPolicy') {
      const targets = cl.podsSelected(labelSelector(d['spec']['podSelector']), n);
      if (targets.length === 0) out.push(`${name}: podSelector selects no pods`);
      for (const rule of d['spec']['ingress'] ?? []) {
        for (const peer of rule['from'] ?? []) {
          const nss = peer['namespaceSelector']
            ? cl.docs
                .filter((x) => x['kind'] === 'Namespace')
                .map((x) => x['metadata']['name'] as string)
                .filter((x) => selects(labelSelector(peer['namespaceSelector']), cl.namespaceLabels(x)!))
            : [n];
          if (nss.length === 0)
            out.push(`${name}: namespaceSelector ${JSON.stringify(peer['namespaceSelector'])} selects no namespace of this install`);
          if (peer['podSelector'] && !nss.some((x) => cl.podsSelected(labelSelector(peer['podSelector']), x).length > 0)) {
            // A peer in another project's namespace (Envoy Gateway's proxies) cannot be modelled here.
            if (nss.every((x) => cl.find('Namespace', x)?.['x-says'] === undefined || x === NS))
              out.push(`${name}: from podSelector ${JSON.stringify(peer['podSelector']['matchLabels'])} selects no pods`);
          }
        }
        for (const port of rule['ports'] ?? []) {
          // A port range opens listeners that pick their own port inside it, which no containerPort can name: it
          // must be the range a selected container's UCX_TCP_PORT_RANGE pins (deploy/kubernetes/workers.yaml).
          const ok =
            port['endPort'] === undefined
              ? targets.some((p) => containerPort(p, port['port']))
              : targets.some((p) => containers(p.spec).some((c) => ucxRange(c) === `${port['port']}-${port['endPort']}`));
          if (!ok)
            out.push(`${name}: port ${port['port']}${port['endPort'] ? `-${port['endPort']}` : ''} is no port of the pods it selects`);
        }
      }
    }
    if (kind === 'ServiceMonitor') {
      const svcs = cl.docs.filter(
        (s) => s['kind'] === 'Service' && nsOf(s) === n && selects(labelSelector(d['spec']['selector']), s['metadata']['labels'] ?? {}),
      );
      if (svcs.length === 0) out.push(`${name}: selects no Service`);
      for (const e of d['spec']['endpoints'] ?? []) {
        if (!svcs.some((s) => s['spec']['ports'].some((p: Doc) => p['name'] === e['port'])))
          out.push(`${name}: no selected Service has port ${e['port']}`);
        for (const svc of svcs) {
          const sp = svc['spec']['ports'].find((p: Doc) => p['name'] === e['port']);
          if (!sp) continue;
          const ends = cl
            .podsSelected(svc['spec']['selector'], nsOf(svc))
            .map((pod) => ({ pod, port: numericPort(pod, sp['targetPort'] ?? sp['port']) }));
          reach(
            cl,
            `${name} scrape`,
            cl.pods.filter((p) => p.namespace === 'monitoring'),
            ends,
            out,
          );
        }
      }
    }
    if (kind === 'PodMonitor') {
      const pods = cl.podsSelected(labelSelector(d['spec']['selector']), n);
      if (pods.length === 0) out.push(`${name}: selects no pods`);
      for (const e of d['spec']['podMetricsEndpoints'] ?? [])
        if (!pods.every((p) => containerPort(p, e['port']))) out.push(`${name}: port ${e['port']} is not on every selected pod`);
        else
          reach(
            cl,
            `${name} scrape`,
            cl.pods.filter((p) => p.namespace === 'monitoring'),
            pods.map((pod) => ({ pod, port: numericPort(pod, e['port']) })),
            out,
          );
    }
    if (kind === 'InferencePool') {
      const pods = cl.podsSelected(d['spec']['selector']['matchLabels'], n);
      if (pods.length === 0) out.push(`${name}: selects no pods`);
      for (const t of d['spec']['targetPorts'] ?? [])
        if (!pods.every((p) => containerPort(p, t['number']))) out.push(`${name}: targetPort ${t['number']} not on every pod`);
      const epp = d['spec']['endpointPickerRef'];
      const eppEnds = checkHostPort(cl, `${name} endpointPickerRef`, epp['name'], epp['port']['number'], n, out);
      // The gateways whose routes send to this pool dial its EPP and its pods.
      for (const route of cl.docs.filter((r) => r['kind'] === 'HTTPRoute' && nsOf(r) === n)) {
        const refs = (route['spec']['rules'] ?? []).flatMap((r: Doc) => r['backendRefs'] ?? []);
        if (!refs.some((b: Doc) => b['kind'] === 'InferencePool' && b['name'] === d['metadata']['name'])) continue;
        for (const parent of route['spec']['parentRefs'] ?? []) {
          const proxies = cl.proxiesOf(parent['name'], parent['namespace'] ?? n);
          if (!proxies) continue;
          reach(cl, `${name} endpointPickerRef (from Gateway ${parent['name']})`, proxies, eppEnds, out);
          for (const t of d['spec']['targetPorts'] ?? [])
            reach(
              cl,
              `${name} targetPort (from Gateway ${parent['name']})`,
              proxies,
              pods.map((pod) => ({ pod, port: t['number'] })),
              out,
            );
        }
      }
    }
    if (kind === 'RoleBinding') {
      if (!cl.find(d['roleRef']['kind'], d['roleRef']['name'], n)) out.push(`${name}: roleRef ${d['roleRef']['name']} does not exist`);
      for (const s of d['subjects'] ?? [])
        if (s['kind'] === 'ServiceAccount' && !cl.find('ServiceAccount', s['name'], s['namespace'] ?? n))
          out.push(`${name}: subject ${s['name']} does not exist`);
    }
    if (!CLUSTER_SCOPED.has(kind) && !cl.find('Namespace', n)) out.push(`${name}: namespace ${n} is not created by this install`);
    // Istio.
    const istioSel: Labels | undefined = d['spec']?.['selector']?.['matchLabels'] ?? d['spec']?.['workloadSelector']?.['labels'];
    if (['PeerAuthentication', 'AuthorizationPolicy', 'EnvoyFilter'].includes(kind)) {
      const pods = istioSel ? cl.podsSelected(istioSel, n) : cl.pods.filter((p) => p.namespace === n);
      if (pods.length === 0) out.push(`${name}: selects no pods`);
      for (const port of Object.keys(d['spec']['portLevelMtls'] ?? {}))
        if (!pods.every((p) => containerPort(p, Number(port)))) out.push(`${name}: port ${port} not on every selected pod`);
      if (mesh) {
        for (const p of pods) {
          const injected =
            p.labels['sidecar.istio.io/inject'] === 'true' || cl.namespaceLabels(p.namespace)?.['istio-injection'] === 'enabled';
          if (!injected)
            out.push(
              `${name}: ${p.owner} runs no Istio proxy (namespace ${p.namespace} is not labelled for injection), so nothing enforces it`,
            );
        }
      }
      for (const rule of d['spec']['rules'] ?? []) {
        for (const from of rule['from'] ?? []) {
          for (const pr of from['source']?.['principals'] ?? []) {
            const m = /^cluster\.local\/ns\/([^/]+)\/sa\/([^/]+)$/.exec(pr);
            if (!m || !cl.find('ServiceAccount', m[2]!, m[1]!)) out.push(`${name}: principal ${pr} is no ServiceAccount of this install`);
          }
        }
        for (const to of rule['to'] ?? [])
          for (const port of to['operation']?.['ports'] ?? [])
            if (!pods.every((p) => containerPort(p, Number(port)))) out.push(`${name}: port ${port} not on every selected pod`);
      }
    }
    if (kind === 'Gateway' && d['apiVersion'].startsWith('networking.istio.io')) {
      const pods = cl.podsSelected(d['spec']['selector']);
      if (pods.length === 0) out.push(`${name}: selector ${JSON.stringify(d['spec']['selector'])} selects no gateway pods`);
      for (const s of d['spec']['servers'] ?? []) {
        const svc = cl.docs.find((x) => x['kind'] === 'Service' && pods.some((p) => selects(x['spec']['selector'], p.labels)));
        if (!svc?.['spec']['ports'].some((p: Doc) => p['port'] === s['port']['number']))
          out.push(`${name}: no Service of its pods has port ${s['port']['number']}`);
      }
    }
    if (kind === 'VirtualService') {
      for (const g of d['spec']['gateways'] ?? []) {
        const [gns, gname] = g.includes('/') ? g.split('/') : [n, g];
        if (!cl.docs.some((x) => x['kind'] === 'Gateway' && x['metadata']['name'] === gname && nsOf(x) === gns))
          out.push(`${name}: gateway ${g} does not exist`);
      }
      const proxies = (d['spec']['gateways'] ?? []).flatMap((g: string) => {
        const [gns, gname] = g.includes('/') ? g.split('/') : [n, g];
        const gw = cl.find('Gateway', gname!, gns);
        return gw?.['spec']?.['selector'] ? cl.podsSelected(gw['spec']['selector']) : [];
      });
      for (const r of d['spec']['http'] ?? [])
        for (const dest of r['route'] ?? []) {
          const what = `${name} route ${r['name']}`;
          reach(
            cl,
            what,
            proxies,
            checkHostPort(cl, what, dest['destination']['host'], dest['destination']['port']['number'], n, out),
            out,
          );
        }
    }
    if (kind === 'DestinationRule' && !cl.serviceByHost(d['spec']['host'], n)) out.push(`${name}: host ${d['spec']['host']} is no Service`);
    if (kind === 'EnvoyFilter') {
      const proxies = cl.podsSelected(istioSel ?? {}, n);
      for (const m of JSON.stringify(d).matchAll(/outbound\|(\d+)\|\|([a-z0-9.-]+)/g))
        reach(cl, `${name} cluster`, proxies, checkHostPort(cl, `${name} cluster`, m[2]!, Number(m[1]), n, out), out);
      for (const p of d['spec']['configPatches'] ?? []) {
        const c = p['match']?.['cluster'];
        if (c?.['service']) checkHostPort(cl, `${name} cluster match`, c['service'], c['portNumber'], n, out);
      }
    }
    // Gateway API and Envoy Gateway.
    if (
      kind === 'Gateway' &&
      d['apiVersion'].startsWith('gateway.networking.k8s.io') &&
      !cl.find('GatewayClass', d['spec']['gatewayClassName'])
    )
      out.push(`${name}: GatewayClass ${d['spec']['gatewayClassName']} does not exist`);
    if (kind === 'HTTPRoute') {
      for (const ref of d['spec']['parentRefs'] ?? [])
        if (!cl.find(ref['kind'] ?? 'Gateway', ref['name'], ref['namespace'] ?? n))
          out.push(`${name}: parent ${ref['name']} does not exist`);
      for (const r of d['spec']['rules'] ?? [])
        for (const b of r['backendRefs'] ?? []) {
          if ((b['kind'] ?? 'Service') === 'Service') {
            if (ALLOWED_DANGLING.some((a) => a.kind === 'Service' && a.name === b['name'] && docSays(a.says))) continue;
            const ends = checkHostPort(cl, `${name} backendRef`, b['name'], b['port'], b['namespace'] ?? n, out);
            for (const parent of d['spec']['parentRefs'] ?? []) {
              const proxies = cl.proxiesOf(parent['name'], parent['namespace'] ?? n);
              if (proxies) reach(cl, `${name} backendRef ${b['name']} (from Gateway ${parent['name']})`, proxies, ends, out);
            }
          } else if (!cl.find(b['kind'], b['name'], b['namespace'] ?? n))
            out.push(`${name}: backend ${b['kind']} ${b['name']} does not exist`);
        }
    }
    if (['EnvoyExtensionPolicy', 'ClientTrafficPolicy', 'BackendTrafficPolicy'].includes(kind)) {
      for (const t of d['spec']['targetRefs'] ?? [])
        if (!cl.find(t['kind'], t['name'], n)) out.push(`${name}: target ${t['kind']} ${t['name']} does not exist`);
      const proxies = (d['spec']['targetRefs'] ?? []).flatMap((t: Doc) =>
        t['kind'] === 'Gateway' ? (cl.proxiesOf(t['name'], n) ?? []) : [],
      );
      for (const e of d['spec']['extProc'] ?? [])
        for (const b of e['backendRefs'] ?? []) {
          // A gate whose config has `tls` takes mTLS clients only: Envoy Gateway needs a BackendTLSPolicy (and a client
          // certificate) for that Service, or the documented note that the operator adds them.
          const svc = cl.serviceByHost(b['name'], n);
          const tlsGate = svc && cl.podsSelected(svc['spec']['selector'] ?? {}, nsOf(svc)).some((p) => gateTls(cl, p));
          const backendTls = cl.docs.some(
            (x) => x['kind'] === 'BackendTLSPolicy' && (x['spec']['targetRefs'] ?? []).some((t: Doc) => t['name'] === b['name']),
          );
          if (tlsGate && !backendTls && !docSays(EG_GATE_TLS))
            out.push(`${name} extProc: ${b['name']} requires mTLS and nothing configures it`);
        }
      for (const e of d['spec']['extProc'] ?? [])
        for (const b of e['backendRefs'] ?? [])
          reach(cl, `${name} extProc`, proxies, checkHostPort(cl, `${name} extProc`, b['name'], b['port'], n, out), out);
    }
  }
}

/** The shipped Envoy Gateway set does not render the gate's mTLS client side; its header tells the operator to. */
const EG_GATE_TLS: DocLine = {
  doc: 'envoy/istio/envoy-gateway.yaml',
  quote: "the gate's mTLS port: add a BackendTLSPolicy for the gate Service and the client certificate in",
};
/** Whether the gate in `pod` runs with `tls` (its --config, as mounted). */
function gateTls(cl: Cluster, pod: Pod): boolean {
  for (const c of containers(pod.spec)) {
    const args: string[] = (c['args'] ?? []).map(String);
    const at = args.indexOf('--config');
    if (args[0] !== 'gate' || at < 0) continue;
    const f = fileIn(cl, pod, c, args[at + 1]!);
    if (f.content !== undefined && (parse(f.content) as Doc)['tls'] && !(parse(f.content) as Doc)['insecure']) return true;
  }
  return false;
}

/** References a kind's own semantics allow to dangle, with the words that say so. */
const ALLOWED_DANGLING: { kind: string; name: string; says: DocLine }[] = [
  // StatefulSet.spec.serviceName only names the DNS subdomain of its pods; the controller does not require the
  // Service, and kvgate addresses the workers by pod IP (what the gate's discovery finds), never by per-pod DNS.
  {
    kind: 'StatefulSet.serviceName',
    name: '*',
    says: { doc: 'deploy/kubernetes/workers.yaml', quote: 'No per-worker Services and no pinned ClusterIPs' },
  },
  {
    kind: 'Service',
    name: 'kvgate-no-such-pool',
    says: {
      doc: 'test/deploy/mesh-pool-services.test.ts',
      quote: "Envoy Gateway's catch-all points at no backend on purpose (a 500, fail closed)",
    },
  },
];

/** The files and addresses inside the configs the pods run. */
function checkConfigs(cl: Cluster, out: string[]): void {
  // Gates first: their route tables say which pods the pools are, which Envoy and the sidecars then dial.
  const isGate = (p: Pod): number => (containers(p.spec).some((c) => String(c['args']?.[0]) === 'gate') ? 1 : 0);
  const pools: PoolEnds[] = [];
  for (const p of [...cl.pods].sort((a, b) => isGate(b) - isGate(a))) {
    for (const c of containers(p.spec)) {
      const args: string[] = (c['args'] ?? []).map(String);
      const at = args.findIndex((a) => a === '--config' || a === '-c');
      if (at < 0) continue;
      const file = args[at + 1]!;
      const what = `${p.owner}/${c['name']} ${file}`;
      const f = fileIn(cl, p, c, file);
      if (!f.ok || f.content === undefined) {
        out.push(`${what}: ${f.why}`);
        continue;
      }
      const cfg = parse(f.content) as Doc;
      const dir = path.posix.dirname(file);
      const abs = (x: string): string => (x.startsWith('/') ? x : path.posix.join(dir, x));
      const needFile = (x: string, label: string): string | undefined => {
        const r = fileIn(cl, p, c, abs(x));
        if (!r.ok) out.push(`${what}: ${label} ${x}: ${r.why}`);
        return r.content;
      };
      if (args[0] === 'gate') {
        const policy = needFile(cfg['policy'], 'policy');
        if (cfg['keys']?.['file']) needFile(cfg['keys']['file'], 'keys.file');
        for (const k of ['cert', 'key', 'clientCa']) if (cfg['tls']?.[k]) needFile(cfg['tls'][k], `tls.${k}`);
        if (policy)
          pools.push(
            ...checkRouteTable(cl, p, c, path.posix.dirname(abs(cfg['policy'])), parse(policy) as Doc, `${p.owner} route table`, out),
          );
      } else if (args[0] === 'sidecar') {
        needFile(cfg['descriptorFile'], 'descriptorFile');
        if (cfg['keys']?.['file']) needFile(cfg['keys']['file'], 'keys.file');
        const via = cfg['prefill']?.['via'];
        if (via === 'direct') {
          // The decode sidecar dials the prefill endpoint the contract names: a prefill pool's pod, on its targetPort
          // (src/sidecar/prefill-leg.ts prefillTargetUrl).
          for (const pool of pools.filter((x) => x.role === 'prefill'))
            reach(cl, `${what} prefill.via direct -> pool ${pool.name}`, [p], pool.ends, out);
        }
        if (via && typeof via === 'object' && via['envoy']) {
          const u = new URL(via['envoy']);
          const w = `${what} prefill.via.envoy`;
          reach(
            cl,
            w,
            [p],
            checkHostPort(cl, w, u.hostname, Number(u.port || (u.protocol === 'https:' ? 443 : 80)), p.namespace, out),
            out,
          );
        }
      } else if (args[0] === 'envoy') {
        walkEnvoy(cfg, (node) => {
          if (typeof node['filename'] === 'string') needFile(node['filename'], 'filename');
        });
        for (const cluster of cfg['static_resources']?.['clusters'] ?? []) {
          if (cluster['type'] === 'ORIGINAL_DST') {
            // The stamped endpoint: a pod of a pool the route tables map to this cluster.
            const mine = pools.filter((x) => x.cluster === cluster['name']);
            if (mine.length === 0) out.push(`${what} cluster ${cluster['name']}: no route table pool uses it`);
            for (const pool of mine) reach(cl, `${what} cluster ${cluster['name']} -> pool ${pool.name}`, [p], pool.ends, out);
          }
          if (!['STRICT_DNS', 'LOGICAL_DNS'].includes(cluster['type'])) continue;
          for (const e of cluster['load_assignment']?.['endpoints'] ?? [])
            for (const lb of e['lb_endpoints'] ?? []) {
              const sa = lb['endpoint']['address']['socket_address'];
              const w = `${what} cluster ${cluster['name']}`;
              reach(cl, w, [p], checkHostPort(cl, w, sa['address'], sa['port_value'], p.namespace, out), out);
            }
        }
      }
    }
  }
}
function walkEnvoy(node: unknown, visit: (n: Doc) => void): void {
  if (Array.isArray(node)) for (const x of node) walkEnvoy(x, visit);
  else if (node && typeof node === 'object') {
    visit(node as Doc);
    for (const v of Object.values(node)) walkEnvoy(v, visit);
  }
}

interface PoolEnds {
  readonly name: string;
  readonly cluster: string;
  readonly role: string;
  readonly ends: Endpoint[];
}
function checkRouteTable(cl: Cluster, p: Pod, c: Doc, dir: string, table: Doc, what: string, out: string[]): PoolEnds[] {
  const found: PoolEnds[] = [];
  for (const [rev, r] of Object.entries((table['revisions'] ?? {}) as Record<string, Doc>)) {
    const f = fileIn(cl, p, c, path.posix.join(dir, r['descriptorFile']));
    if (!f.ok) out.push(`${what}: revision ${rev} descriptorFile ${r['descriptorFile']}: ${f.why}`);
  }
  for (const pool of table['pools'] ?? []) {
    const k = pool['discovery']?.['kubernetes'];
    if (!k) continue;
    const sel: Labels = { ...k['matchLabels'], ...(k['revisionLabel'] ? { [k['revisionLabel']]: pool['revision'] } : {}) };
    const pods = cl.podsSelected(sel, k['namespace'] ?? p.namespace);
    if (pods.length === 0) out.push(`${what}: pool ${pool['name']} selects no pods`);
    for (const port of [k['targetPort'], k['statusPort']].filter((x) => x !== undefined))
      if (!pods.every((x) => containerPort(x, port))) out.push(`${what}: pool ${pool['name']} port ${port} not on every pod`);
      else
        reach(
          cl,
          `${what}: pool ${pool['name']}`,
          [p],
          pods.map((pod) => ({ pod, port })),
          out,
        );
    found.push({
      name: pool['name'],
      cluster: pool['cluster'],
      role: pool['role'],
      ends: pods.map((pod) => ({ pod, port: k['targetPort'] })),
    });
  }
  return found;
}

function problems(ip: InstallPath): string[] {
  let docs = ip.docs;
  for (const e of ip.edits) docs = e.apply(docs);
  const cl = new Cluster(docs);
  const out: string[] = [];
  checkPods(cl, out);
  checkServices(cl, out);
  checkSelectors(cl, ip.mesh, out);
  checkConfigs(cl, out);
  return [...new Set(out)];
}

describe('every reference an operator applies resolves within its install path', () => {
  for (const ip of PATHS) {
    it(`${ip.name}: the doc lines behind its external objects and edits say so`, () => {
      const lines = [...ip.docs.map((d) => d['x-says']).filter(Boolean), ...ip.edits.map((e) => e.says)] as DocLine[];
      expect(lines.filter((l) => !docSays(l)).map((l) => `${l.doc}: "${l.quote}"`)).toEqual([]);
    });
    it(`${ip.name}: no reference dangles`, () => {
      expect(problems(ip)).toEqual([]);
    });
  }

  it('the checks see a broken reference (a Secret, a Service port, a ConfigMap key, a NetworkPolicy, a port range, a pool label)', () => {
    const base = PATHS[0]!;
    const broken = base.docs
      .map((d) =>
        d['kind'] === 'Service' && d['metadata']['name'] === 'kvgate-envoy-internal'
          ? { ...d, spec: { ...d['spec'], ports: [{ name: 'x', port: 10002, targetPort: 'internal' }] } }
          : d['kind'] === 'Secret' && d['metadata']['name'] === 'kvgate-keys'
            ? { ...d, metadata: { ...d['metadata'], name: 'kvgate-key' } }
            : d['kind'] === 'ConfigMap' && d['metadata']['name'] === 'kvgate-sidecar'
              ? { ...d, data: Object.fromEntries(Object.entries(d['data']).filter(([k]) => k !== 'llama-b.yaml')) }
              : d,
      )
      .map((d) =>
        d['kind'] === 'NetworkPolicy' && d['metadata']['name'] === 'kvgate-workers'
          ? {
              ...d,
              spec: {
                ...d['spec'],
                ingress: d['spec']['ingress']
                  .slice(1)
                  .map((r: Doc) => ({ ...r, ports: r['ports'].map((x: Doc) => (x['endPort'] ? { ...x, endPort: x['endPort'] + 9 } : x)) })),
              },
            }
          : d['kind'] === 'StatefulSet' && d['metadata']['name'] === 'vllm-b-decode'
            ? structuredClone({
                ...d,
                spec: {
                  ...d['spec'],
                  template: {
                    ...d['spec']['template'],
                    metadata: { labels: { 'app.kubernetes.io/name': 'vllm', 'kvgate.io/pool': 'b-decode' } },
                  },
                },
              })
            : d,
      );
    const found = problems({ ...base, docs: broken });
    const saw = (...parts: string[]): boolean => found.some((x) => parts.every((p) => x.includes(p)));
    expect(saw('kvgate-keys, which nothing creates')).toBe(true);
    expect(saw('prefill.via.envoy', 'no port 10001')).toBe(true);
    expect(saw('ConfigMap kvgate-sidecar has no key llama-b.yaml')).toBe(true);
    expect(saw('NetworkPolicy drops Deployment/kvgate-gate -> StatefulSet/vllm-a-decode:9090')).toBe(true);
    expect(saw('pool b-decode selects no pods')).toBe(true);
    expect(saw('NetworkPolicy kvgate-workers: port 5700-5740 is no port of the pods it selects')).toBe(true);
  });
});

/** A container's `--flag value` pairs. */
function flagsOf(c: Doc): Map<string, string> {
  const args = (c['args'] ?? []) as string[];
  const out = new Map<string, string>();
  for (let i = 0; i < args.length; i++) if (args[i]!.startsWith('--') && i + 1 < args.length) out.set(args[i]!, args[++i]!);
  return out;
}

/** `$(VAR)` in an arg, as the kubelet expands it from the container's env. */
const expand = (arg: string, env: Record<string, string>): string => arg.replace(/\$\(([A-Z_]+)\)/g, (m, v: string) => env[v] ?? m);

/**
 * Every sidecar of a pool some gate of the path finds by selector names itself exactly as that gate names the pod's
 * endpoint: `--advertise` expanded with an IPv4 and an IPv6 pod IP, read as `kvgate sidecar` reads it, must equal what
 * the gate's discovery makes of that pod (src/discovery/pods.ts `podEndpoints`). Decode sidecars only where the gate's
 * pick is where the request goes; where a proxy picks the pod, a pinned decode sidecar would refuse its traffic.
 */
function pinningProblems(ip: InstallPath): string[] {
  let docs = ip.docs;
  for (const e of ip.edits) docs = e.apply(docs);
  const cl = new Cluster(docs);
  const out: string[] = [];
  const tables = docs.filter((d) => d['kind'] === 'ConfigMap' && typeof d['data']?.['route-table.yaml'] === 'string');
  if (tables.length === 0) out.push('no gate route table');
  for (const cm of tables) {
    const table = parse(cm['data']['route-table.yaml']) as Doc;
    for (const pool of table['pools'] ?? []) {
      if (pool['discovery'] === undefined) continue;
      const d = PoolDiscoverySchema.parse(pool['discovery']);
      const what = `ConfigMap ${cm['metadata']['name']} pool ${pool['name']}`;
      const pods = cl.podsSelected({ ...d.kubernetes.matchLabels, [d.kubernetes.revisionLabel]: pool['revision'] }, d.kubernetes.namespace);
      if (pods.length === 0) out.push(`${what}: selects no pods`);
      const pinned = pool['role'] !== 'decode' || ip.decodePick === 'gate';
      for (const pod of pods) {
        const sidecar = containers(pod.spec).find((c) => (c['args'] ?? [])[0] === 'sidecar');
        if (sidecar === undefined) {
          out.push(`${what}: ${pod.owner} runs no kvgate sidecar`);
          continue;
        }
        const flags = flagsOf(sidecar);
        const advertise = flags.get('--advertise');
        if (!pinned) {
          if (advertise !== undefined) out.push(`${what}: ${pod.owner} pins its decode sidecar, but the data plane picks the pod`);
          continue;
        }
        if (advertise === undefined) {
          out.push(`${what}: ${pod.owner}'s ${pool['role']} sidecar does not pin itself (no --advertise)`);
          continue;
        }
        const podIpEnv = (sidecar['env'] ?? []).find((e: Doc) => e['name'] === 'POD_IP');
        if (podIpEnv?.['valueFrom']?.['fieldRef']?.['fieldPath'] !== 'status.podIP')
          out.push(`${what}: ${pod.owner}: POD_IP is not the downward API's status.podIP`);
        for (const podIP of ['10.1.2.3', 'fd00::1']) {
          const read = hostPortFlag('advertise', expand(advertise, { POD_IP: podIP }));
          const named = podEndpoints(
            [
              {
                metadata: { uid: 'u', name: 'p', labels: pod.labels },
                status: { phase: 'Running', podIP, conditions: [{ type: 'Ready', status: 'True' }] },
              },
            ],
            d,
            pool['revision'],
          )[0]?.address;
          if (!read.ok || read.value !== named)
            out.push(
              `${what}: ${pod.owner} advertises ${read.ok ? read.value : 'an unreadable value'} at pod IP ${podIP}, the gate names ${named}`,
            );
          const side = flags.get('--nixl-side-channel');
          if (side !== undefined && !hostPortFlag('nixl-side-channel', expand(side, { POD_IP: podIP })).ok)
            out.push(`${what}: ${pod.owner}'s --nixl-side-channel ${side} is unreadable at pod IP ${podIP}`);
        }
      }
    }
  }
  return [...new Set(out)];
}

describe('every sidecar names itself as the gate names its pod (a decode sidecar serves only contracts routed to it)', () => {
  for (const ip of PATHS) {
    it(`${ip.name}: ${ip.decodePick === 'gate' ? 'every sidecar pins itself' : 'prefill sidecars name themselves, decode sidecars are left to the proxy'}`, () => {
      expect(pinningProblems(ip)).toEqual([]);
    });
  }

  it('the check sees an unpinned decode sidecar, a wrong port and an unbracketed pod IP', () => {
    const base = PATHS[0]!;
    expect(pinningProblems({ ...base, edits: [{ says: { doc: '', quote: '' }, apply: unpinDecode }] })).toContain(
      "ConfigMap kvgate-policy pool a-decode: StatefulSet/vllm-a-decode's decode sidecar does not pin itself (no --advertise)",
    );
    const rewrite = (from: string, to: string) => (docs: Doc[]) =>
      docs.map((d) => (d['kind'] === 'StatefulSet' ? JSON.parse(JSON.stringify(d).replaceAll(from, to)) : d));
    const wrongPort = pinningProblems({
      ...base,
      edits: [{ says: { doc: '', quote: '' }, apply: rewrite('[$(POD_IP)]:9090', '[$(POD_IP)]:8000') }],
    });
    expect(wrongPort).toContain(
      'ConfigMap kvgate-policy pool b-decode: StatefulSet/vllm-b-decode advertises 10.1.2.3:8000 at pod IP 10.1.2.3, the gate names 10.1.2.3:9090',
    );
    const unbracketed = pinningProblems({ ...base, edits: [{ says: { doc: '', quote: '' }, apply: rewrite('[$(POD_IP)]', '$(POD_IP)') }] });
    expect(unbracketed).toContain(
      'ConfigMap kvgate-policy pool a-decode: StatefulSet/vllm-a-decode advertises an unreadable value at pod IP fd00::1, the gate names [fd00::1]:9090',
    );
    expect(unbracketed).toContain(
      "ConfigMap kvgate-policy pool a-decode: StatefulSet/vllm-a-decode's --nixl-side-channel $(POD_IP):5600 is unreadable at pod IP fd00::1",
    );
    const gieWithProxyPick = PATHS.find((x) => x.name.startsWith('GIE istio'))!;
    expect(pinningProblems({ ...gieWithProxyPick, decodePick: 'proxy' })).toContain(
      'ConfigMap kvgate-epp-policy pool a-decode: StatefulSet/vllm-a-decode pins its decode sidecar, but the data plane picks the pod',
    );
  });
});
