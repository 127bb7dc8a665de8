/**
 * An evaluator of Kubernetes NetworkPolicy ingress rules, for tests that ask whether the shipped policies let one pod
 * open a connection to another on a port.
 *
 * It follows the semantics of kubernetes/website content/en/docs/concepts/services-networking/network-policies.md:
 * a pod selected by any Ingress policy admits only what some rule of those policies allows (policies are additive);
 * a peer with only `podSelector` means pods of the policy's own namespace, with only `namespaceSelector` every pod of
 * the matching namespaces, with both the pods matching both; a rule without `ports` allows every port; a port entry
 * without `protocol` means TCP; `endPort` ("Targeting a range of ports", stable since Kubernetes 1.25) widens the
 * entry to every port from `port` to `endPort`. Namespaces carry `kubernetes.io/metadata.name`.
 *
 * Not modelled (none of the shipped policies use them): `ipBlock` peers (pod IPs are not modelled), named ports,
 * `matchExpressions` (a selector with any never matches here, so a test fails rather than passes on one).
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { parseAllDocuments } from 'yaml';
import { PACKAGE_ROOT } from '../../src/package-root.js';

export type Obj = Record<string, any>;
type Labels = Record<string, string>;

/** A pod as a NetworkPolicy sees it: its namespace and labels. */
export interface Pod {
  readonly namespace: string;
  readonly labels: Labels;
}

/** The namespace of the example manifests (deploy/kubernetes/kustomization.yaml and deploy/gie/kustomization.yaml). */
export const NS = 'kvgate';

/** Every non-empty YAML document of a file under the package root. */
export const docs = (f: string): Obj[] =>
  parseAllDocuments(readFileSync(path.join(PACKAGE_ROOT, f), 'utf8'))
    .map((d) => d.toJS() as Obj)
    .filter((d) => d !== null);

/** The NetworkPolicies of a file under the package root. */
export const policiesIn = (f: string): Obj[] => docs(f).filter((d) => d['kind'] === 'NetworkPolicy');

const matchLabels = (selector: Obj | undefined, labels: Labels): boolean =>
  Object.entries((selector?.['matchLabels'] ?? {}) as Labels).every(([k, v]) => labels[k] === v) &&
  (selector?.['matchExpressions'] ?? []).length === 0;

function peerMatches(peer: Obj, policyNamespace: string, src: Pod): boolean {
  const nsLabels = { 'kubernetes.io/metadata.name': src.namespace };
  if (peer['ipBlock']) return false;
  const nsOk = peer['namespaceSelector'] ? matchLabels(peer['namespaceSelector'], nsLabels) : src.namespace === policyNamespace;
  const podOk = peer['podSelector'] ? matchLabels(peer['podSelector'], src.labels) : true;
  return nsOk && podOk;
}

function portMatches(entry: Obj, port: number): boolean {
  if ((entry['protocol'] ?? 'TCP') !== 'TCP' || typeof entry['port'] !== 'number') return false;
  return port >= entry['port'] && port <= (entry['endPort'] ?? entry['port']);
}

/** Whether `src` may open a TCP connection to `dst` on `port` under `policies`. */
export function admits(policies: readonly Obj[], src: Pod, dst: Pod, port: number): boolean {
  const selecting = policies.filter(
    (p) =>
      (p['metadata']['namespace'] ?? NS) === dst.namespace &&
      matchLabels(p['spec']['podSelector'], dst.labels) &&
      (p['spec']['policyTypes'] ?? ['Ingress']).includes('Ingress'),
  );
  if (selecting.length === 0) return true;
  return selecting.some((p) =>
    (p['spec']['ingress'] ?? []).some(
      (rule: Obj) =>
        (rule['from'] === undefined || rule['from'].some((peer: Obj) => peerMatches(peer, p['metadata']['namespace'] ?? NS, src))) &&
        (rule['ports'] === undefined || rule['ports'].some((x: Obj) => portMatches(x, port))),
    ),
  );
}
