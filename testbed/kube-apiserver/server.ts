/**
 * A test Kubernetes API server for pods: what @kubernetes/client-node's informer needs, served the way
 * kube-apiserver documents and implements it, so discovery runs through the REAL client library without a cluster.
 *
 * Followed (Kubernetes API concepts, kubernetes.io/docs/reference/using-api/api-concepts/, and kubernetes/kubernetes
 * staging/src/k8s.io/apiserver at v1.33):
 * - list: `GET /api/v1/namespaces/{ns}/pods?labelSelector=` answers a PodList whose `metadata.resourceVersion` is
 *   the store's current one ("Resource versions");
 * - watch: `?watch=true&resourceVersion=N` streams newline-delimited `{"type","object"}` events after N
 *   ("Efficient detection of changes"); a selector watch turns an object that starts matching into ADDED and one
 *   that stops matching into DELETED (pkg/storage/cacher/cache_watcher.go, convertToWatchEvent);
 * - `allowWatchBookmarks=true`: BOOKMARK events carrying only `metadata.resourceVersion` ("Watch bookmarks");
 * - a resourceVersion older than the retained history: HTTP 200, then one ERROR event whose object is a Status with
 *   code 410 / reason Expired, then the stream ends (pkg/storage/cacher/cacher.go, newErrWatcher: "to match the
 *   uncached watch implementation"; the uncached etcd3 watcher sends the same ERROR, pkg/storage/etcd3/watcher.go).
 *   Never an HTTP 410 on a watch: the handler writes a status only for errors before the stream (authn/z, a bad
 *   parameter, an unready watch cache);
 * - `timeoutSeconds` (or the server's own watch timeout) ends the stream cleanly
 *   (pkg/endpoints/handlers/get.go `ListResource` picks minRequestTimeout × (1 + rand) when the client gives none);
 * - RBAC: a namespace outside `allowedNamespaces` gets 403 with a Forbidden Status, a wrong bearer token 401; checked
 *   once per request as it arrives (pkg/endpoints/filters/authorization.go `withAuthorization`, kubernetes/kubernetes
 *   @008b3652), so an RBAC edit leaves watches already open running until they end;
 * - label selectors (selector.ts), pagination, bookmarks, restarts and the `version`-dependent watch while the watch
 *   cache initializes: see README.md, which cites the upstream file for each.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { KubeConfig } from '@kubernetes/client-node';
import { parseLabelSelector, type LabelSelector } from './selector.js';
import { PodStore, type Change, type Pod } from './store.js';

export interface KubeApiServerOptions {
  /** Namespaces the gate's service account may get/list/watch pods in (others: 403). Default: all. */
  readonly allowedNamespaces?: readonly string[];
  /** Bearer token the client must present; default `test-token`. */
  readonly token?: string;
  /**
   * Watch timeout when the client sends no `timeoutSeconds` (ms). Default: kube-apiserver's, `minRequestTimeout`
   * (1800 s) × (1 + rand) (pkg/endpoints/handlers/get.go `ListResource`, v1.33).
   */
  readonly watchTimeoutMs?: number;
  /**
   * BOOKMARK period for watches that allow them (ms); 0 sends none on a timer. Default 60 000, the watch cache's
   * `defaultBookmarkFrequency` (pkg/storage/cacher/cacher.go, v1.33). Either way one is also sent 2 s before the
   * watch's timeout (cache_watcher.go `nextBookmarkTime`: "right before the watcher timeout").
   */
  readonly bookmarkIntervalMs?: number;
  /** How long a list takes to answer (ms): a slow API server, or a large namespace. Default 0. */
  readonly listDelayMs?: number;
  /**
   * Which kube-apiserver's behaviour to follow where versions differ in a way a client sees (default `1.33`):
   * - while the watch cache (re)initializes after a start (`start({ watchCacheInitializing: true })`), v1.31 and
   *   later refuse a watch with 429 TooManyRequests, earlier versions hold it until the cache is ready
   *   (ResilientWatchCacheInitialization, KEP-4568: beta and on by default in v1.31, GA in v1.34;
   *   pkg/storage/cacher/cacher.go `Cacher.Watch`, "429 error can now be returned if watchcache is under
   *   initialization" in cacher_whitebox_test.go). A list without resourceVersion is answered from etcd in both.
   */
  readonly version?: '1.30' | '1.33';
}

export interface KubeApiServer {
  readonly url: string;
  readonly store: PodStore;
  /** A KubeConfig for the real client pointing here (token auth, plain HTTP). */
  kubeConfig(): KubeConfig;
  /** End every open watch cleanly (what a watch timeout or an apiserver rollout does). */
  endWatches(): void;
  /**
   * Every open watch goes silent without a close: no event, bookmark or end reaches its client any more (a
   * half-open connection: a load balancer that dropped the flow, an API server host gone without a reset). New
   * watches work.
   */
  freezeWatches(): void;
  /** Send a bookmark on every open watch that allows them. */
  bookmark(): void;
  /** Change who may list pods where (an RBAC edit): from the next request on; open watches keep running. */
  setAllowedNamespaces(namespaces: readonly string[] | undefined): void;
  /** RBAC that grants get/list but not watch (a Role with `verbs: [get, list]`): watches get 403. */
  setWatchForbidden(forbidden: boolean): void;
  /** From now on, lists answer after `ms` (a list that hangs: a large value). */
  setListDelay(ms: number): void;
  /**
   * From now on (until `null`), every watch that passed authorization and parameter checks is answered 200, one
   * `ERROR` event carrying this Status, then the end of the stream: what the watch cache does with an error it meets
   * while setting the watch up (`newErrWatcher` in pkg/storage/cacher/cacher.go: an error without a Status becomes
   * 500 InternalError), e.g. `{ code: 500, reason: 'InternalError', message: '...' }`. Lists are not affected.
   */
  setWatchError(status: WatchErrorStatus | null): void;
  /**
   * Every open watch gets one `ERROR` event carrying this Status, then its stream ends: an error met mid-watch (the
   * etcd3 watcher sends it as the last event before closing, `sendError`/`transformErrorToEvent` in
   * pkg/storage/etcd3/watcher.go: a non-Status error as 500 InternalError).
   */
  errorWatches(status: WatchErrorStatus): void;
  /**
   * Requests served, by kind, for assertions (`list`, `watch`, `forbidden`, `expired`, `unready`, `held`,
   * `watchError`).
   */
  counts(): Readonly<Record<string, number>>;
  /** Watches open now. */
  openWatches(): number;
  /** The API server goes down: every connection is dropped and the port refuses connections. */
  stop(): Promise<void>;
  /**
   * Up again on the same port, as a new kube-apiserver process: its watch cache starts empty from a fresh list,
   * so a watch from a resourceVersion older than that list is 410 Expired (see `serveWatch`). With
   * `watchCacheInitializing`, the cache is not ready until `watchCacheReady()` (see `version`).
   */
  start(opts?: { readonly watchCacheInitializing?: boolean }): Promise<void>;
  /** The watch cache finished its initial list: it serves watches from the resourceVersion it listed at. */
  watchCacheReady(): void;
  close(): Promise<void>;
}

/** The Status an injected `ERROR` event carries. */
export interface WatchErrorStatus {
  readonly code: number;
  readonly reason: string;
  readonly message: string;
}

interface OpenWatch {
  readonly res: ServerResponse;
  readonly bookmarks: boolean;
  /** The connection goes dead without a close (see `freezeWatches`): nothing more reaches the client. */
  freeze(): void;
  end(): void;
}

export async function startKubeApiServer(opts: KubeApiServerOptions = {}): Promise<KubeApiServer> {
  const store = new PodStore();
  const token = opts.token ?? 'test-token';
  let allowed = opts.allowedNamespaces;
  let watchForbidden = false;
  let listDelayMs = opts.listDelayMs ?? 0;
  let watchError: WatchErrorStatus | null = null;
  const watches = new Set<OpenWatch>();
  const sockets = new Set<Socket>();
  const counts: Record<string, number> = {};
  const version = opts.version ?? '1.33';
  // The watch cache (pkg/storage/cacher/watch_cache.go, v1.33): it has no history before the list it was built
  // from, so `getAllEventsSinceLocked` answers a resourceVersion below that list's "too old" (oldest = listRV + 1
  // while nothing was evicted since; a watch fails when rv < oldest - 1). Etcd's own history is `store.since`.
  let cacheListRv = store.resourceVersion;
  let cacheReady = true;
  const heldWatches = new Set<() => void>();
  const count = (k: string): void => void (counts[k] = (counts[k] ?? 0) + 1);

  const handler = (req: IncomingMessage, res: ServerResponse): void => {
    const url = new URL(req.url ?? '/', 'http://localhost');
    const m = /^\/api\/v1\/namespaces\/([^/]+)\/pods$/.exec(url.pathname);
    if (req.method !== 'GET' || m === null)
      return status(res, 404, 'NotFound', `the server could not find the requested resource (${req.method} ${url.pathname})`);
    if (req.headers.authorization !== `Bearer ${token}`) return status(res, 401, 'Unauthorized', 'Unauthorized');
    const namespace = decodeURIComponent(m[1]!);
    const watch = url.searchParams.get('watch') === 'true' || url.searchParams.get('watch') === '1';
    if ((allowed !== undefined && !allowed.includes(namespace)) || (watch && watchForbidden)) {
      count('forbidden');
      return status(
        res,
        403,
        'Forbidden',
        `pods is forbidden: User "system:serviceaccount:kvgate:kvgate-gate" cannot ${watch ? 'watch' : 'list'} resource "pods" in API group "" in the namespace "${namespace}"`,
      );
    }
    let selector: LabelSelector;
    try {
      selector = parseLabelSelector(url.searchParams.get('labelSelector') ?? '');
    } catch (e) {
      return status(res, 400, 'BadRequest', (e as Error).message);
    }
    if (!watch) {
      count('list');
      const answer = (): void => servePage(res, namespace, selector, url.searchParams);
      if (listDelayMs > 0) setTimeout(answer, listDelayMs).unref();
      else answer();
      return;
    }
    count('watch');
    if (!cacheReady) {
      if (version === '1.33') {
        count('unready');
        res.setHeader('retry-after', '1');
        return status(res, 429, 'TooManyRequests', 'storage is (re)initializing', { retryAfterSeconds: 1 });
      }
      // Before v1.31 the request waits for the cache (`c.ready.wait(ctx)`), headers unsent.
      count('held');
      const go = (): void => serveWatch(req, res, namespace, selector, url.searchParams);
      heldWatches.add(go);
      req.on('close', () => heldWatches.delete(go));
      return;
    }
    serveWatch(req, res, namespace, selector, url.searchParams);
  };

  /**
   * A list, paginated as the etcd3 store does when `limit` is given (pkg/storage/etcd3/store.go `GetList`, v1.33;
   * a paginated list with resourceVersion unset is not served from the watch cache in v1.33): names in key order,
   * at most `limit` matching items, `metadata.continue` when more may follow (a token naming the list's
   * resourceVersion and the next key, pkg/storage/continue.go `EncodeContinue`), `remainingItemCount` only without a
   * selector. `continue` resumes at the token's resourceVersion, a consistent snapshot; once that is compacted away
   * it is 410 Expired with a fresh token that continues at the latest state (store.go `handleCompactedErrorForPaging`).
   * `resourceVersion` on a list is otherwise not modelled: the answer is the latest state, which satisfies an unset
   * resourceVersion, "0" and NotOlderThan alike (not Exact).
   */
  const servePage = (res: ServerResponse, namespace: string, selector: LabelSelector, q: URLSearchParams): void => {
    const limit = Number(q.get('limit') ?? '');
    const cont = q.get('continue') ?? '';
    let rv = store.resourceVersion;
    let startKey = '';
    if (cont !== '') {
      const rvParam = q.get('resourceVersion') ?? '';
      if (rvParam !== '' && rvParam !== '0')
        return status(res, 400, 'BadRequest', 'specifying resource version is not allowed when using continue');
      const token = decodeContinue(cont);
      if (token === null) return status(res, 400, 'BadRequest', 'continue key is not valid');
      startKey = token.start;
      if (token.rv !== -1) {
        if (store.listAt(namespace, token.rv) === null) {
          count('expired');
          return json(res, 410, {
            ...statusBody(410, 'Expired', INCONSISTENT_CONTINUE),
            metadata: { continue: encodeContinue(-1, startKey) },
          });
        }
        rv = token.rv;
      }
    }
    const all = (store.listAt(namespace, rv) ?? [])
      .filter((p) => p.metadata.name >= startKey)
      .sort((x, y) => (x.metadata.name < y.metadata.name ? -1 : 1));
    const items: Pod[] = [];
    let next = '';
    let examined = 0;
    for (const p of all) {
      if (Number.isInteger(limit) && limit > 0 && items.length >= limit) {
        next = encodeContinue(rv, `${all[examined - 1]!.metadata.name}\u0000`);
        break;
      }
      examined++;
      if (selector(p.metadata.labels)) items.push(p);
    }
    const everything = (q.get('labelSelector') ?? '').trim() === '';
    const metadata = {
      resourceVersion: String(rv),
      ...(next === '' ? {} : { continue: next, ...(everything ? { remainingItemCount: all.length - examined } : {}) }),
    };
    json(res, 200, { kind: 'PodList', apiVersion: 'v1', metadata, items });
  };

  const serveWatch = (req: IncomingMessage, res: ServerResponse, namespace: string, selector: LabelSelector, q: URLSearchParams): void => {
    const rvParam = q.get('resourceVersion') ?? '';
    const from = rvParam === '' || rvParam === '0' ? null : Number(rvParam);
    if (watchError !== null) {
      count('watchError');
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(`${JSON.stringify({ type: 'ERROR', object: statusBody(watchError.code, watchError.reason, watchError.message) })}\n`);
      return;
    }
    const backlog = from === null || from < cacheListRv ? null : store.since(from);
    if (from !== null && backlog === null) {
      count('expired');
      const message = `too old resource version: ${from} (${Math.max(cacheListRv, store.compactedRv)})`;
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(`${JSON.stringify({ type: 'ERROR', object: statusBody(410, 'Expired', message) })}\n`);
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json', 'transfer-encoding': 'chunked' });
    // The answer's headers go out at once, before any event: `WatchServer.HandleHTTP` writes 200 and flushes
    // (kubernetes/kubernetes staging/src/k8s.io/apiserver/pkg/endpoints/handlers/watch.go
    // @034debc18008c8ebfe1971d7d402dcf2b50b84c2). Node would hold them until the first write.
    res.flushHeaders();
    let frozen = false;
    const send = (type: string, object: unknown): void => void (frozen || res.write(`${JSON.stringify({ type, object })}\n`));
    const emit = (c: Change): void => {
      // Only events newer than the watch's resourceVersion, even one from ahead of the store (cache_watcher.go
      // `process`, v1.33: "only send events newer than resourceVersion").
      if (c.pod.metadata.namespace !== namespace || (from !== null && c.rv <= from)) return;
      const now = selector(c.pod.metadata.labels);
      const was = c.before !== undefined && selector(c.before.metadata.labels);
      if (c.type === 'DELETED') {
        if (was) send('DELETED', c.pod);
      } else if (now && (c.type === 'ADDED' || !was)) send('ADDED', c.pod);
      else if (now && was) send('MODIFIED', c.pod);
      // The object stopped matching: a DELETED carrying its PREVIOUS content with this change's resourceVersion
      // (pkg/storage/cacher/cache_watcher.go v1.33, convertToWatchEvent: `oldObj := getMutableObject(event.PrevObject)`,
      // `updateResourceVersion(oldObj, c.versioner, event.ResourceVersion)`).
      else if (!now && was) send('DELETED', { ...c.before!, metadata: { ...c.before!.metadata, resourceVersion: String(c.rv) } });
    };
    if (from === null) for (const p of store.list(namespace)) if (selector(p.metadata.labels)) send('ADDED', p);
    for (const c of backlog ?? []) emit(c);
    const unsubscribe = store.subscribe(emit);
    const bookmarks = q.get('allowWatchBookmarks') === 'true';
    const timeoutS = Number(q.get('timeoutSeconds') ?? '');
    const timeoutMs =
      Number.isFinite(timeoutS) && timeoutS > 0 ? timeoutS * 1000 : (opts.watchTimeoutMs ?? Math.round(1_800_000 * (1 + Math.random())));
    const timer = setTimeout(() => (frozen ? undefined : w.end()), timeoutMs);
    const every = opts.bookmarkIntervalMs ?? 60_000;
    const tick = bookmarks && every > 0 ? setInterval(() => frozen || sendBookmark(w), every) : undefined;
    const last = bookmarks && timeoutMs > 2000 ? setTimeout(() => frozen || sendBookmark(w), timeoutMs - 2000) : undefined;
    const w: OpenWatch = {
      res,
      bookmarks,
      freeze() {
        frozen = true;
      },
      end() {
        if (!watches.delete(w)) return;
        clearTimeout(timer);
        clearInterval(tick);
        clearTimeout(last);
        unsubscribe();
        res.end();
      },
    };
    watches.add(w);
    req.on('close', () => w.end());
  };

  const sendBookmark = (w: OpenWatch): void => {
    if (!w.bookmarks) return;
    w.res.write(
      `${JSON.stringify({ type: 'BOOKMARK', object: { kind: 'Pod', apiVersion: 'v1', metadata: { resourceVersion: String(store.resourceVersion) } } })}\n`,
    );
  };

  let server: Server = createServer(handler);
  const listen = (port: number): Promise<number> =>
    new Promise((resolve, reject) => {
      server = createServer(handler);
      server.on('connection', (s: Socket) => {
        sockets.add(s);
        s.on('close', () => sockets.delete(s));
      });
      server.once('error', reject);
      server.listen(port, '127.0.0.1', () => resolve((server.address() as { port: number }).port));
    });
  const port = await listen(0);
  const url = `http://127.0.0.1:${port}`;
  const down = async (): Promise<void> => {
    for (const w of [...watches]) w.end();
    heldWatches.clear();
    for (const s of sockets) s.destroy();
    await new Promise<void>((r) => server.close(() => r()));
  };
  return {
    url,
    store,
    kubeConfig() {
      const kc = new KubeConfig();
      kc.loadFromOptions({
        clusters: [{ name: 'test', server: url, skipTLSVerify: true }],
        users: [{ name: 'gate', token }],
        contexts: [{ name: 'test', cluster: 'test', user: 'gate' }],
        currentContext: 'test',
      });
      return kc;
    },
    endWatches: () => [...watches].forEach((w) => w.end()),
    freezeWatches: () => [...watches].forEach((w) => w.freeze()),
    bookmark: () => [...watches].forEach(sendBookmark),
    setAllowedNamespaces: (ns) => void (allowed = ns),
    setWatchForbidden(forbidden) {
      watchForbidden = forbidden;
    },
    setListDelay(ms) {
      listDelayMs = ms;
    },
    setWatchError(s) {
      watchError = s;
    },
    errorWatches(s) {
      for (const w of [...watches]) {
        w.res.write(`${JSON.stringify({ type: 'ERROR', object: statusBody(s.code, s.reason, s.message) })}\n`);
        w.end();
      }
    },
    counts: () => ({ ...counts }),
    openWatches: () => watches.size,
    stop: down,
    async start(o) {
      await listen(port);
      cacheReady = o?.watchCacheInitializing !== true;
      cacheListRv = store.resourceVersion;
    },
    watchCacheReady() {
      cacheReady = true;
      cacheListRv = store.resourceVersion;
      const held = [...heldWatches];
      heldWatches.clear();
      for (const go of held) go();
    },
    close: down,
  };
}

const INCONSISTENT_CONTINUE =
  'The provided continue parameter is too old to display a consistent list result. You can start a new list without the ' +
  'continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing ' +
  'with the provided token results in an inconsistent list - objects that were created, modified, or deleted between ' +
  'the time the first chunk was returned and now may show up in the list.';

/** pkg/storage/continue.go: base64url (no padding) of `{"v":"meta.k8s.io/v1","rv":N,"start":"<key after the prefix>"}`. */
function encodeContinue(rv: number, start: string): string {
  return Buffer.from(JSON.stringify({ v: 'meta.k8s.io/v1', rv, start })).toString('base64url');
}

function decodeContinue(token: string): { rv: number; start: string } | null {
  try {
    const c = JSON.parse(Buffer.from(token, 'base64url').toString('utf8')) as { v?: unknown; rv?: unknown; start?: unknown };
    if (c.v !== 'meta.k8s.io/v1' || typeof c.rv !== 'number' || c.rv === 0 || typeof c.start !== 'string' || c.start === '') return null;
    return { rv: c.rv, start: c.start };
  } catch {
    return null;
  }
}

function statusBody(code: number, reason: string, message: string, details?: object): object {
  return {
    kind: 'Status',
    apiVersion: 'v1',
    metadata: {},
    status: 'Failure',
    message,
    reason,
    ...(details === undefined ? {} : { details }),
    code,
  };
}

function status(res: ServerResponse, code: number, reason: string, message: string, details?: object): void {
  json(res, code, statusBody(code, reason, message, details));
}

function json(res: ServerResponse, code: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(code, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

/**
 * A Ready, Running pod at `ip` (what a test adds): scheduled (`spec.nodeName`; a Running pod has a node), with
 * `podIP` and `podIPs` as the kubelet reports them.
 */
export function readyPod(
  name: string,
  namespace: string,
  ip: string,
  labels: Record<string, string>,
  uid: string,
): Omit<Pod, 'apiVersion' | 'kind' | 'metadata'> & { metadata: Omit<Pod['metadata'], 'resourceVersion' | 'creationTimestamp'> } {
  return {
    metadata: { name, namespace, uid, labels },
    spec: { nodeName: 'node-1' },
    status: { phase: 'Running', podIP: ip, podIPs: [{ ip }], conditions: [{ type: 'Ready', status: 'True' }] },
  };
}
