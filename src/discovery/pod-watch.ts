/**
 * The I/O adapter for one Kubernetes pod selector: list + watch through @kubernetes/client-node 1.4.0's informer
 * (`ListWatch` in dist/cache.js, built as `makeInformer` in dist/informer.js builds it, but with our own `Watch`),
 * restarted by us whenever it stops.
 *
 * How the library behaves (read in node_modules/@kubernetes/client-node@1.4.0, dist/cache.js and dist/watch.js),
 * and what this adapter does about it:
 * - a watch that ends cleanly (the API server's watch timeout) is re-opened by the library from the last
 *   resourceVersion; a `410 Gone` (HTTP status or an ERROR event with code 410) makes it re-list;
 * - an `ERROR` event other than 410 is ignored (`watchHandler`), and the stream's end that follows is taken for a
 *   clean one: the watch is re-opened at once, no backoff. `GuardedWatch` turns such an event into a failure;
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
  /**
   * Since when the watch has been broken (ms since the epoch); null once a watch request was answered 200 and was not
   * then ended by an ERROR event. A list alone does not clear it: with RBAC that grants list but not watch every list
   * succeeds and every watch is refused, and the watch is broken all along (`kvgate_discovery_watches_broken`).
   */
  readonly brokenSinceMs: number | null;
  /**
   * Since when the pods are not known to be current (ms since the epoch): set when the watch breaks, null again once a
   * list (or a watch) succeeds. The pods of a list that succeeded are current, even while its watch is refused.
   */
  readonly staleSinceMs: number | null;
  /** What broke the watch last; null once a watch is established again. */
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

/** An ERROR event's Status (`{"type":"ERROR","object":<Status>}`), as a watch failure. */
class WatchErrorEvent extends Error {
  constructor(
    readonly code: number | null,
    readonly reason: string,
    readonly detail: string,
  ) {
    super(`the API server ended the watch with an ERROR event: ${code ?? 'no code'} ${reason}: ${detail}`);
  }
}

interface WatchHooks {
  /** A sign of life: a watch opened, or a line (event or bookmark; an ERROR event is none) arrived. */
  alive(what: 'open' | 'line' | 'error'): void;
  /** The watch request was answered 200: the watch is established. */
  established(): void;
  /** An ERROR event other than 410; `first`: it was the request's first line (the watch never ran). */
  failed(e: WatchErrorEvent, first: boolean): void;
}

/**
 * A library `Watch` that opens nothing once its informer was stopped, aborts a watch that connected meanwhile,
 * reports every sign of life (a watch opened, any line: event, bookmark or error) to the idle check, says when a
 * watch request was answered 200, and turns an ERROR event other than 410 into a failure of the informer.
 *
 * The library ignores such an ERROR event (`watchHandler` in dist/cache.js returns on `ERROR` after looking only
 * for code 410), and kube-apiserver ends the stream right after it (the cacher's `newErrWatcher` sends one event and
 * closes its channel; `WatchServer.HandleHTTP` returns when the channel closes: kubernetes/kubernetes
 * staging/src/k8s.io/apiserver/pkg/storage/cacher/cacher.go @00319881a809400fd88feac10e724a9e4afae4d9,
 * pkg/endpoints/handlers/watch.go @034debc18008c8ebfe1971d7d402dcf2b50b84c2). The library takes that end for a
 * clean one and re-opens the watch at once from the same resourceVersion, with no backoff: an error that persists
 * (a 500 InternalError, which `newErrWatcher` makes of any error without a Status) would loop as fast as the API
 * server answers, with the watch counted healthy. A 410 is left to the library, which re-lists.
 */
class GuardedWatch extends Watch {
  stopped = false;
  constructor(
    config: KubeConfig,
    private readonly hooks: WatchHooks,
  ) {
    super(config);
  }
  override async watch(...[path, query, callback, done]: Parameters<Watch['watch']>): Promise<AbortController> {
    if (this.stopped) {
      const none = new AbortController();
      none.abort();
      return none;
    }
    this.hooks.alive('open');
    let refused = false;
    let lines = 0;
    const controller = await super.watch(
      path,
      query,
      (phase, obj, raw) => {
        const first = lines++ === 0;
        if (phase === 'ERROR') {
          this.hooks.alive('error');
          const status = (obj ?? {}) as { code?: unknown; reason?: unknown; message?: unknown };
          const code = typeof status.code === 'number' ? status.code : null;
          if (code !== 410 && !this.stopped) {
            this.hooks.failed(new WatchErrorEvent(code, String(status.reason ?? ''), String(status.message ?? '')), first);
            return;
          }
        } else this.hooks.alive('line');
        callback(phase, obj, raw);
      },
      (err) => {
        if (err) refused = true;
        done(err);
      },
    );
    // The library's `watch` returns once the answer's headers are in: `done` was called with an error by then for
    // any answer but 200 (dist/watch.js), so a watch not refused by now was answered 200.
    if (this.stopped) controller.abort();
    else if (!refused) this.hooks.established();
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
  // brokenSinceMs as it was before the current watch request was answered 200: an ERROR event as that watch's first
  // line means it never ran, and the broken spell goes on from then (the alert's `for`, kept across the retry).
  let brokenBeforeOpenMs: number | null = null;
  let staleSinceMs: number | null = null;
  let lastError: string | null = null;
  let restarts = 0;
  let attempt = 0;
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  const changed = (): void => void setImmediate(() => !stopped && opts.onChange());
  // Real (monotonic) time, not opts.now: it measures the connection, not the gate's clock.
  let lastAliveMs = performance.now();
  const alive = (what?: 'open' | 'line' | 'error'): void => {
    lastAliveMs = performance.now();
    // The backoff starts over once a watch delivers: a list alone proves nothing about the watch (RBAC with
    // get/list but not watch lists fine, then every watch is refused), and re-listing at once after each list
    // would load the API server with a full list every initialMs, forever. Nor does an ERROR event.
    if (what === 'line') attempt = 0;
  };

  const start = (): void => {
    const listed = { ok: false };
    const guard: GuardedWatch = new GuardedWatch(opts.kubeConfig, {
      alive,
      established() {
        if (informer !== current || stopped || guard.stopped) return;
        brokenBeforeOpenMs = brokenSinceMs;
        if (brokenSinceMs === null && lastError === null) return;
        brokenSinceMs = null;
        lastError = null;
        changed();
      },
      failed: (e, first) => onFailure(informer, guard, e, first),
    });
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
            // The pods are current; the watch is not mended until it is answered (brokenSinceMs, lastError).
            staleSinceMs = null;
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

  const onFailure = (informer: Informer, guard: GuardedWatch, e: unknown, neverRan = false): void => {
    if (informer !== current || stopped || guard.stopped) return;
    if (currentListed) lastKnown = informer.list(opts.namespace);
    currentListed = false;
    guard.stopped = true;
    void informer.stop();
    const status = statusOf(e);
    lastError = describe(e, status, opts.namespace);
    if (neverRan && brokenBeforeOpenMs !== null) brokenSinceMs = brokenBeforeOpenMs;
    brokenSinceMs ??= opts.now();
    staleSinceMs ??= opts.now();
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
    state: () => ({ synced, brokenSinceMs, staleSinceMs, lastError, restarts }),
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
  if (e instanceof WatchErrorEvent) return e.code;
  const o = e as { code?: unknown; statusCode?: unknown } | null;
  if (typeof o?.statusCode === 'number') return o.statusCode;
  if (typeof o?.code === 'number') return o.code;
  return null;
}

function describe(e: unknown, status: number | null, namespace: string): string {
  if (e instanceof WatchErrorEvent) {
    return (
      `the API server ended the pod watch in namespace ${namespace} with an ERROR event (${status ?? 'no code'}` +
      `${e.reason === '' ? '' : ` ${e.reason}`}): ${e.detail}; retrying with a fresh list`
    );
  }
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
