/**
 * A model rolled from revision A to B under continuous traffic with kvgate as the InferencePool's endpoint picker
 * (GIE mode): the real gate (live worker view, pods found through the real informer from testbed/kube-apiserver)
 * behind the harness playing the GIE data plane (test/support/gie-gateway.ts), pods rolled by the Deployment
 * controller model (test/support/deployment-controller.ts, one Deployment whose template moves from A to B, maxSurge
 * 25 % / maxUnavailable 25 %), the rollout weight moved by reloads and B promoted at the end.
 *
 * The gateway's endpoint list is not the gate's. How a GIE data plane's list moves, from source:
 * - it is the InferencePool's selector as EndpointSlices publish it: kubernetes/kubernetes
 *   `staging/src/k8s.io/endpointslice/utils.go` `podToEndpoint` (commit e637659d8932777d897d26632b0715131694d26b):
 *   `serving` = the pod is Ready, `terminating` = it has a deletionTimestamp, `ready` = serving && !terminating. A pod
 *   is listed once Ready and leaves the ready set as soon as its deletion starts (some data planes keep
 *   `serving && terminating` endpoints to drain them: a longer removal lag here);
 * - the gateway learns that through its own control plane (EndpointSlice watch, xDS push), on its own schedule: a lag
 *   after each change, configurable here separately for additions (`addMs`) and removals (`removeMs`);
 * - GIE's own EPP drops a pod from its datastore the moment it has a deletionTimestamp or is not Ready
 *   (kubernetes-sigs/gateway-api-inference-extension `pkg/epp/controller/pod_reconciler.go` `updateDatastore`, commit
 *   0ae2b2a65a4969e21c87e40f0893820bd86cd6ff): the EPP's view and the gateway's disagree during every rollout, so the
 *   protocol's subset hint (docs/proposals/004-endpoint-picker-protocol at 84436a96, "Endpoint Subset") can list a pod
 *   the EPP has not verified yet, one it already dropped, or an address whose pod was replaced.
 *
 * Each request carries the gateway's list as it stood (`envoy.lb.subset_hint`), and the gateway's cluster holds the
 * same hosts (override_host takes the first listed member). Checked at every request:
 * - a 200 was served by a pod of the revision the gate stamped (`x-kvgate-revision`), the pod got that stamp;
 * - every endpoint the gate listed (`x-gateway-destination-endpoint`: pick and fallbacks) was in that request's subset;
 * - every listed endpoint's pod was Ready and had answered the gate's status poll (nothing else can verify it), and
 *   none had been dropped by the gate for its deletion before the request was sent;
 * - refusals: only 503 `no_compatible_capacity` (docs/gie.md: nothing eligible in the subset, or a session pinned
 *   to a revision with no capacity, docs/policy-guide.md §5/§7), never while capacity the request could use was
 *   Ready, listed by the gateway and settled for `PICKUP_MS`; each with exactly one audit line, whose reason says
 *   first that the view was narrowed to the gateway's subset.
 * An address reused by a pod of the other revision while the gateway still lists it for the old pod (removal lag
 * longer than the grace period): the gate never sends the old revision's requests there and routes the new pod only
 * once it has verified it.
 */
import { mkdtemp, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { stringify as toYaml } from 'yaml';
import type { RunningGate } from '../../src/gate/gate.js';
import { clone, tableFromValue, twoRevisionTableValue } from '../../src/policy/testing.js';
import { createDevKeyRing } from '../../src/contract/keys.js';
import { answerStatus, jsonLineSink } from '../../src/sidecar/testing.js';
import { startKubeApiServer } from '../../testbed/kube-apiserver/server.js';
import { createDevPki } from '../../testbed/tls/dev-pki.js';
import { Deployment, type PodTemplate, type SimPod } from '../support/deployment-controller.js';
import { startDiscoveringGate } from '../support/e2e-gate.js';
import { behindGieGateway } from '../support/gie-gateway.js';
import { PodServers, watchDropped } from '../support/pod-servers.js';
import {
  A,
  auditProblem,
  B,
  freePort,
  NS,
  PICKUP_MS,
  POLL_MS,
  type Sent,
  SETTLE_MS,
  traffic,
  until,
  untilStickyRefused,
} from '../support/rollout-traffic.js';

const SEED = 'e2e-gie-rolling';
const KEYS = createDevKeyRing(SEED);
/**
 * Termination grace: shorter than the slow gateway's removal lag, so a pod's address is reused while still listed. The
 * lag (2 s) leaves the reused address listed for well over a second, so traffic meets it even on a loaded machine (at
 * 1 s, a run under four parallel suites once sent no request in that window).
 */
const GRACE_MS = 400;

/** How far the gateway's endpoint list trails the pods: after a pod turns Ready, after its deletion starts. */
interface Lag {
  readonly addMs: number;
  readonly removeMs: number;
}

interface Pod extends SimPod {
  readonly address: string;
  /** When its sidecar first answered a status poll (the gate cannot have verified it before). */
  polledAt?: number;
}

/** What a pod served. */
interface Served {
  readonly seq: number;
  readonly pod: Pod;
  readonly stamped: string | undefined;
  /** `x-gateway-destination-endpoint` as the pod got it: the gate's pick and fallbacks. */
  readonly listed: readonly string[];
  readonly at: number;
}

let cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanup.reverse()) await c();
  cleanup = [];
});

let ipCounter = 0;

async function startRig(lag: Lag) {
  const port = await freePort();
  const api = await startKubeApiServer({ bookmarkIntervalMs: 200 });
  cleanup.push(() => api.close());
  const value = clone(twoRevisionTableValue()) as unknown as {
    pools: unknown[];
    models: Record<string, { rollout: Record<string, unknown> }>;
    fallback: unknown[];
  };
  const kube = { namespace: NS, matchLabels: { app: 'llama' }, targetPort: port, statusPort: port };
  value.pools = [
    { name: 'a-decode', cluster: 'a_decode', role: 'both', revision: A, discovery: { kubernetes: kube } },
    { name: 'b-decode', cluster: 'b_decode', role: 'both', revision: B, discovery: { kubernetes: kube } },
  ];
  value.models['llama-3-8b']!.rollout = { stable: A, candidate: B, weight: 0 };
  value.fallback = [{ routeVia: { revisions: [A, B] } }, { refuse: { retryAfterSeconds: 1 } }];
  const compiled = tableFromValue(value);
  const fp = new Map([A, B].map((r) => [r, compiled.revisions.get(r)!.fingerprint]));
  const dir = await mkdtemp(path.join(tmpdir(), 'kvgate-gie-rolling-'));
  const tablePath = path.join(dir, 'route-table.yaml');
  await writeFile(tablePath, toYaml(value));
  const { lines: logs, sink } = jsonLineSink();
  const subsets = new Map<number, readonly string[]>();
  const picker = behindGieGateway(2, {
    endpoints: () => members(Date.now()),
    onRequest: (h, subset) => subsets.set(Number(h['x-test-seq']), subset),
  });
  const { gate, harness } = await startDiscoveringGate({
    dir,
    pki: await createDevPki(path.join(dir, 'tls')),
    seed: SEED,
    kubeConfig: api.kubeConfig(),
    pollMs: POLL_MS,
    logger: pino({ level: 'info' }, sink),
    extra: picker.extra,
    harness: picker.harness,
  });
  cleanup.push(() => gate.close());
  cleanup.push(() => harness.close());
  const gw = picker.gateway();

  const served: Served[] = [];
  const pods: Pod[] = [];
  const servers = new PodServers();
  /** Addresses whose pod is gone and whose server is closed: the next pod may get one (IP reuse). */
  const freed: string[] = [];
  const startPod = async (sim: SimPod) => {
    const pod = Object.assign(sim, { address: `${sim.ip}:${port}` }) as Pod;
    pods.push(pod);
    const server = createServer((req, res) => {
      if (req.url === '/kvgate/v1/status') {
        pod.polledAt ??= Date.now();
        // Signed for the gate's poll, as a sidecar holding the gate's key ring does.
        answerStatus(req, res, { fingerprint: fp.get(pod.revision), verified: true, draining: false, reasons: [], podUid: pod.uid }, KEYS);
        return;
      }
      req.resume();
      req.on('end', () => {
        served.push({
          seq: Number(req.headers['x-test-seq']),
          pod,
          stamped: req.headers['x-kvgate-revision'] as string | undefined,
          listed: String(req.headers['x-gateway-destination-endpoint'] ?? '').split(','),
          at: Date.now(),
        });
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ pod: pod.name, revision: pod.revision }));
      });
    });
    await servers.listen(pod, port, server);
  };
  const stopPod = async (pod: SimPod) => {
    if (await servers.stop(pod)) freed.push(pod.ip);
  };
  cleanup.push(() => servers.closeAll());

  // The gateway's list: a pod is listed `addMs` after it turns Ready until `removeMs` after its deletion starts.
  const listedAt = (p: Pod, now: number) =>
    p.readyAt !== undefined && now >= p.readyAt + lag.addMs && (p.deletingAt === undefined || now < p.deletingAt + lag.removeMs);
  const members = (now: number) => [...new Set(pods.filter((p) => listedAt(p, now)).map((p) => p.address))].sort();
  // The gate's view of each deleted pod: the moment its discovered endpoint went away.
  const droppedAt = new Map<string, number>();
  const stopWatch = watchDropped(gate, () => pods, droppedAt);
  const tick = setInterval(() => gw.setMembers(members(Date.now())), 5);
  cleanup.push(async () => {
    clearInterval(tick);
    stopWatch();
  });

  const deployments: Deployment[] = [];
  cleanup.push(async () => {
    for (const d of deployments) await d.close();
  });
  return {
    gate: gate as RunningGate,
    gw,
    url: harness.listeners['http']!.url,
    logs,
    served,
    pods,
    subsets,
    droppedAt,
    lag,
    listedAt,
    async reload(rollout: Record<string, unknown>) {
      value.models['llama-3-8b']!.rollout = rollout;
      await writeFile(tablePath, toYaml(value));
      const r = await gate.policy.reload('test');
      if (!r.ok) throw new Error(`reload failed: ${JSON.stringify(r)}`);
    },
    deployment(template: PodTemplate, replicas: number) {
      const d = new Deployment(
        api.store,
        { name: 'llama', namespace: NS, replicas, template, readyAfterMs: 100, minReadyMs: SETTLE_MS, graceMs: GRACE_MS },
        {
          // A freed address first, as a node's IPAM hands out a released pod IP again.
          allocIp: () => freed.shift() ?? `127.0.${30 + Math.floor(++ipCounter / 250)}.${1 + (ipCounter % 250)}`,
          start: startPod,
          stop: stopPod,
        },
      );
      deployments.push(d);
      return d;
    },
    routable(revision: string): number {
      const pools = (gate.status() as { workerView: { pools: Array<{ revision: string; endpoints: Array<{ state: string }> }> } })
        .workerView.pools;
      return pools
        .filter((p) => p.revision === revision)
        .flatMap((p) => p.endpoints)
        .filter((e) => e.state === 'routable').length;
    },
  };
}

type Rig = Awaited<ReturnType<typeof startRig>>;

const template = (revision: string): PodTemplate => ({ revision, labels: { app: 'llama', 'kvgate.io/revision': revision } });

/** The pod at `address` at time `t`: the last one created there by then. */
function ownerAt(rig: Rig, address: string, t: number): Pod | undefined {
  return rig.pods.filter((p) => p.address === address && p.createdAt <= t).at(-1);
}

/** A pod of `revision` Ready, listed by the gateway and not terminating from `from` through `to`. */
function hadCapacity(rig: Rig, revision: string, from: number, to: number): boolean {
  return rig.pods.some(
    (p) =>
      p.revision === revision &&
      p.readyAt !== undefined &&
      p.readyAt + rig.lag.addMs <= from &&
      (p.deletingAt === undefined || p.deletingAt >= to),
  );
}

/** Every check at every request, collected (so one failure shows every other). */
function check(rig: Rig, sent: readonly Sent[]): { problems: string[]; pinnedRefusals: number; ok: number } {
  const problems: string[] = [];
  let pinnedRefusals = 0;
  let ok = 0;
  const sentBySeq = new Map(sent.map((s) => [s.seq, s]));
  for (const s of sent) {
    const tag = `#${s.seq} ${s.client}${s.boundTo === null ? '' : ` (bound to ${s.boundTo})`}`;
    if (s.error !== undefined) {
      problems.push(`${tag}: reset: ${s.error}`);
      continue;
    }
    if (s.status === 200) {
      ok++;
      if (s.stamp === undefined || s.body?.revision !== s.stamp)
        problems.push(`${tag}: stamped ${s.stamp}, served by ${s.body?.pod} of ${s.body?.revision}`);
      continue;
    }
    if (rig.served.some((l) => l.seq === s.seq)) problems.push(`${tag}: ${s.status} after a pod served it`);
    // Decided under the gateway's subset: the reason says first that the view was narrowed to it (src/gate/admission.ts).
    const audit = auditProblem(rig.logs, s, "the data plane's subset hint");
    if (audit !== null) problems.push(`${tag}: ${audit}`);
    if (s.status !== 503 || s.reject !== 'no_compatible_capacity') problems.push(`${tag}: refused ${s.status} ${s.reject}`);
    const usable = s.boundTo !== null ? [s.boundTo] : [A, B];
    const had = usable.filter((r) => hadCapacity(rig, r, s.sentAt - PICKUP_MS, s.doneAt));
    if (had.length > 0) problems.push(`${tag}: ${s.status} ${s.reject} while ${had.join(', ')} had listed Ready capacity`);
    else if (s.boundTo !== null) pinnedRefusals++;
  }
  for (const l of rig.served) {
    const tag = `#${l.seq} on ${l.pod.name} (${l.pod.revision})`;
    const s = sentBySeq.get(l.seq);
    const subset = rig.subsets.get(l.seq);
    if (s === undefined || subset === undefined) {
      problems.push(`${tag}: not a request the clients sent through the gateway`);
      continue;
    }
    if (l.stamped !== l.pod.revision) problems.push(`${tag}: got a request stamped ${l.stamped}`);
    if (!l.listed.includes(l.pod.address)) problems.push(`${tag}: served outside the gate's list ${l.listed.join()}`);
    for (const address of l.listed) {
      if (!subset.includes(address)) problems.push(`${tag}: the gate listed ${address}, not in the gateway's subset ${subset.join()}`);
      const owner = ownerAt(rig, address, l.at);
      if (owner === undefined || owner.readyAt === undefined || owner.readyAt > l.at)
        problems.push(`${tag}: the gate listed ${address} (${owner?.name}) before its pod was Ready`);
      else if (owner.polledAt === undefined || owner.polledAt > l.at)
        problems.push(`${tag}: the gate listed ${address} (${owner.name}) before it polled its sidecar`);
      const dropped = owner === undefined ? undefined : rig.droppedAt.get(owner.name);
      if (dropped !== undefined && s.sentAt > dropped)
        problems.push(`${tag}: the gate listed ${address} (${owner!.name}), dropped for its deletion ${s.sentAt - dropped} ms before`);
    }
  }
  return { problems, pinnedRefusals, ok };
}

describe('a rolling update with kvgate as the InferencePool endpoint picker (GIE data plane, lagging endpoint list)', () => {
  it.each([
    ['lists new pods at once (before the gate verified them) and drops old ones late, past their grace', { addMs: 0, removeMs: 2000 }],
    ['lists new pods late (after the gate routes them) and drops old ones soon after their deletion', { addMs: 600, removeMs: 150 }],
  ] as const)('the gateway %s', async (_, lag) => {
    const rig = await startRig(lag);
    const llama = rig.deployment(template(A), 4);
    await until(() => llama.complete() && rig.routable(A) === 4 && rig.gw.members().length === 4, 'four llama-a pods routable and listed');
    const t = traffic(rig.url);
    let promoted = Number.POSITIVE_INFINITY;
    try {
      await until(() => t.done() >= 30, 'traffic flowing on A');
      llama.update(template(B));
      await until(() => rig.routable(B) > 0, 'a llama-b pod routable');
      await rig.reload({ stable: A, candidate: B, weight: 50 });
      await until(() => llama.complete(), 'the rollout complete');
      const aPods = rig.pods.filter((p) => p.revision === A);
      await until(() => aPods.every((p) => rig.droppedAt.has(p.name)), 'the gate dropped every llama-a pod');
      await until(() => aPods.every((p) => !rig.listedAt(p, Date.now())), 'the gateway dropped every llama-a pod');
      const aGone = Date.now();
      const sticky = t.clients.filter((c) => c.startsWith('sticky'));
      await untilStickyRefused(t, aGone);
      promoted = Date.now();
      await rig.reload({ stable: B });
      await until(
        () => sticky.every((c) => t.sent.some((s) => s.client === c && s.sentAt > promoted && s.status === 200 && s.stamp === B)),
        'each session bound to A served by B after the promotion',
      );
    } finally {
      await t.stop();
    }
    const v = check(rig, t.sent);
    expect(v.problems.slice(0, 20), `${v.problems.length} problems`).toEqual([]);
    expect(v.ok).toBeGreaterThan(50);
    expect(v.pinnedRefusals).toBeGreaterThan(0);
    // Only sessions pinned to a gone revision were refused: the gateway's list and the gate's view always shared a pod.
    expect(t.sent.filter((s) => s.status !== 200 && s.boundTo === null).map((s) => `#${s.seq} ${s.reject}`)).toEqual([]);
    const beforePromotion = t.sent.filter((x) => x.boundTo === A && x.status === 200 && x.doneAt < promoted);
    expect(beforePromotion.length).toBeGreaterThan(0);
    expect(beforePromotion.filter((x) => x.stamp !== A)).toEqual([]);
    // The subset listed pods the gate had not verified yet (addMs 0), or omitted B pods the gate routed (addMs > 0).
    const bPods = rig.pods.filter((p) => p.revision === B);
    if (lag.addMs === 0)
      expect(
        t.sent.some((s) => bPods.some((p) => rig.subsets.get(s.seq)?.includes(p.address) && (p.polledAt ?? Infinity) > s.sentAt)),
      ).toBe(true);
    else
      expect(
        t.sent.some((s) =>
          bPods.some(
            (p) => (p.polledAt ?? Infinity) < s.sentAt && s.sentAt < p.readyAt! + lag.addMs && !rig.subsets.get(s.seq)?.includes(p.address),
          ),
        ),
      ).toBe(true);
    // Address reuse: a llama-b pod got a gone llama-a pod's address while the gateway still listed it for that pod.
    const reused = bPods.flatMap((p) => {
      const old = rig.pods.find((q) => q.address === p.address && q.revision === A);
      return old === undefined ? [] : [{ p, until: old.deletingAt! + lag.removeMs }];
    });
    expect(reused.length).toBeGreaterThan(0);
    if (lag.removeMs > GRACE_MS) {
      const window = t.sent.filter((s) =>
        reused.some((r) => s.sentAt >= r.p.createdAt && s.sentAt < r.until && rig.subsets.get(s.seq)?.includes(r.p.address)),
      );
      expect(window.length).toBeGreaterThan(0);
    }
    // A reused address served the new revision only: never a request stamped A after its new pod started.
    for (const r of reused) expect(rig.served.filter((l) => l.pod === r.p && l.stamped !== B)).toEqual([]);
  });
});
