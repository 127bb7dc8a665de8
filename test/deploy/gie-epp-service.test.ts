/**
 * The EPP's ext_proc port is mTLS (deploy/gie/config/gate.yaml `tls`), so its Service must not declare a cleartext
 * application protocol: Kubernetes defines `kubernetes.io/h2c` as HTTP/2 prior knowledge over cleartext and
 * `kubernetes.io/ws` as WebSocket over cleartext (ServicePort.appProtocol, staging/src/k8s.io/api/core/v1/types.go),
 * and gateways pick their upstream protocol from it. GIE's own EPP Service says `http2`
 * (kubernetes-sigs/gateway-api-inference-extension config/charts/inferencepool/templates/epp-service.yaml @6db43ed5).
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments, parse as parseYaml } from 'yaml';
import { PACKAGE_ROOT } from '../../src/package-root.js';

type Obj = Record<string, any>;
const read = (f: string) => readFileSync(path.join(PACKAGE_ROOT, f), 'utf8');
const CLEARTEXT = ['kubernetes.io/h2c', 'kubernetes.io/ws'];

describe('deploy/gie/epp.yaml: the ext_proc Service port', () => {
  it('targets the mTLS listen port and declares HTTP/2 without claiming cleartext', () => {
    const gate = parseYaml(read('deploy/gie/config/gate.yaml')) as { listen: string; tls?: unknown };
    expect(gate.tls).toBeDefined();
    const listen = Number(gate.listen.slice(gate.listen.lastIndexOf(':') + 1));
    const docs = parseAllDocuments(read('deploy/gie/epp.yaml')).map((d) => d.toJS() as Obj);
    const container = docs.find((d) => d['kind'] === 'Deployment')!['spec']['template']['spec']['containers'][0];
    const named = new Map<string, number>(container['ports'].map((p: Obj) => [p['name'], p['containerPort']]));
    const service = docs.find((d) => d['kind'] === 'Service' && d['metadata']['name'] === 'kvgate-epp')!;
    const port = service['spec']['ports'].find((p: Obj) => (named.get(p['targetPort']) ?? p['targetPort']) === listen);
    expect(port, 'a Service port reaches the ext_proc listen port').toBeDefined();
    expect(CLEARTEXT).not.toContain(port['appProtocol']);
    expect(port['appProtocol']).toBe('http2');
  });
});
