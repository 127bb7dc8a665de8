/**
 * The test API server against what kube-apiserver does (the upstream file and version are cited in the sources):
 * label selector syntax and its 400, the DELETED a selector watch sends for an object that stops matching.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { parseLabelSelector } from './selector.js';
import { readyPod, startKubeApiServer, type KubeApiServer } from './server.js';

const NS = 'ns';
let api: KubeApiServer | undefined;
afterEach(async () => {
  await api?.close();
  api = undefined;
});

async function get(path: string): Promise<{ status: number; body: string }> {
  const res = await fetch(`${api!.url}${path}`, { headers: { authorization: 'Bearer test-token' } });
  return { status: res.status, body: await res.text() };
}

/** Open a pod watch from now and return once its headers are in (the server flushes them at once). */
async function openWatch(ac: AbortController): Promise<Response> {
  return fetch(`${api!.url}/api/v1/namespaces/${NS}/pods?watch=true&resourceVersion=${api!.store.resourceVersion}`, {
    headers: { authorization: 'Bearer test-token' },
    signal: ac.signal,
  });
}

/** Until the server counts an open watch (one started without awaiting its headers). */
async function untilWatchOpen(): Promise<void> {
  for (let i = 0; i < 200 && api!.openWatches() === 0; i++) await new Promise((r) => setTimeout(r, 5));
}

/** Read watch lines until `n` arrived, then drop the connection. */
async function watchLines(path: string, n: number): Promise<{ type: string; object: Record<string, unknown> }[]> {
  const ac = new AbortController();
  const res = await fetch(`${api!.url}${path}`, { headers: { authorization: 'Bearer test-token' }, signal: ac.signal });
  const out: { type: string; object: Record<string, unknown> }[] = [];
  const decoder = new TextDecoder();
  let buf = '';
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    buf += decoder.decode(chunk, { stream: true });
    let nl: number;
    while ((nl = buf.indexOf('\n')) >= 0) {
      out.push(JSON.parse(buf.slice(0, nl)) as { type: string; object: Record<string, unknown> });
      buf = buf.slice(nl + 1);
    }
    if (out.length >= n) break;
  }
  ac.abort();
  return out;
}

describe('label selectors (apimachinery labels/selector.go, v1.33)', () => {
  const m = (sel: string, labels: Record<string, string>): boolean => parseLabelSelector(sel)(labels);

  it('matches equality, inequality, set-based, existence and numeric requirements as upstream does', () => {
    expect(m('', {})).toBe(true);
    expect(m('app=x', { app: 'x' })).toBe(true);
    expect(m('app==x', { app: 'y' })).toBe(false);
    // `!=` and `notin` match a pod that lacks the key altogether.
    expect(m('app!=x', {})).toBe(true);
    expect(m('env notin (a,b)', {})).toBe(true);
    expect(m('env notin (a,b)', { env: 'a' })).toBe(false);
    expect(m('env in (a, b)', { env: 'b' })).toBe(true);
    expect(m('env in (a,b)', {})).toBe(false);
    expect(m('env', { env: '' })).toBe(true);
    expect(m('!env', { env: '' })).toBe(false);
    expect(m('!env,app=x', { app: 'x' })).toBe(true);
    // An empty value is a value: `a=` needs the label present and empty; `a in ()` is `a in ("")`.
    expect(m('a=', { a: '' })).toBe(true);
    expect(m('a=', {})).toBe(false);
    expect(m('a in ()', { a: '' })).toBe(true);
    // `in`/`notin` are identifiers where a value is expected.
    expect(m('in in (in)', { in: 'in' })).toBe(true);
    expect(m('gpu>2', { gpu: '4' })).toBe(true);
    expect(m('gpu<2', { gpu: 'x' })).toBe(false);
    expect(m('kvgate.io/revision=llama-a,app=llama', { app: 'llama', 'kvgate.io/revision': 'llama-a' })).toBe(true);
  });

  it('refuses what kube-apiserver refuses', () => {
    for (const bad of [
      'a=b,', // a comma needs a requirement after it
      ',a=b',
      'a=b c',
      '!a=b', // `!key` takes no operator
      'a in (x',
      'a in x',
      'a in (x) y',
      'a>x', // gt/lt take an integer
      'a>',
      'rev=a@b', // not a label value
      'rev=a/b',
      'rev=-a',
      `rev=${'a'.repeat(64)}`, // 63 at most
      'a/b/c=x', // at most one prefix
      '/a=x',
      'Example.com/a=x', // the prefix is a lowercase DNS subdomain
      `${'a'.repeat(64)}=x`,
      '=x',
    ])
      expect(() => parseLabelSelector(bad), bad).toThrow();
    expect(() => parseLabelSelector(`rev=${'a'.repeat(63)}`)).not.toThrow();
  });

  it('answers 400 BadRequest with a Status for an invalid selector, on a list and on a watch', async () => {
    api = await startKubeApiServer();
    for (const watch of ['', '&watch=true']) {
      const r = await get(`/api/v1/namespaces/${NS}/pods?labelSelector=${encodeURIComponent('kvgate.io/revision=llama@1')}${watch}`);
      expect(r.status).toBe(400);
      expect(JSON.parse(r.body)).toMatchObject({ kind: 'Status', status: 'Failure', reason: 'BadRequest', code: 400 });
    }
  });
});

describe('selector watches (apiserver pkg/storage/cacher/cache_watcher.go, v1.33)', () => {
  it('an object that stops matching is a DELETED with its previous content and the change resourceVersion', async () => {
    api = await startKubeApiServer();
    api.store.create(readyPod('a-0', NS, '10.0.0.5', { app: 'x' }, 'uid-1'));
    const rv = api.store.resourceVersion;
    const lines = watchLines(`/api/v1/namespaces/${NS}/pods?watch=true&resourceVersion=${rv}&labelSelector=app%3Dx`, 1);
    api.store.update(NS, 'a-0', (p) => {
      p.metadata.labels = { app: 'y' };
      p.status.conditions = [{ type: 'Ready', status: 'False' }];
    });
    const [ev] = await lines;
    expect(ev!.type).toBe('DELETED');
    const obj = ev!.object as { metadata: { labels: Record<string, string>; resourceVersion: string }; status: { conditions: unknown } };
    expect(obj.metadata.labels).toEqual({ app: 'x' });
    expect(obj.status.conditions).toEqual([{ type: 'Ready', status: 'True' }]);
    expect(obj.metadata.resourceVersion).toBe(String(api.store.resourceVersion));
  });
});

describe('a restarted API server (pkg/storage/cacher/watch_cache.go, v1.33)', () => {
  it('its watch cache starts at its own list: a watch from before it is 410 Expired, one from its list resumes', async () => {
    api = await startKubeApiServer();
    api.store.create(readyPod('a-0', NS, '10.0.0.5', { app: 'x' }, 'uid-1'));
    const before = api.store.resourceVersion;
    await api.stop();
    api.store.create(readyPod('a-1', NS, '10.0.0.6', { app: 'x' }, 'uid-2'));
    await api.start();
    const [ev] = await watchLines(`/api/v1/namespaces/${NS}/pods?watch=true&resourceVersion=${before}`, 1);
    expect(ev).toMatchObject({ type: 'ERROR', object: { kind: 'Status', code: 410, reason: 'Expired' } });
    const now = api.store.resourceVersion;
    const lines = watchLines(`/api/v1/namespaces/${NS}/pods?watch=true&resourceVersion=${now}`, 1);
    api.store.delete(NS, 'a-0');
    expect((await lines)[0]!.type).toBe('DELETED');
  });

  for (const version of ['1.30', '1.33'] as const) {
    it(`v${version}: a watch while the watch cache initializes is ${version === '1.33' ? 'refused with 429' : 'held until it is ready'}`, async () => {
      api = await startKubeApiServer({ version });
      await api.stop();
      await api.start({ watchCacheInitializing: true });
      const rv = api.store.resourceVersion;
      expect((await get(`/api/v1/namespaces/${NS}/pods`)).status).toBe(200); // lists come from etcd meanwhile
      if (version === '1.33') {
        const r = await get(`/api/v1/namespaces/${NS}/pods?watch=true&resourceVersion=${rv}`);
        expect(r.status).toBe(429);
        expect(JSON.parse(r.body)).toMatchObject({ kind: 'Status', reason: 'TooManyRequests', code: 429 });
      } else {
        const lines = watchLines(`/api/v1/namespaces/${NS}/pods?watch=true&resourceVersion=${rv}`, 1);
        while ((api.counts()['held'] ?? 0) < 1) await new Promise((r) => setTimeout(r, 5));
        api.watchCacheReady();
        api.store.create(readyPod('a-0', NS, '10.0.0.5', { app: 'x' }, 'uid-1'));
        expect((await lines)[0]!.type).toBe('ADDED');
      }
    });
  }
});

describe('pod deletion (pkg/registry/core/pod/strategy.go CheckGracefulDelete, apiserver registry/rest/delete.go, v1.33)', () => {
  it('a scheduled, running pod is marked first (MODIFIED with deletionTimestamp), removed on the final delete', async () => {
    api = await startKubeApiServer();
    api.store.create(readyPod('a-0', NS, '10.0.0.5', { app: 'x' }, 'uid-1'));
    const rv = api.store.resourceVersion;
    const lines = watchLines(`/api/v1/namespaces/${NS}/pods?watch=true&resourceVersion=${rv}`, 3);
    api.store.deletePod(NS, 'a-0', { nowMs: Date.parse('2026-01-01T00:00:00Z') });
    api.store.deletePod(NS, 'a-0'); // a second delete with no shorter grace changes nothing
    expect(api.store.get(NS, 'a-0')?.metadata).toMatchObject({ deletionTimestamp: '2026-01-01T00:00:30Z', deletionGracePeriodSeconds: 30 });
    api.store.deletePod(NS, 'a-0', { gracePeriodSeconds: 0 });
    const evs = await lines;
    expect(evs.map((e) => e.type)).toEqual(['MODIFIED', 'MODIFIED', 'DELETED']);
    expect(evs[2]!.object).toMatchObject({ metadata: { deletionGracePeriodSeconds: 0 }, status: { podIP: '10.0.0.5' } });
  });

  it('an unscheduled or terminal pod is deleted at once, still with the update first', async () => {
    api = await startKubeApiServer();
    const pending = readyPod('p-0', NS, '10.0.0.5', { app: 'x' }, 'uid-1');
    pending.spec = {};
    pending.status = { phase: 'Pending', conditions: [] };
    api.store.create(pending);
    const done = readyPod('d-0', NS, '10.0.0.6', { app: 'x' }, 'uid-2');
    done.status.phase = 'Failed';
    api.store.create(done);
    const rv = api.store.resourceVersion;
    const lines = watchLines(`/api/v1/namespaces/${NS}/pods?watch=true&resourceVersion=${rv}`, 4);
    api.store.deletePod(NS, 'p-0');
    api.store.deletePod(NS, 'd-0');
    expect((await lines).map((e) => e.type)).toEqual(['MODIFIED', 'DELETED', 'MODIFIED', 'DELETED']);
  });
});

describe('paginated lists (pkg/storage/etcd3/store.go, pkg/storage/continue.go, v1.33)', () => {
  type List = {
    metadata: { resourceVersion: string; continue?: string; remainingItemCount?: number };
    items: { metadata: { name: string } }[];
  };
  const names = (l: List) => l.items.map((p) => p.metadata.name);

  it('pages in key order at one resourceVersion: a continued page does not see later changes', async () => {
    api = await startKubeApiServer();
    for (const n of ['c', 'a', 'b']) api.store.create(readyPod(n, NS, '10.0.0.5', { app: 'x' }, `uid-${n}`));
    const first = JSON.parse((await get(`/api/v1/namespaces/${NS}/pods?limit=2`)).body) as List;
    expect(names(first)).toEqual(['a', 'b']);
    expect(first.metadata.remainingItemCount).toBe(1);
    api.store.create(readyPod('d', NS, '10.0.0.6', { app: 'x' }, 'uid-d'));
    api.store.deletePod(NS, 'c', { gracePeriodSeconds: 0 });
    const second = JSON.parse((await get(`/api/v1/namespaces/${NS}/pods?limit=2&continue=${first.metadata.continue}`)).body) as List;
    expect(names(second)).toEqual(['c']); // the snapshot of the first page
    expect(second.metadata.resourceVersion).toBe(first.metadata.resourceVersion);
    expect(second.metadata.continue).toBeUndefined();
    const sel = JSON.parse((await get(`/api/v1/namespaces/${NS}/pods?limit=1&labelSelector=app%3Dx`)).body) as List;
    expect(sel.metadata.remainingItemCount).toBeUndefined(); // not counted under a selector
  });

  it('a continue token whose resourceVersion was compacted is 410 Expired with a token that continues at the latest', async () => {
    api = await startKubeApiServer();
    for (const n of ['a', 'b']) api.store.create(readyPod(n, NS, '10.0.0.5', { app: 'x' }, `uid-${n}`));
    const first = JSON.parse((await get(`/api/v1/namespaces/${NS}/pods?limit=1`)).body) as List;
    api.store.create(readyPod('c', NS, '10.0.0.6', { app: 'x' }, 'uid-c'));
    api.store.compact();
    const r = await get(`/api/v1/namespaces/${NS}/pods?limit=1&continue=${first.metadata.continue}`);
    expect(r.status).toBe(410);
    const st = JSON.parse(r.body) as { reason: string; code: number; metadata: { continue: string } };
    expect(st).toMatchObject({ kind: 'Status', reason: 'Expired', code: 410 });
    const rest = JSON.parse((await get(`/api/v1/namespaces/${NS}/pods?continue=${st.metadata.continue}`)).body) as List;
    expect(names(rest)).toEqual(['b', 'c']); // inconsistent: the latest state from where the first page stopped
    expect((await get(`/api/v1/namespaces/${NS}/pods?continue=${first.metadata.continue}&resourceVersion=5`)).status).toBe(400);
  });
});

describe('bookmarks (pkg/storage/cacher/cache_watcher.go nextBookmarkTime, v1.33)', () => {
  it('a watch that allows bookmarks gets one 2 s before its timeout, carrying only the resourceVersion, then ends', async () => {
    api = await startKubeApiServer({ bookmarkIntervalMs: 0 });
    api.store.create(readyPod('a-0', NS, '10.0.0.5', { app: 'x' }, 'uid-1'));
    const rv = api.store.resourceVersion;
    const lines = await watchLines(
      `/api/v1/namespaces/${NS}/pods?watch=true&resourceVersion=${rv}&allowWatchBookmarks=true&timeoutSeconds=3`,
      1,
    );
    expect(lines).toEqual([{ type: 'BOOKMARK', object: { kind: 'Pod', apiVersion: 'v1', metadata: { resourceVersion: String(rv) } } }]);
  });
});

describe('watch from a resourceVersion (pkg/storage/cacher/cache_watcher.go process, v1.33)', () => {
  it('sends only events newer than it, also when it is ahead of the store', async () => {
    api = await startKubeApiServer();
    const ahead = api.store.resourceVersion + 2;
    const lines = watchLines(`/api/v1/namespaces/${NS}/pods?watch=true&resourceVersion=${ahead}`, 1);
    for (const n of ['a', 'b', 'c']) api.store.create(readyPod(n, NS, '10.0.0.5', { app: 'x' }, `uid-${n}`));
    const [ev] = await lines;
    expect(ev).toMatchObject({ type: 'ADDED', object: { metadata: { name: 'c' } } });
  });
});

describe('RBAC (apiserver pkg/endpoints/filters/authorization.go)', () => {
  it('authorizes a request as it arrives: a watch open before the Role went keeps running, the next list and watch are 403', async () => {
    api = await startKubeApiServer({ allowedNamespaces: [NS] });
    const rv = api.store.resourceVersion;
    const lines = watchLines(`/api/v1/namespaces/${NS}/pods?watch=true&resourceVersion=${rv}`, 1);
    await untilWatchOpen();
    expect(api.openWatches()).toBe(1);
    api.setAllowedNamespaces([]);
    api.store.create(readyPod('a-0', NS, '10.0.0.5', { app: 'x' }, 'uid-1'));
    expect(await lines).toMatchObject([{ type: 'ADDED', object: { metadata: { name: 'a-0' } } }]);
    for (const watch of ['', `&watch=true&resourceVersion=${rv}`]) {
      const r = await get(`/api/v1/namespaces/${NS}/pods?labelSelector=app%3Dx${watch}`);
      expect(r.status).toBe(403);
      expect(JSON.parse(r.body)).toMatchObject({ kind: 'Status', reason: 'Forbidden', code: 403 });
    }
  });
});

describe('watch answers and ERROR events (pkg/endpoints/handlers/watch.go HandleHTTP; pkg/storage/cacher/cacher.go newErrWatcher)', () => {
  it('answers a watch 200 with its headers at once, before any event (HandleHTTP flushes after WriteHeader)', async () => {
    api = await startKubeApiServer({ bookmarkIntervalMs: 0 });
    const ac = new AbortController();
    // fetch resolves on the headers: with nothing to send yet, it resolves only if they were flushed.
    const res = await openWatch(ac);
    expect(res.status).toBe(200);
    expect(api.openWatches()).toBe(1);
    ac.abort();
  });

  it('setWatchError: every new watch is 200, one ERROR event with the Status, then the end; lists are not affected', async () => {
    api = await startKubeApiServer();
    const status = { code: 500, reason: 'InternalError', message: 'Internal error occurred: etcdserver: no leader' };
    api.setWatchError(status);
    const res = await get(`/api/v1/namespaces/${NS}/pods?watch=true&resourceVersion=${api.store.resourceVersion}`);
    expect(res.status).toBe(200);
    const lines = res.body.trim().split('\n');
    expect(lines.map((l) => JSON.parse(l) as unknown)).toEqual([
      { type: 'ERROR', object: { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', ...status } },
    ]);
    expect(api.counts()['watchError']).toBe(1);
    expect((await get(`/api/v1/namespaces/${NS}/pods`)).status).toBe(200);
    api.setWatchError(null);
    const ok = watchLines(`/api/v1/namespaces/${NS}/pods?watch=true&resourceVersion=${api.store.resourceVersion}`, 1);
    await untilWatchOpen();
    api.store.create(readyPod('a-0', NS, '10.0.0.5', { app: 'x' }, 'uid-1'));
    expect(await ok).toMatchObject([{ type: 'ADDED' }]);
  });

  it('errorWatches: an open watch gets one ERROR event, then its stream ends (the etcd watcher failing mid-watch)', async () => {
    api = await startKubeApiServer({ bookmarkIntervalMs: 0 });
    const ac = new AbortController();
    const res = await openWatch(ac);
    expect(api.openWatches()).toBe(1);
    api.errorWatches({ code: 500, reason: 'InternalError', message: 'Internal error occurred: failed to decode' });
    const body = await res.text(); // the whole stream: it ended
    expect(
      body
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as unknown),
    ).toEqual([
      {
        type: 'ERROR',
        object: expect.objectContaining({
          kind: 'Status',
          code: 500,
          reason: 'InternalError',
          message: 'Internal error occurred: failed to decode',
        }),
      },
    ]);
    expect(api.openWatches()).toBe(0);
  });
});
