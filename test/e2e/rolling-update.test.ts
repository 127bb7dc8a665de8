/**
 * A model rolled from revision A to B under continuous traffic, end to end: the real gate (live worker view) finds pods
 * through the real @kubernetes/client-node informer from the test API server (testbed/kube-apiserver), the
 * Envoy-faithful harness runs the shipped envoy/envoy.yaml, and Deployments roll the pods the way Kubernetes does
 * (test/support/deployment-controller.ts: kubernetes/kubernetes `pkg/controller/deployment/rolling.go` at
 * 95f08499d652a6211121d8af35f470609217c730, maxSurge 25 % / maxUnavailable 25 %, new pods created not Ready then Ready,
 * old pods deleted gracefully: deletionTimestamp first, still Ready until the grace period ends, then removed).
 *
 * Two ways operators roll:
 * - one Deployment whose pod template moves from `kvgate.io/revision: llama-a` to `llama-b` (role-both pools), while
 *   the route table's rollout weight moves 0 → 50 by a reload, then B is promoted to stable;
 * - disaggregated P/D: one Deployment per revision and role; B's prefill pods Ready before its decode pods, and the
 *   reverse, with the weight already at 50; then B promoted and A's Deployments scaled to 0.
 *
 * Traffic never stops: clients with a session key that send the binding back, clients with a session key that do
 * not, and clients with no session key. Checked at every request:
 * - a 200 carries the gate's stamp (`x-kvgate-revision`) and was served by a pod of that revision, its prefill leg too;
 * - no new request goes to a pod after the gate's view dropped it for its deletionTimestamp; only the prefill leg
 *   of a request decided before still goes to the pod its contract planned, while that pod serves its grace period;
 * - a refusal while a revision the request could use had settled Ready capacity is a bug; each refusal is explained
 *   by a documented rule (a session pinned to a revision without capacity: docs/policy-guide.md §5, §7
 *   `eligible.notPinned`), and has exactly one audit line with its code and a reason;
 * - sessions bound to A stay on A while A has capacity, are refused 503 when A is gone, and move to B once B is
 *   promoted (A no longer serves the model: the binding is ignored, policy-guide §5).
 */
import { mkdtemp, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { stringify as toYaml } from 'yaml';
import type { RunningGate } from '../../src/gate/gate.js';
import { createDevKeyRing } from '../../src/contract/keys.js';
import { answerStatus, jsonLineSink } from '../../src/sidecar/testing.js';
import { clone, tableFromValue, twoRevisionTableValue } from '../../src/policy/testing.js';
import { request as rawRequest, type EnvoyHarness } from '../../testbed/harness/index.js';
import { startKubeApiServer, type KubeApiServer } from '../../testbed/kube-apiserver/server.js';
import { createDevPki } from '../../testbed/tls/dev-pki.js';
import { startDiscoveringGate } from '../support/e2e-gate.js';
import { Deployment, type PodTemplate, type SimPod } from '../support/deployment-controller.js';
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

const SEED = 'e2e-rolling';
const KEYS = createDevKeyRing(SEED);
/** The pods' termination grace (Kubernetes' default is 30 s): long enough for a request in flight on a loaded machine. */
const GRACE_MS = 1500;

type Role = 'both' | 'prefill' | 'decode';

let cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanup.reverse()) await c();
  cleanup = [];
});

/** What a pod served: one line per request (a prefill leg included). */
interface Served {
  readonly seq: number;
  readonly pod: string;
  readonly revision: string;
  readonly role: Role;
  /** The revision the gate stamped on the request the pod got. */
  readonly stamped: string | undefined;
  /** When its client sent the request (a prefill leg: the request it is part of). */
  readonly requestSentAt: number;
  readonly at: number;
}

interface Rig {
  api: KubeApiServer;
  gate: RunningGate;
  harness: EnvoyHarness;
  port: number;
  logs: Array<Record<string, any>>;
  served: Served[];
  pods: Map<string, SimPod & { role: Role }>;
  /** When the gate's view first lacked each deleted pod (its deletionTimestamp seen). */
  droppedAt: Map<string, number>;
  /** The one request sent with `x-test-hold`: whether it reached its decode pod, and its release. */
  held: { reached: boolean; release(): void };
  reload(mutate: (v: TableValue) => void): Promise<void>;
  deployment(name: string, role: Role, template: PodTemplate, replicas: number, readyAfterMs?: number): Deployment;
  routable(revision: string, role: Role): number;
}

interface TableValue {
  pools: unknown[];
  models: Record<string, { rollout: Record<string, unknown> }>;
  fallback: unknown[];
}

function tableValue(port: number, pd: boolean): TableValue {
  const v = clone(twoRevisionTableValue()) as unknown as TableValue;
  const pool = (name: string, cluster: string, role: Role, revision: string) => ({
    name,
    cluster,
    role,
    revision,
    discovery: {
      kubernetes: {
        namespace: NS,
        matchLabels: pd ? { app: 'llama', 'kvgate.dev/role': role } : { app: 'llama' },
        targetPort: port,
        statusPort: port,
      },
    },
  });
  v.pools = pd
    ? [
        pool('a-prefill', 'a_prefill', 'prefill', A),
        pool('a-decode', 'a_decode', 'decode', A),
        pool('b-prefill', 'b_prefill', 'prefill', B),
        pool('b-decode', 'b_decode', 'decode', B),
      ]
    : [pool('a-decode', 'a_decode', 'both', A), pool('b-decode', 'b_decode', 'both', B)];
  v.models['llama-3-8b']!.rollout = { stable: A, candidate: B, weight: 0 };
  // A request whose revision has no capacity may run on the other one, unless a binding pins it (notPinned).
  v.fallback = [{ routeVia: { revisions: [A, B] } }, { refuse: { retryAfterSeconds: 1 } }];
  return v;
}

let ipCounter = 0;
const nextIp = () => {
  const n = ++ipCounter;
  return `127.0.${10 + Math.floor(n / 250)}.${1 + (n % 250)}`;
};

async function startRig(pd: boolean): Promise<Rig> {
  const port = await freePort();
  const api = await startKubeApiServer({ bookmarkIntervalMs: 200 });
  cleanup.push(() => api.close());
  const value = tableValue(port, pd);
  const fp = new Map<string, string>();
  const compiled = tableFromValue(value);
  for (const r of [A, B]) fp.set(r, compiled.revisions.get(r)!.fingerprint);
  const dir = await mkdtemp(path.join(tmpdir(), 'kvgate-rolling-'));
  const tablePath = path.join(dir, 'route-table.yaml');
  await writeFile(tablePath, toYaml(value));
  const pki = await createDevPki(path.join(dir, 'tls'));
  const { lines: logs, sink } = jsonLineSink();
  const { gate, harness } = await startDiscoveringGate({
    dir,
    pki,
    seed: SEED,
    kubeConfig: api.kubeConfig(),
    pollMs: POLL_MS,
    logger: pino({ level: 'info' }, sink),
  });
  cleanup.push(() => gate.close());
  cleanup.push(() => harness.close());

  const served: Served[] = [];
  let release = () => {};
  const held = { reached: false, released: new Promise<void>((r) => (release = r)), release: () => release() };
  const pods = new Map<string, SimPod & { role: Role }>();
  const servers = new PodServers();
  const internalUrl = harness.listeners['internal']!.url;

  const startPod = async (pod: SimPod, role: Role) => {
    pods.set(pod.name, Object.assign(pod, { role }));
    const server = createServer((req, res) => {
      if (req.url === '/kvgate/v1/status') {
        // Signed for the gate's poll, as a sidecar holding the gate's key ring does.
        const status = {
          fingerprint: fp.get(pod.revision),
          verified: true,
          draining: false,
          reasons: [],
          podUid: pod.uid,
          ...(role === 'both' ? {} : { role }),
        };
        answerStatus(req, res, status, KEYS);
        return;
      }
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', async () => {
        const seq = Number(req.headers['x-test-seq']);
        served.push({
          seq,
          pod: pod.name,
          revision: pod.revision,
          role,
          stamped: req.headers['x-kvgate-revision'] as string | undefined,
          requestSentAt: Number(req.headers['x-test-sent']),
          at: Date.now(),
        });
        let prefill: unknown = null;
        if (role === 'decode') {
          // A request the test holds here, decided and on its decode pod, before its prefill leg.
          if (req.headers['x-test-hold'] !== undefined) {
            held.reached = true;
            await held.released;
          }
          // The decode sidecar's part: the prefill leg back through Envoy's internal listener, under the contract.
          const leg = await rawRequest(internalUrl, {
            path: '/v1/completions',
            headers: {
              'content-type': 'application/json',
              'x-request-id': String(req.headers['x-request-id']),
              'x-kvgate-contract': String(req.headers['x-kvgate-contract']),
              'x-test-seq': String(seq),
              'x-test-sent': String(req.headers['x-test-sent']),
            },
            body: Buffer.concat(chunks),
          });
          if ('error' in leg) {
            res.writeHead(502, { 'content-type': 'application/json' });
            res.end(JSON.stringify({ pod: pod.name, revision: pod.revision, prefillFailed: leg.error }));
            return;
          }
          if (leg.status !== 200) {
            // A refusal of the leg goes back to the client as it came, as the decode sidecar relays it.
            const reason = leg.headers['x-kvgate-reject-reason'];
            res.writeHead(leg.status, {
              'content-type': 'application/json',
              ...(reason === undefined ? {} : { 'x-kvgate-reject-reason': reason }),
            });
            res.end(leg.body);
            return;
          }
          prefill = JSON.parse(leg.body);
        }
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ pod: pod.name, revision: pod.revision, prefill }));
      });
    });
    await servers.listen(pod, port, server);
  };
  const stopPod = async (pod: SimPod) => void (await servers.stop(pod));
  cleanup.push(async () => {
    held.release();
    await servers.closeAll();
  });

  // The gate's view of each deleted pod: the moment its discovered endpoint went away.
  const droppedAt = new Map<string, number>();
  const stopWatch = watchDropped(gate, () => pods.values(), droppedAt);
  cleanup.push(async () => stopWatch());

  const deployments: Deployment[] = [];
  cleanup.push(async () => {
    for (const d of deployments) await d.close();
  });

  return {
    api,
    gate,
    harness,
    port,
    logs,
    served,
    pods,
    droppedAt,
    held,
    async reload(mutate) {
      mutate(value);
      await writeFile(tablePath, toYaml(value));
      const r = await gate.policy.reload('test');
      if (!r.ok) throw new Error(`reload failed: ${JSON.stringify(r)}`);
    },
    deployment(name, role, template, replicas, readyAfterMs = 100) {
      const d = new Deployment(
        api.store,
        { name, namespace: NS, replicas, template, readyAfterMs, minReadyMs: SETTLE_MS, graceMs: GRACE_MS },
        { allocIp: nextIp, start: (p) => startPod(p, role), stop: stopPod },
      );
      deployments.push(d);
      return d;
    },
    routable(revision, role) {
      const pools = (
        gate.status() as { workerView: { pools: Array<{ revision: string; role: string; endpoints: Array<{ state: string }> }> } }
      ).workerView.pools;
      return pools
        .filter((p) => p.revision === revision && p.role === role)
        .flatMap((p) => p.endpoints)
        .filter((e) => e.state === 'routable').length;
    },
  };
}

const template = (revision: string, role?: Role): PodTemplate => ({
  revision,
  labels: { app: 'llama', 'kvgate.io/revision': revision, ...(role === undefined ? {} : { 'kvgate.dev/role': role }) },
});

/** A pod of `revision` (both roles for P/D) Ready and not terminating from `from` through `to`. */
function hadCapacity(rig: Rig, revision: string, roles: readonly Role[], from: number, to: number): boolean {
  return roles.every((role) =>
    [...rig.pods.values()].some(
      (p) =>
        p.revision === revision &&
        p.role === role &&
        p.readyAt !== undefined &&
        p.readyAt <= from &&
        (p.deletingAt === undefined || p.deletingAt >= to),
    ),
  );
}

interface Verdicts {
  problems: string[];
  refusals: number;
  pinnedRefusals: number;
  ok: number;
}

/** Every check at every request, collected (so one failure shows every other). */
function check(rig: Rig, sent: readonly Sent[], roles: readonly Role[]): Verdicts {
  const problems: string[] = [];
  const bySeq = new Map<number, Served[]>();
  for (const s of rig.served) bySeq.set(s.seq, [...(bySeq.get(s.seq) ?? []), s]);
  let refusals = 0;
  let pinnedRefusals = 0;
  let ok = 0;
  for (const s of sent) {
    const tag = `#${s.seq} ${s.client}${s.boundTo === null ? '' : ` (bound to ${s.boundTo})`}`;
    if (s.error !== undefined) {
      problems.push(`${tag}: reset: ${s.error}`);
      continue;
    }
    const legs = bySeq.get(s.seq) ?? [];
    if (s.status === 200) {
      ok++;
      if (s.stamp === undefined) problems.push(`${tag}: 200 without x-kvgate-revision`);
      if (s.body?.revision !== s.stamp) problems.push(`${tag}: stamped ${s.stamp}, served by ${s.body?.pod} of ${s.body?.revision}`);
      if (roles.includes('decode') && s.body?.prefill?.revision !== s.stamp)
        problems.push(`${tag}: stamped ${s.stamp}, prefill leg on ${s.body?.prefill?.pod} of ${s.body?.prefill?.revision}`);
      continue;
    }
    refusals++;
    if (legs.length > 0) problems.push(`${tag}: ${s.status} after a pod served it (${legs.map((l) => l.pod).join(', ')})`);
    // Exactly one audit line, with its code and a reason.
    const audit = auditProblem(rig.logs, s);
    if (audit !== null) problems.push(`${tag}: ${audit}`);
    // Why: capacity the request could use, settled before it was sent and still there when it was answered.
    const from = s.sentAt - PICKUP_MS;
    const usable = s.boundTo !== null ? [s.boundTo] : [A, B];
    const had = usable.filter((r) => hadCapacity(rig, r, roles, from, s.doneAt));
    if (had.length > 0) problems.push(`${tag}: ${s.status} ${s.reject} while ${had.join(', ')} had Ready capacity`);
    else if (s.boundTo !== null) {
      pinnedRefusals++;
      // docs/policy-guide.md §5 and §7: a pinned request is not moved by routeVia; it is refused until its binding goes.
      if (s.status !== 503 || s.reject !== 'no_compatible_capacity') problems.push(`${tag}: pinned refusal ${s.status} ${s.reject}`);
    }
  }
  // No new request reaches a pod after the gate dropped it for its deletion (a prefill leg is part of its request).
  for (const l of rig.served) {
    const dropped = rig.droppedAt.get(l.pod);
    if (dropped !== undefined && l.requestSentAt > dropped)
      problems.push(
        `#${l.seq}: ${l.role} on ${l.pod} for a request sent after the gate dropped the deleted pod (${l.requestSentAt - dropped} ms)`,
      );
    if (l.stamped !== undefined && l.stamped !== l.revision)
      problems.push(`#${l.seq}: ${l.pod} of ${l.revision} got a request stamped ${l.stamped}`);
  }
  // The gate saw every deletion while the pod was still there (terminating), not only its removal.
  for (const p of rig.pods.values()) {
    const dropped = rig.droppedAt.get(p.name);
    if (p.goneAt !== undefined && (dropped === undefined || dropped > p.goneAt))
      problems.push(`${p.name}: still listed when it was removed`);
  }
  return { problems, refusals, pinnedRefusals, ok };
}

/**
 * These tests wait for counts of requests (30 on A, 40 while B is half there, ...), so they take as long as the
 * machine needs to serve them: about 2 s on a quiet 2-core machine, 12 s at a load average near 10, where the
 * default 20 s cut two of them off before any `until` could say what it was waiting for. Each `until` still has its
 * own 10 s limit and names the step that hung.
 */
const ROLLOUT_TIMEOUT_MS = 60_000;

describe('a rolling update under continuous traffic', () => {
  it(
    'one Deployment rolls A → B (maxSurge 25 %, maxUnavailable 25 %) while the weight moves by reloads',
    async () => {
      const rig = await startRig(false);
      const llama = rig.deployment('llama', 'both', template(A), 4);
      await until(() => llama.complete() && rig.routable(A, 'both') === 4, 'four llama-a pods routable');
      const t = traffic(rig.harness.listeners['public']!.url);
      let promoted = Number.POSITIVE_INFINITY;
      try {
        await until(() => t.done() >= 30, 'traffic flowing on A');
        llama.update(template(B));
        await until(() => rig.routable(B, 'both') > 0, 'a llama-b pod routable');
        await rig.reload((v) => void (v.models['llama-3-8b']!.rollout['weight'] = 50));
        await until(() => llama.complete(), 'the rollout complete');
        const aPods = llama.pods.filter((p) => p.revision === A);
        await until(() => aPods.every((p) => rig.droppedAt.has(p.name)), 'the gate dropped every llama-a pod');
        const aGone = Date.now();
        // Sessions pinned to A: refused until their binding goes (docs/policy-guide.md §5, step 6; §7 notPinned).
        const sticky = t.clients.filter((c) => c.startsWith('sticky'));
        await untilStickyRefused(t, aGone);
        // Promote B: A no longer serves the model, so bindings to it are ignored and those sessions move to B.
        promoted = Date.now();
        await rig.reload((v) => void (v.models['llama-3-8b']!.rollout = { stable: B }));
        await until(
          () => sticky.every((c) => t.sent.some((s) => s.client === c && s.sentAt > promoted && s.status === 200 && s.stamp === B)),
          'each session bound to A served by B after the promotion',
        );
      } finally {
        await t.stop();
      }
      const v = check(rig, t.sent, ['both']);
      expect(v.problems.slice(0, 20), `${v.problems.length} problems`).toEqual([]);
      // Sessions bound to A stayed on A while it had capacity.
      const beforePromotion = t.sent.filter((x) => x.boundTo === A && x.status === 200 && x.doneAt < promoted);
      expect(beforePromotion.length).toBeGreaterThan(0);
      expect(beforePromotion.filter((x) => x.stamp !== A)).toEqual([]);
      expect(v.ok).toBeGreaterThan(50);
      expect(v.pinnedRefusals).toBeGreaterThan(0);
      expect(t.sent.some((s) => s.status === 200 && s.stamp === B && s.boundTo === null)).toBe(true);
    },
    ROLLOUT_TIMEOUT_MS,
  );
});

describe('a disaggregated rollout: one Deployment per revision and role', () => {
  it.each([
    ['prefill', 'decode'],
    ['decode', 'prefill'],
  ] as const)(
    "B's %s pods Ready before its %s pods: no B request until B has both roles, never a mixed pair",
    async (first, second) => {
      const rig = await startRig(true);
      const aPrefill = rig.deployment('a-prefill', 'prefill', template(A, 'prefill'), 2);
      const aDecode = rig.deployment('a-decode', 'decode', template(A, 'decode'), 2);
      await until(() => rig.routable(A, 'prefill') === 2 && rig.routable(A, 'decode') === 2, 'llama-a prefill and decode routable');
      const t = traffic(rig.harness.listeners['public']!.url);
      let halfB = { from: 0, to: 0 };
      let held: Sent | undefined;
      try {
        await until(() => t.done() >= 30, 'traffic flowing on A');
        // The weight moves before B is complete: B's cohort has no B capacity yet.
        await rig.reload((v) => void (v.models['llama-3-8b']!.rollout['weight'] = 50));
        rig.deployment(`b-${first}`, first, template(B, first), 2);
        await until(() => rig.routable(B, first) === 2, `llama-b ${first} pods routable`);
        halfB = { from: Date.now(), to: 0 };
        const mark = t.done();
        await until(() => t.done() >= mark + 40, `traffic while llama-b has only ${first} pods`);
        halfB.to = Date.now();
        rig.deployment(`b-${second}`, second, template(B, second), 2);
        await until(() => rig.routable(B, second) === 2, `llama-b ${second} pods routable`);
        const complete = Date.now();
        await until(() => t.sent.some((s) => s.sentAt > complete && s.status === 200 && s.stamp === B), 'llama-b serving');
        // A session still on A has a request decided and on its decode pod, its prefill leg not sent yet.
        const heldReq = t.one('held', 'sticky-0', t.bindingOf('sticky-0'), { 'x-test-hold': '1' });
        await until(() => rig.held.reached, 'the held request on its llama-a decode pod');
        // Promote B, then remove A's Deployments; every A pod is terminating, and the gate has seen it.
        await rig.reload((v) => void (v.models['llama-3-8b']!.rollout = { stable: B }));
        aPrefill.scale(0);
        aDecode.scale(0);
        const aPods = [...rig.pods.values()].filter((p) => p.revision === A);
        await until(() => aPods.every((p) => rig.droppedAt.has(p.name)), 'the gate dropped every llama-a pod');
        // Its prefill leg now: the pod the contract planned still serves (its grace period), so the request completes.
        rig.held.release();
        held = await heldReq;
        const gone = t.done();
        await until(() => t.done() >= gone + 30, 'traffic on B alone');
      } finally {
        await t.stop();
      }
      const v = check(rig, t.sent, ['prefill', 'decode']);
      expect(v.problems.slice(0, 20), `${v.problems.length} problems`).toEqual([]);
      // B took nothing before it had both roles Ready: not a decode leg, not a prefill leg.
      const bReady = (role: Role) =>
        Math.min(...[...rig.pods.values()].filter((p) => p.revision === B && p.role === role).map((p) => p.readyAt ?? Infinity));
      const bothReady = Math.max(bReady('prefill'), bReady('decode'));
      expect(rig.served.filter((l) => l.revision === B && l.at < bothReady)).toEqual([]);
      // Meanwhile B's cohort ran on A (routeVia), whole: decode and prefill on A.
      const during = t.sent.filter((s) => s.sentAt >= halfB.from && s.doneAt <= halfB.to);
      expect(during.length).toBeGreaterThan(0);
      expect(during.filter((s) => s.status !== 200)).toEqual([]);
      expect(new Set(during.map((s) => s.stamp))).toEqual(new Set([A]));
      expect(t.sent.some((s) => s.status === 200 && s.stamp === B)).toBe(true);
      // The request decided on A before A's deletion finished on A, prefill leg on a terminating A pod.
      expect(held).toMatchObject({ status: 200, stamp: A, body: { revision: A, prefill: { revision: A } } });
      const heldLeg = rig.served.find((l) => l.seq === held!.seq && l.role === 'prefill')!;
      expect(rig.droppedAt.get(heldLeg.pod)).toBeLessThan(heldLeg.at);
    },
    ROLLOUT_TIMEOUT_MS,
  );
});
