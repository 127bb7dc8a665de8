/**
 * The vLLM containers of the shipped manifests and the network settings they carry, for the tests that hold those
 * settings consistent with the NetworkPolicies and the Istio annotations (test/deploy/ucx-tcp-ports.test.ts,
 * test/deploy/gie-network-policies.test.ts).
 */
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { PACKAGE_ROOT } from '../../src/package-root.js';
import { docs, type Obj } from './network-policy.js';

/** A pod template that runs vLLM: where it is, its labels and annotations, and its vLLM containers. */
export interface VllmPodTemplate {
  readonly where: string;
  readonly labels: Record<string, string>;
  readonly annotations: Record<string, string>;
  readonly containers: readonly Obj[];
}

const isVllm = (c: Obj): boolean => c['command']?.[0] === 'vllm' || /^vllm\//.test(String(c['image'] ?? ''));

/** Every pod template (Deployment, StatefulSet) under `dirs` with at least one vLLM container. */
export function vllmPodTemplates(dirs: readonly string[]): VllmPodTemplate[] {
  const files = dirs.flatMap((dir) =>
    readdirSync(path.join(PACKAGE_ROOT, dir), { withFileTypes: true, recursive: true })
      .filter((e) => e.isFile() && /\.ya?ml$/.test(e.name))
      .map((e) => path.relative(PACKAGE_ROOT, path.join(e.parentPath, e.name))),
  );
  return files.sort().flatMap((file) =>
    docs(file)
      .filter((d) => ['Deployment', 'StatefulSet'].includes(d['kind']))
      .map((d) => ({ d, containers: ((d['spec']['template']['spec']['containers'] ?? []) as Obj[]).filter(isVllm) }))
      .filter(({ containers }) => containers.length > 0)
      .map(({ d, containers }) => ({
        where: `${file}: ${d['kind']}/${d['metadata']['name']}`,
        labels: d['spec']['template']['metadata']['labels'] ?? {},
        annotations: d['spec']['template']['metadata']['annotations'] ?? {},
        containers,
      })),
  );
}

/** A literal env value of a container (undefined when unset or taken from elsewhere). */
export const envOf = (c: Obj, name: string): string | undefined =>
  (c['env'] as Obj[] | undefined)?.find((e) => e['name'] === name)?.['value'];

/**
 * UCX_TCP_PORT_RANGE as UCX reads it: one number, or `first-last` (openucx/ucx src/ucs/config/parser.c
 * ucs_config_sscanf_range_spec @9466d104). Stricter than UCX: 0 (UCX's default, "the OS picks") and a reversed range
 * are refused, since a NetworkPolicy cannot open "whatever the OS picks".
 */
export function parseUcxPortRange(value: string): { first: number; last: number } {
  const m = /^(\d+)(?:-(\d+))?$/.exec(value);
  if (!m) throw new Error(`UCX_TCP_PORT_RANGE "${value}": expected PORT or FIRST-LAST`);
  const first = Number(m[1]);
  const last = Number(m[2] ?? m[1]);
  if (first < 1 || last > 65535 || last < first) throw new Error(`UCX_TCP_PORT_RANGE "${value}": not a port range`);
  return { first, last };
}

/** The one UCX TCP port range of the shipped vLLM containers (deploy/), as every port in it. */
export function shippedUcxPorts(): number[] {
  const values = new Set(vllmPodTemplates(['deploy']).flatMap((t) => t.containers.map((c) => envOf(c, 'UCX_TCP_PORT_RANGE') ?? '(unset)')));
  if (values.size !== 1) throw new Error(`the vLLM containers disagree on UCX_TCP_PORT_RANGE: ${[...values].join(', ')}`);
  const { first, last } = parseUcxPortRange([...values][0]!);
  return Array.from({ length: last - first + 1 }, (_, i) => first + i);
}
