/**
 * deploy/kubernetes/monitoring.yaml scrapes what the other manifests run: the ServiceMonitor selects the gate's
 * ClusterIP Service and names one of its ports; the PodMonitor selects every worker pod with a kvgate sidecar, names
 * the sidecar's container port, and copies labels those pods carry. No cluster here, so this is the check.
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { parseAllDocuments } from 'yaml';
import { describe, expect, it } from 'vitest';
import { PACKAGE_ROOT } from '../../src/package-root.js';

type Obj = Record<string, any>;
const load = async (file: string): Promise<Obj[]> =>
  parseAllDocuments(await readFile(path.join(PACKAGE_ROOT, 'deploy', 'kubernetes', file), 'utf8'))
    .map((d) => d.toJS() as Obj)
    .filter((d) => d !== null);
const matches = (selector: Record<string, string>, labels: Record<string, string> = {}) =>
  Object.entries(selector).every(([k, v]) => labels[k] === v);

describe('monitoring.yaml against the manifests it scrapes', () => {
  it('the ServiceMonitor selects the gate Service that has the named admin port', async () => {
    const [sm] = (await load('monitoring.yaml')).filter((o) => o['kind'] === 'ServiceMonitor');
    const services = (await load('gate-deployment.yaml')).filter(
      (o) => o['kind'] === 'Service' && matches(sm!['spec'].selector.matchLabels, o['metadata'].labels),
    );
    const withPort = services.filter((s) => (s['spec'].ports as Obj[]).some((p) => p['name'] === sm!['spec'].endpoints[0].port));
    expect(withPort.map((s) => s['metadata'].name)).toEqual(['kvgate-gate']);
  });

  it('the PodMonitor selects every worker pod, on the sidecar port, with the labels it copies', async () => {
    const [pm] = (await load('monitoring.yaml')).filter((o) => o['kind'] === 'PodMonitor');
    const workers = (await load('workers.yaml')).filter((o) => o['kind'] === 'StatefulSet');
    expect(workers.length).toBeGreaterThan(0);
    for (const w of workers) {
      const tpl = w['spec'].template;
      expect(matches(pm!['spec'].selector.matchLabels, tpl.metadata.labels)).toBe(true);
      const ports = (tpl.spec.containers as Obj[]).flatMap((c) => (c['ports'] ?? []) as Obj[]);
      expect(ports.some((p) => p['name'] === pm!['spec'].podMetricsEndpoints[0].port)).toBe(true);
      for (const l of pm!['spec'].podTargetLabels as string[]) expect(tpl.metadata.labels[l]).toBeTypeOf('string');
    }
  });
});
