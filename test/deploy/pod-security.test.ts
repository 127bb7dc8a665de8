/**
 * Every example workload can read the Secrets it mounts, as the kubelet writes them, and none mounts a Secret
 * world-readable.
 *
 * What the kubelet does (kubernetes/kubernetes): a secret volume's files get the item's `mode` or the volume's
 * `defaultMode` (0644 when unset), owned root:root; only with a pod `fsGroup` does `SetVolumeOwnership`
 * (pkg/volume/volume_linux.go) give them that group, and with a nil fsGroup it does nothing. So a non-root container
 * reads a 0440 Secret only through fsGroup. The manifests are parsed as YAML 1.1, as kubectl does (sigs.k8s.io/yaml
 * on go-yaml): `0440` is octal there, where YAML 1.2 would read decimal 440.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { PACKAGE_ROOT } from '../../src/package-root.js';

type Obj = Record<string, any>;
const FILES = [
  'deploy/kubernetes/gate-deployment.yaml',
  'deploy/kubernetes/envoy-deployment.yaml',
  'deploy/kubernetes/workers.yaml',
  'deploy/gie/epp.yaml',
];
const docs = (f: string): Obj[] =>
  parseAllDocuments(readFileSync(path.join(PACKAGE_ROOT, f), 'utf8'), { version: '1.1' })
    .map((d) => d.toJS() as Obj)
    .filter((d) => d !== null);
const workloads = FILES.flatMap((f) =>
  docs(f)
    .filter((d) => ['Deployment', 'StatefulSet', 'DaemonSet'].includes(d['kind']))
    .map((d) => ({ file: f, name: d['metadata']['name'] as string, pod: d['spec']['template']['spec'] as Obj })),
);

/** The uid a container's process runs as, from the container's or else the pod's securityContext. */
const uidOf = (pod: Obj, c: Obj): number | undefined => c['securityContext']?.['runAsUser'] ?? pod['securityContext']?.['runAsUser'];

describe('deploy: Secrets as the kubelet mounts them', () => {
  it('there are workloads to check', () => {
    expect(workloads.map((w) => w.name).sort()).toEqual([
      'kvgate-envoy',
      'kvgate-epp',
      'kvgate-gate',
      'vllm-a-decode',
      'vllm-a-prefill',
      'vllm-b-decode',
      'vllm-b-prefill',
    ]);
  });

  for (const w of workloads) {
    it(`${w.name}: every container reads each Secret it mounts, and no Secret is world-readable`, () => {
      const fsGroup: number | undefined = w.pod['securityContext']?.['fsGroup'];
      const secrets = new Map<string, Obj>(
        (w.pod['volumes'] ?? []).filter((v: Obj) => v['secret']).map((v: Obj) => [v['name'], v['secret']]),
      );
      for (const c of w.pod['containers'] as Obj[]) {
        const uid = uidOf(w.pod, c);
        for (const m of c['volumeMounts'] ?? []) {
          const secret = secrets.get(m['name']);
          if (!secret) continue;
          const where = `${w.file} ${w.name}/${c['name']}: Secret ${secret['secretName']}`;
          const modes: number[] = [secret['defaultMode'] ?? 0o644, ...(secret['items'] ?? []).map((i: Obj) => i['mode'])].filter(
            (x) => x !== undefined,
          );
          for (const mode of modes) {
            expect(mode & 0o007, `${where}: mode 0${mode.toString(8)} is world-readable`).toBe(0);
            if (uid === 0) continue;
            // Owner root, group fsGroup when set (else root; fsGroup is every container's supplementary group): a
            // non-root process reads through the group bit, and only with fsGroup.
            const readable = (mode & 0o040) !== 0 && fsGroup !== undefined;
            expect(readable, `${where}: mode 0${mode.toString(8)}, uid ${uid}, fsGroup ${fsGroup}`).toBe(true);
          }
        }
      }
    });
  }
});
