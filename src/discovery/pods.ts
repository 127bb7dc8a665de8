/**
 * Pure: which pods are endpoints of a pool found by selector, and at which address.
 *
 * Followed: GIE's pool membership (kubernetes-sigs/gateway-api-inference-extension @84436a96,
 * pkg/lwepp/util/pod/pod.go and pkg/lwepp/controller/pod_reconciler.go: a pod counts when it matches the pool's
 * selector, has a pod IP and is Ready; an endpoint is podIP:targetPort) and Kubernetes' pod status semantics (the
 * `Ready` condition, `deletionTimestamp` set on a terminating pod; k8s.io/api core/v1 types.go). A terminating pod
 * is left out at once, as Kubernetes' EndpointSlice controller marks it not `serving`-for-new-traffic.
 *
 * kvgate adds the revision: the selector always carries `revisionLabel=<pool revision>`, so a pod of another
 * revision is never listed for the pool, and every endpoint keeps its pod's UID so a reused IP is a new endpoint.
 */
import type { PoolDiscovery } from '../policy/schema.js';

/** The parts of a Kubernetes Pod this module reads (structural: the client library's V1Pod fits). */
export interface PodLike {
  readonly metadata?: {
    readonly name?: string;
    readonly namespace?: string;
    readonly uid?: string;
    readonly labels?: Readonly<Record<string, string>>;
    readonly deletionTimestamp?: unknown;
    readonly creationTimestamp?: unknown;
  };
  readonly spec?: { readonly hostNetwork?: boolean };
  readonly status?: {
    readonly phase?: string;
    readonly podIP?: string;
    readonly conditions?: readonly { readonly type?: string; readonly status?: string }[];
  };
}

/** One pod that takes traffic for a pool. */
export interface DiscoveredEndpoint {
  /** `podIP:targetPort` (IPv6 in brackets): what Envoy's ORIGINAL_DST / override_host routes to. */
  readonly address: string;
  /** The sidecar's status base URL on the same pod. */
  readonly status: string;
  readonly podUid: string;
  readonly podName: string;
  readonly podIP: string;
  /** Pod creation time (ms since the epoch), to tell an older pod from its IP's newer owner. */
  readonly createdAtMs: number;
}

/** Why a matching pod is not (yet) an endpoint; null when it is one. */
export function notReadyReason(pod: PodLike): string | null {
  return isTerminating(pod) ? 'terminating' : notServingReason(pod);
}

function isTerminating(pod: PodLike): boolean {
  return pod.metadata?.deletionTimestamp !== undefined && pod.metadata.deletionTimestamp !== null;
}

/**
 * Why a pod cannot serve at all, terminating or not; null when it can (Running, Ready, with an IP and a UID). A
 * terminating pod that still serves is what Kubernetes' EndpointSlice marks `serving: true, terminating: true`: it
 * takes no new request, but finishes the ones sent to it before (its grace period exists for them).
 */
function notServingReason(pod: PodLike): string | null {
  if (pod.status?.phase !== 'Running') return `phase ${pod.status?.phase ?? 'unknown'}`;
  if (!pod.status.podIP) return 'no pod IP yet';
  const ready = pod.status.conditions?.find((c) => c.type === 'Ready');
  if (ready?.status !== 'True') return 'not Ready';
  if (!pod.metadata?.uid) return 'no UID';
  return null;
}

/**
 * The pod IP this pod holds now, for the IP-reuse guard; undefined when it holds none. A terminal pod (phase
 * Succeeded or Failed: completed, evicted, OOM-killed with restartPolicy Never) keeps `status.podIP` in the API (the
 * kubelet preserves it, kubernetes/kubernetes#125404) although its sandbox is gone and the IP is back in the node's
 * pool for the next pod; Kubernetes' own endpoints leave terminal pods out for that reason (`ShouldPodBeInEndpoints`,
 * staging/src/k8s.io/endpointslice/util/controller_utils.go, v1.33). Such a pod lingers until it is deleted or the
 * terminated-pod GC reaps it, so it must not claim the IP from the pod that now has it.
 *
 * A `hostNetwork` pod holds no IP of its own either: its `podIP` is its node's (the kubelet reports the host IPs for
 * it, pkg/kubelet/kubelet_pods.go `generateAPIPodStatus`, v1.33), shared by every hostNetwork pod on the node, so
 * two of them on one IP are neighbours on different ports, not a reuse. They are told apart by address and pod UID
 * (the sidecar's `podUid` check in src/gate/worker-poller.ts).
 */
export function heldPodIP(pod: PodLike): string | undefined {
  const phase = pod.status?.phase;
  if (phase === 'Succeeded' || phase === 'Failed' || pod.spec?.hostNetwork === true) return undefined;
  return pod.status?.podIP || undefined;
}

/** The label selector the watch uses: the pool's labels plus its revision label. */
export function selectorLabels(d: PoolDiscovery, revision: string): Readonly<Record<string, string>> {
  return { ...d.kubernetes.matchLabels, [d.kubernetes.revisionLabel]: revision };
}

/** `k=v,k2=v2`, sorted, as the API's `labelSelector` parameter takes equality selectors. */
export function labelSelectorString(labels: Readonly<Record<string, string>>): string {
  return Object.keys(labels)
    .sort()
    .map((k) => `${k}=${labels[k]}`)
    .join(',');
}

/**
 * A conflict the table itself has: `matchLabels` pins the revision label to another revision, so the pool could
 * never have an endpoint. Null when consistent.
 */
export function selectorConflict(d: PoolDiscovery, revision: string): string | null {
  const pinned = d.kubernetes.matchLabels[d.kubernetes.revisionLabel];
  return pinned !== undefined && pinned !== revision
    ? `matchLabels sets ${d.kubernetes.revisionLabel}=${pinned}, but the pool's revision is ${revision}`
    : null;
}

/** True when every label of `labels` is on the pod with the same value. */
export function matches(pod: PodLike, labels: Readonly<Record<string, string>>): boolean {
  const have = pod.metadata?.labels ?? {};
  return Object.entries(labels).every(([k, v]) => have[k] === v);
}

function hostPort(ip: string, port: number): string {
  return ip.includes(':') ? `[${ip}]:${port}` : `${ip}:${port}`;
}

/**
 * The endpoints among `pods` for a pool: matching, Ready, not terminating. When two of them share a pod IP (the
 * cache still holds a deleted pod whose IP a new pod got), only the newest is kept: IPs are unique among live pods.
 * `terminating`: the matching pods that are terminating and still serve instead (never a new request's target).
 */
export function podEndpoints(
  pods: readonly PodLike[],
  d: PoolDiscovery,
  revision: string,
  which: 'ready' | 'terminating' = 'ready',
): DiscoveredEndpoint[] {
  const labels = selectorLabels(d, revision);
  const byIp = new Map<string, DiscoveredEndpoint>();
  for (const pod of pods) {
    if (!matches(pod, labels) || isTerminating(pod) !== (which === 'terminating') || notServingReason(pod) !== null) continue;
    const ip = pod.status!.podIP!;
    const ep: DiscoveredEndpoint = {
      address: hostPort(ip, d.kubernetes.targetPort),
      status: `http://${hostPort(ip, d.kubernetes.statusPort)}`,
      podUid: pod.metadata!.uid!,
      podName: pod.metadata?.name ?? '',
      podIP: ip,
      createdAtMs: timeMs(pod.metadata?.creationTimestamp),
    };
    const other = byIp.get(ip);
    if (other === undefined || other.createdAtMs < ep.createdAtMs) byIp.set(ip, ep);
  }
  return [...byIp.values()].sort((a, b) => (a.address < b.address ? -1 : a.address > b.address ? 1 : 0));
}

function timeMs(t: unknown): number {
  if (t instanceof Date) return t.getTime();
  if (typeof t === 'string') {
    const ms = Date.parse(t);
    return Number.isNaN(ms) ? 0 : ms;
  }
  return 0;
}
