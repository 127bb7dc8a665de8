/**
 * Every manifest of a built-in Kubernetes kind that kvgate ships (deploy/, envoy/) installs under `kubectl apply`'s
 * strict field validation: no unknown field, every value of the type the Kubernetes API schema gives it (see
 * test/support/kube-schema.ts for the schema's source and its limits). Custom resources are checked elsewhere
 * against their own schemas (InferencePool, Gateway API: test/gie; Envoy config inside EnvoyFilters and ConfigMaps:
 * test/envoy-static).
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { PACKAGE_ROOT } from '../../src/package-root.js';
import { builtInModel, schemaFindings } from '../support/kube-schema.js';

type Obj = Record<string, unknown>;

function yamlFiles(dir: string): string[] {
  return readdirSync(path.join(PACKAGE_ROOT, dir), { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && /\.ya?ml$/.test(e.name))
    .map((e) => path.relative(PACKAGE_ROOT, path.join(e.parentPath, e.name)))
    .sort();
}

/** Manifests parsed as kubectl parses them (YAML 1.1, sigs.k8s.io/yaml on go-yaml). */
const manifests = ['deploy', 'envoy'].flatMap(yamlFiles).flatMap((file) =>
  parseAllDocuments(readFileSync(path.join(PACKAGE_ROOT, file), 'utf8'), { version: '1.1' })
    .map((d) => d.toJS() as Obj | null)
    .filter((d): d is Obj => d !== null && typeof d['kind'] === 'string' && typeof d['apiVersion'] === 'string')
    .map((d) => ({ file, doc: d, model: builtInModel(d['apiVersion'] as string, d['kind'] as string) })),
);
const builtIn = manifests.filter((m) => m.model !== undefined);

describe('deploy: built-in Kubernetes objects match the Kubernetes API schema', () => {
  it('finds the shipped built-in kinds (a renamed folder or a client-node upgrade would otherwise check nothing)', () => {
    const kinds = new Set(builtIn.map((m) => m.doc['kind']));
    for (const k of [
      'Deployment',
      'StatefulSet',
      'Service',
      'ServiceAccount',
      'NetworkPolicy',
      'Role',
      'RoleBinding',
      'PodDisruptionBudget',
      'Secret',
      'Namespace',
    ])
      expect(kinds, k).toContain(k);
  });

  for (const m of builtIn) {
    const name = (m.doc['metadata'] as Obj | undefined)?.['name'];
    it(`${m.file}: ${m.doc['kind']} ${String(name)}`, () => {
      expect(schemaFindings(m.model as string, m.doc, `${m.doc['kind']}/${String(name)}`)).toEqual([]);
    });
  }
});

describe('the schema check finds what strict field validation refuses', () => {
  const deployment = (container: Obj): Obj => ({
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: 'x', labels: { app: 'x' } },
    spec: {
      replicas: 2,
      selector: { matchLabels: { app: 'x' } },
      template: { metadata: { labels: { app: 'x' } }, spec: { containers: [{ name: 'c', image: 'i', ...container }] } },
    },
  });
  const check = (doc: Obj) => schemaFindings(builtInModel('apps/v1', 'Deployment') as string, doc, 'Deployment/x');

  it('passes a well-formed Deployment, with quantities as numbers or strings and ports by name or number', () => {
    expect(
      check(
        deployment({
          resources: { limits: { 'nvidia.com/gpu': 1, memory: '1Gi' } },
          readinessProbe: { httpGet: { path: '/', port: 'http' } },
          ports: [{ name: 'http', containerPort: 8080 }],
        }),
      ),
    ).toEqual([]);
  });

  it('names a misspelt field with its path and the field meant', () => {
    expect(check(deployment({ readinesProbe: { httpGet: { path: '/', port: 80 } } }))).toEqual([
      'Deployment/x.spec.template.spec.containers[0].readinesProbe: unknown field of V1Container (did you mean readinessProbe?)',
    ]);
  });

  it('names a field at the wrong level', () => {
    const doc = deployment({});
    (doc['spec'] as Obj)['terminationGracePeriodSeconds'] = 30;
    expect(check(doc)).toEqual(['Deployment/x.spec.terminationGracePeriodSeconds: unknown field of V1DeploymentSpec']);
  });

  it('names values of the wrong type', () => {
    expect(check(deployment({ ports: [{ containerPort: '8080' }], args: 'serve', stdin: 'yes' }))).toEqual([
      'Deployment/x.spec.template.spec.containers[0].ports[0].containerPort: a number is expected here, not string "8080"',
      'Deployment/x.spec.template.spec.containers[0].args: a list is expected here, not string "serve"',
      'Deployment/x.spec.template.spec.containers[0].stdin: true or false is expected here, not string "yes"',
    ]);
  });

  it('reads YAML as kubectl does: `on` in a label value is a boolean in YAML 1.1, which a label refuses', () => {
    const doc = parseAllDocuments('metadata:\n  name: x\n  labels:\n    enabled: on\n', { version: '1.1' })[0]?.toJS() as Obj;
    expect(schemaFindings('V1Service', doc, 'Service/x')).toEqual([
      'Service/x.metadata.labels.enabled: a string is expected here, not boolean true (quote it)',
    ]);
  });
});
