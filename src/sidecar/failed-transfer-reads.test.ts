import type { Counter } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import type { SimServer } from '../../testbed/sim/server.js';
import { startTestSim } from '../../testbed/sim/testing.js';
import { FailedTransferReads } from './failed-transfer-reads.js';
import type { FetchFn } from './http-io.js';

const sims: SimServer[] = [];
afterEach(async () => {
  await Promise.all(sims.splice(0).map((s) => s.close()));
});

async function sim(settings: Parameters<typeof startTestSim>[1]): Promise<SimServer> {
  const s = await startTestSim({}, settings);
  sims.push(s);
  return s;
}

/** Fail `n` transfers on the sim's rank-0 counter, as its NIXL path would. */
function failTransfers(s: SimServer, n: number): void {
  const c = s.registry.getSingleMetric('vllm:nixl_num_failed_transfers_total') as Counter<string>;
  c.inc({ model_name: s.config.sim.servedModelName ?? 'test-model', engine: '0' }, n);
}

/** The global fetch, recording every URL and the size of every answer. */
function recordingFetch(): { fetch: FetchFn; calls: { url: string; bytes: number }[] } {
  const calls: { url: string; bytes: number }[] = [];
  return {
    calls,
    fetch: async (url, init) => {
      const res = await fetch(url, init);
      const text = await res.text();
      calls.push({ url, bytes: text.length });
      return new Response(text, { status: res.status, headers: res.headers });
    },
  };
}

function reader(s: { url: string }, fetchFn: FetchFn, closed = new AbortController().signal, clock?: () => number) {
  return new FailedTransferReads({
    fetch: fetchFn,
    workerUrl: s.url,
    workerAuth: {},
    timeoutMs: 2_000,
    closed,
    ...(clock ? { clock } : {}),
  });
}

const never = new AbortController().signal;

describe('FailedTransferReads against the simulated vLLM, version by version', () => {
  it('asks for the counter alone where prometheus_client serves /metrics (main), and reads what a full scrape shows', async () => {
    const s = await sim({ flavour: 'main' });
    const rec = recordingFetch();
    const r = reader(s, rec.fetch);
    expect(await r.read(0, never)).toBe(0);
    failTransfers(s, 3);
    expect(await r.read(0, never)).toBe(3);
    expect(rec.calls.map((c) => c.url.replace(s.url, ''))).toEqual([
      '/metrics?name%5B%5D=vllm%3Anixl_num_failed_transfers_total&name%5B%5D=vllm%3Anixl_num_failed_transfers',
      '/metrics?name%5B%5D=vllm%3Anixl_num_failed_transfers_total&name%5B%5D=vllm%3Anixl_num_failed_transfers',
    ]);
    const full = await (await fetch(`${s.url}/metrics`)).text();
    expect(rec.calls[1]!.bytes).toBeLessThan(full.length / 5);
    expect(r.filtering).toBe(true);
  });

  it("still reads the counter where the instrumentator's route ignores the filter (0.13)", async () => {
    const s = await sim({ flavour: '0.13' });
    const rec = recordingFetch();
    const r = reader(s, rec.fetch);
    failTransfers(s, 2);
    expect(await r.read(0, never)).toBe(2);
    expect(rec.calls).toHaveLength(1);
    expect(r.filtering).toBe(true); // the answer had the counter: nothing to distrust, only no bytes saved
  });

  it('reads no counter from vLLM 0.11, which exports no vllm:nixl_* series (PR #26811 came after v0.11.0)', async () => {
    const s = await sim({ flavour: '0.11' });
    expect(s.registry.getSingleMetric('vllm:nixl_num_failed_transfers_total')).toBeUndefined();
    const rec = recordingFetch();
    const r = reader(s, rec.fetch);
    expect(await r.read(0, never)).toBeUndefined(); // no evidence, never a zero
    expect(rec.calls.map((c) => c.url.replace(s.url, '').split('?')[0])).toEqual(['/metrics', '/metrics']);
    expect(r.filtering).toBe(false);
  });

  it('never takes an empty filtered answer for "no counter": several API servers answer the filter with nothing', async () => {
    const s = await sim({ flavour: 'main', apiServerCount: 2 });
    expect(await (await fetch(`${s.url}/metrics?name%5B%5D=vllm%3Anixl_num_failed_transfers_total`)).text()).toBe('');
    const rec = recordingFetch();
    const r = reader(s, rec.fetch);
    failTransfers(s, 4);
    expect(await r.read(0, never)).toBe(4);
    expect(rec.calls.map((c) => c.url.replace(s.url, '').split('?')[0])).toEqual(['/metrics', '/metrics']);
    expect(r.filtering).toBe(false);
    failTransfers(s, 1);
    expect(await r.read(0, never)).toBe(5);
    expect(rec.calls.slice(2).map((c) => c.url.replace(s.url, ''))).toEqual(['/metrics']); // full reads from now on
  });

  it('an unreachable worker is no evidence, asked once', async () => {
    const s = await sim({});
    const url = s.url;
    await s.close();
    sims.splice(0);
    const calls: string[] = [];
    const r = reader({ url }, (u, init) => {
      calls.push(u);
      return fetch(u, init);
    });
    expect(await r.read(0, never)).toBeUndefined();
    expect(calls).toHaveLength(1);
  });
});

describe('FailedTransferReads sharing', () => {
  /** One event-loop turn: a shared read starts after the turn it was first asked for in (shared-read.ts). */
  const turn = () => new Promise<void>((r) => setImmediate(r));
  /** A fetch whose answers wait until released, counting calls. */
  function gatedFetch(value: () => number) {
    const pending: (() => void)[] = [];
    let calls = 0;
    const fetchFn: FetchFn = async () => {
      calls++;
      await new Promise<void>((r) => pending.push(r));
      return new Response(`vllm:nixl_num_failed_transfers_total{engine="0"} ${value()}\n`, { status: 200 });
    };
    return { fetchFn, release: () => pending.splice(0).forEach((r) => r()), calls: () => calls };
  }

  it('joins a read in flight that started at or after the moment asked for, and starts a new one otherwise', async () => {
    let now = 100;
    let counter = 1;
    const g = gatedFetch(() => counter);
    const r = reader({ url: 'http://127.0.0.1:9' }, g.fetchFn, never, () => now);
    const a = r.read(100, never); // starts a read at t=100
    const b = r.read(90, never); // a window that began at 90: the read started at 100 is evidence for it
    await turn();
    expect(g.calls()).toBe(1);
    now = 120;
    const c = r.read(110, never); // its first output came at 110: the read from 100 may predate a failure
    await turn();
    expect(g.calls()).toBe(2);
    counter = 2;
    g.release();
    expect(await Promise.all([a, b, c])).toEqual([2, 2, 2]);
    const d = r.read(120, never); // nothing in flight any more: a fresh read
    await turn();
    expect(g.calls()).toBe(3);
    g.release();
    expect(await d).toBe(2);
  });

  it('starts a read one turn after it is asked for, so every request of that turn joins it', async () => {
    let now = 100;
    const g = gatedFetch(() => 3);
    const r = reader({ url: 'http://127.0.0.1:9' }, g.fetchFn, never, () => now);
    const a = r.read(100, never);
    now = 130; // later in the same turn (other requests' callbacks ran): the pending read has not started yet
    const b = r.read(125, never);
    expect(g.calls()).toBe(0);
    await turn();
    expect(g.calls()).toBe(1); // started at 130, after both moments
    now = 140;
    const c = r.read(135, never); // in flight since 130: no evidence about 135
    await turn();
    expect(g.calls()).toBe(2);
    g.release();
    expect(await Promise.all([a, b, c])).toEqual([3, 3, 3]);
  });

  it('one caller giving up does not abort the read the others share; the sidecar closing does', async () => {
    const g = gatedFetch(() => 7);
    const closing = new AbortController();
    const r = reader({ url: 'http://127.0.0.1:9' }, g.fetchFn, closing.signal, () => 0);
    const gone = new AbortController();
    const a = r.read(0, gone.signal);
    const b = r.read(0, never);
    gone.abort();
    expect(await a).toBeUndefined();
    await turn();
    g.release();
    expect(await b).toBe(7);
    expect(g.calls()).toBe(1);
  });
});
