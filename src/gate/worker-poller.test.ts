import { pino } from 'pino';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { createInFlightTracker } from '../decide/worker-view.js';
import { tableFromValue, twoRevisionTableValue } from '../policy/testing.js';
import { eligibleFor } from '../decide/pick.js';
import { createEndpointLoad } from './endpoint-load.js';
import { createDevKeyRing, createKeyRing, keyRingIds, type KeyRing } from '../contract/keys.js';
import { signingFetch } from '../contract/testing.js';
import { createWorkerPoller } from './worker-poller.js';

/** The ring the gate and its sidecars hold in these tests. */
const KEYS = createDevKeyRing('worker-poller-tests');

/**
 * A poller over `table` with the tests' timings (1 s interval, `timeoutMs`, 5 s stale), a silent logger and the test
 * ring; `deps.fetch` answers as sidecars holding that ring (signed) unless `sign` is false.
 */
function pollerFor(
  table: ReturnType<typeof tableFromValue>,
  deps: Partial<Parameters<typeof createWorkerPoller>[1]> = {},
  timeoutMs = 200,
  sign = true,
) {
  const fetch = deps.fetch === undefined ? {} : { fetch: sign ? signingFetch(KEYS, deps.fetch) : deps.fetch };
  return createWorkerPoller(
    { intervalMs: 1000, timeoutMs, staleAfterMs: 5000 },
    {
      inFlight: createInFlightTracker(),
      logger: pino({ level: 'silent' }),
      registry: new Registry(),
      keys: () => KEYS,
      table: () => table,
      ...deps,
      ...fetch,
    },
  );
}

/** a-decode's first endpoint polled at its own address, its second with no status URL (opted in as unverified, or not). */
function tableWithStatus(optIn = false) {
  const v = twoRevisionTableValue() as { pools: Array<{ name: string; endpoints: Array<{ address: string; status?: string }> }> };
  const pool = v.pools.find((p) => p.name === 'a-decode')!;
  pool.endpoints = pool.endpoints.map((e, i) =>
    i === 0 ? { ...e, status: `http://${e.address}` } : { address: e.address, ...(optIn ? { unverified: true } : {}) },
  );
  return tableFromValue(v);
}

describe('live worker view', () => {
  const table = tableWithStatus();
  const pool = table.pools.get('a-decode')!;
  const polled = pool.endpoints[0]!;
  const declaredOnly = pool.endpoints[1]!;

  function setup(answer: () => Response | Promise<Response>) {
    let t = 1_000_000;
    const poller = pollerFor(
      table,
      {
        now: () => t,
        fetch: (async () => answer()) as typeof fetch,
      },
      200,
    );
    const view = poller.viewFor(table);
    return {
      poller,
      view,
      advance: (ms: number) => (t += ms),
      /** The polled endpoint as the decision core sees it. */
      polledState: () => view.endpoints('a-decode').find((e) => e.address === polled.address)!,
      /** The polled endpoint as /status shows it. */
      entry: () =>
        poller
          .poolStates()
          .find((p) => p.pool === 'a-decode')!
          .endpoints.find((e) => e.address === polled.address)!,
    };
  }
  const status = (body: object) => new Response(JSON.stringify(body), { status: 200 });

  it('fails closed before the first answer, then routes by what the sidecar reports', async () => {
    const { poller, view } = setup(() => status({ fingerprint: pool.fingerprint, verified: true, draining: false }));
    const before = view.endpoints('a-decode').find((e) => e.address === polled.address)!;
    expect(before.verified).toBe(false);
    expect(before.fingerprint).toBeNull();
    await poller.pollOnce();
    const after = view.endpoints('a-decode').find((e) => e.address === polled.address)!;
    expect(after).toMatchObject({ fingerprint: pool.fingerprint, verified: true, draining: false });
    // An endpoint without a status URL is never routed: nothing vouches for its worker.
    expect(view.endpoints('a-decode').find((e) => e.address === declaredOnly.address)).toMatchObject({
      fingerprint: null,
      verified: false,
    });
  });

  it('routes an endpoint without a status URL only when the table declares it unverified: true', async () => {
    const optedIn = tableWithStatus(true);
    const poller = pollerFor(
      optedIn,
      {
        fetch: (async () => status({ fingerprint: pool.fingerprint, verified: true, draining: false })) as typeof fetch,
      },
      200,
    );
    const view = poller.viewFor(optedIn);
    expect(view.endpoints('a-decode').find((e) => e.address === declaredOnly.address)).toMatchObject({
      fingerprint: pool.fingerprint,
      verified: true,
    });
    const shown = poller
      .poolStates()
      .find((p) => p.pool === 'a-decode')!
      .endpoints.find((e) => e.address === declaredOnly.address)!;
    expect(shown.reasons.join(' ')).toMatch(/routed UNCHECKED \(the table declares unverified: true\)/);
  });

  it('drops an endpoint whose worker was upgraded in place (other fingerprint) or failed its probe', async () => {
    let body: object = { fingerprint: 'f'.repeat(64), verified: true, draining: false };
    const { poller, view } = setup(() => status(body));
    await poller.pollOnce();
    expect(view.endpoints('a-decode').find((e) => e.address === polled.address)!.fingerprint).toBe('f'.repeat(64));
    body = { fingerprint: pool.fingerprint, verified: false, draining: false, reasons: ['tokenizer canary differs'] };
    await poller.pollOnce();
    expect(view.endpoints('a-decode').find((e) => e.address === polled.address)!.verified).toBe(false);
    expect(poller.snapshot()[polled.address]!.reasons).toEqual(['tokenizer canary differs']);
  });

  it('says why an endpoint whose sidecar verifies another fingerprint is unverified (a worker or a declaration changed in place)', async () => {
    const other = 'b'.repeat(64);
    const { poller, polledState, entry } = setup(() => status({ fingerprint: other, verified: true, draining: false, reasons: [] }));
    await poller.pollOnce();
    expect(polledState().verified).toBe(true); // the sidecar's own verdict: the decision core compares fingerprints
    expect(entry().state).toBe('unverified');
    expect(entry().reasons.join('; ')).toContain(
      `the sidecar verifies its worker as fingerprint ${other.slice(0, 12)}…, but the route table declares revision ${pool.revision} as ${pool.fingerprint.slice(0, 12)}…`,
    );
  });

  it("routes an endpoint only when the worker's observed NIXL hash is the revision's prediction, naming both hashes", async () => {
    const rev = table.revisions.get(pool.revision)!;
    const live = (observed: string | null, state = observed === null ? 'none' : 'match') => ({ state, observed, note: null });
    let body: object = { fingerprint: pool.fingerprint, verified: true, draining: false, nixlHash: { live: live(rev.nixlHash) } };
    const { poller, polledState, entry } = setup(() => status(body));
    await poller.pollOnce();
    expect(polledState().verified).toBe(true);
    // The sidecar vouches for its worker, but the hash it observed is not this revision's (e.g. it declares another
    // model.path: same fingerprint, another handshake hash). The gate does not route it, and says why.
    const other = 'a'.repeat(64);
    body = { fingerprint: pool.fingerprint, verified: true, draining: false, nixlHash: { live: live(other, 'match') } };
    await poller.pollOnce();
    expect(polledState().verified).toBe(false);
    expect(entry().state).toBe('unverified');
    expect(entry().reasons[0]).toContain(`serves ${other}, revision ${rev.name} predicts ${rev.nixlHash}`);
    // No hash observed (vLLM before 0.13, or the sidecar's explicit opt-out): the sidecar's verdict stands.
    body = { fingerprint: pool.fingerprint, verified: true, draining: false, nixlHash: { live: live(null) } };
    await poller.pollOnce();
    expect(polledState().verified).toBe(true);
  });

  it('does not route a recorded revision to a sidecar that checks on declaration alone or against other canaries', async () => {
    // The table's trust and canaries are what /status and kvgate_revision_trust promise; a sidecar configured with
    // trust: declared-only, or with another copy of the descriptor, would verify its worker against something else.
    const rev = table.revisions.get(pool.revision)!;
    const canaries = rev.descriptor.canaries!;
    const honest = { fingerprint: pool.fingerprint, verified: true, draining: false, trust: 'recorded', descriptor: rev.descriptor };
    let body: object = honest;
    const { poller, polledState, entry } = setup(() => status(body));
    await poller.pollOnce();
    expect(polledState().verified).toBe(true);

    body = { ...honest, trust: 'declared-only' };
    await poller.pollOnce();
    expect(polledState().verified).toBe(false);
    expect(entry().state).toBe('unverified');
    expect(entry().reasons[0]).toContain(
      `the sidecar at ${polled.address} checks its worker on its declaration alone (trust: declared-only), but the route table routes revision ${rev.name} on recorded canaries`,
    );

    const other = 'b'.repeat(64);
    body = { ...honest, descriptor: { ...rev.descriptor, canaries: { ...canaries, generation: other } } };
    await poller.pollOnce();
    expect(polledState().verified).toBe(false);
    expect(entry().reasons[0]).toContain(
      `the sidecar at ${polled.address} checks its worker against other canary digests than the route table records for revision ${rev.name} (generation: table ${canaries.generation!.slice(0, 12)}…, sidecar ${other.slice(0, 12)}…)`,
    );

    body = honest;
    await poller.pollOnce();
    expect(polledState().verified).toBe(true);
  });

  it("shows the worker a sidecar named (address, engine id, field, both values) on the gate's /status", async () => {
    const mismatch = {
      worker: { address: 'http://127.0.0.1:8000', endpoint: polled.address, engineId: 'eng-7' },
      fields: [{ field: 'canaries.generation', declared: 'aa', observed: 'bb' }],
    };
    const { poller } = setup(() => status({ fingerprint: pool.fingerprint, verified: false, draining: false, reasons: ['x'], mismatch }));
    await poller.pollOnce();
    const entry = poller
      .poolStates()
      .find((p) => p.pool === 'a-decode')!
      .endpoints.find((e) => e.address === polled.address)!;
    expect(entry.state).toBe('unverified');
    expect(entry.named).toBe('worker http://127.0.0.1:8000, engine id eng-7: canaries.generation declared "aa", observed "bb"');
  });

  it('keeps the last good observation through a failed poll, until it goes stale', async () => {
    let up = true;
    const { poller, view, advance } = setup(() =>
      up ? status({ fingerprint: pool.fingerprint, verified: true, draining: true }) : Promise.reject(new Error('ECONNREFUSED')),
    );
    await poller.pollOnce();
    up = false;
    advance(1000);
    await poller.pollOnce();
    const e = view.endpoints('a-decode').find((x) => x.address === polled.address)!;
    expect(e).toMatchObject({ verified: true, draining: true });
    expect(poller.snapshot()[polled.address]!.error).toMatch(/ECONNREFUSED/);
    advance(5000);
    expect(view.endpoints('a-decode').find((x) => x.address === polled.address)!.verified).toBe(false);
    expect(view.ageMs).toBeGreaterThanOrEqual(6000);
  });

  it('the view age is the oldest answer, even while another endpoint has never answered (which counts as staleAfterMs)', async () => {
    // Two polled endpoints in a-decode: the first answers, then stops; the second never answers at all (a listed pod
    // that is not up, a port a network policy blocks). The never-answered one used to pin the age at staleAfterMs,
    // so kvgate_worker_view_age_seconds, and KvgateWorkerViewStale on it, never showed the first going stale.
    const v = twoRevisionTableValue() as { pools: Array<{ name: string; endpoints: Array<{ address: string; status?: string }> }> };
    const p = v.pools.find((x) => x.name === 'a-decode')!;
    p.endpoints = p.endpoints.map((e) => ({ ...e, status: `http://${e.address}` }));
    const twoPolled = tableFromValue(v);
    const [first, never] = twoPolled.pools.get('a-decode')!.endpoints;
    let clock = 1_000_000;
    let up = true;
    const poller = pollerFor(
      twoPolled,
      {
        now: () => clock,
        fetch: (async (url: string | URL) =>
          String(url).startsWith(never!.status!) || !up
            ? Promise.reject(new Error('ECONNREFUSED'))
            : new Response(JSON.stringify({ fingerprint: first!.fingerprint, verified: true, draining: false }))) as typeof fetch,
      },
      200,
    );
    const view = poller.viewFor(twoPolled);
    await poller.pollOnce();
    expect(view.ageMs).toBe(5000); // only the never-answered endpoint: counted as stale, no older
    up = false;
    clock += 60_000;
    await poller.pollOnce();
    expect(view.ageMs).toBe(60_000);
  });

  it('exports endpoints by pool, revision, role and state, zeros included, so "no routable endpoint" can alert', async () => {
    const registry = new Registry();
    let verified = true;
    const poller = createWorkerPoller(
      { intervalMs: 1000, timeoutMs: 200, staleAfterMs: 5000 },
      {
        inFlight: createInFlightTracker(),
        logger: pino({ level: 'silent' }),
        registry,
        keys: () => KEYS,
        table: () => table,
        fetch: signingFetch(KEYS, (async () => status({ fingerprint: pool.fingerprint, verified, draining: false })) as typeof fetch),
      },
    );
    const value = async (labels: Record<string, string>) => {
      const m = (await registry.getSingleMetric('kvgate_worker_endpoints')!.get()).values;
      return m.find((v) => Object.entries(labels).every(([k, x]) => v.labels[k] === x))?.value;
    };
    const decode = { pool: 'a-decode', revision: pool.revision, role: pool.role };
    expect(await value({ ...decode, state: 'unreached' })).toBe(1); // polled endpoint, no answer yet
    expect(await value({ ...decode, state: 'unverified' })).toBe(1); // the one without a status URL: never routed
    expect(await value({ ...decode, state: 'routable' })).toBe(0);
    await poller.pollOnce();
    expect(await value({ ...decode, state: 'routable' })).toBe(1);
    expect(await value({ ...decode, state: 'unreached' })).toBe(0);
    verified = false;
    await poller.pollOnce();
    expect(await value({ ...decode, state: 'unverified' })).toBe(2);
    // Every pool of the table has a series per state, so an absent routable endpoint reads 0, not "no data".
    for (const p of table.pools.values()) expect(await value({ pool: p.name, state: 'routable' })).toBeTypeOf('number');
  });
});

describe('live worker view: the routable index of a large pool', () => {
  it('follows what the sidecars report: rebuilt when an endpoint turns routable, and never trusted alone', async () => {
    const v = twoRevisionTableValue() as { pools: Array<{ name: string; endpoints: Array<{ address: string; status?: string }> }> };
    const pool = v.pools.find((p) => p.name === 'a-decode')!;
    pool.endpoints = Array.from({ length: 200 }, (_, i) => ({
      address: `10.9.${i >> 8}.${i & 255}:8000`,
      status: `http://10.9.${i >> 8}.${i & 255}:9000`,
    }));
    const table = tableFromValue(v);
    const decode = table.pools.get('a-decode')!;
    let verified = false;
    const poller = pollerFor(
      table,
      {
        fetch: (async () => new Response(JSON.stringify({ fingerprint: decode.fingerprint, verified, draining: false }))) as typeof fetch,
      },
      200,
    );
    const view = poller.viewFor(table);
    const pick = () => eligibleFor([decode], view, decode.fingerprint, 'acme', { requestId: 'r' });
    await poller.pollOnce();
    expect(view.routable!('a-decode', decode.fingerprint).addresses).toHaveLength(0);
    expect(pick().candidates).toEqual([]);
    verified = true;
    await poller.pollOnce();
    expect(view.routable!('a-decode', decode.fingerprint).addresses).toHaveLength(200);
    expect(pick().sampledFrom).toBe(200);
    verified = false; // every sidecar now reports a failed probe: the next poll rebuilds, and the pick re-checks anyway
    await poller.pollOnce();
    expect(pick().candidates).toEqual([]);
    expect(view.endpoint!('a-decode', '10.9.0.7:8000')).toMatchObject({ verified: false });
  });
});

describe('live worker view: a discovered pod is routed only when its own sidecar answers', () => {
  const table = tableFromValue(twoRevisionTableValue());
  const pool = table.pools.get('a-decode')!;
  const address = '10.7.0.1:9090';
  function viewWith(reported: string | undefined) {
    const poller = pollerFor(
      table,
      {
        endpointsOf: (p) =>
          p.name === 'a-decode' ? [{ address, status: `http://${address}`, fingerprint: pool.fingerprint, podUid: 'uid-1' }] : [],
        fetch: (async () =>
          new Response(
            JSON.stringify({
              fingerprint: pool.fingerprint,
              verified: true,
              draining: false,
              ...(reported === undefined ? {} : { podUid: reported }),
            }),
          )) as typeof fetch,
      },
      200,
    );
    return { poller, view: poller.viewFor(table) };
  }
  const reasonOf = (poller: ReturnType<typeof createWorkerPoller>) =>
    poller
      .poolStates()
      .find((p) => p.pool === 'a-decode')
      ?.endpoints[0]?.reasons.join('; ');

  it('the pod the watch lists answers: routable', async () => {
    const { poller, view } = viewWith('uid-1');
    await poller.pollOnce();
    expect(view.endpoints('a-decode')[0]).toMatchObject({ address, verified: true });
  });

  it('another pod answers at that IP (reused before the watch saw the deletion): unverified, and /status says why', async () => {
    const { poller, view } = viewWith('uid-2');
    await poller.pollOnce();
    expect(view.endpoints('a-decode')[0]).toMatchObject({ address, verified: false });
    expect(reasonOf(poller)).toMatch(/is pod uid-2, but discovery lists pod uid-1 there \(the pod IP was reused\)/);
  });

  it('a sidecar that does not report its pod UID is not trusted for a discovered pod, with the fix', async () => {
    const { poller, view } = viewWith(undefined);
    await poller.pollOnce();
    expect(view.endpoints('a-decode')[0]).toMatchObject({ verified: false });
    expect(reasonOf(poller)).toMatch(/does not report its pod UID.*--pod-uid/);
  });

  it('a terminating pod is still polled and shown apart (for the legs planned there), never among the endpoints', async () => {
    let polls = 0;
    const poller = pollerFor(
      table,
      {
        endpointsOf: () => [],
        terminatingOf: (p) =>
          p.name === 'a-decode' ? [{ address, status: `http://${address}`, fingerprint: pool.fingerprint, podUid: 'uid-1' }] : [],
        fetch: (async () => {
          polls++;
          return new Response(JSON.stringify({ fingerprint: pool.fingerprint, verified: true, draining: false, podUid: 'uid-1' }));
        }) as typeof fetch,
      },
      200,
    );
    const view = poller.viewFor(table);
    await poller.pollOnce();
    expect(polls).toBe(1);
    expect(view.endpoints('a-decode')).toEqual([]);
    expect(view.terminating!('a-decode')).toMatchObject([{ address, fingerprint: pool.fingerprint, verified: true }]);
    expect(eligibleFor([pool], view, pool.fingerprint, 'acme', { requestId: 'r' }).candidates).toEqual([]);
  });

  it('an endpoint that leaves the pool (pod deleted) leaves the in-flight counts too: nothing stays counted for it', async () => {
    let t = 1_000_000;
    const load = createEndpointLoad({ now: () => t, bridgeTtlMs: () => 30_000 });
    let listed = true;
    const poller = createWorkerPoller(
      { intervalMs: 1000, timeoutMs: 200, staleAfterMs: 5000 },
      {
        inFlight: load,
        logger: pino({ level: 'silent' }),
        registry: new Registry(),
        keys: () => KEYS,
        table: () => table,
        now: () => t,
        endpointsOf: (p) =>
          p.name === 'a-decode' && listed ? [{ address, status: `http://${address}`, fingerprint: pool.fingerprint, podUid: 'uid-1' }] : [],
        fetch: signingFetch(
          KEYS,
          (async () =>
            new Response(
              JSON.stringify({
                fingerprint: pool.fingerprint,
                verified: true,
                draining: false,
                podUid: 'uid-1',
                requests: { inFlight: ['r1', 'r2'], received: ['r1', 'r2'] },
              }),
            )) as typeof fetch,
        ),
      },
    );
    await poller.pollOnce();
    load.release(load.acquire(address, 'r3')); // routed, its stream ended before any poll listed it
    expect(load.inFlight(address)).toBe(3);
    listed = false; // the pod is deleted: discovery no longer lists it, nothing polls it any more
    t += 1000;
    await poller.pollOnce();
    t += 60_000; // long after the bridge lifetime
    expect(load.snapshot()).toEqual(new Map());
    expect(load.inFlight(address)).toBe(0);
  });

  it('an answer too large for a status (whatever holds the IP now) is refused unread past the limit, not buffered whole', async () => {
    let pulled = 0;
    const chunk = new TextEncoder().encode(`"${'x'.repeat(64 * 1024 - 2)}",`);
    const poller = pollerFor(
      table,
      {
        endpointsOf: (p) =>
          p.name === 'a-decode' ? [{ address, status: `http://${address}`, fingerprint: pool.fingerprint, podUid: 'uid-1' }] : [],
        fetch: (async () => {
          let sent = 0;
          const body = new ReadableStream<Uint8Array>({
            pull(c) {
              if (sent === 0) c.enqueue(new TextEncoder().encode('{"fingerprint":"x","verified":true,"pad":['));
              if (sent++ >= 1024) {
                c.enqueue(new TextEncoder().encode('""]}'));
                c.close();
                return;
              }
              pulled += chunk.length;
              c.enqueue(chunk);
            },
          });
          return new Response(body, { status: 200, headers: { 'content-type': 'application/json' } });
        }) as typeof fetch,
      },
      5000,
      false, // refused for its size before any signature is looked at
    );
    await poller.pollOnce(); // 64 MiB on offer
    expect(pulled).toBeLessThan(8 * 1024 * 1024);
    expect(poller.snapshot()[`${address}|uid-1`]).toMatchObject({ verified: false });
    expect(reasonOf(poller)).toMatch(/larger than/);
  });
});

describe('a sidecar of the other role', () => {
  it('is never routed by the pool: a decode sidecar found by a prefill pool would take prefill legs as whole requests', async () => {
    const v = twoRevisionTableValue() as { pools: Array<{ name: string; endpoints: Array<{ address: string; status?: string }> }> };
    const prefill = v.pools.find((p) => p.name === 'a-prefill')!;
    prefill.endpoints = [{ address: prefill.endpoints[0]!.address, status: `http://${prefill.endpoints[0]!.address}` }];
    const table = tableFromValue(v);
    const fp = table.pools.get('a-prefill')!.fingerprint;
    let role = 'decode';
    const poller = pollerFor(
      table,
      {
        fetch: (async () => new Response(JSON.stringify({ fingerprint: fp, verified: true, draining: false, role }))) as typeof fetch,
      },
      200,
    );
    await poller.pollOnce();
    const view = poller.viewFor(table);
    expect(view.endpoints('a-prefill')[0]).toMatchObject({ verified: false });
    const shown = poller.poolStates().find((p) => p.pool === 'a-prefill')!.endpoints[0]!;
    expect(shown.state).toBe('unverified');
    expect(shown.reasons.join(' ')).toContain('serves the decode role, and pool a-prefill is a prefill pool');
    role = 'prefill';
    await poller.pollOnce();
    expect(poller.viewFor(table).endpoints('a-prefill')[0]).toMatchObject({ verified: true });
  });
});

describe('pollOnce while a round runs', () => {
  it('answers after a round that started after the call, not the one already reading (which may have seen the old answer)', async () => {
    const table = tableWithStatus();
    const pool = table.pools.get('a-decode')!;
    let answer = { fingerprint: pool.fingerprint, verified: true, draining: false };
    let release: (() => void) | undefined;
    let calls = 0;
    const poller = pollerFor(
      table,
      {
        fetch: (async (url: string) => {
          const body = JSON.stringify(answer); // read now, answered later: a round in flight has the old answer
          if (!url.includes(pool.endpoints[0]!.address)) return new Response(body);
          calls++;
          if (calls === 1) await new Promise<void>((r) => (release = r));
          return new Response(body);
        }) as typeof fetch,
      },
      500,
    );
    const first = poller.pollOnce();
    await new Promise((r) => setImmediate(r));
    answer = { ...answer, verified: false }; // the sidecar changed while the first round was reading
    const second = poller.pollOnce();
    const third = poller.pollOnce();
    expect(third).toBe(second); // one follow-up round for every caller meanwhile
    release!();
    await first;
    await second;
    expect(calls).toBe(2);
    expect(poller.viewFor(table).endpoints('a-decode')[0]).toMatchObject({ verified: false });
  });
});

describe('signed status answers', () => {
  const table = tableWithStatus();
  const pool = table.pools.get('a-decode')!;
  const address = pool.endpoints[0]!.address;
  const answer = { fingerprint: pool.fingerprint, verified: true, draining: false };

  /** A poller whose sidecar answers through `respond` (given the poll's request), with its logs and metrics. */
  function setup(respond: (init: RequestInit | undefined) => Response | Promise<Response>, gateKeys = () => KEYS) {
    const lines: Record<string, unknown>[] = [];
    const registry = new Registry();
    const poller = pollerFor(
      table,
      {
        keys: gateKeys,
        registry,
        logger: pino({ level: 'info' }, { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) }),
        // The table's other polled endpoints answer as their sidecars do: only this one is under test.
        fetch: (async (url: string, init?: RequestInit) => (url.includes(address) ? respond(init) : signed()(url, init))) as typeof fetch,
      },
      200,
      false,
    );
    const view = poller.viewFor(table);
    return {
      poller,
      verified: () => view.endpoints('a-decode').find((e) => e.address === address)!.verified,
      entry: () =>
        poller
          .poolStates()
          .find((p) => p.pool === 'a-decode')!
          .endpoints.find((e) => e.address === address)!,
      warnings: () => lines.filter((l) => l['msg'] === 'worker status answer refused: signature'),
      polls: async (result: string) =>
        (await registry.getSingleMetric('kvgate_worker_status_polls_total')!.get()).values.find((v) => v.labels['result'] === result)
          ?.value,
    };
  }
  const signed = (keys = KEYS) => signingFetch(keys, (async () => new Response(JSON.stringify(answer))) as typeof fetch);

  it('routes on an answer signed for this poll; an unsigned copy of it is unverified, counted and warned once', async () => {
    let sign = true;
    const t = setup((init) => (sign ? signed()('http://x', init) : new Response(JSON.stringify(answer))));
    await t.poller.pollOnce();
    expect(t.verified()).toBe(true);
    expect(await t.polls('unsigned')).toBe(0); // every result is exported from the start
    sign = false;
    for (let i = 0; i < 3; i++) await t.poller.pollOnce();
    expect(t.verified()).toBe(false);
    expect(t.entry().state).toBe('unverified');
    expect(t.entry().reasons.join('; ')).toMatch(
      /the answer is not signed \(no x-kvgate-status-signature\).*upgrade sidecars before gates/,
    );
    expect(await t.polls('unsigned')).toBe(3);
    expect(t.warnings()).toHaveLength(1);
    expect(t.warnings()[0]).toMatchObject({ endpoint: address, reason: 'missing', level: 40 });
    sign = true;
    await t.poller.pollOnce();
    expect(t.verified()).toBe(true);
    expect(t.poller.snapshot()[address]).toMatchObject({ signedBy: 'dev-insecure' });
  });

  it('a replay of a real signed answer (another poll nonce) is unverified: bad_signature', async () => {
    let recorded: { body: ArrayBuffer; headers: Headers } | undefined;
    const t = setup(async (init) => {
      if (recorded !== undefined) return new Response(recorded.body, { headers: recorded.headers });
      const res = await signed()('http://x', init);
      recorded = { body: await res.clone().arrayBuffer(), headers: res.headers };
      return res;
    });
    await t.poller.pollOnce();
    expect(t.verified()).toBe(true);
    await t.poller.pollOnce();
    expect(t.verified()).toBe(false);
    expect(t.entry().reasons.join('; ')).toMatch(/does not verify under key id dev-insecure for this poll's nonce and body: replayed/);
    expect(await t.polls('bad_signature')).toBe(1);
    expect(t.warnings()[0]).toMatchObject({ reason: 'bad_signature' });
  });

  it('an answer altered after signing is unverified before its JSON is trusted', async () => {
    const t = setup(async (init) => {
      const honest = signingFetch(KEYS, (async () => new Response(JSON.stringify({ ...answer, verified: false }))) as typeof fetch);
      const res = await honest('http://x', init);
      // The sidecar signed "verified": false; flipped on the way.
      const text = (await res.text()).replace('"verified":false', '"verified":true');
      expect(text).toContain('"verified":true');
      return new Response(text, { headers: res.headers });
    });
    await t.poller.pollOnce();
    expect(t.verified()).toBe(false);
    expect(t.poller.snapshot()[address]).toMatchObject({ fingerprint: null, signatureProblem: 'bad_signature' });
  });

  it('a malformed signature or a key id the gate lacks is refused with a reason naming it', async () => {
    let header = 'not a signature';
    const t = setup(async () => new Response(JSON.stringify(answer), { headers: { 'x-kvgate-status-signature': header } }));
    await t.poller.pollOnce();
    expect(t.entry().reasons.join('; ')).toMatch(/is not <key id>\.<43 base64url characters>/);
    expect(await t.polls('malformed_signature')).toBe(1);
    header = `${'k'.repeat(64)}.${'A'.repeat(400)}`; // oversized: refused unread, the same way
    await t.poller.pollOnce();
    expect(await t.polls('malformed_signature')).toBe(2);
    expect(t.warnings()).toHaveLength(1); // the same reason: no second warning
    const other = createKeyRingWith('k9', createDevKeyRing('another-fleet'));
    const t2 = setup((init) => signingFetch(other, (async () => new Response(JSON.stringify(answer))) as typeof fetch)('http://x', init));
    await t2.poller.pollOnce();
    expect(t2.verified()).toBe(false);
    expect(t2.entry().reasons.join('; ')).toMatch(/signed with key id k9, which this gate does not hold/);
    expect(await t2.polls('unknown_key')).toBe(1);
  });

  it('verifies under the ring in use now: a gate reloaded with the sidecar new current id verifies its answers', async () => {
    const sidecar = createKeyRingWith('k2', KEYS);
    let gate = KEYS;
    const t = setup(
      (init) => signingFetch(sidecar, (async () => new Response(JSON.stringify(answer))) as typeof fetch)('http://x', init),
      () => gate,
    );
    await t.poller.pollOnce();
    expect(t.entry().reasons.join('; ')).toContain('key id k2');
    gate = sidecar; // the key file reloaded (src/key-store.ts hands the poller the new ring)
    await t.poller.pollOnce();
    expect(t.verified()).toBe(true);
    expect(t.poller.snapshot()[address]).toMatchObject({ signedBy: 'k2' });
  });
});

/** `base`'s key ids and secrets plus `id` (a fresh secret), signing with `id`: step 2 of a rotation. */
function createKeyRingWith(id: string, base: KeyRing): KeyRing {
  const ids = keyRingIds(base);
  return createKeyRing({
    keys: [...ids.map((k) => ({ id: k, secret: base.secret(k)! })), { id, secret: Buffer.alloc(32, id.charCodeAt(1)) }],
    currentId: id,
    saltSecret: base.saltSecret,
  });
}
