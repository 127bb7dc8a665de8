/**
 * Prefill KV left behind (prefill-release.ts): a request that ends after a successful prefill leg without the decode
 * worker receiving it must not leave the prefill worker holding its blocks to the abort timeout (480 s before leases)
 * or the lease. Simulated workers model what frees them (testbed/sim: a notification after a read, or without one for
 * a request vLLM 0.21+ refuses before admission); the tests look at what the prefill worker still holds.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { metricValue, postJson, scrape, startTestSim } from '../../testbed/sim/testing.js';
import type { SimServer } from '../../testbed/sim/server.js';
import type { FetchFn } from './http-io.js';
import { planRelease, RELEASE_MODEL } from './prefill-release.js';
import { bound, contractFor, endpointOf, sidecarConfigFor, startTestSidecar, type TestSidecar } from './testing.js';

const MODEL = '/models/acme-llama-3-8b';
const PROMPT = 'The quick brown fox jumps over the lazy dog. Kubernetes operators reconcile state.';
/** vLLM 0.21 with connector v13: leases, and a refused decode request notifies the prefill worker (PR #41269). */
const V021 = { engine: { version: '0.21.0' }, connector: { version: 13 } };

const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  for (const x of open.splice(0).reverse()) await x.close();
});
const track = <T extends { close(): Promise<void> }>(x: T): T => {
  open.push(x);
  return x;
};

interface Pair {
  readonly prefillSim: SimServer;
  readonly decodeSim: SimServer;
  readonly P: TestSidecar;
  readonly D: TestSidecar;
}

/** P and D sims with their sidecars; `wrap` wraps the decode sidecar's fetch. */
async function pair(
  descriptor: Record<string, unknown> = {},
  sim: Record<string, unknown> = {},
  wrap?: (f: FetchFn) => FetchFn,
): Promise<Pair> {
  const prefillSim = track(await startTestSim(descriptor, sim));
  const decodeSim = track(await startTestSim(descriptor, sim));
  const P = await startTestSidecar(sidecarConfigFor(prefillSim, 'prefill'));
  track(P.sidecar);
  const D = await startTestSidecar(sidecarConfigFor(decodeSim, 'decode'), undefined, wrap);
  track(D.sidecar);
  return { prefillSim, decodeSim, P, D };
}

/** What the prefill worker holds for requests (its sidecar's engine canary holds a block of its own, by design). */
const held = (sim: SimServer) => sim.heldKv().filter((h) => !h.requestId.includes('kvgate-engine-canary'));

let n = 0;
const completion = (extra: Record<string, unknown> = {}) => ({ model: MODEL, prompt: PROMPT, max_tokens: 12, temperature: 0, ...extra });
const releases = async (t: TestSidecar, labels: Record<string, string>) =>
  metricValue(await scrape(t.sidecar), 'kvgate_sidecar_prefill_kv_releases_total', labels);

/** The request's outcome line is written after its handler returned, so after any release it made. */
async function done(t: TestSidecar, requestId: string): Promise<Record<string, unknown>[]> {
  for (let i = 0; i < 2000; i++) {
    const mine = t.lines.filter((l) => l['request_id'] === requestId);
    if (mine.some((l) => l['msg'] === 'request done')) return mine;
    await new Promise((r) => setTimeout(r, 5));
  }
  throw new Error(`request ${requestId} never finished`);
}

describe('planRelease', () => {
  const params = { remote_engine_id: 'e' };
  it('notifies without a read where vLLM does (0.21+), reads only verified parameters before, and never trusts unattested ones', () => {
    expect(planRelease({ authentic: params, workerTrusted: true, notifiesOnRefusal: true })).toEqual({ via: 'rejected_request', params });
    expect(planRelease({ verified: params, authentic: params, workerTrusted: true, notifiesOnRefusal: false })).toEqual({
      via: 'handover',
      params,
    });
    expect(planRelease({ authentic: params, workerTrusted: true, notifiesOnRefusal: false }).via).toBe('none');
    expect(planRelease({ workerTrusted: true, notifiesOnRefusal: true }).via).toBe('none');
    expect(planRelease({ verified: params, authentic: params, workerTrusted: false, notifiesOnRefusal: true }).via).toBe('none');
  });
});

describe('a request refused after its prefill leg', () => {
  it('before vLLM 0.21: the verified KV is handed to this decode worker as a one-token decode, and the prefill worker lets go', async () => {
    const { prefillSim, decodeSim, P, D } = await pair();
    const c = contractFor(D.config.fingerprint, endpointOf(P.sidecar.url), { requestId: `rel-${++n}` });
    // Fits the shape check (no count yet), not the prompt as this worker counts it: refused after the leg.
    const r = await postJson(`${D.sidecar.url}/v1/completions`, ...bound(c, completion({ max_tokens: 2040 })));
    expect([r.status, r.body.error.code]).toEqual([400, 'bad_request']);
    const lines = await done(D, c.requestId);
    const calls = D.spy.workCalls(decodeSim.url).filter((x) => new URL(x.url).pathname === '/v1/completions');
    expect(calls).toHaveLength(1);
    expect(calls[0]!.body).toMatchObject({ max_tokens: 1, stream: false, kv_transfer_params: { remote_engine_id: prefillSim.engineId } });
    expect(held(prefillSim)).toEqual([]);
    expect(metricValue(await scrape(decodeSim), 'kvgate_sim_kv_blocks_pulled_total')).toBeGreaterThan(0);
    expect(await releases(D, { reason: 'refused', via: 'handover' })).toBe(1);
    expect(lines.filter((l) => l['event'] === 'prefill_kv_release')).toHaveLength(1);
  });

  it("the release call to this decode worker carries the contract's priority, as every call to it does", async () => {
    const { decodeSim, P, D } = await pair({}, { schedulingPolicy: 'priority' });
    const c = contractFor(D.config.fingerprint, endpointOf(P.sidecar.url), { requestId: `rel-${++n}`, priority: 5 });
    const r = await postJson(`${D.sidecar.url}/v1/completions`, ...bound(c, completion({ max_tokens: 2040 })));
    expect(r.status).toBe(400);
    await done(D, c.requestId);
    const calls = D.spy.workCalls(decodeSim.url).filter((x) => new URL(x.url).pathname === '/v1/completions');
    expect(calls.map((x) => x.body)).toEqual([expect.objectContaining({ max_tokens: 1, priority: 5 })]);
  });

  it('vLLM 0.21+: a request the decode worker refuses before admission notifies the prefill worker; nothing is read', async () => {
    const { prefillSim, decodeSim, P, D } = await pair(V021, { flavour: 'main' });
    const c = contractFor(D.config.fingerprint, endpointOf(P.sidecar.url), { requestId: `rel-${++n}` });
    const r = await postJson(`${D.sidecar.url}/v1/completions`, ...bound(c, completion({ max_tokens: 2040 })));
    expect(r.status).toBe(400);
    await done(D, c.requestId);
    const calls = D.spy.workCalls(decodeSim.url).filter((x) => new URL(x.url).pathname === '/v1/completions');
    expect(calls.map((x) => (x.body as Record<string, unknown>)['model'])).toEqual([RELEASE_MODEL]);
    expect(held(prefillSim)).toEqual([]);
    expect(metricValue(await scrape(decodeSim), 'kvgate_sim_kv_blocks_pulled_total')).toBe(0);
    expect(await releases(D, { reason: 'refused', via: 'rejected_request' })).toBe(1);
  });

  it('before vLLM 0.21, KV this worker could not verify (its tokenizer disagrees) is never read: left to the timeout, counted', async () => {
    const { prefillSim, decodeSim, P } = await pair();
    // Same declaration, another tokenizer, canaries waived: only the attestation catches it (409), after the leg.
    const drifted = track(await startTestSim({}, { behaveAs: { tokenizer: { revision: 'tok-b' } } }));
    const D = await startTestSidecar(sidecarConfigFor(drifted, 'decode', { trust: 'declared-only' }));
    track(D.sidecar);
    const c = contractFor(D.config.fingerprint, endpointOf(P.sidecar.url), { requestId: `rel-${++n}` });
    const r = await postJson(`${D.sidecar.url}/v1/completions`, ...bound(c, completion()));
    expect([r.status, r.body.error.code]).toEqual([409, 'incompatible_transfer']);
    await done(D, c.requestId);
    expect(D.spy.workCalls(drifted.url).map((x) => new URL(x.url).pathname)).toEqual(['/tokenize']);
    expect(held(prefillSim)).toHaveLength(1);
    expect(metricValue(await scrape(decodeSim), 'kvgate_sim_kv_blocks_pulled_total')).toBe(0);
    expect(await releases(D, { reason: 'refused', via: 'none' })).toBe(1);
  });
});

describe('a client that leaves after the prefill leg answered, before the decode worker got the request', () => {
  /**
   * The decode sidecar's fetch, holding the prefill leg's answer until the client has gone: the leg succeeded, the
   * request ends before the decode call. `leave` is set once the client's request is sent.
   */
  function leavingAfterTheLeg(prefillUrl: () => string, leave: { now?: () => void }) {
    return (inner: FetchFn): FetchFn => {
      const f = async (url: string, init?: RequestInit): Promise<Response> => {
        const r = await inner(url, init);
        const leg = prefillUrl();
        if (leg === '' || !url.startsWith(leg) || init?.signal === undefined || init.signal === null) return r;
        const text = await r.text();
        const signal = init.signal;
        const gone = new Promise<void>((resolve) =>
          signal.aborted ? resolve() : signal.addEventListener('abort', () => resolve(), { once: true }),
        );
        leave.now?.();
        await gone;
        return new Response(text, { status: r.status, headers: r.headers });
      };
      return f as FetchFn;
    };
  }

  async function leaveAfterTheLeg(descriptor: Record<string, unknown>, sim: Record<string, unknown>) {
    let prefillUrl = '';
    const leave: { now?: () => void } = {};
    const p = await pair(
      descriptor,
      sim,
      leavingAfterTheLeg(() => prefillUrl, leave),
    );
    prefillUrl = p.P.sidecar.url;
    const c = contractFor(p.D.config.fingerprint, endpointOf(p.P.sidecar.url), { requestId: `gone-${++n}` });
    const client = new AbortController();
    leave.now = () => client.abort();
    const [body, headers] = bound(c, completion());
    const sent = fetch(`${p.D.sidecar.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
      signal: client.signal,
    }).catch(() => 'gone');
    expect(await sent).toBe('gone');
    await done(p.D, c.requestId);
    return { ...p, requestId: c.requestId };
  }

  it('before vLLM 0.21: counted and checked without the client, then handed over; the prefill worker lets go at once', async () => {
    const { prefillSim, decodeSim, D } = await leaveAfterTheLeg({}, {});
    const calls = D.spy.workCalls(decodeSim.url).filter((x) => new URL(x.url).pathname === '/v1/completions');
    expect(calls.map((x) => (x.body as Record<string, unknown>)['max_tokens'])).toEqual([1]);
    expect(held(prefillSim)).toEqual([]);
    expect(await releases(D, { reason: 'client_gone', via: 'handover' })).toBe(1);
  });

  it('before vLLM 0.21, a client gone while this worker counted the prompt: counted again without it, then handed over', async () => {
    let prefillUrl = '';
    let decodeUrl = '';
    const client = new AbortController();
    let legAnswered: () => void = () => undefined;
    const answered = new Promise<void>((r) => (legAnswered = r));
    let cut = false;
    const wrap = (inner: FetchFn): FetchFn =>
      (async (url: string, init?: RequestInit) => {
        if (prefillUrl !== '' && url.startsWith(prefillUrl)) {
          const r = await inner(url, init);
          const text = await r.text();
          legAnswered();
          return new Response(text, { status: r.status, headers: r.headers });
        }
        if (decodeUrl !== '' && url === `${decodeUrl}/tokenize` && !cut && init?.signal) {
          // The first count: the client leaves once the leg has answered, and the count is cut with it.
          cut = true;
          const signal = init.signal;
          await answered;
          client.abort();
          await new Promise<void>((r) => (signal.aborted ? r() : signal.addEventListener('abort', () => r(), { once: true })));
          throw new DOMException('the client left', 'AbortError');
        }
        return inner(url, init);
      }) as FetchFn;
    const { prefillSim, decodeSim, P, D } = await pair({}, {}, wrap);
    prefillUrl = P.sidecar.url;
    decodeUrl = decodeSim.url;
    const c = contractFor(D.config.fingerprint, endpointOf(P.sidecar.url), { requestId: `gone-${++n}` });
    const [body, headers] = bound(c, completion());
    const sent = await fetch(`${D.sidecar.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
      signal: client.signal,
    }).catch(() => 'gone');
    expect(sent).toBe('gone');
    await done(D, c.requestId);
    // The spy sits under the wrap: it sees the count run again without the client, then the handover.
    expect(cut).toBe(true);
    const paths = D.spy.workCalls(decodeSim.url).map((x) => new URL(x.url).pathname);
    expect(paths).toEqual(['/tokenize', '/v1/completions']);
    expect(held(prefillSim)).toEqual([]);
    expect(await releases(D, { reason: 'client_gone', via: 'handover' })).toBe(1);
  });

  it('vLLM 0.21+: a refused request notifies the prefill worker, nothing read', async () => {
    const { prefillSim, decodeSim, D } = await leaveAfterTheLeg(V021, { flavour: 'main' });
    const calls = D.spy.workCalls(decodeSim.url).filter((x) => new URL(x.url).pathname === '/v1/completions');
    expect(calls.map((x) => (x.body as Record<string, unknown>)['model'])).toEqual([RELEASE_MODEL]);
    expect(held(prefillSim)).toEqual([]);
    expect(metricValue(await scrape(decodeSim), 'kvgate_sim_kv_blocks_pulled_total')).toBe(0);
    expect(await releases(D, { reason: 'client_gone', via: 'rejected_request' })).toBe(1);
  });
});
