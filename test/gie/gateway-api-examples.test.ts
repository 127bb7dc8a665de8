/**
 * The Gateway and HTTPRoute examples under deploy/gie/ (Istio, Envoy Gateway, kgateway) against the Gateway API's
 * own v1 schemas (deploy/gie/upstream/gateway-api, gateway-api v1.6.1, descriptions removed): structural checks as
 * kube-apiserver applies them (test/gie/openapi-schema.ts). CEL rules are not evaluated here.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { PACKAGE_ROOT } from '../../src/package-root.js';
import { validate, type Schema } from './openapi-schema.js';

const GIE = path.join(PACKAGE_ROOT, 'deploy', 'gie');
const UPSTREAM = path.join(GIE, 'upstream', 'gateway-api');
type Doc = Record<string, any>;

const schemaOf = (file: string): Schema =>
  (JSON.parse(readFileSync(path.join(UPSTREAM, file), 'utf8')) as { openAPIV3Schema: Schema }).openAPIV3Schema;
const SCHEMAS: Record<string, Schema> = { HTTPRoute: schemaOf('httproute-v1.schema.json'), Gateway: schemaOf('gateway-v1.schema.json') };

const examples = readdirSync(GIE, { withFileTypes: true })
  .filter((e) => e.isDirectory() && e.name !== 'upstream' && e.name !== 'config')
  .flatMap((e) =>
    readdirSync(path.join(GIE, e.name))
      .filter((f) => f.endsWith('.yaml'))
      .flatMap((f) =>
        parseAllDocuments(readFileSync(path.join(GIE, e.name, f), 'utf8'))
          .map((d) => d.toJS() as Doc)
          .filter((d) => d !== null && d['apiVersion'] === 'gateway.networking.k8s.io/v1')
          .map((doc) => ({ file: `${e.name}/${f}`, doc })),
      ),
  );

describe('deploy/gie: Gateway API examples against the Gateway API v1 schemas', () => {
  it('every gateway example has its Gateway and its HTTPRoute', () => {
    for (const dir of ['istio', 'envoy-gateway', 'kgateway']) {
      const kinds = examples.filter((x) => x.file.startsWith(`${dir}/`)).map((x) => x.doc['kind']);
      expect(kinds.sort(), dir).toEqual(['Gateway', 'HTTPRoute']);
    }
  });

  for (const { file, doc } of examples) {
    it(`${file}: ${doc['kind']} ${doc['metadata']?.['name']} validates`, () => {
      const schema = SCHEMAS[doc['kind'] as string];
      expect(schema, `a vendored schema for ${doc['kind']}`).toBeDefined();
      expect(validate(schema!, structuredClone(doc))).toEqual([]);
    });
  }

  it('the schema check catches what the API server would refuse', () => {
    const route = structuredClone(examples.find((x) => x.doc['kind'] === 'HTTPRoute')!.doc);
    route['spec']['rules'][0]['backendRefs'][0]['weight'] = -1;
    route['spec']['rules'][0]['matchez'] = [];
    route['spec']['parentRefs'][0]['name'] = '';
    const errors = validate(SCHEMAS['HTTPRoute']!, route).join('\n');
    expect(errors).toMatch(/weight: .*minimum|weight.*0/);
    expect(errors).toMatch(/matchez: unknown field/);
    expect(errors).toMatch(/parentRefs\[0\]\.name/);
  });
});
