/**
 * Pools by selector: one pod watch per (namespace, selector), shared by the pools that use it, and the endpoints
 * each pool has right now, failing closed.
 *
 * - Never listed: no endpoints (the gate's readiness stays NOT_SERVING until every watch it starts with has listed
 *   once; a watch a later reload adds keeps only its own pools empty until it lists).
 * - Watch broken: the last known endpoints are kept, marked stale, for `staleAfterMs`; after that the pool has no
 *   endpoints until a re-list succeeds.
 * - A pod IP seen on two live pods (a deleted pod still cached while a new pod, of any watched revision, has its IP):
 *   only the newest pod keeps the address, so an old pod's verified state never stands for its IP's new owner. A
 *   terminal pod (Succeeded, Failed) holds no IP, though its status still lists one, and a hostNetwork pod shares
 *   its node's (pods.ts, `heldPodIP`).
 * Every endpoint still has to pass the live worker view (its sidecar's verified status) before it takes traffic.
 */
import type { KubeConfig } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { Counter, Gauge, type Registry } from 'prom-client';
import type { CompiledEndpoint, CompiledPool } from '../policy/compile.js';
import { startPodWatch, type PodWatch, type PodWatchOptions } from './pod-watch.js';
import { heldPodIP, labelSelectorString, podEndpoints, selectorConflict, selectorLabels, type DiscoveredEndpoint } from './pods.js';

export interface PoolDiscoveryState {
  readonly namespace: string;
  readonly selector: string;
  /** `ok`, `syncing` (never listed), `stale` (broken, last known kept), `failed` (broken past staleAfterMs). */
  readonly state: 'ok' | 'syncing' | 'stale' | 'failed';
  readonly endpoints: readonly { readonly address: string; readonly pod: string; readonly uid: string }[];
  readonly lastError: string | null;
  readonly restarts: number;
}

export interface Discovery {
  /** Start the watches the pools need and stop the ones no pool needs any more (call on every table swap). */
  sync(pools: Iterable<CompiledPool>): void;
  /** The pool's endpoints now; [] when it has none that may take traffic (see the module comment). */
  endpoints(pool: CompiledPool): readonly CompiledEndpoint[];
  /**
   * The pool's pods that are terminating but still serve (Ready, with their IP, inside their grace period): never a
   * target for a new request, only for the rest of a request decided before their deletion (a prefill leg the
   * contract planned there). [] whenever `endpoints` is failing closed.
   */
  terminating(pool: CompiledPool): readonly CompiledEndpoint[];
  /**
   * True once every watch has listed at least once, and from then on: a watch a reload adds later fails its own pools
   * closed until it lists (`syncing`), it does not take the whole gate out of service.
   */
  ready(): boolean;
  /** Per selector pool, for the gate's /status. */
  status(pools: Iterable<CompiledPool>): Record<string, PoolDiscoveryState>;
  onChange(cb: () => void): void;
  close(): Promise<void>;
}

export interface DiscoveryDeps {
  readonly kubeConfig: KubeConfig;
  readonly staleAfterMs: number;
  readonly logger: Logger;
  readonly registry: Registry;
  readonly now?: () => number;
  readonly backoff?: PodWatchOptions['backoff'];
  /** A watch silent for this long (no event, bookmark or reconnect) is presumed dead and restarted; tests. */
  readonly watchIdleMs?: number;
}

interface Entry {
  readonly watch: PodWatch;
  readonly namespace: string;
  readonly selector: string;
}

export function createDiscovery(deps: DiscoveryDeps): Discovery {
  const now = deps.now ?? Date.now;
  const watches = new Map<string, Entry>();
  const listeners: (() => void)[] = [];
  let version = 0;
  const cache = new Map<string, { version: number; at: number; endpoints: readonly CompiledEndpoint[] }>();
  let newestByIp: Map<string, string> | undefined;
  // Readiness gates the start only: a watch added by a reload that cannot list (a namespace without RBAC, a typo)
  // would otherwise turn every replica NOT_SERVING and stop all traffic, other models' included.
  let everReady = false;
  const restarts = new Counter({
    name: 'kvgate_discovery_watch_restarts_total',
    help: 'Pod watches restarted with a fresh list after they broke, by HTTP status (none for a connection error).',
    labelNames: ['status'] as const,
    registers: [deps.registry],
  });
  const brokenGauge = new Gauge({
    name: 'kvgate_discovery_watches_broken',
    help: 'Pod watches that are broken now: not answered by the API server since they last failed (a list alone does not mend one).',
    registers: [deps.registry],
    collect() {
      this.set([...watches.values()].filter((e) => e.watch.state().brokenSinceMs !== null).length);
    },
  });
  void brokenGauge;
  const bump = (): void => {
    version++;
    newestByIp = undefined;
    for (const cb of listeners) cb();
  };

  const keyOf = (pool: CompiledPool): { key: string; namespace: string; selector: string } | null => {
    const d = pool.discovery;
    if (d === null) return null;
    const selector = labelSelectorString(selectorLabels(d, pool.revision));
    return { key: `${d.kubernetes.namespace}\n${selector}`, namespace: d.kubernetes.namespace, selector };
  };

  /** Across every watch: the newest pod UID per pod IP it holds (IPs are unique among pods that hold one; `heldPodIP`). */
  const newest = (): Map<string, string> => {
    if (newestByIp !== undefined) return newestByIp;
    const best = new Map<string, { uid: string; at: number }>();
    for (const e of watches.values()) {
      for (const pod of e.watch.pods()) {
        const ip = heldPodIP(pod);
        const uid = pod.metadata?.uid;
        if (!ip || !uid) continue;
        const at = Date.parse(String(pod.metadata?.creationTimestamp ?? '')) || 0;
        const had = best.get(ip);
        if (had === undefined || had.at < at) best.set(ip, { uid, at });
      }
    }
    newestByIp = new Map([...best].map(([ip, v]) => [ip, v.uid]));
    return newestByIp;
  };

  const discovered = (pool: CompiledPool, entry: Entry, which: 'ready' | 'terminating' = 'ready'): DiscoveredEndpoint[] => {
    const owners = newest();
    // No owner: no pod holds the IP alone (hostNetwork pods share their node's); address and pod UID tell them apart.
    return podEndpoints(entry.watch.pods(), pool.discovery!, pool.revision, which).filter((ep) => {
      const owner = owners.get(ep.podIP);
      return owner === undefined || owner === ep.podUid;
    });
  };

  const stateOf = (entry: Entry | undefined): PoolDiscoveryState['state'] => {
    if (entry === undefined) return 'syncing';
    const s = entry.watch.state();
    if (!s.synced) return 'syncing';
    // The pods' age, not the watch's: a list that succeeded is current even while its watch is refused.
    if (s.staleSinceMs === null) return 'ok';
    return now() - s.staleSinceMs > deps.staleAfterMs ? 'failed' : 'stale';
  };

  return {
    sync(pools) {
      const wanted = new Map<string, { namespace: string; selector: string }>();
      for (const p of pools) {
        const k = keyOf(p);
        if (k === null) continue;
        const conflict = selectorConflict(p.discovery!, p.revision);
        if (conflict !== null) deps.logger.error({ pool: p.name }, `pool ${p.name} can never have endpoints: ${conflict}`);
        wanted.set(k.key, k);
      }
      for (const [key, e] of watches) {
        if (!wanted.has(key)) {
          void e.watch.stop();
          watches.delete(key);
        }
      }
      for (const [key, { namespace, selector }] of wanted) {
        if (watches.has(key)) continue;
        const watch = startPodWatch({
          kubeConfig: deps.kubeConfig,
          namespace,
          labelSelector: selector,
          now,
          ...(deps.backoff === undefined ? {} : { backoff: deps.backoff }),
          ...(deps.watchIdleMs === undefined ? {} : { idleMs: deps.watchIdleMs }),
          onChange: bump,
          onError: (message, status) => {
            restarts.inc({ status: status === null ? 'none' : String(status) });
            deps.logger.warn({ namespace, selector, status }, message);
          },
        });
        watches.set(key, { watch, namespace, selector });
      }
      bump();
    },
    endpoints(pool) {
      const k = keyOf(pool);
      if (k === null) return pool.endpoints;
      const entry = watches.get(k.key);
      const state = stateOf(entry);
      if (entry === undefined || state === 'syncing' || state === 'failed') return [];
      const t = now();
      const hit = cache.get(pool.name);
      // Re-derive on a change, and at least once a second so a stale watch turns `failed` on time.
      if (hit !== undefined && hit.version === version && t - hit.at < 1000) return hit.endpoints;
      const endpoints = discovered(pool, entry).map((ep) =>
        Object.freeze({ address: ep.address, status: ep.status, fingerprint: pool.fingerprint, podUid: ep.podUid }),
      );
      cache.set(pool.name, { version, at: t, endpoints });
      return endpoints;
    },
    terminating(pool) {
      const k = keyOf(pool);
      const entry = k === null ? undefined : watches.get(k.key);
      const state = stateOf(entry);
      if (entry === undefined || state === 'syncing' || state === 'failed') return [];
      return discovered(pool, entry, 'terminating').map((ep) =>
        Object.freeze({ address: ep.address, status: ep.status, fingerprint: pool.fingerprint, podUid: ep.podUid }),
      );
    },
    ready() {
      everReady ||= [...watches.values()].every((e) => e.watch.state().synced);
      return everReady;
    },
    status(pools) {
      const out: Record<string, PoolDiscoveryState> = {};
      for (const p of pools) {
        const k = keyOf(p);
        if (k === null) continue;
        const entry = watches.get(k.key);
        const s = entry?.watch.state();
        out[p.name] = {
          namespace: k.namespace,
          selector: k.selector,
          state: stateOf(entry),
          endpoints: entry === undefined ? [] : discovered(p, entry).map((e) => ({ address: e.address, pod: e.podName, uid: e.podUid })),
          lastError: s?.lastError ?? null,
          restarts: s?.restarts ?? 0,
        };
      }
      return out;
    },
    onChange: (cb) => void listeners.push(cb),
    async close() {
      await Promise.all([...watches.values()].map((e) => e.watch.stop()));
      watches.clear();
    },
  };
}
