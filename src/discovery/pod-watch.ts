/**
 * The I/O adapter for one Kubernetes pod selector: list + watch through @kubernetes/client-node 1.4.0's informer
 * (`ListWatch` in dist/cache.js, built as `makeInformer` in dist/informer.js builds it, but with our own `Watch`),
 * restarted by us whenever it stops.
 *
 * How the library behaves (read in node_modules/@kubernetes/client-node@1.4.0, dist/cache.js and dist/watch.js),
 * and what this adapter does about it:
 * - a watch that ends cleanly (the API server's watch timeout) is re-opened by the library from the last
 *   resourceVersion; a `410 Gone` (HTTP status or an ERROR event with code 410) makes it re-list;
 * - any other failure (connection refused, a failed list, 403) fires its `error` callback and the informer STOPS.
 *   We then start a fresh informer after a backoff, which lists again (a full re-list; the pods it no longer
 *   returns are gone). Until that list succeeds the last known pods are kept and reported as stale;
 * - it sets no read timeout and sends no `timeoutSeconds`: a watch whose connection died without a close waits
 *   forever. The path asks for `timeoutSeconds`, and a watch silent for `idleMs` is restarted (see `idleCheck`);
 * - it does not ask for bookmarks; the watch path carries `allowWatchBookmarks=true` so that the server's
 *   BOOKMARK events keep the resourceVersion fresh and a re-opened watch rarely falls out of the history window
 *   (Kubernetes API concepts, "Watch bookmarks", kubernetes.io/docs/reference/using-api/api-concepts/);
 * - `stop()` only aborts the watch request it already holds: an informer stopped while it lists (or while a watch
 *   it re-opens is connecting) goes on to open its watch afterwards (`doneHandler` awaits the list, then
 *   `this.request = await this.watch.watch(...)` without looking at `stopped` again), which then stays open until the
 *   API server ends it (30 to 60 minutes on kube-apiserver). So each informer gets its own `Watch` that opens
 *   nothing once we stopped the informer and aborts a watch that connected meanwhile (`GuardedWatch`).
 */
import { CoreV1Api, type KubeConfig, ListWatch, type V1Pod, Watch } from '@kubernetes/client-node';
import type { PodLike } from './pods.js';

export interface PodWatchState {
  /** A list has succeeded at least once: the pods are known. */
  readonly synced: boolean;
  /** Since when the watch has been broken (ms since the epoch); null while it runs. */
  readonly brokenSinceMs: number | null;
  readonly lastError: string | null;
  readonly restarts: number;
}

export interface PodWatch {
  /** The last known pods: the running informer's once it has listed, else the previous one's. */
  pods(): readonly PodLike[];
  state(): PodWatchState;
  stop(): Promise<void>;
}

export interface PodWatchOptions {
  readonly kubeConfig: KubeConfig;
  readonly namespace: string;
  readonly labelSelector: string;
  /** Called (on a later tick) after every change to `pods()` or `state()`. */
  readonly onChange: () => void;
  /** Called when the watch breaks, with a message that says what to do. */
  readonly onError: (message: string, status: number | null) => void;
  readonly now: () => number;
  /** Restart backoff: initial delay, doubled per failed attempt up to `maxMs`. */
  readonly backoff?: { readonly initialMs: number; readonly maxMs: number };
  /**
   * A watch that delivers nothing (no event, bookmark or reconnect) for this long is presumed dead and restarted
   * with a fresh list. Default 150 s; the watch asks the server to end it within 0.8 of that (`timeoutSeconds`).
   */
  readonly idleMs?: number;
}

interface Informer {
  list(namespace?: string): V1Pod[];
  on(verb: 'add' | 'update' | 'delete' | 'error', cb: (o: unknown) => void): void;
  start(): Promise<void>;
  stop(): Promise<void>;
}

/**
 * A library `Watch` that opens nothing once its informer was stopped, aborts a watch that connected meanwhile, and
 * reports every sign of life (a watch opened, any line: event, bookmark or error) to the idle check.
 */
class GuardedWatch extends Watch {
  stopped = false;
  constructor(
    config: KubeConfig,
    private readonly alive: (what: 'open' | 'line') => void,
  ) {
    super(config);
  }
  override async watch(...[path, query, callback, done]: Parameters<Watch['watch']>): Promise<AbortController> {
    if (this.stopped) {
      const none = new AbortController();
      none.abort();
      return none;
    }
    this.alive('open');
    const controller = await super.watch(
      path,
      query,
      (phase, obj, raw) => {
        this.alive('line');
        callback(phase, obj, raw);
      },
      done,
    );
    if (this.stopped) controller.abort();
    return controller;
  }
}

export function startPodWatch(opts: PodWatchOptions): PodWatch {
  const api = opts.kubeConfig.makeApiClient(CoreV1Api);
  const backoff = opts.backoff ?? { initialMs: 250, maxMs: 10_000 };
  const idleMs = opts.idleMs ?? 150_000;
  // The server ends each watch within timeoutSeconds (the library re-opens it from its resourceVersion), so even an
  // API server that sends no bookmarks shows a sign of life before idleMs; only a dead connection stays silent.
  const timeoutSeconds = Math.max(1, Math.floor((idleMs * 0.8) / 1000));
  const path = `/api/v1/namespaces/${encodeURIComponent(opts.namespace)}/pods?allowWatchBookmarks=true&timeoutSeconds=${timeoutSeconds}`;
  let current: Informer | undefined;
  let currentGuard: GuardedWatch | undefined;
  let currentListed = false;
  let lastKnown: readonly PodLike[] = [];
  let synced = false;
  let brokenSinceMs: number | null = null;
  let lastError: string | null = null;
  let restarts = 0;
  let attempt = 0;
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  const changed = (): void => void setImmediate(() => !stopped && opts.onChange());
  // Real (monotonic) time, not opts.now: it measures the connection, not the gate's clock.
  let lastAliveMs = performance.now();
  const alive = (what?: 'open' | 'line'): void => {
    lastAliveMs = performance.now();
    // The backoff starts over once a watch delivers: a list alone proves nothing about the watch (RBAC with
    // get/list but not watch lists fine, then every watch is refused), and re-listing at once after each list
    // would load the API server with a full list every initialMs, forever.
    if (what === 'line') attempt = 0;
  };

  const start = (): void => {
    const listed = { ok: false };
    const guard = new GuardedWatch(opts.kubeConfig, alive);
    alive();
    const informer = new ListWatch<V1Pod>(
      path,
      guard,
      async () => {
        alive();
        const list = await api.listNamespacedPod({ namespace: opts.namespace, labelSelector: opts.labelSelector }).finally(() => alive());
        if (informer === current) {
          // The library fills its cache right after this promise resolves; from the next tick on, it is current.
          setImmediate(() => {
            if (informer !== current || stopped) return;
            listed.ok = true;
            currentListed = true;
            synced = true;
            brokenSinceMs = null;
            lastError = null;
            opts.onChange();
          });
        }
        return list;
      },
      false,
      opts.labelSelector,
    ) as unknown as Informer;
    current = informer;
    currentGuard = guard;
    currentListed = false;
    for (const verb of ['add', 'update', 'delete'] as const) informer.on(verb, () => listed.ok && changed());
    informer.on('error', (e) => onFailure(informer, guard, e));
    informer.start().catch((e: unknown) => onFailure(informer, guard, e));
  };

  const onFailure = (informer: Informer, guard: GuardedWatch, e: unknown): void => {
    if (informer !== current || stopped || guard.stopped) return;
    if (currentListed) lastKnown = informer.list(opts.namespace);
    currentListed = false;
    guard.stopped = true;
    void informer.stop();
    const status = statusOf(e);
    lastError = describe(e, status, opts.namespace);
    brokenSinceMs ??= opts.now();
    opts.onError(lastError, status);
    const delay = Math.min(backoff.maxMs, backoff.initialMs * 2 ** attempt++);
    restarts++;
    timer = setTimeout(() => !stopped && start(), delay);
    timer.unref();
    changed();
  };

  // A watch that delivers nothing for idleMs (no event, no bookmark: kube-apiserver's watch cache sends one about
  // every minute, `defaultBookmarkFrequency` in staging/src/k8s.io/apiserver/pkg/storage/cacher/cacher.go, v1.33; and
  // no re-open, though the server ends it within timeoutSeconds) is a dead connection the library would wait on
  // forever (it sets no read timeout; kubernetes-client/javascript#596): restart it with a fresh list.
  const idleCheck = setInterval(
    () => {
      // A list counts too: one that hangs (the library sets no timeout on it either) would leave the informer's last
      // cache standing for current, a re-list after 410 Gone included. No pod list takes anywhere near idleMs.
      if (stopped || current === undefined || currentGuard === undefined || currentGuard.stopped) return;
      if (performance.now() - lastAliveMs <= idleMs) return;
      onFailure(
        current,
        currentGuard,
        new Error(`no answer, event, bookmark or reconnect from the list+watch for ${idleMs} ms: the connection is presumed dead`),
      );
    },
    Math.min(5000, Math.max(10, Math.floor(idleMs / 4))),
  );
  idleCheck.unref();

  start();
  return {
    pods: () => (currentListed && current ? current.list(opts.namespace) : lastKnown),
    state: () => ({ synced, brokenSinceMs, lastError, restarts }),
    async stop() {
      stopped = true;
      clearTimeout(timer);
      clearInterval(idleCheck);
      if (currentGuard !== undefined) currentGuard.stopped = true;
      await current?.stop();
    },
  };
}

function statusOf(e: unknown): number | null {
  const o = e as { code?: unknown; statusCode?: unknown } | null;
  if (typeof o?.statusCode === 'number') return o.statusCode;
  if (typeof o?.code === 'number') return o.code;
  return null;
}

function describe(e: unknown, status: number | null, namespace: string): string {
  if (status === 403) {
    return (
      `the API server refused to list or watch pods in namespace ${namespace} (403 Forbidden): grant the gate's ` +
      'service account get/list/watch on pods there (deploy/kubernetes/rbac.yaml)'
    );
  }
  if (status === 401) return "the API server did not accept the gate's credentials (401): check the service-account token or kubeconfig";
  const msg = e instanceof Error ? e.message : String(e);
  return `the pod watch in namespace ${namespace} failed${status === null ? '' : ` (HTTP ${status})`}: ${msg}; retrying with a fresh list`;
}
