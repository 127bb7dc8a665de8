/**
 * Numbers beyond a double's range (`1e400`, which JSON.parse reads as Infinity) and handler bugs: a client's body
 * holding one is a 400 with an audit line, a prefill worker answering with one fails closed (502), and whatever a
 * handler throws still ends as a recorded request (metric, `request done` line, span), never a bare 500.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metricValue, postJson, scrape, startTestSim } from '../../testbed/sim/testing.js';
import type { SimServer } from '../../testbed/sim/server.js';
import { cacheSaltDigestOf } from '../contract/body-binding.js';
import { parseJsonObject } from './http-io.js';
import type { FetchFn } from './http-io.js';
import { bound, contractFor, endpointOf, gateHeaders, sidecarConfigFor, startTestSidecar, TEST_SALT, type TestSidecar } from './testing.js';

const MODEL = '/models/acme-llama-3-8b';

const open: { close(): Promise<void> }[] = [];
const track = <T extends { close(): Promise<void> }>(x: T): T => {
  open.push(x);
  return x;
};
afterAll(async () => {
  for (const x of open.reverse()) await x.close();
});

/** The request's `request done` line and audit lines on `t`. */
const linesOf = (t: TestSidecar, id: string) => {
  const mine = t.lines.filter((l) => l['request_id'] === id);
  return { done: mine.filter((l) => l['msg'] === 'request done'), audits: mine.filter((l) => l['audit'] === 'refusal') };
};
const handlerFailures = (t: TestSidecar) => t.lines.filter((l) => l['msg'] === 'sidecar request handler failed');

describe('parseJsonObject and numbers beyond a double', () => {
  it('refuses 1e400, -1e400 and a 400-digit integer anywhere in the body; reads 1e300', () => {
    for (const text of ['{"prompt":[1e400]}', '{"a":{"b":[1,-1e400]}}', `{"n":${'9'.repeat(400)}}`]) {
      const r = parseJsonObject(text);
      expect(r.ok ? 'ok' : [r.error.code, r.error.reason]).toEqual([
        'bad_request',
        'the request body holds a number beyond the range of a double (such as 1e400); send finite numbers',
      ]);
    }
    expect(parseJsonObject('{"x":1e300,"y":"1e400"}').ok).toBe(true);
  });
});

describe('sidecars and numbers beyond a double', () => {
  let prefillSim: SimServer;
  let decodeSim: SimServer;
  let P: TestSidecar;
  let D: TestSidecar;
  /** While set, the prefill worker's answers carry remote_port 1e400 (a worker that lies in its kv_transfer_params). */
  let lying = false;
  beforeAll(async () => {
    prefillSim = track(await startTestSim());
    decodeSim = track(await startTestSim());
    const liar =
      (f: FetchFn): FetchFn =>
      async (url, init) => {
        const res = await f(url, init);
        if (!lying || url !== `${prefillSim.url}/v1/completions`) return res;
        const text = (await res.text()).replace(/"remote_port":\s*\d+/, '"remote_port":1e400');
        return new Response(text, { status: res.status, headers: res.headers });
      };
    P = await startTestSidecar(sidecarConfigFor(prefillSim, 'prefill'), undefined, liar);
    track(P.sidecar);
    D = await startTestSidecar(sidecarConfigFor(decodeSim, 'decode'));
    track(D.sidecar);
  });

  it('a client body with 1e400 in its prompt is 400 bad_request with one audit line, counted and released', async () => {
    const c = contractFor(D.config.fingerprint, endpointOf(P.sidecar.url), {
      requestId: 'inf-1',
      model: MODEL,
      cacheSaltDigest: cacheSaltDigestOf(TEST_SALT),
    });
    const raw = `{"model":"${MODEL}","prompt":[1e400],"max_tokens":3,"cache_salt":"${TEST_SALT}"}`;
    const r = await fetch(`${D.sidecar.url}/v1/completions`, {
      method: 'POST',
      body: raw,
      headers: { 'content-type': 'application/json', ...gateHeaders(c) },
    });
    const body = (await r.json()) as { error: { code: string; message: string } };
    expect([r.status, body.error.code]).toEqual([400, 'bad_request']);
    expect(body.error.message).toContain('beyond the range of a double');
    const { done, audits } = linesOf(D, 'inf-1');
    expect(done.map((l) => l['outcome'])).toEqual(['refused']);
    expect(audits).toHaveLength(1);
    expect(handlerFailures(D)).toEqual([]);
    expect(
      metricValue(await scrape(D.sidecar), 'kvgate_sidecar_requests_total', { role: 'decode', outcome: 'refused', code: 'bad_request' }),
    ).toBe(1);
    expect(D.sidecar.status().inFlight).toBe(0);
  });

  it('a prefill worker answering remote_port 1e400 fails closed: 502 worker_error on both sidecars, nothing attested', async () => {
    lying = true;
    try {
      const c = contractFor(D.config.fingerprint, endpointOf(P.sidecar.url), { requestId: 'inf-2' });
      const r = await postJson(
        `${D.sidecar.url}/v1/completions`,
        ...bound(c, { model: MODEL, prompt: 'a prompt for the liar', max_tokens: 3 }),
      );
      expect([r.status, r.body.error.code]).toEqual([502, 'worker_error']);
      expect(r.body.error.message).toContain("the prefill worker's answer holds a number beyond the range of a double");
      // 502 is retried inside the group (here: the same endpoint, prefill.maxAttempts times); each attempt fails alike.
      expect(linesOf(P, 'inf-2').done.map((l) => [l['outcome'], l['code']])).toEqual(Array(3).fill(['failed', 'worker_error']));
      expect(linesOf(D, 'inf-2').done.map((l) => [l['outcome'], l['code']])).toEqual([['failed', 'worker_error']]);
      expect(handlerFailures(P)).toEqual([]);
      expect(D.spy.workCalls(decodeSim.url).filter((x) => x.url.endsWith('/v1/completions'))).toEqual([]);
    } finally {
      lying = false;
    }
  });
});

describe('a handler that throws', () => {
  it('still answers with a kvgate error and records the request: metric, request done line, slot released', async () => {
    const sim = track(await startTestSim());
    let broken = false;
    // A worker answer the relay cannot read (no headers): stands in for any bug below runCompletion.
    const breaker =
      (f: FetchFn): FetchFn =>
      async (url, init) =>
        broken && url === `${sim.url}/v1/completions` ? ({ status: 200 } as Response) : f(url, init);
    const t = await startTestSidecar(sidecarConfigFor(sim, 'decode'), undefined, breaker);
    track(t.sidecar);
    broken = true;
    const c = contractFor(t.config.fingerprint, null, { requestId: 'bug-1' });
    const r = await postJson(`${t.sidecar.url}/v1/completions`, ...bound(c, { model: MODEL, prompt: 'hello', max_tokens: 2 }));
    expect([r.status, r.body.error.code]).toEqual([500, 'internal']);
    expect(handlerFailures(t)).toHaveLength(1);
    expect(linesOf(t, 'bug-1').done.map((l) => [l['outcome'], l['code']])).toEqual([['failed', 'internal']]);
    expect(
      metricValue(await scrape(t.sidecar), 'kvgate_sidecar_requests_total', { role: 'decode', outcome: 'failed', code: 'internal' }),
    ).toBe(1);
    expect(t.sidecar.status().inFlight).toBe(0);
  });
});
