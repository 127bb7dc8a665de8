/**
 * A Kubernetes Deployment, rolled the way the Deployment and ReplicaSet controllers roll it, against the test API server
 * (testbed/kube-apiserver). Test support for test/e2e/rolling-update.test.ts.
 *
 * What it follows, from kubernetes/kubernetes `pkg/controller/deployment/rolling.go` (read at commit
 * 95f08499d652a6211121d8af35f470609217c730):
 * - `rolloutRolling`: scale the new ReplicaSet up if it can; only when it did not, scale old ones down;
 * - `reconcileNewReplicaSet` → `deploymentutil.NewRSNewReplicas`: at most `replicas + maxSurge` pods in all
 *   ReplicaSets; a new ReplicaSet above `replicas` is cut to it (also how a Deployment scaled down shrinks);
 * - `reconcileOldReplicaSets`: `maxScaledDown = allPods - minAvailable - newRSUnavailable`
 *   (`minAvailable = replicas - maxUnavailable`); unhealthy old replicas go first (`cleanupUnhealthyReplicas`), then
 *   `scaleDownOldReplicaSetsForRollingUpdate` removes `availablePods - minAvailable` from the oldest old ReplicaSets;
 * - `deploymentutil.ResolveFenceposts`: a percentage `maxSurge` rounds up, `maxUnavailable` rounds down, and both 0
 *   makes `maxUnavailable` 1. So 25 % / 25 % of 4 replicas is 1 / 1.
 * A pod is available once Ready for `minReadySeconds` (`minReadyMs` here). The ReplicaSet controller counts only
 * active pods (no deletionTimestamp), creates pods not Ready (the kubelet sets Ready once the readiness probe passes)
 * and deletes not-Ready pods before Ready ones, the most recently Ready first (`controller.ActivePods` order).
 * A delete is graceful: the API server sets deletionTimestamp and the pod stays Ready while its containers stop
 * (`store.deletePod`, see testbed/kube-apiserver/README.md); the kubelet removes it after the grace period.
 */
import type { PodStore } from '../../testbed/kube-apiserver/store.js';
import { readyPod } from '../../testbed/kube-apiserver/server.js';

export interface PodTemplate {
  /** The `kvgate.io/revision` label (what a pool's selector adds) and what the pod's worker serves. */
  readonly revision: string;
  readonly labels: Readonly<Record<string, string>>;
}

/** A pod this controller made, with the times the test's checks need (`Date.now()` ms). */
export interface SimPod {
  readonly name: string;
  readonly uid: string;
  readonly ip: string;
  readonly revision: string;
  readonly deployment: string;
  readonly createdAt: number;
  readyAt?: number;
  /** When its delete was sent (deletionTimestamp set). */
  deletingAt?: number;
  /** When the kubelet removed it (its servers are closed from then on). */
  goneAt?: number;
}

export interface DeploymentOptions {
  readonly name: string;
  readonly namespace: string;
  readonly replicas: number;
  readonly template: PodTemplate;
  readonly maxSurgePercent?: number;
  readonly maxUnavailablePercent?: number;
  /** Pod created → Ready (the readiness probe passes). */
  readonly readyAfterMs: number;
  /** `minReadySeconds`, in ms. */
  readonly minReadyMs: number;
  /** The termination grace: deletionTimestamp → the kubelet's final delete. */
  readonly graceMs: number;
}

export interface PodHooks {
  /** A free pod IP. */
  allocIp(): string;
  /** Start the pod's servers (before it is created in the API: its containers run before it turns Ready). */
  start(pod: SimPod): Promise<void>;
  /** Stop the pod's servers (the kubelet killed its containers). */
  stop(pod: SimPod): Promise<void>;
}

interface ReplicaSet {
  readonly id: number;
  readonly template: PodTemplate;
  spec: number;
  readonly pods: SimPod[];
}

let nextUid = 0;

export class Deployment {
  replicas: number;
  private template: PodTemplate;
  private readonly rss: ReplicaSet[] = [];
  private readonly timers = new Set<NodeJS.Timeout>();
  private readonly loop: NodeJS.Timeout;
  private busy = false;
  private closed = false;
  private readonly pending = new Set<Promise<void>>();
  /** Every pod it ever made, in creation order. */
  readonly pods: SimPod[] = [];

  constructor(
    private readonly store: PodStore,
    private readonly opts: DeploymentOptions,
    private readonly hooks: PodHooks,
  ) {
    this.replicas = opts.replicas;
    this.template = opts.template;
    this.loop = setInterval(() => void this.tick(), 20);
  }

  /** `kubectl apply` of a new pod template (a new ReplicaSet rolls in). */
  update(template: PodTemplate): void {
    this.template = template;
  }

  /** `kubectl scale`. */
  scale(replicas: number): void {
    this.replicas = replicas;
  }

  /**
   * The rollout is complete as the controller sees it (`DeploymentComplete`): the new ReplicaSet has every replica
   * available and no old ReplicaSet has an active pod. Old pods may still be terminating.
   */
  complete(): boolean {
    const n = this.newRs();
    return (
      n !== undefined &&
      n.spec === this.replicas &&
      this.available(n) === this.replicas &&
      this.rss.every((rs) => rs === n || this.active(rs).length === 0)
    );
  }

  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.loop);
    for (const t of this.timers) clearTimeout(t);
    await Promise.all(this.pending);
  }

  private newRs(): ReplicaSet | undefined {
    return this.rss.find((rs) => rs.template === this.template);
  }

  private active(rs: ReplicaSet): SimPod[] {
    return rs.pods.filter((p) => p.deletingAt === undefined);
  }

  private available(rs: ReplicaSet): number {
    const now = Date.now();
    return this.active(rs).filter((p) => p.readyAt !== undefined && now - p.readyAt >= this.opts.minReadyMs).length;
  }

  private async tick(): Promise<void> {
    if (this.busy || this.closed) return;
    this.busy = true;
    try {
      this.syncDeployment();
      await this.syncReplicaSets();
    } finally {
      this.busy = false;
    }
  }

  /** rolling.go `rolloutRolling`, one sync. */
  private syncDeployment(): void {
    let n = this.newRs();
    if (n === undefined) {
      n = { id: this.rss.length, template: this.template, spec: 0, pods: [] };
      this.rss.push(n);
    }
    const pct = (p: number, up: boolean) => (up ? Math.ceil : Math.floor)((p * this.replicas) / 100);
    const surge = pct(this.opts.maxSurgePercent ?? 25, true);
    let unavailable = pct(this.opts.maxUnavailablePercent ?? 25, false);
    if (surge === 0 && unavailable === 0) unavailable = 1;
    const all = () => this.rss.reduce((s, rs) => s + rs.spec, 0);
    // reconcileNewReplicaSet
    if (n.spec > this.replicas) {
      n.spec = this.replicas;
      return;
    }
    if (n.spec < this.replicas) {
      const room = this.replicas + surge - all();
      if (room > 0) {
        n.spec += Math.min(room, this.replicas - n.spec);
        return;
      }
    }
    // reconcileOldReplicaSets
    const old = this.rss.filter((rs) => rs !== n && rs.spec > 0).sort((a, b) => a.id - b.id);
    if (old.length === 0) return;
    const minAvailable = this.replicas - unavailable;
    const maxScaledDown = all() - minAvailable - (n.spec - this.available(n));
    if (maxScaledDown <= 0) return;
    let cleaned = 0;
    for (const rs of old) {
      if (cleaned >= maxScaledDown) break;
      const cut = Math.min(maxScaledDown - cleaned, rs.spec - this.available(rs));
      if (cut <= 0) continue;
      rs.spec -= cut;
      cleaned += cut;
    }
    const availableAll = this.rss.reduce((s, rs) => s + this.available(rs), 0);
    if (availableAll <= minAvailable) return;
    let toCut = availableAll - minAvailable;
    for (const rs of old) {
      if (toCut <= 0) break;
      const cut = Math.min(rs.spec, toCut);
      rs.spec -= cut;
      toCut -= cut;
    }
  }

  /** The ReplicaSet controller's `manageReplicas`, for every ReplicaSet. */
  private async syncReplicaSets(): Promise<void> {
    for (const rs of this.rss) {
      const active = this.active(rs);
      if (active.length < rs.spec) {
        for (let i = active.length; i < rs.spec; i++) await this.createPod(rs);
      } else if (active.length > rs.spec) {
        const order = [...active].sort((a, b) => {
          if ((a.readyAt === undefined) !== (b.readyAt === undefined)) return a.readyAt === undefined ? -1 : 1;
          return (b.readyAt ?? 0) - (a.readyAt ?? 0);
        });
        for (const p of order.slice(0, active.length - rs.spec)) this.deletePod(p);
      }
    }
  }

  private async createPod(rs: ReplicaSet): Promise<void> {
    const uid = `uid-${this.opts.name}-${++nextUid}`;
    const pod: SimPod = {
      name: `${this.opts.name}-${rs.id}-${nextUid}`,
      uid,
      ip: this.hooks.allocIp(),
      revision: rs.template.revision,
      deployment: this.opts.name,
      createdAt: Date.now(),
    };
    rs.pods.push(pod);
    this.pods.push(pod);
    await this.hooks.start(pod);
    const manifest = readyPod(pod.name, this.opts.namespace, pod.ip, { ...rs.template.labels }, uid);
    manifest.status.conditions = [{ type: 'Ready', status: 'False' }];
    this.store.create(manifest);
    this.after(this.opts.readyAfterMs, () => {
      if (pod.deletingAt !== undefined) return;
      this.store.update(this.opts.namespace, pod.name, (p) => void (p.status.conditions = [{ type: 'Ready', status: 'True' }]));
      pod.readyAt = Date.now();
    });
  }

  private deletePod(pod: SimPod): void {
    pod.deletingAt = Date.now();
    this.store.deletePod(this.opts.namespace, pod.name);
    this.after(this.opts.graceMs, () => {
      this.store.deletePod(this.opts.namespace, pod.name, { gracePeriodSeconds: 0 });
      pod.goneAt = Date.now();
      const stopping = this.hooks.stop(pod);
      this.pending.add(stopping);
      void stopping.finally(() => this.pending.delete(stopping));
    });
  }

  private after(ms: number, fn: () => void): void {
    const t = setTimeout(() => {
      this.timers.delete(t);
      if (!this.closed) fn();
    }, ms);
    this.timers.add(t);
  }
}
