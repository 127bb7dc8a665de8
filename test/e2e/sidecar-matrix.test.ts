/**
 * Issue 5's end-to-end matrix through the full topology (harness running envoy/envoy.yaml, gate, sidecars, simulated
 * vLLM workers of two revisions): token parity with the non-disaggregated baselines, contracts on both listeners,
 * workers upgraded in place between probes on either side, a restart as the same revision, and a prefill retry that
 * stays inside its group. Sidecars probe only when told to (interval 60 s), so every restart below is one their
 * periodic probe has not seen.
 */
import http from 'node:http';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { groupIdOf } from '../../src/compat/fingerprint.js';
import { mintContract, type TransferContract } from '../../src/contract/contract.js';
import { createDevKeyRing, type KeyRing } from '../../src/contract/keys.js';
import {
  baseline,
  completion,
  firstDivergence,
  post,
  PROMPTS,
  sessionOn,
  tokenIds,
  type HttpResult,
} from '../../testbed/demo/scenarios.js';
import { SERVED_MODEL, startTopology, type RevisionName, type Topology } from '../../testbed/demo/topology.js';
import { H } from '../../src/headers.js';
import { ENGINE_CANARY_REQUEST_PREFIX } from '../../src/sidecar/engine-canary.js';
import { parseSimConfig } from '../../testbed/sim/config.js';
import { createSimServer, type SimServer } from '../../testbed/sim/server.js';
import { metricValue, scrape } from '../../testbed/sim/testing.js';

const silent = pino({ level: 'silent' });
const OTHER_SHA = 'e1945c40cd546c78e41f1151f4db032b271faeaa'; // revision B's weights, under A's label
/** Under the tokenizer revision `tok-changed` (o200k) PROMPTS[1] is 16 tokens; revision `main` (cl100k) makes 17. */
const TOKENIZER_CHANGED = { tokenizer: { revision: 'tok-changed' } };

/** Keep-alive sockets to a restarted worker must see their close before this process sends on that port again. */
const settle = async (): Promise<void> => {
  for (let i = 0; i < 3; i++) await new Promise((resolve) => setImmediate(resolve));
};

const chatBody = (prompt: string, extra: Record<string, unknown> = {}) => ({
  model: SERVED_MODEL,
  messages: [{ role: 'user', content: prompt }],
  max_tokens: 12,
  return_token_ids: true,
  ...extra,
});

/** Token ids of a JSON answer or of an SSE stream (which must end with [DONE]). */
async function idsOf(res: Response): Promise<number[]> {
  const text = await res.text();
  if (!(res.headers.get('content-type') ?? '').includes('text/event-stream'))
    return tokenIds({ status: res.status, headers: res.headers, json: JSON.parse(text) });
  expect(text).toContain('data: [DONE]');
  return text
    .split('\n')
    .filter((l) => l.startsWith('data: {'))
    .flatMap((l) => (JSON.parse(l.slice(6)).choices?.[0]?.token_ids ?? []) as number[]);
}

/** The non-disaggregated baseline on a revision's decode worker, its prefix cache cleared before and after. */
async function directBaseline(sim: SimServer, path: string, body: Record<string, unknown>): Promise<number[]> {
  sim.resetPrefixCache();
  const res = await fetch(`${sim.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ...body, stream: false }),
  });
  expect(res.status).toBe(200);
  const ids = await idsOf(res);
  sim.resetPrefixCache();
  return ids;
}

/** What a decode worker consumed from prefill workers: blocks pulled, NIXL transfers and failures. */
async function kvConsumed(sim: SimServer): Promise<number[]> {
  const text = await scrape(sim);
  return ['kvgate_sim_kv_blocks_pulled_total', 'vllm:nixl_xfer_time_seconds_count', 'vllm:nixl_num_failed_transfers_total'].map((m) => {
    const v = metricValue(text, m);
    return Number.isNaN(v) ? 0 : v;
  });
}

function contractFields(t: Topology, requestId: string, nowMs: number): Omit<TransferContract, 'kind'> {
  const fingerprint = t.gate.policy.current().revisions.get('llama-a')!.fingerprint;
  const tenantScope = 'tenant:acme';
  return {
    requestId,
    groupId: groupIdOf(fingerprint, tenantScope),
    fingerprint,
    tenantScope,
    tenant: 'acme',
    model: SERVED_MODEL,
    revision: 'llama-a',
    adapter: null,
    // Placeholders until a body is bound (gateSigned).
    cacheSaltDigest: '0'.repeat(64),
    promptDigest: '0'.repeat(64),
    issuedAtMs: nowMs,
    expiresAtMs: nowMs + 30_000,
    decode: { cluster: 'a_decode', endpoint: t.worker('llama-a', 'decode').address },
    prefill: { cluster: 'a_prefill', endpoint: t.worker('llama-a', 'prefill').address },
  };
}

/** A prefill leg as a decode sidecar sends it, with a contract minted by `keys`. */
function prefillLeg(t: Topology, requestId: string, fields: Omit<TransferContract, 'kind'>, keys: KeyRing): Promise<HttpResult> {
  return post(`${t.internalUrl}/v1/completions`, completion(PROMPTS[2], 1), {
    'x-request-id': requestId,
    [H.contract]: mintContract(fields, keys),
  });
}

describe('the sidecar matrix through the full topology', () => {
  let t: Topology;
  const sessions = {} as Record<RevisionName, string>;
  const headersFor = (rev: RevisionName) => ({ 'content-type': 'application/json', 'x-tenant-id': 'acme', 'x-session-id': sessions[rev] });
  beforeAll(async () => {
    t = await startTopology({ logger: silent, candidateWeight: 50, sidecarProbeIntervalMs: 60_000 });
    sessions['llama-a'] = (await sessionOn(t, 'llama-a')).session;
    sessions['llama-b'] = (await sessionOn(t, 'llama-b')).session;
  });
  afterAll(() => t.close());

  it('A-to-A and B-to-B give the non-disaggregated baseline token ids: completions and chat, streamed and not', async () => {
    let n = 0;
    for (const rev of ['llama-a', 'llama-b'] as const) {
      const decode = t.worker(rev, 'decode').sim;
      for (const [path, make] of [
        ['/v1/completions', (p: string) => completion(p, 12)],
        ['/v1/chat/completions', (p: string) => chatBody(p)],
      ] as const) {
        for (const stream of [false, true]) {
          const body = make(PROMPTS[n++ % PROMPTS.length]!);
          const expected = await directBaseline(decode, path, body);
          const pulledBefore = (await kvConsumed(decode))[0]!;
          const res = await fetch(`${t.publicUrl}${path}`, {
            method: 'POST',
            headers: headersFor(rev),
            body: JSON.stringify({ ...body, stream }),
          });
          expect(res.status).toBe(200);
          expect(res.headers.get(H.revision)).toBe(rev);
          const ids = await idsOf(res);
          expect(ids.length).toBeGreaterThan(0);
          expect({ rev, path, stream, divergence: firstDivergence(ids, expected) }).toEqual({ rev, path, stream, divergence: -1 });
          // Disaggregated for real: the decode worker pulled the prompt's KV from the prefill worker.
          expect((await kvConsumed(decode))[0]!).toBeGreaterThan(pulledBefore);
        }
      }
    }
  });

  it('a forged or expired contract on the internal listener is 403 contract_invalid before any prefill', async () => {
    const prefillSim = t.worker('llama-a', 'prefill').sim;
    const promptTokensBefore = metricValue(await scrape(prefillSim), 'vllm:prompt_tokens_total');
    const logBefore = t.harness.accessLog().length;
    const now = Date.now();
    const forged = await prefillLeg(t, 'forged-1', contractFields(t, 'forged-1', now), createDevKeyRing('not-the-gate'));
    const expired = await prefillLeg(
      t,
      'expired-1',
      { ...contractFields(t, 'expired-1', now - 120_000), expiresAtMs: now - 60_000 },
      t.keys,
    );
    for (const r of [forged, expired]) {
      expect([r.status, r.json.error.code, r.headers.get(H.rejectReason)]).toEqual([403, 'contract_invalid', 'contract_invalid']);
    }
    expect(expired.json.error.message).toMatch(/expired/);
    const log = (await t.harness.waitForAccessLog(logBefore + 2)).slice(logBefore);
    expect(log.map((e) => [e.listener, e.upstreamHost])).toEqual([
      ['internal', undefined],
      ['internal', undefined],
    ]);
    expect(metricValue(await scrape(prefillSim), 'vllm:prompt_tokens_total')).toBe(promptTokensBefore);
  });

  it('on the public listener a client-sent x-kvgate-contract is removed and the request bound afresh', async () => {
    const now = Date.now();
    // One forged with another key, one validly signed but for another request and for revision B's group.
    const bFingerprint = t.gate.policy.current().revisions.get('llama-b')!.fingerprint;
    const forB = {
      ...contractFields(t, 'someone-else', now),
      fingerprint: bFingerprint,
      groupId: groupIdOf(bFingerprint, 'tenant:acme'),
      revision: 'llama-b',
    };
    const expected = await baseline(t, 'llama-a', PROMPTS[3], 12);
    const logBefore = t.harness.accessLog().length;
    for (const contract of [mintContract(contractFields(t, 'x', now), createDevKeyRing('not-the-gate')), mintContract(forB, t.keys)]) {
      const r = await post(`${t.publicUrl}/v1/completions`, completion(PROMPTS[3], 12), {
        'x-tenant-id': 'acme',
        'x-session-id': sessions['llama-a'],
        [H.contract]: contract,
        [H.prefillCluster]: 'b_prefill',
      });
      expect(r.status).toBe(200);
      expect(r.headers.get(H.revision)).toBe('llama-a');
      expect(firstDivergence(tokenIds(r), expected)).toBe(-1);
    }
    const log = (await t.harness.waitForAccessLog(logBefore + 4)).slice(logBefore);
    expect(log.map((e) => e.upstreamCluster).sort()).toEqual(['a_decode', 'a_decode', 'a_prefill', 'a_prefill']);
  });

  it('a prefill worker upgraded in place between poll and request is refused before decode: 409, no KV consumed', async () => {
    const decode = t.worker('llama-a', 'decode').sim;
    const consumedBefore = await kvConsumed(decode);
    const upgraded = await t.restartWorker('llama-a', 'prefill', { behaveAs: { model: { revision: OTHER_SHA } } });
    await settle();
    expect(upgraded.sidecar.status().verified).toBe(true); // not probed since: the gate still routes to it
    const r = await post(`${t.publicUrl}/v1/completions`, completion(PROMPTS[1], 12), {
      'x-tenant-id': 'acme',
      'x-session-id': sessions['llama-a'],
    });
    expect([r.status, r.json.error.code, r.headers.get(H.rejectReason)]).toEqual([409, 'incompatible_transfer', 'incompatible_transfer']);
    expect(r.json.error.message).toMatch(/prefill worker restarted as something else since it was verified: .*generation canary digest/);
    expect(await kvConsumed(decode)).toEqual(consumedBefore);
    expect(upgraded.sidecar.status()).toMatchObject({ verified: false, engineId: upgraded.sim.engineId });
    // Restore revision A's prefill worker for the tests below.
    await t.restartWorker('llama-a', 'prefill', { behaveAs: {} });
    await settle();
    expect((await upgraded.sidecar.probe()).verified).toBe(true);
    await t.gate.refreshWorkerView();
  });

  it('a decode worker restarted with another tokenizer is refused before decode: 409 naming both token counts', async () => {
    const w = await t.restartWorker('llama-a', 'decode', { behaveAs: TOKENIZER_CHANGED });
    await settle();
    const r = await post(`${t.publicUrl}/v1/completions`, completion(PROMPTS[1], 12), {
      'x-tenant-id': 'acme',
      'x-session-id': sessions['llama-a'],
    });
    expect([r.status, r.json.error.code]).toEqual([409, 'incompatible_transfer']);
    expect(r.json.error.message).toMatch(/prefill tokenized 17 tokens, this decode worker's tokenizer gives 16/);
    expect(await kvConsumed(w.sim)).toEqual([0, 0, 0]); // a fresh worker: nothing pulled, no transfer attempted
    // The refusal started a probe of the decode worker: it finds the tokenizer changed, so the gate will stop routing.
    await vi.waitFor(() => expect(w.sidecar.status().verified).toBe(false), { timeout: 3_000 });
    expect(w.sidecar.status().reasons.join(' ')).toMatch(/tokenizer canary digest/);
    // Restore.
    await t.restartWorker('llama-a', 'decode', { behaveAs: {} });
    await settle();
    expect((await w.sidecar.probe()).verified).toBe(true);
    await t.gate.refreshWorkerView();
  });

  it('workers restarted in place as the SAME revision keep serving: the new engine id is learned, no false refusal', async () => {
    const p = await t.restartWorker('llama-a', 'prefill', { behaveAs: {} });
    const d = await t.restartWorker('llama-a', 'decode', { behaveAs: {} });
    await settle();
    const expected = await baseline(t, 'llama-a', PROMPTS[4], 12);
    d.sim.resetPrefixCache();
    const r = await post(`${t.publicUrl}/v1/completions`, completion(PROMPTS[4], 12), {
      'x-tenant-id': 'acme',
      'x-session-id': sessions['llama-a'],
    });
    expect(r.status).toBe(200);
    expect(firstDivergence(tokenIds(r), expected)).toBe(-1);
    expect((await kvConsumed(d.sim))[0]).toBeGreaterThan(0);
    expect(p.sidecar.status()).toMatchObject({ verified: true, engineId: p.sim.engineId });
    expect(await (await fetch(`http://${p.address}/metrics`)).text()).toContain(
      'kvgate_sidecar_worker_restarts_total{role="prefill",result="reverified"} 1',
    );
  });
});

/**
 * A one-shot fault in front of simulated workers: the first real prefill (not an engine canary) through any of these
 * proxies gets `x-sim-fault: error=503`, so the worker itself answers 503 exactly once.
 */
function createOneShotFault(): { armed: number; proxyTo(port: number, target: () => string): Promise<http.Server> } {
  const state = {
    armed: 0,
    proxyTo(port: number, target: () => string): Promise<http.Server> {
      const server = http.createServer((req, res) => {
        const chunks: Buffer[] = [];
        req.on('data', (c: Buffer) => chunks.push(c));
        req.on('end', () => {
          const body = Buffer.concat(chunks).toString('utf8');
          const headers: Record<string, string> = {};
          for (const [k, v] of Object.entries(req.headers))
            if (typeof v === 'string' && k !== 'host' && k !== 'content-length') headers[k] = v;
          const prefill =
            req.url === '/v1/completions' &&
            body.includes('"do_remote_decode":true') &&
            !(headers['x-request-id'] ?? '').startsWith(ENGINE_CANARY_REQUEST_PREFIX);
          if (prefill && state.armed > 0) {
            state.armed--;
            headers['x-sim-fault'] = 'error=503';
          }
          const init: RequestInit = { method: req.method ?? 'GET', headers, ...(body === '' ? {} : { body }) };
          void fetch(`${target()}${req.url ?? '/'}`, init)
            .then(async (up) => {
              const text = await up.text();
              res.writeHead(up.status, { 'content-type': up.headers.get('content-type') ?? 'application/json' });
              res.end(text);
            })
            .catch(() => res.destroy());
        });
      });
      return new Promise((resolve, reject) => {
        server.once('error', reject);
        server.listen(port, '127.0.0.1', () => resolve(server));
      });
    },
  };
  return state;
}

describe('prefill retries through the full topology', () => {
  let t: Topology;
  const proxies: http.Server[] = [];
  const fault = createOneShotFault();
  beforeAll(async () => {
    t = await startTopology({ logger: silent, replicas: 2, sidecarProbeIntervalMs: 60_000 });
    // Put the one-shot fault between each of A's prefill sidecars and its worker: the proxy takes the worker's port
    // at once (nothing else can bind it in between), the worker restarts on a free one.
    for (const index of [0, 1]) {
      const w = t.worker('llama-a', 'prefill', index);
      const old = w.sim;
      await old.close();
      proxies.push(await fault.proxyTo(old.port, () => w.sim.url));
      const cfg = parseSimConfig({
        descriptor: old.config.descriptor,
        sim: { ...old.config.sim, engineId: undefined, port: 0, sideChannelPort: 0 },
      });
      if (!cfg.ok) throw cfg.error;
      w.sim = await createSimServer(cfg.value); // the topology closes the current sim at teardown
      await settle();
      expect((await w.sidecar.probe()).verified).toBe(true);
    }
    await t.gate.refreshWorkerView();
  });
  afterAll(async () => {
    await t.close();
    for (const p of proxies) await new Promise((resolve) => p.close(resolve));
  });

  it('a prefill worker answering 503 once is retried inside the group: A baseline tokens, no request ever reached B', async () => {
    const { session } = await sessionOn(t, 'llama-a');
    const expected = await baseline(t, 'llama-a', PROMPTS[1], 12);
    const logBefore = t.harness.accessLog().length;
    fault.armed = 1;
    const r = await post(`${t.publicUrl}/v1/completions`, completion(PROMPTS[1], 12), { 'x-tenant-id': 'acme', 'x-session-id': session });
    expect(r.status).toBe(200);
    expect(r.headers.get(H.revision)).toBe('llama-a');
    expect(firstDivergence(tokenIds(r), expected)).toBe(-1);
    expect(fault.armed).toBe(0); // the fault fired
    // One public request, two prefill legs on the internal listener: a 503 from A's prefill pool, then a 200 from it.
    const log = (await t.harness.waitForAccessLog(logBefore + 3)).slice(logBefore);
    const legs = log.filter((e) => e.listener === 'internal');
    expect(legs.map((e) => [e.upstreamCluster, e.status])).toEqual([
      ['a_prefill', 503],
      ['a_prefill', 200],
    ]);
    const retries = await Promise.all(
      [0, 1].map(async (i) =>
        metricValue(
          await (await fetch(`http://${t.worker('llama-a', 'decode', i).address}/metrics`)).text(),
          'kvgate_sidecar_prefill_retries_total',
          { status: '503' },
        ),
      ),
    );
    expect(retries.filter((v) => v === 1)).toHaveLength(1);
    // Every hop of this request stayed on revision A's workers (B serves other sessions in this topology).
    const aHosts = new Set(t.workers.filter((w) => w.revision === 'llama-a').map((w) => w.address));
    expect(log.every((e) => e.upstreamHost !== undefined && aHosts.has(e.upstreamHost))).toBe(true);
    expect(log.every((e) => (e.upstreamCluster ?? '').startsWith('a_'))).toBe(true);
  });
});
