/**
 * Kubelet's gRPC probes present no client certificate, so a gate whose ext_proc port requires mTLS must be probed
 * on its plaintext health port (`health` in the gate config, src/gate/server.ts). Checked for every shipped gate.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments, parse as parseYaml } from 'yaml';

const read = (p: string) => readFileSync(new URL(`../../${p}`, import.meta.url), 'utf8');
const portOf = (hostPort: string) => Number(hostPort.slice(hostPort.lastIndexOf(':') + 1));

const GATES = [
  { deployment: 'deploy/kubernetes/gate-deployment.yaml', config: 'deploy/kubernetes/config/gate.yaml' },
  { deployment: 'deploy/gie/epp.yaml', config: 'deploy/gie/config/gate.yaml' },
];

describe('gate probes', () => {
  for (const g of GATES) {
    it(`${g.deployment}: every probe targets the plaintext health port, which the container exposes`, () => {
      const config = parseYaml(read(g.config)) as { listen: string; health?: string; tls?: unknown };
      expect(config.tls, 'the shipped gate runs mTLS on its ext_proc port').toBeDefined();
      expect(config.health, `${g.config} sets health: HOST:PORT`).toMatch(/:\d+$/);
      const health = portOf(config.health!);
      expect(health).not.toBe(portOf(config.listen));
      const deployment = parseAllDocuments(read(g.deployment))
        .map((d) => d.toJS() as { kind?: string; spec?: any })
        .find((d) => d.kind === 'Deployment')!;
      const container = deployment.spec.template.spec.containers.find((c: { name: string }) => c.name === 'gate');
      expect(container.ports.map((p: { containerPort: number }) => p.containerPort)).toContain(health);
      for (const probe of ['livenessProbe', 'readinessProbe']) {
        const p = container[probe];
        expect(p?.grpc, `${probe} is a gRPC probe`).toBeDefined();
        expect(p.grpc.port, `${probe} on the health port`).toBe(health);
      }
    });
  }
});
