/**
 * The pool Services of the Istio and Envoy Gateway sets. Plain Envoy routes to the exact pod the gate chose
 * (`ORIGINAL_DST` on the stamped endpoint), so deploy/kubernetes has no Service in front of the workers; Istio's
 * VirtualServices and Envoy Gateway's HTTPRoute can only name a Service, so these sets bring their own. Each selects
 * exactly the pods the gate's discovery finds for the pool (its `matchLabels` and revision label), on the sidecar's
 * port: Kubernetes lists only Ready pods behind a Service, and the sidecar's readiness fails while its worker is
 * unverified or draining, so those pods drop out of the Service as they drop out of the gate's view.
 *
 * A cluster whose Service cannot be derived from the route table (several pools, or listed endpoints) gets a comment
 * saying what to create, and the render command warns: without it every request to that pool would end in a 503.
 */
import type { RenderCluster } from './input.js';
import type { RenderSettings } from './settings.js';
import { scalar } from './text.js';

/** The Service a cluster's traffic goes to on Istio and Envoy Gateway (named after its first pool). */
export function poolServiceOf(c: RenderCluster, s: RenderSettings): string {
  return s.poolService.replaceAll('{pool}', c.pools[0]!);
}

/** One YAML document per cluster (a Service, or the comment saying what to create), and a warning per cluster left to the operator. */
export function poolServiceDocs(clusters: readonly RenderCluster[], s: RenderSettings): { docs: string[][]; warnings: string[] } {
  const docs: string[][] = [];
  const warnings: string[] = [];
  for (const c of clusters) {
    const name = poolServiceOf(c, s);
    const spec = c.service;
    const why =
      'missing' in spec
        ? spec.missing
        : spec.namespace === s.namespace
          ? undefined
          : `pool ${c.pools[0]!} finds its pods in namespace ${spec.namespace}, and these routes name Services in ${s.namespace} (--namespace)`;
    if (why !== undefined || 'missing' in spec) {
      warnings.push(
        `no Service rendered for cluster ${c.name}: ${why ?? ''}; create Service ${name} in namespace ${s.namespace} selecting its pods`,
      );
      docs.push([
        `# NO SERVICE RENDERED for cluster ${c.name}: ${why ?? ''}.`,
        `# Create Service ${name} in namespace ${s.namespace}, port ${String(s.poolPort)} -> the sidecar's port, selecting exactly`,
        '# the pods of its pools; until it exists, every request routed to this cluster ends in a 503.',
      ]);
      continue;
    }
    const selector = Object.entries(spec.selector)
      .map(([k, v]) => `${scalar(k)}: ${scalar(v)}`)
      .join(', ');
    docs.push([
      `# ${c.name} (pool ${c.pools[0]!}): the pods the gate's discovery finds for it, on the sidecar's port.`,
      'apiVersion: v1',
      'kind: Service',
      'metadata:',
      `  name: ${name}`,
      `  namespace: ${s.namespace}`,
      '  labels: { app.kubernetes.io/part-of: kvgate }',
      'spec:',
      `  selector: { ${selector} }`,
      '  ports:',
      `  - { name: http, port: ${String(s.poolPort)}, targetPort: ${String(spec.targetPort)}, appProtocol: http }`,
    ]);
  }
  return { docs, warnings };
}
