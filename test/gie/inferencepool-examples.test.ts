/**
 * The GIE examples under deploy/gie/ validate: every InferencePool against the vendored CRD schema
 * (deploy/gie/upstream, GIE @84436a96) including its two CEL rules, FailClose everywhere, each HTTPRoute's backend
 * an InferencePool that exists, and the route table's selector pools exactly the InferencePool's pods.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { parseGateConfig } from '../../src/gate/config.js';
import { PACKAGE_ROOT } from '../../src/package-root.js';
import { loadRouteTable } from '../../src/policy/load.js';
import { validate, type Schema } from './openapi-schema.js';

const GIE = path.join(PACKAGE_ROOT, 'deploy', 'gie');
type Doc = Record<string, any>;

function docs(file: string): Doc[] {
  return parseAllDocuments(readFileSync(file, 'utf8'))
    .map((d) => d.toJS() as Doc)
    .filter((d) => d !== null);
}

function yamlFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) return e.name === 'upstream' ? [] : yamlFiles(p);
    return e.name.endsWith('.yaml') ? [p] : [];
  });
}

const crd = docs(path.join(GIE, 'upstream', 'inference.networking.k8s.io_inferencepools.yaml'))[0]!;
const v1 = (crd['spec']['versions'] as Doc[]).find((v) => v['name'] === 'v1')!;
const schema = v1['schema']['openAPIV3Schema'] as Schema;
const all = yamlFiles(GIE).flatMap((f) => docs(f).map((d) => ({ file: path.relative(GIE, f), doc: d })));
const pools = all.filter((d) => d.doc['kind'] === 'InferencePool');

/** The CRD's CEL rules (x-kubernetes-validations), re-implemented: one per rule in the vendored file. */
function celRules(pool: Doc): string[] {
  const out: string[] = [];
  const ref = pool['spec']['endpointPickerRef'];
  if (ref !== undefined && (ref['kind'] ?? 'Service') === 'Service' && ref['port'] === undefined)
    out.push('port is required when kind is Service');
  const ports = (pool['spec']['targetPorts'] as Doc[]).map((p) => p['number']);
  if (new Set(ports).size !== ports.length) out.push('port number must be unique');
  return out;
}

describe('deploy/gie: InferencePool examples against the GIE CRD', () => {
  it('the vendored CRD is the v1 InferencePool and its CEL rules are the ones re-implemented here', () => {
    expect(crd['spec']['group']).toBe('inference.networking.k8s.io');
    const rules = JSON.stringify(v1).match(/"rule":"[^"]*"/g);
    expect(rules).toEqual([
      `"rule":"self.kind != 'Service' || has(self.port)"`,
      '"rule":"self.all(p1, self.exists_one(p2, p1.number==p2.number))"',
    ]);
  });

  it('every InferencePool validates, names an EPP Service that exists, and fails closed', () => {
    expect(pools.length).toBeGreaterThan(0);
    for (const { file, doc } of pools) {
      expect(doc['apiVersion'], file).toBe('inference.networking.k8s.io/v1');
      const copy = structuredClone(doc);
      expect([...validate(schema, copy), ...celRules(copy)], file).toEqual([]);
      expect(copy['spec']['endpointPickerRef']['failureMode'], `${file}: FailOpen would bypass kvgate`).toBe('FailClose');
      const svc = all.find((d) => d.doc['kind'] === 'Service' && d.doc['metadata']['name'] === doc['spec']['endpointPickerRef']['name']);
      expect(svc, `${file}: the EPP Service`).toBeDefined();
      expect(svc!.doc['spec']['ports'].map((p: Doc) => p['port'])).toContain(doc['spec']['endpointPickerRef']['port']['number']);
    }
  });

  it('the schema check catches what the API server would refuse', () => {
    const bad = structuredClone(pools[0]!.doc);
    bad['spec']['targetPorts'] = [{ number: 70000 }, { number: 70000 }];
    bad['spec']['endpointPickerRef']['failureMode'] = 'Sometimes';
    bad['spec']['selector']['extra'] = true;
    const errors = [...validate(schema, bad), ...celRules(bad)];
    expect(errors.join('\n')).toMatch(/targetPorts\[0\]\.number: above 65535/);
    expect(errors.join('\n')).toMatch(/failureMode: "Sometimes" is not one of/);
    expect(errors.join('\n')).toMatch(/selector\.extra: unknown field/);
    expect(errors).toContain('port number must be unique');
  });

  it('each gateway example routes to an InferencePool of deploy/gie', () => {
    const routes = all.filter((d) => d.doc['kind'] === 'HTTPRoute');
    expect(new Set(routes.map((r) => r.file.split('/')[0]))).toEqual(new Set(['istio', 'envoy-gateway', 'kgateway']));
    for (const { file, doc } of routes) {
      for (const rule of doc['spec']['rules'] as Doc[]) {
        for (const ref of rule['backendRefs'] as Doc[]) {
          expect(ref['group'], file).toBe('inference.networking.k8s.io');
          expect(ref['kind'], file).toBe('InferencePool');
          expect(
            pools.some((p) => p.doc['metadata']['name'] === ref['name']),
            `${file}: ${ref['name']}`,
          ).toBe(true);
        }
      }
    }
  });

  it("the route table's decode pools are exactly the InferencePool's pods, one revision each", async () => {
    const gate = parseGateConfig(readFileSync(path.join(GIE, 'config', 'gate.yaml'), 'utf8'), path.join(GIE, 'config', 'gate.yaml'));
    expect(gate.ok).toBe(true);
    if (gate.ok) expect(gate.value.envoy.gieHeaders).toBe(true);
    const table = await loadRouteTable(path.join(GIE, 'config', 'route-table.yaml'));
    if (!table.ok) throw new Error(JSON.stringify(table.error));
    const pool = pools[0]!.doc;
    const decode = [...table.value.pools.values()].filter((p) => p.role === 'decode');
    expect(decode.map((p) => p.revision).sort()).toEqual([...table.value.revisions.keys()].sort());
    for (const p of decode) {
      const k = p.discovery!.kubernetes;
      expect(k.matchLabels).toEqual(pool['spec']['selector']['matchLabels']);
      expect(k.targetPort).toBe(pool['spec']['targetPorts'][0]['number']);
      expect(pool['spec']['selector']['matchLabels'][k.revisionLabel], 'the InferencePool spans revisions').toBeUndefined();
    }
  });

  it('RBAC: the EPP may only get/list/watch pods in its namespace; only it mounts a token', () => {
    const roles = all.filter((d) => d.doc['kind'] === 'Role' || d.doc['kind'] === 'ClusterRole');
    expect(roles.map((r) => r.doc['kind'])).toEqual(['Role']);
    expect(roles[0]!.doc['rules']).toEqual([{ apiGroups: [''], resources: ['pods'], verbs: ['get', 'list', 'watch'] }]);
  });
});
