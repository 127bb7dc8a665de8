/**
 * The test API server's object store: pods with an etcd-like, cluster-wide, increasing resourceVersion, and a
 * bounded history of changes from which watches are served. Compacting drops history, so a watch (or list) from an
 * older resourceVersion gets `410 Gone`, as etcd compaction does for kube-apiserver.
 *
 * Followed: Kubernetes API concepts (kubernetes.io/docs/reference/using-api/api-concepts/, "Efficient detection of
 * changes", "Watch bookmarks", "Resource versions"); resourceVersions are opaque to clients, numbers here.
 */

export interface Pod {
  apiVersion: 'v1';
  kind: 'Pod';
  metadata: {
    name: string;
    namespace: string;
    uid: string;
    labels: Record<string, string>;
    resourceVersion: string;
    creationTimestamp: string;
    deletionTimestamp?: string;
    deletionGracePeriodSeconds?: number;
  };
  /** The parts of the spec tests set (absent: a pod on the pod network). */
  spec?: { hostNetwork?: boolean; nodeName?: string; terminationGracePeriodSeconds?: number };
  status: {
    phase: string;
    /** The kubelet sets both: `podIP` is `podIPs[0].ip` (k8s.io/api core/v1 types.go, PodStatus). */
    podIP?: string;
    podIPs?: { ip: string }[];
    conditions: { type: string; status: string }[];
  };
}

export type EventType = 'ADDED' | 'MODIFIED' | 'DELETED';

export interface Change {
  readonly rv: number;
  readonly type: EventType;
  /** The object after the change (for DELETED: its last state, with the deletion's resourceVersion). */
  readonly pod: Pod;
  /** The object before the change (for selector transitions); undefined for ADDED. */
  readonly before?: Pod;
}

export class PodStore {
  #rv = 1;
  #compactedRv = 0;
  readonly #pods = new Map<string, Pod>(); // key: namespace/name
  readonly #history: Change[] = [];
  readonly #listeners = new Set<(c: Change) => void>();
  readonly #maxHistory: number;

  constructor(maxHistory = 10_000) {
    this.#maxHistory = maxHistory;
  }

  get resourceVersion(): number {
    return this.#rv;
  }

  get compactedRv(): number {
    return this.#compactedRv;
  }

  list(namespace: string): Pod[] {
    return [...this.#pods.values()].filter((p) => p.metadata.namespace === namespace).map(clone);
  }

  /** The namespace's pods as they were at `rv` (etcd reads at a revision); null when `rv` is compacted away. */
  listAt(namespace: string, rv: number): Pod[] | null {
    const after = this.since(rv);
    if (after === null) return null;
    const pods = new Map([...this.#pods].filter(([, p]) => p.metadata.namespace === namespace));
    for (const c of [...after].reverse()) {
      if (c.pod.metadata.namespace !== namespace) continue;
      const key = `${namespace}/${c.pod.metadata.name}`;
      if (c.before === undefined) pods.delete(key);
      else pods.set(key, c.before);
    }
    return [...pods.values()].map(clone);
  }

  get(namespace: string, name: string): Pod | undefined {
    const p = this.#pods.get(`${namespace}/${name}`);
    return p === undefined ? undefined : clone(p);
  }

  create(
    pod: Omit<Pod, 'apiVersion' | 'kind' | 'metadata'> & {
      metadata: Omit<Pod['metadata'], 'resourceVersion' | 'creationTimestamp'> & { creationTimestamp?: string };
    },
  ): Pod {
    const key = `${pod.metadata.namespace}/${pod.metadata.name}`;
    if (this.#pods.has(key)) throw new Error(`pod ${key} already exists`);
    const rv = ++this.#rv;
    const created: Pod = {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { creationTimestamp: new Date(1_700_000_000_000 + rv * 1000).toISOString(), ...pod.metadata, resourceVersion: String(rv) },
      ...(pod.spec === undefined ? {} : { spec: pod.spec }),
      status: pod.status,
    };
    this.#pods.set(key, created);
    this.#record({ rv, type: 'ADDED', pod: clone(created) });
    return clone(created);
  }

  update(namespace: string, name: string, mutate: (p: Pod) => void): Pod {
    const key = `${namespace}/${name}`;
    const before = this.#pods.get(key);
    if (before === undefined) throw new Error(`pod ${key} does not exist`);
    const after = clone(before);
    mutate(after);
    const rv = ++this.#rv;
    after.metadata.resourceVersion = String(rv);
    this.#pods.set(key, after);
    this.#record({ rv, type: 'MODIFIED', pod: clone(after), before: clone(before) });
    return clone(after);
  }

  /**
   * `DELETE /api/v1/namespaces/{ns}/pods/{name}` as kube-apiserver answers it (v1.33). The grace period is the
   * request's, else the pod's `terminationGracePeriodSeconds` (defaulted to 30), and 0 for a pod not scheduled
   * (no `spec.nodeName`) or terminal (Succeeded, Failed): pkg/registry/core/pod/strategy.go `CheckGracefulDelete`.
   * The object is first UPDATED with `deletionTimestamp` = now + grace and `deletionGracePeriodSeconds`
   * (staging/src/k8s.io/apiserver/pkg/registry/rest/delete.go `BeforeDelete`; registry/generic/registry/store.go
   * `updateForGracefulDeletionAndFinalizers`): a MODIFIED event. With grace 0 it is then removed at once (DELETED);
   * otherwise it stays, terminating, until the kubelet deletes it with grace 0 (call again with 0), which
   * shortens the period (another update) and removes it. A second delete with no shorter grace changes nothing.
   */
  deletePod(namespace: string, name: string, opts: { gracePeriodSeconds?: number; nowMs?: number } = {}): void {
    const pod = this.#pods.get(`${namespace}/${name}`);
    if (pod === undefined) throw new Error(`pod ${namespace}/${name} does not exist`);
    let grace = opts.gracePeriodSeconds ?? pod.spec?.terminationGracePeriodSeconds ?? 30;
    if (!pod.spec?.nodeName || pod.status.phase === 'Succeeded' || pod.status.phase === 'Failed') grace = 0;
    const pending = pod.metadata.deletionGracePeriodSeconds;
    if (pending !== undefined && grace >= pending) return;
    const now = opts.nowMs ?? Date.now();
    this.update(namespace, name, (p) => {
      p.metadata.deletionTimestamp = new Date(now + grace * 1000).toISOString().replace(/\.\d{3}Z$/, 'Z');
      p.metadata.deletionGracePeriodSeconds = grace;
    });
    if (grace === 0) this.delete(namespace, name);
  }

  /** The object removed from storage, with no update before it (what the final step of `deletePod` does). */
  delete(namespace: string, name: string): void {
    const key = `${namespace}/${name}`;
    const before = this.#pods.get(key);
    if (before === undefined) throw new Error(`pod ${key} does not exist`);
    this.#pods.delete(key);
    const rv = ++this.#rv;
    const last = clone(before);
    last.metadata.resourceVersion = String(rv);
    this.#record({ rv, type: 'DELETED', pod: last, before: clone(before) });
  }

  /** Drop all history up to now (etcd compaction): any resourceVersion before the current one is too old. */
  compact(): void {
    this.#compactedRv = this.#rv;
    this.#history.length = 0;
  }

  /** Changes after `rv`, or null when `rv` is older than the retained history. */
  since(rv: number): Change[] | null {
    if (rv < this.#compactedRv) return null;
    return this.#history.filter((c) => c.rv > rv);
  }

  subscribe(fn: (c: Change) => void): () => void {
    this.#listeners.add(fn);
    return () => this.#listeners.delete(fn);
  }

  #record(c: Change): void {
    this.#history.push(c);
    if (this.#history.length > this.#maxHistory) {
      const dropped = this.#history.splice(0, this.#history.length - this.#maxHistory);
      this.#compactedRv = dropped[dropped.length - 1]!.rv;
    }
    for (const fn of this.#listeners) fn(c);
  }
}

function clone<T>(v: T): T {
  return structuredClone(v);
}
