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

/**
 * The Service this set renders for a cluster (its selector as YAML flow text, and the sidecar's port), or why none:
 * several pools or listed endpoints (input.ts), or pods in another namespace than the routes name. The Envoy Gateway
 * render's NetworkPolicies select the same pods, so they ask here too.
 */
export function renderedService(c: RenderCluster, s: RenderSettings): { selector: string; targetPort: number } | { missing: string } {
  const spec = c.service;
  if ('missing' in spec) return spec;
  if (spec.namespace !== s.namespace) {
    return {
      missing: `pool ${c.pools[0]!} finds its pods in namespace ${spec.namespace}, and these routes name Services in ${s.namespace} (--namespace)`,
    };
  }
  const selector = Object.entries(spec.selector)
    .map(([k, v]) => `${scalar(k)}: ${scalar(v)}`)
    .join(', ');
  return { selector, targetPort: spec.targetPort };
}

/** One YAML document per cluster (a Service, or the comment saying what to create), and a warning per cluster left to the operator. */
export function poolServiceDocs(clusters: readonly RenderCluster[], s: RenderSettings): { docs: string[][]; warnings: string[] } {
  const docs: string[][] = [];
  const warnings: string[] = [];
  for (const c of clusters) {
    const name = poolServiceOf(c, s);
    const svc = renderedService(c, s);
    if ('missing' in svc) {
      warnings.push(
        `no Service rendered for cluster ${c.name}: ${svc.missing}; create Service ${name} in namespace ${s.namespace} selecting its pods`,
      );
      docs.push([
        `# NO SERVICE RENDERED for cluster ${c.name}: ${svc.missing}.`,
        `# Create Service ${name} in namespace ${s.namespace}, port ${String(s.poolPort)} -> the sidecar's port, selecting exactly`,
        '# the pods of its pools; until it exists, every request routed to this cluster ends in a 503.',
      ]);
      continue;
    }
    docs.push([
      `# ${c.name} (pool ${c.pools[0]!}): the pods the gate's discovery finds for it, on the sidecar's port.`,
      'apiVersion: v1',
      'kind: Service',
      'metadata:',
      `  name: ${name}`,
      `  namespace: ${s.namespace}`,
      '  labels: { app.kubernetes.io/part-of: kvgate }',
      'spec:',
      `  selector: { ${svc.selector} }`,
      '  ports:',
      `  - { name: http, port: ${String(s.poolPort)}, targetPort: ${String(svc.targetPort)}, appProtocol: http }`,
    ]);
  }
  return { docs, warnings };
}
