/**
 * Discovery through the REAL @kubernetes/client-node informer against the test API server
 * (testbed/kube-apiserver): pods appearing, becoming Ready, deleted, an IP reused by a pod of another revision,
 * watch reset, 410 Gone, the API server down (stale, then fail closed), and 403 for missing RBAC.
 */
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import type { CompiledPool } from '../policy/compile.js';
import { PoolSchema } from '../policy/schema.js';
import { clone, tableFromValue, twoRevisionTableValue } from '../policy/testing.js';
import { readyPod, startKubeApiServer, type KubeApiServer } from '../../testbed/kube-apiserver/server.js';
import { createDiscovery, type Discovery } from './discovery.js';
import { kubeConfigFrom } from './runtime.js';
import { labelSelectorString, selectorLabels } from './pods.js';

const NS = 'serving';
const silent = pino({ level: 'silent' });

/** The two-revision table with its decode pools found by selector. */
function selectorPools(): { a: CompiledPool; b: CompiledPool } {
  const v = clone(twoRevisionTableValue()) as { pools: Record<string, unknown>[] };
  for (const p of v.pools) {
    if (p['role'] !== 'decode') continue;
    p['endpoints'] = [];
    p['discovery'] = { kubernetes: { namespace: NS, matchLabels: { app: 'llama', role: 'decode' }, targetPort: 8000, statusPort: 9090 } };
  }
  const t = tableFromValue(v);
  return { a: t.pools.get('a-decode')!, b: t.pools.get('b-decode')! };
}

const labels = (rev: string) => ({ app: 'llama', role: 'decode', 'kvgate.io/revision': rev });

async function until(check: () => boolean, what: string, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

let api: KubeApiServer | undefined;
let discovery: Discovery | undefined;
afterEach(async () => {
  await discovery?.close();
  await api?.close();
  discovery = undefined;
  api = undefined;
});

function start(skew = { ms: 0 }, staleAfterMs = 5000, watchIdleMs?: number): Discovery {
  discovery = createDiscovery({
    kubeConfig: api!.kubeConfig(),
    staleAfterMs,
    logger: silent,
    registry: new Registry(),
    now: () => Date.now() + skew.ms,
    backoff: { initialMs: 20, maxMs: 100 },
    ...(watchIdleMs === undefined ? {} : { watchIdleMs }),
  });
  return discovery;
}

const addrs = (d: Discovery, p: CompiledPool) => d.endpoints(p).map((e) => e.address);

describe('pool discovery through @kubernetes/client-node against the test API server', () => {
  it('takes Ready pods of the pool revision only, and drops them on NotReady and deletion', async () => {
    api = await startKubeApiServer({ bookmarkIntervalMs: 50 });
    const { a, b } = selectorPools();
    const d = start();
    d.sync([a, b]);
    await until(() => d.ready(), 'both watches listed');
    expect(d.endpoints(a)).toEqual([]);
    const pending = readyPod('a-0', NS, '10.1.0.5', labels('llama-a'), 'uid-a0');
    pending.status = { phase: 'Pending', conditions: [] };
    api.store.create(pending);
    api.store.create(readyPod('other', NS, '10.1.0.9', { app: 'other', 'kvgate.io/revision': 'llama-a' }, 'uid-x'));
    await new Promise((r) => setTimeout(r, 100));
    expect(d.endpoints(a)).toEqual([]); // pending, and the other pod does not match the selector
    api.store.update(NS, 'a-0', (p) => {
      p.status = { phase: 'Running', podIP: '10.1.0.5', conditions: [{ type: 'Ready', status: 'True' }] };
    });
    await until(() => addrs(d, a).length === 1, 'a-0 Ready');
    expect(d.endpoints(a)[0]).toMatchObject({
      address: '10.1.0.5:8000',
      status: 'http://10.1.0.5:9090',
      podUid: 'uid-a0',
      fingerprint: a.fingerprint,
    });
    expect(d.endpoints(b)).toEqual([]); // another revision's pool never sees it
    api.store.update(NS, 'a-0', (p) => {
      p.status.conditions = [{ type: 'Ready', status: 'False' }];
    });
    await until(() => addrs(d, a).length === 0, 'a-0 NotReady');
    api.store.update(NS, 'a-0', (p) => {
      p.status.conditions = [{ type: 'Ready', status: 'True' }];
    });
    await until(() => addrs(d, a).length === 1, 'a-0 Ready again');
    // `kubectl delete pod`: kube-apiserver first marks it (deletionTimestamp, still Ready while its containers stop);
    // it leaves at once, then the kubelet's final delete removes it.
    api.store.deletePod(NS, 'a-0');
    await until(() => addrs(d, a).length === 0, 'a-0 terminating');
    expect(d.status([a])['a-decode']!.endpoints).toEqual([]);
    api.store.deletePod(NS, 'a-0', { gracePeriodSeconds: 0 });
    expect(api.store.get(NS, 'a-0')).toBeUndefined();
    await new Promise((r) => setTimeout(r, 100));
    expect(addrs(d, a)).toEqual([]);
  });

  it('an IP reused by a pod of another revision belongs to the new pod only, even while the old one is still cached', async () => {
    api = await startKubeApiServer();
    const { a, b } = selectorPools();
    const d = start();
    d.sync([a, b]);
    await until(() => d.ready(), 'listed');
    api.store.create(readyPod('a-0', NS, '10.1.0.5', labels('llama-a'), 'uid-a0'));
    await until(() => addrs(d, a).length === 1, 'a-0 Ready');
    // The old pod's deletion has not been seen yet (its DELETE is still to come) when the new pod takes the IP.
    api.store.create(readyPod('b-0', NS, '10.1.0.5', labels('llama-b'), 'uid-b0'));
    await until(() => addrs(d, b).length === 1, 'b-0 Ready');
    expect(d.endpoints(a)).toEqual([]);
    expect(d.endpoints(b)[0]).toMatchObject({ address: '10.1.0.5:8000', podUid: 'uid-b0', fingerprint: b.fingerprint });
    expect(a.fingerprint).not.toBe(b.fingerprint);
  });

  it('a terminal pod (evicted: Failed) keeps its pod IP in status but no longer owns it: the pod given the IP is routed', async () => {
    api = await startKubeApiServer();
    const { a, b } = selectorPools();
    const d = start();
    d.sync([a, b]);
    await until(() => d.ready(), 'listed');
    const waiting = readyPod('b-0', NS, '10.1.0.5', labels('llama-b'), 'uid-b0');
    waiting.status = { phase: 'Pending', conditions: [] }; // created first, waits for a GPU
    api.store.create(waiting);
    api.store.create(readyPod('a-0', NS, '10.1.0.5', labels('llama-a'), 'uid-a0')); // created later, runs
    await until(() => addrs(d, a).length === 1, 'a-0 Ready');
    // a-0 is evicted: Failed, and the kubelet keeps status.podIP on a terminal pod (kubernetes/kubernetes#125404)
    // while the IP goes back to the node's pool; b-0 lands on that node and gets it.
    api.store.update(NS, 'a-0', (p) => {
      p.status = { phase: 'Failed', podIP: '10.1.0.5', conditions: [{ type: 'Ready', status: 'False' }] };
    });
    api.store.update(NS, 'b-0', (p) => {
      p.status = { phase: 'Running', podIP: '10.1.0.5', conditions: [{ type: 'Ready', status: 'True' }] };
    });
    await until(() => addrs(d, b).length === 1, 'b-0 routed although the older-looking a-0 still lists the IP');
    expect(d.endpoints(b)[0]).toMatchObject({ address: '10.1.0.5:8000', podUid: 'uid-b0' });
    expect(d.endpoints(a)).toEqual([]);
  });

  it('hostNetwork pods share their node IP by design: pools on other ports of the same node keep their pods', async () => {
    api = await startKubeApiServer();
    const v = clone(twoRevisionTableValue()) as { pools: Record<string, unknown>[] };
    for (const p of v.pools) {
      if (p['role'] !== 'decode') continue;
      const port = p['revision'] === 'llama-a' ? 8000 : 8100;
      p['endpoints'] = [];
      p['discovery'] = {
        kubernetes: { namespace: NS, matchLabels: { app: 'llama', role: 'decode' }, targetPort: port, statusPort: port + 1 },
      };
    }
    const t = tableFromValue(v);
    const a = t.pools.get('a-decode')!;
    const b = t.pools.get('b-decode')!;
    const d = start();
    d.sync([a, b]);
    await until(() => d.ready(), 'listed');
    const onNode = (pod: ReturnType<typeof readyPod>) => ({ ...pod, spec: { hostNetwork: true, nodeName: 'gpu-1' } });
    api.store.create(onNode(readyPod('a-0', NS, '10.0.0.1', labels('llama-a'), 'uid-a0')));
    api.store.create(onNode(readyPod('b-0', NS, '10.0.0.1', labels('llama-b'), 'uid-b0'))); // the same node, later
    await until(() => addrs(d, b).length === 1, 'b-0');
    await until(() => addrs(d, a).length === 1, 'a-0 kept: its node IP is not reused, it is shared');
    expect(d.endpoints(a)[0]).toMatchObject({ address: '10.0.0.1:8000', podUid: 'uid-a0' });
    expect(d.endpoints(b)[0]).toMatchObject({ address: '10.0.0.1:8100', podUid: 'uid-b0' });
  });

  it('a reset watch resumes from its resourceVersion; a 410 Gone makes it re-list and see what changed meanwhile', async () => {
    api = await startKubeApiServer(); // no bookmarks: the client's resourceVersion falls behind
    const { a } = selectorPools();
    const d = start();
    d.sync([a]);
    api.store.create(readyPod('a-0', NS, '10.1.0.5', labels('llama-a'), 'uid-a0'));
    api.store.create(readyPod('a-1', NS, '10.1.0.6', labels('llama-a'), 'uid-a1'));
    await until(() => addrs(d, a).length === 2, 'two pods');
    const lists = api.counts()['list'] ?? 0;
    api.endWatches(); // a clean end (the server's watch timeout): the library re-watches without a list
    api.store.delete(NS, 'a-1');
    await until(() => addrs(d, a).length === 1, 'deletion seen through the resumed watch');
    expect(api.counts()['list']).toBe(lists);
    api.store.create(readyPod('x-0', NS, '10.1.0.99', { app: 'other' }, 'uid-x0')); // moves the resourceVersion on, unseen
    api.store.compact(); // history gone: the next watch from the client's resourceVersion is 410 Gone
    api.endWatches();
    api.store.delete(NS, 'a-0');
    api.store.create(readyPod('a-2', NS, '10.1.0.7', labels('llama-a'), 'uid-a2'));
    await until(() => addrs(d, a).join() === '10.1.0.7:8000', 're-listed after 410');
    expect(api.counts()['expired']).toBeGreaterThanOrEqual(1);
    expect(api.counts()['list']).toBeGreaterThan(lists);
  });

  it('a watch gone silent without a close (half-open connection) is restarted: a pod that turned NotReady leaves', async () => {
    api = await startKubeApiServer({ bookmarkIntervalMs: 50 });
    const { a } = selectorPools();
    const d = start({ ms: 0 }, 60_000, 600);
    d.sync([a]);
    api.store.create(readyPod('a-0', NS, '10.1.0.5', labels('llama-a'), 'uid-a0'));
    await until(() => addrs(d, a).length === 1, 'a-0');
    await new Promise((r) => setTimeout(r, 900)); // a live watch (bookmarks) is not taken for a dead one
    expect(d.status([a])['a-decode']).toMatchObject({ state: 'ok', restarts: 0 });
    const lists = api.counts()['list'] ?? 0;
    api.freezeWatches(); // the connection dies silently: the client never hears of it
    api.store.update(NS, 'a-0', (p) => {
      p.status.conditions = [{ type: 'Ready', status: 'False' }];
    });
    await until(() => addrs(d, a).length === 0, 'the NotReady pod dropped after the silent watch was replaced');
    expect(api.counts()['list']).toBeGreaterThan(lists);
    expect(d.status([a])['a-decode']!.restarts).toBeGreaterThanOrEqual(1);
  });

  it('a re-list that hangs (after a 410) is given up after the idle limit, not trusted as current forever', async () => {
    api = await startKubeApiServer({ bookmarkIntervalMs: 50 });
    const { a } = selectorPools();
    const d = start({ ms: 0 }, 60_000, 600);
    d.sync([a]);
    api.store.create(readyPod('a-0', NS, '10.1.0.5', labels('llama-a'), 'uid-a0'));
    await until(() => addrs(d, a).length === 1, 'a-0');
    api.setListDelay(3_600_000); // lists hang from now on
    api.store.create(readyPod('x-0', NS, '10.1.0.99', { app: 'other' }, 'uid-x0'));
    api.store.compact();
    api.endWatches(); // the re-watch gets 410 Gone: the library re-lists, and that list hangs
    api.store.update(NS, 'a-0', (p) => {
      p.status.conditions = [{ type: 'Ready', status: 'False' }];
    });
    await until(() => (api!.counts()['expired'] ?? 0) >= 1, '410');
    await new Promise((r) => setTimeout(r, 1000));
    api.setListDelay(0); // the API server answers again
    await until(() => addrs(d, a).length === 0, 'a fresh list after the hung one: a-0 is NotReady');
    expect(d.status([a])['a-decode']!.restarts).toBeGreaterThanOrEqual(1);
  });

  it('the API server down: last known endpoints are kept as stale, then dropped after staleAfterMs; back up: recovers', async () => {
    api = await startKubeApiServer();
    const { a } = selectorPools();
    const skew = { ms: 0 };
    const d = start(skew, 5000);
    d.sync([a]);
    api.store.create(readyPod('a-0', NS, '10.1.0.5', labels('llama-a'), 'uid-a0'));
    await until(() => addrs(d, a).length === 1, 'a-0');
    await api.stop();
    await until(() => d.status([a])['a-decode']!.state === 'stale', 'watch broken');
    expect(addrs(d, a)).toEqual(['10.1.0.5:8000']); // stale but kept
    skew.ms = 6000; // past staleAfterMs
    await until(() => d.status([a])['a-decode']!.state === 'failed', 'stale past staleAfterMs');
    await new Promise((r) => setTimeout(r, 1100)); // past the one-second derivation cache
    expect(d.endpoints(a)).toEqual([]);
    await api.start();
    await until(() => d.status([a])['a-decode']!.state === 'ok', 'watch restarted with a fresh list');
    expect(addrs(d, a)).toEqual(['10.1.0.5:8000']);
  });

  // A restarted kube-apiserver rebuilds its watch cache from a fresh list; how a watch fares meanwhile depends on the
  // version (testbed/kube-apiserver `version`): 429 from v1.31 on, held until ready before. Either way the gate must
  // end up with what changed while it could not watch.
  for (const version of ['1.30', '1.33'] as const) {
    it(`v${version}: an API server restart with its watch cache still initializing; pods changed meanwhile are seen`, async () => {
      api = await startKubeApiServer({ version });
      const { a } = selectorPools();
      const d = start();
      d.sync([a]);
      api.store.create(readyPod('a-0', NS, '10.1.0.5', labels('llama-a'), 'uid-a0'));
      await until(() => addrs(d, a).length === 1, 'a-0');
      await api.stop();
      api.store.update(NS, 'a-0', (p) => void (p.status.conditions = [{ type: 'Ready', status: 'False' }]));
      api.store.create(readyPod('a-1', NS, '10.1.0.6', labels('llama-a'), 'uid-a1'));
      // The informer's re-watch was refused and the gate restarts with a list. (Had the re-watch reached a v1.30
      // server that is initializing, it would wait there, no list, until the cache is ready or idleMs passes.)
      await until(() => d.status([a])['a-decode']!.state === 'stale', 'watch broken');
      await api.start({ watchCacheInitializing: true });
      // Lists are answered from etcd while the cache initializes: the gate sees the changes at once.
      await until(() => addrs(d, a).join() === '10.1.0.6:8000', 'the list after the restart');
      if (version === '1.33') await until(() => (api!.counts()['unready'] ?? 0) >= 1, 'a watch refused with 429');
      else await until(() => (api!.counts()['held'] ?? 0) >= 1, 'a watch held until the cache is ready');
      api.store.create(readyPod('a-2', NS, '10.1.0.7', labels('llama-a'), 'uid-a2'));
      api.watchCacheReady();
      // v1.30: the held watch's resourceVersion predates the cache's list, so it is 410 Expired and the informer
      // re-lists; v1.33: the next restart lists and watches.
      await until(() => addrs(d, a).join() === '10.1.0.6:8000,10.1.0.7:8000', 'a-2 after the cache is ready');
      if (version === '1.30') expect(api.counts()['expired'] ?? 0).toBeGreaterThanOrEqual(1);
      api.store.delete(NS, 'a-1');
      await until(() => addrs(d, a).join() === '10.1.0.7:8000', 'a deletion through the watch');
      expect(d.status([a])['a-decode']!.state).toBe('ok');
    });
  }

  it('403 for missing RBAC: never synced, no endpoints, an error that names the fix; fixed RBAC: syncs', async () => {
    api = await startKubeApiServer({ allowedNamespaces: ['elsewhere'] });
    api.store.create(readyPod('a-0', NS, '10.1.0.5', labels('llama-a'), 'uid-a0'));
    const { a } = selectorPools();
    const d = start();
    d.sync([a]);
    await until(() => (api!.counts()['forbidden'] ?? 0) >= 1 && d.status([a])['a-decode']!.lastError !== null, '403');
    expect(d.ready()).toBe(false);
    expect(d.endpoints(a)).toEqual([]);
    expect(d.status([a])['a-decode']!.lastError).toMatch(/403 Forbidden.*get\/list\/watch on pods/);
    api.setAllowedNamespaces([NS]);
    await until(() => d.ready() && addrs(d, a).length === 1, 'synced after the RBAC fix');
  });

  it('a watch stopped while it lists (a reload drops its pool, or the gate closes) never opens its watch afterwards', async () => {
    api = await startKubeApiServer({ listDelayMs: 150 });
    const { a } = selectorPools();
    const d = start();
    d.sync([a]);
    await until(() => (api!.counts()['list'] ?? 0) >= 1, 'the list is under way');
    d.sync([]); // the reload that removes the pool stops its watch before the list has answered
    await new Promise((r) => setTimeout(r, 400));
    expect(api.counts()['watch'] ?? 0).toBe(0);
    expect(api.openWatches()).toBe(0);
    // The same when the whole discovery closes mid-list.
    d.sync([a]);
    await until(() => (api!.counts()['list'] ?? 0) >= 2, 'the second list is under way');
    await d.close();
    await new Promise((r) => setTimeout(r, 400));
    expect(api.counts()['watch'] ?? 0).toBe(0);
    expect(api.openWatches()).toBe(0);
  });

  it('a watch refused after every successful list (RBAC without the watch verb) backs off instead of re-listing at once', async () => {
    api = await startKubeApiServer();
    api.setWatchForbidden(true);
    api.store.create(readyPod('a-0', NS, '10.1.0.5', labels('llama-a'), 'uid-a0'));
    const { a } = selectorPools();
    discovery = createDiscovery({
      kubeConfig: api.kubeConfig(),
      staleAfterMs: 5000,
      logger: silent,
      registry: new Registry(),
      backoff: { initialMs: 20, maxMs: 400 },
    });
    discovery.sync([a]);
    await new Promise((r) => setTimeout(r, 1500));
    // Backing off 20, 40, 80, 160, 320, 400 ms: well under 15 lists; re-listing after 20 ms each time: about 50.
    expect(api.counts()['list'] ?? 0).toBeLessThan(15);
    expect(api.counts()['forbidden'] ?? 0).toBeGreaterThanOrEqual(2);
    expect(discovery.status([a])['a-decode']!.restarts).toBeGreaterThanOrEqual(2);
  });

  /** A discovery whose metrics the test reads; `sample` runs at every change it announces. */
  function withMetrics(sample?: () => void): { d: Discovery; registry: Registry } {
    const registry = new Registry();
    discovery = createDiscovery({
      kubeConfig: api!.kubeConfig(),
      staleAfterMs: 5000,
      logger: silent,
      registry,
      backoff: { initialMs: 20, maxMs: 100 },
    });
    if (sample !== undefined) discovery.onChange(sample);
    return { d: discovery, registry };
  }
  /** The gauge as a scrape would read it now (its `collect` runs synchronously inside `get`). */
  const brokenGauge = (registry: Registry): Promise<number> =>
    registry
      .getSingleMetric('kvgate_discovery_watches_broken')!
      .get()
      .then((m) => m.values[0]?.value ?? 0);
  const restartsBy = async (registry: Registry, status: string): Promise<number> =>
    (await registry.getSingleMetric('kvgate_discovery_watch_restarts_total')!.get()).values.find((v) => v.labels['status'] === status)
      ?.value ?? 0;
  async function eventually(check: () => Promise<boolean>, what: string): Promise<void> {
    const end = Date.now() + 5000;
    while (!(await check())) {
      if (Date.now() > end) throw new Error(`timed out waiting for: ${what}`);
      await new Promise((r) => setTimeout(r, 10));
    }
  }

  it('a watch answered with an ERROR event other than 410 is a broken watch: restarted with a fresh list and backoff, counted by its code', async () => {
    api = await startKubeApiServer();
    api.store.create(readyPod('a-0', NS, '10.1.0.5', labels('llama-a'), 'uid-a0'));
    const { a } = selectorPools();
    const { d, registry } = withMetrics();
    d.sync([a]);
    await until(() => addrs(d, a).length === 1, 'a-0');
    // What kube-apiserver's watch cache sends for an error it meets setting a watch up (newErrWatcher): 200, one
    // ERROR event, the end. client-node 1.4.0 ignores the event and re-opens the watch at once, no backoff.
    api.setWatchError({ code: 500, reason: 'InternalError', message: 'Internal error occurred: etcdserver: no leader' });
    api.endWatches();
    await until(() => (api!.counts()['watchError'] ?? 0) >= 3, 'three watches ended by an ERROR event');
    // Each one restarted the informer: a fresh list (after the backoff) before the next watch, not a re-watch at once.
    expect(api.counts()['list'] ?? 0).toBeGreaterThanOrEqual(api.counts()['watchError'] ?? 0);
    await eventually(async () => (await restartsBy(registry, '500')) >= 2, 'restarts counted with the Status code');
    expect(d.status([a])['a-decode']!.lastError).toMatch(
      /ERROR event \(500 InternalError\): Internal error occurred: etcdserver: no leader/,
    );
    await eventually(async () => (await brokenGauge(registry)) === 1, 'the watch counted broken');
    expect(addrs(d, a)).toEqual(['10.1.0.5:8000']); // each list is current: its pods are kept
    // The error clears: the next watch runs, and so does the gauge.
    api.setWatchError(null);
    await eventually(async () => (await brokenGauge(registry)) === 0 && d.status([a])['a-decode']!.lastError === null, 'mended');
    api.store.update(NS, 'a-0', (p) => {
      p.status.conditions = [{ type: 'Ready', status: 'False' }];
    });
    await until(() => addrs(d, a).length === 0, 'changes seen through the watch again');
  });

  it('an ERROR event in the middle of a running watch (the etcd watcher failing) restarts it the same way', async () => {
    api = await startKubeApiServer();
    const { a } = selectorPools();
    const { d, registry } = withMetrics();
    d.sync([a]);
    await until(() => d.ready() && api!.openWatches() === 1, 'watching');
    const lists = api.counts()['list'] ?? 0;
    api.errorWatches({ code: 500, reason: 'InternalError', message: 'Internal error occurred: failed to decode' });
    await eventually(async () => (await restartsBy(registry, '500')) === 1, 'restart counted');
    await until(() => (api!.counts()['list'] ?? 0) > lists && api!.openWatches() === 1, 're-listed and watching again');
    api.store.create(readyPod('a-0', NS, '10.1.0.5', labels('llama-a'), 'uid-a0'));
    await until(() => addrs(d, a).length === 1, 'a-0 through the new watch');
    expect(await brokenGauge(registry)).toBe(0);
  });

  it('list allowed, watch refused (403): the broken-watch gauge never reads 0 across the restarts, and the listed pods are used', async () => {
    api = await startKubeApiServer();
    api.setWatchForbidden(true);
    api.store.create(readyPod('a-0', NS, '10.1.0.5', labels('llama-a'), 'uid-a0'));
    const { a } = selectorPools();
    const samples: number[] = [];
    let failedOnce = false;
    let registry: Registry | undefined;
    // Read the gauge at every change discovery announces (a list landing, a failure), as a scrape then would.
    const sample = (): void => {
      if (failedOnce) void brokenGauge(registry!).then((v) => samples.push(v));
    };
    const made = withMetrics(sample);
    registry = made.registry;
    const d = made.d;
    d.sync([a]);
    await until(() => (api!.counts()['forbidden'] ?? 0) >= 1, 'the first watch refused');
    await eventually(async () => (await brokenGauge(registry!)) === 1, 'broken');
    failedOnce = true;
    const lists = api.counts()['list'] ?? 0;
    await until(() => (api!.counts()['list'] ?? 0) >= lists + 3 && (api!.counts()['forbidden'] ?? 0) >= 4, 'three more list + 403 rounds');
    await until(() => samples.length >= 6, 'gauge read at each list and failure');
    expect(samples.every((v) => v === 1)).toBe(true);
    expect(await brokenGauge(registry)).toBe(1);
    expect(d.status([a])['a-decode']!.lastError).toMatch(/403 Forbidden/);
    // The pods of each list are current: not stale for want of a watch.
    expect(addrs(d, a)).toEqual(['10.1.0.5:8000']);
    // The Role gains `watch`: the next watch is answered, and only that mends it.
    api.setWatchForbidden(false);
    await eventually(async () => (await brokenGauge(registry!)) === 0, 'mended by a watch that runs');
    expect(d.status([a])['a-decode']).toMatchObject({ state: 'ok', lastError: null });
  });

  it('a reload that adds a pool whose watch cannot list (403) fails that pool closed, and leaves a ready gate ready', async () => {
    api = await startKubeApiServer({ allowedNamespaces: [NS] });
    const v = clone(twoRevisionTableValue()) as { pools: Record<string, unknown>[] };
    for (const p of v.pools) {
      if (p['role'] !== 'decode') continue;
      p['endpoints'] = [];
      const namespace = p['revision'] === 'llama-a' ? NS : 'no-rbac-here';
      p['discovery'] = { kubernetes: { namespace, matchLabels: { app: 'llama', role: 'decode' }, targetPort: 8000, statusPort: 9090 } };
    }
    const t = tableFromValue(v);
    const a = t.pools.get('a-decode')!;
    const b = t.pools.get('b-decode')!;
    api.store.create(readyPod('a-0', NS, '10.1.0.5', labels('llama-a'), 'uid-a0'));
    const d = start();
    d.sync([a]);
    await until(() => d.ready() && addrs(d, a).length === 1, 'serving pool a');
    d.sync([a, b]); // the reload: pool b's namespace has no RBAC for the gate
    await until(() => (api!.counts()['forbidden'] ?? 0) >= 2, 'pool b refused');
    expect(d.ready()).toBe(true); // the gate keeps serving pool a
    expect(addrs(d, a)).toEqual(['10.1.0.5:8000']);
    expect(d.endpoints(b)).toEqual([]);
    expect(d.status([b])['b-decode']).toMatchObject({ state: 'syncing', lastError: expect.stringMatching(/403 Forbidden/) });
  });

  it('a selector pool whose revision is no label value is refused at load: kube-apiserver would answer its selector 400 forever', async () => {
    api = await startKubeApiServer();
    const pool = {
      name: 'c-decode',
      cluster: 'c-decode',
      role: 'decode',
      revision: 'llama@2026-12-01',
      discovery: { kubernetes: { namespace: NS, matchLabels: { app: 'llama' }, targetPort: 8000, statusPort: 9090 } },
    };
    // What the gate's watch would ask for: the API server refuses the selector, list and watch alike.
    const d = PoolSchema.parse({ ...pool, revision: 'llama-a' }).discovery!;
    const selector = labelSelectorString(selectorLabels(d, pool.revision));
    const res = await fetch(`${api.url}/api/v1/namespaces/${NS}/pods?labelSelector=${encodeURIComponent(selector)}`, {
      headers: { authorization: 'Bearer test-token' },
    });
    expect(res.status).toBe(400);
    // So the table is refused where it is loaded, naming the field, instead of a pool that never syncs.
    const r = PoolSchema.safeParse(pool);
    expect(r.success).toBe(false);
    expect(r.error?.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('\n')).toMatch(/revision: .*label value/);
    expect(PoolSchema.safeParse({ ...pool, revision: 'llama-a' }).success).toBe(true);
    // A static pool's revision is never a label: any name still goes.
    const { discovery: _, ...staticPool } = pool;
    expect(PoolSchema.safeParse({ ...staticPool, endpoints: [{ address: '10.0.0.1:8000', status: 'http://10.0.0.1:9090' }] }).success).toBe(
      true,
    );
  });
});

describe('kubeConfigFrom', () => {
  it('outside a pod and without discovery.kubeconfig: an error that names the setting, not a bare "Invalid URL" later', () => {
    expect(() => kubeConfigFrom(undefined, {})).toThrow(
      /runs outside a pod \(KUBERNETES_SERVICE_HOST\/PORT are unset\) and its config sets no discovery\.kubeconfig\. Fix: set discovery: \{ kubeconfig: FILE \}/,
    );
    // In a pod (the environment names the API server), the service account's config is loaded as before.
    expect(() => kubeConfigFrom(undefined, { KUBERNETES_SERVICE_HOST: '10.96.0.1', KUBERNETES_SERVICE_PORT: '443' })).not.toThrow();
  });
});
