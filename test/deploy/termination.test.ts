/**
 * Pod termination as the kubelet runs it: every container's preStop hook runs first, then its SIGTERM, and "the Pod's
 * termination grace period countdown begins before the PreStop hook is executed" (k8s.io/api core/v1 types.go,
 * `Lifecycle.PreStop`): SIGKILL ends whatever is left when it runs out. So, for each example:
 * - the gate and the EPP (no preStop): drain.announceMs + drain.graceMs fits in the grace period, with margin;
 * - a worker: the sidecar (SIGTERM at once) finishes drainAnnounceMs + drainGraceMs before vLLM's preStop sleep ends,
 *   and vLLM then still has time to stop before the grace period runs out.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments, parse as parseYaml } from 'yaml';
import { PACKAGE_ROOT } from '../../src/package-root.js';

type Obj = Record<string, any>;
const read = (f: string) => readFileSync(path.join(PACKAGE_ROOT, f), 'utf8');
const workloads = (f: string): Obj[] =>
  parseAllDocuments(read(f))
    .map((d) => d.toJS() as Obj)
    .filter((d) => d !== null && ['Deployment', 'StatefulSet'].includes(d['kind']));
const MARGIN_S = 5;

describe('deploy: drain fits the termination grace period', () => {
  for (const g of [
    { file: 'deploy/kubernetes/gate-deployment.yaml', config: 'deploy/kubernetes/config/gate.yaml' },
    { file: 'deploy/gie/epp.yaml', config: 'deploy/gie/config/gate.yaml' },
  ]) {
    it(`${g.file}: announce + grace + margin <= terminationGracePeriodSeconds, no preStop`, () => {
      const drain = (parseYaml(read(g.config)) as { drain: { announceMs: number; graceMs: number } }).drain;
      const pod = workloads(g.file)[0]!['spec']['template']['spec'];
      expect(pod['containers'].every((c: Obj) => c['lifecycle']?.['preStop'] === undefined)).toBe(true);
      expect((drain.announceMs + drain.graceMs) / 1000 + MARGIN_S).toBeLessThanOrEqual(pod['terminationGracePeriodSeconds']);
    });
  }

  for (const w of workloads('deploy/kubernetes/workers.yaml')) {
    it(`${w['metadata']['name']}: the sidecar drains before vLLM's preStop ends, and vLLM stops within the grace period`, () => {
      const pod = w['spec']['template']['spec'];
      const role = w['spec']['template']['metadata']['labels']['kvgate.io/role'];
      const sidecar = parseYaml(read(`deploy/kubernetes/config/sidecar-${role}.yaml`)) as Obj;
      const vllm = pod['containers'].find((c: Obj) => c['name'] === 'vllm');
      const cmd: string[] = vllm['lifecycle']['preStop']['exec']['command'];
      expect(cmd[0]).toBe('sleep');
      const sleepS = Number(cmd[1]);
      expect((sidecar['drainAnnounceMs'] + sidecar['drainGraceMs']) / 1000).toBeLessThan(sleepS);
      expect(sleepS + MARGIN_S).toBeLessThanOrEqual(pod['terminationGracePeriodSeconds']);
    });
  }
});
