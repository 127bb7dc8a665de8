/**
 * Workers upgraded in place between two probes (restarted on the same ports, with a new engine id, as something else
 * or as the same revision): the prefill sidecar ties every attestation to the launch its probe verified, the decode
 * sidecar re-checks its worker's version and the prompt token count, and nothing a changed worker computed is
 * attested or consumed. Real simulated workers, the prefill leg in direct mode.
 */
import { afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import type { CompatDescriptorInput } from '../compat/descriptor.js';
import { metricValue, postJson, scrape, startTestSim, testDescriptor } from '../../testbed/sim/testing.js';
import type { SimServer } from '../../testbed/sim/server.js';
import type { SidecarConfigInput } from './config.js';
import { ENGINE_CANARY_REQUEST_PREFIX } from './engine-canary.js';
import { judgeLaunch, restartRefusal } from './launch-check.js';
import { PREFILL_KV_PARAMS } from './openai-body.js';
import { measureCanaries } from './probe.js';
import type { SidecarStatus } from './status.js';
import { contractFor, endpointOf, restartSimInPlace, sidecarConfigFor, startTestSidecar, type TestSidecar, bound } from './testing.js';

const MODEL = '/models/acme-llama-3-8b';
// 19 tokens with the declared tokenizer (tok-a), 16 with tok-b.
const PROMPT = 'The quick brown fox jumps over the lazy dog. Kubernetes operators reconcile state.';
const completion = { model: MODEL, prompt: PROMPT, max_tokens: 8, return_token_ids: true };

let declared: CompatDescriptorInput;
beforeAll(async () => {
  // The declaration carries canary digests, as `kvgate fingerprint` records them, so probes can see weights change.
  const honest = await startTestSim();
  const m = await measureCanaries(honest.url);
  await honest.close();
  expect(m.errors).toEqual({});
  declared = testDescriptor({ canaries: m.digests });
});

interface Rig {
  pSim: SimServer;
  dSim: SimServer;
  P: TestSidecar;
  D: TestSidecar;
}
let rig: Rig | undefined;
afterEach(async () => {
  if (rig === undefined) return;
  await rig.D.sidecar.close();
  await rig.P.sidecar.close();
  await Promise.all([rig.pSim.close(), rig.dSim.close()]);
  rig = undefined;
});

async function startRig(edit: { prefill?: Partial<SidecarConfigInput>; decode?: Partial<SidecarConfigInput> } = {}): Promise<Rig> {
  const [pSim, dSim] = await Promise.all([startTestSim(), startTestSim()]);
  const P = await startTestSidecar(sidecarConfigFor(pSim, 'prefill', { ...edit.prefill, descriptor: declared }));
  const D = await startTestSidecar(sidecarConfigFor(dSim, 'decode', { ...edit.decode, descriptor: declared }));
  rig = { pSim, dSim, P, D };
  return rig;
}

let n = 0;
function send(r: Rig, body: Record<string, unknown> = completion) {
  const c = contractFor(r.D.config.fingerprint, endpointOf(r.P.sidecar.url), { requestId: `launch-${++n}` });
  return postJson(`${r.D.sidecar.url}/v1/completions`, ...bound(c, body));
}

/** The decode worker's own answer, its prefix cache cleared after so a disaggregated request must pull from P. */
async function baseline(sim: SimServer): Promise<number[]> {
  const r = await postJson(`${sim.url}/v1/completions`, completion);
  expect(r.status).toBe(200);
  sim.resetPrefixCache();
  return r.body.choices[0].token_ids as number[];
}

/** Completions the decode sidecar sent its worker for a request (probes carry no request id). */
const decodeCompletions = (r: Rig) =>
  r.D.spy.workCalls(r.dSim.url).filter((c) => c.url.endsWith('/v1/completions') && c.headers['x-request-id'] !== undefined);
const pulled = async (sim: SimServer) => metricValue(await scrape(sim), 'kvgate_sim_kv_blocks_pulled_total');

describe('the prefill sidecar learns the engine id of the launch it verifies', () => {
  it('from a one-token canary prefill that runs before every other probe step', async () => {
    const r = await startRig();
    expect(r.P.sidecar.status()).toMatchObject({ verified: true, engineId: r.pSim.engineId });
    const calls = r.P.spy.calls;
    const i = calls.findIndex((c) => (c.headers['x-request-id'] ?? '').startsWith(ENGINE_CANARY_REQUEST_PREFIX));
    expect(i).toBeGreaterThan(0);
    expect(calls[i]!.url).toBe(`${r.pSim.url}/v1/completions`);
    expect(calls[i]!.body).toEqual({
      model: MODEL,
      prompt: 'kvgate',
      max_tokens: 1,
      temperature: 0,
      ignore_eos: true,
      stream: false,
      kv_transfer_params: { ...PREFILL_KV_PARAMS },
    });
    // Only the model list (to name the model) comes before it; every identity check comes after.
    expect(calls.slice(0, i).map((c) => c.url)).toEqual([`${r.pSim.url}/v1/models`]);
    expect(calls.slice(i + 1).map((c) => new URL(c.url).pathname)).toEqual(
      expect.arrayContaining(['/version', '/metrics', '/tokenize', '/v1/completions']),
    );
    // A decode sidecar runs no engine canary.
    expect(r.D.sidecar.status().engineId).toBeNull();
    expect(r.D.spy.calls.some((c) => (c.headers['x-request-id'] ?? '').startsWith(ENGINE_CANARY_REQUEST_PREFIX))).toBe(false);
  });
});

describe('a prefill worker upgraded in place between probes', () => {
  it('restarted as other weights: not attested, re-probed, refused 409 incompatible_transfer before the decode worker pulls anything', async () => {
    const r = await startRig();
    r.pSim = await restartSimInPlace(r.pSim, { behaveAs: { model: { revision: 'rev-x' } } });
    const res = await send(r);
    expect([res.status, res.body.error.code]).toEqual([409, 'incompatible_transfer']);
    expect(res.body.error.message).toMatch(/prefill worker restarted as something else since it was verified: .*generation canary digest/);
    expect(decodeCompletions(r)).toEqual([]);
    expect(await pulled(r.dSim)).toBe(0);
    expect(r.P.sidecar.status().verified).toBe(false);
    expect(r.P.sidecar.status().engineId).toBe(r.pSim.engineId);
    expect(await scrape(r.P.sidecar)).toContain('kvgate_sidecar_worker_restarts_total{role="prefill",result="refused"} 1');
    expect(await scrape(r.D.sidecar)).toContain('kvgate_sidecar_prefill_refusals_total{action="fail"} 1');
    expect(r.P.lines.some((l) => l['event'] === 'worker_restarted' && l['seen'] === r.pSim.engineId)).toBe(true);
  });

  it('restarted as the same revision: its new engine id is learned and the request gets the baseline tokens', async () => {
    const r = await startRig();
    const expected = await baseline(r.dSim);
    const before = r.P.sidecar.status().engineId;
    r.pSim = await restartSimInPlace(r.pSim);
    expect(r.pSim.engineId).not.toBe(before);
    const res = await send(r);
    expect(res.status).toBe(200);
    expect(res.body.choices[0].token_ids).toEqual(expected);
    expect(r.P.sidecar.status()).toMatchObject({ verified: true, engineId: r.pSim.engineId });
    expect(decodeCompletions(r).at(-1)!.body).toMatchObject({ kv_transfer_params: { remote_engine_id: r.pSim.engineId } });
    expect(await pulled(r.dSim)).toBeGreaterThan(0);
    expect(await scrape(r.P.sidecar)).toContain('kvgate_sidecar_worker_restarts_total{role="prefill",result="reverified"} 1');
  });

  it('a burst of prefills from the restarted worker shares one re-probe', async () => {
    const r = await startRig();
    r.pSim = await restartSimInPlace(r.pSim);
    r.P.spy.reset();
    const answers = await Promise.all([1, 2, 3, 4].map(() => send(r)));
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 200]);
    const canaries = r.P.spy.calls.filter((c) => (c.headers['x-request-id'] ?? '').startsWith(ENGINE_CANARY_REQUEST_PREFIX));
    expect(canaries).toHaveLength(1);
    expect(await scrape(r.P.sidecar)).toMatch(/kvgate_sidecar_worker_restarts_total\{role="prefill",result="reverified"\} [1-4]\n/);
  });

  it('refuses when the fresh probe does not finish within probe.timeoutMs', async () => {
    // A probe limit a busy machine still meets for the first (healthy) probe, canaries included.
    const r = await startRig({ prefill: { probe: { intervalMs: 60_000, timeoutMs: 1_000 } } });
    r.pSim = await restartSimInPlace(r.pSim);
    r.pSim.setFaults({ slowMs: 2_500 }); // every completion, the canary's too, now takes longer than the probe may
    const res = await send(r);
    expect([res.status, res.body.error.code]).toEqual([409, 'incompatible_transfer']);
    expect(res.body.error.message).toMatch(
      /restarted since it was verified \(it now reports NIXL engine .*\), and a fresh probe did not finish within 1000 ms/,
    );
    expect(decodeCompletions(r)).toEqual([]);
    // The late round still finishes and is recorded: its canaries timed out, so the worker stays unverified.
    await vi.waitFor(() => expect(r.P.sidecar.status().verified).toBe(false), { timeout: 8_000 });
  });

  it('with onTransferFailure: recompute, the refusal is answered by a local prefill on the verified decode worker', async () => {
    const r = await startRig({ decode: { onTransferFailure: 'recompute' } });
    const expected = await baseline(r.dSim);
    r.pSim = await restartSimInPlace(r.pSim, { behaveAs: { model: { revision: 'rev-x' } } });
    const res = await send(r);
    expect(res.status).toBe(200);
    expect(res.body.choices[0].token_ids).toEqual(expected);
    expect(decodeCompletions(r).at(-1)!.body).not.toHaveProperty('kv_transfer_params');
    expect(await pulled(r.dSim)).toBe(0);
    const text = await scrape(r.D.sidecar);
    expect(text).toContain('kvgate_sidecar_prefill_refusals_total{action="recompute"} 1');
    expect(text).toContain('kvgate_sidecar_requests_total{role="decode",outcome="recomputed",code=""} 1');
  });
});

describe('a decode worker upgraded in place between probes', () => {
  it('restarted as another vLLM version: re-probed on its GET /version, refused 409 before it consumes any KV', async () => {
    const r = await startRig();
    r.dSim = await restartSimInPlace(r.dSim, { behaveAs: { engine: { version: '0.11.1' } } });
    const res = await send(r);
    expect([res.status, res.body.error.code]).toEqual([409, 'incompatible_transfer']);
    expect(res.body.error.message).toMatch(
      /decode worker restarted as something else since it was verified: engine version: the worker reports vLLM "0.11.1"/,
    );
    expect(decodeCompletions(r)).toEqual([]);
    expect(await pulled(r.dSim)).toBe(0);
    expect(r.D.sidecar.status().verified).toBe(false);
    expect(await scrape(r.D.sidecar)).toContain('kvgate_sidecar_worker_restarts_total{role="decode",result="refused"} 1');
  });

  it('the same check guards requests served without disaggregation (a contract with no prefill leg)', async () => {
    const r = await startRig();
    r.dSim = await restartSimInPlace(r.dSim, { behaveAs: { engine: { version: '0.11.1' } } });
    const c = contractFor(r.D.config.fingerprint, null, { requestId: `launch-${++n}` });
    const res = await postJson(`${r.D.sidecar.url}/v1/completions`, ...bound(c, completion));
    expect([res.status, res.body.error.code]).toEqual([409, 'incompatible_transfer']);
    expect(res.body.error.message).toMatch(/decode worker restarted as something else/);
    expect(decodeCompletions(r)).toEqual([]);
  });

  it('restarted with another tokenizer: refused 409 naming both token counts, and its next probe finds out', async () => {
    const r = await startRig();
    r.dSim = await restartSimInPlace(r.dSim, { behaveAs: { tokenizer: { revision: 'tok-b' } } });
    const res = await send(r);
    expect([res.status, res.body.error.code]).toEqual([409, 'incompatible_transfer']);
    expect(res.body.error.message).toMatch(/prefill tokenized 19 tokens, this decode worker's tokenizer gives 16/);
    expect(decodeCompletions(r)).toEqual([]);
    expect(await pulled(r.dSim)).toBe(0);
    // The mismatch triggers a fresh probe of this worker, which the gate will see at its next poll.
    await vi.waitFor(() => expect(r.D.sidecar.status().verified).toBe(false), { timeout: 3_000 });
    expect(r.D.sidecar.status().reasons.join(' ')).toMatch(/tokenizer canary digest/);
  });

  it('restarted as the same revision: serves the baseline tokens, no false refusal', async () => {
    const r = await startRig();
    r.dSim = await restartSimInPlace(r.dSim);
    const expected = await baseline(r.dSim);
    const res = await send(r);
    expect(res.status).toBe(200);
    expect(res.body.choices[0].token_ids).toEqual(expected);
    expect(await pulled(r.dSim)).toBeGreaterThan(0);
    expect(r.D.sidecar.status().verified).toBe(true);
  });
});

describe('judging a launch (pure)', () => {
  const status = (s: Partial<SidecarStatus>): SidecarStatus =>
    ({ verified: true, reasons: [], measured: {}, engineId: null, ...s }) as SidecarStatus;

  it('goes on only for the verified launch, refuses the same launch once unverified, re-probes any other', () => {
    expect(judgeLaunch('prefill', status({ engineId: 'e1' }), 'e1').kind).toBe('ok');
    expect(judgeLaunch('prefill', status({ engineId: 'e1' }), 'e2').kind).toBe('reprobe');
    expect(judgeLaunch('prefill', status({ engineId: null }), 'e1').kind).toBe('reprobe');
    const stale = judgeLaunch('prefill', status({ engineId: 'e1', verified: false, reasons: ['model: other weights'] }), 'e1');
    expect(stale.kind === 'refuse' && [stale.error.code, stale.error.reason]).toEqual([
      'incompatible_transfer',
      'the prefill worker no longer matches its declared descriptor: model: other weights',
    ]);
    expect(judgeLaunch('decode', status({ measured: { 'engine.version': '0.11.0' } }), '0.11.0').kind).toBe('ok');
    expect(judgeLaunch('decode', status({ measured: { 'engine.version': '0.11.0' } }), '0.11.1').kind).toBe('reprobe');
  });

  it('a worker that stopped answering is a retryable worker failure (502), not a 409: nothing shows it became another revision', () => {
    const down = status({
      engineId: 'e1',
      verified: false,
      workerDown: true,
      reasons: ['the worker is down or unreachable: connect ECONNREFUSED'],
    });
    const judged = judgeLaunch('prefill', down, 'e1');
    expect(judged.kind === 'refuse' && [judged.error.code, judged.error.status]).toEqual(['worker_error', 502]);
    const after = restartRefusal('prefill', { ...down, engineId: null }, 'e2', 100);
    expect([after.code, after.reason]).toEqual([
      'worker_error',
      'the prefill worker stopped answering since it was verified (the worker is down or unreachable: connect ECONNREFUSED); nothing from it is used, retry on another endpoint',
    ]);
  });

  it('says why after the re-probe: changed, timed out, or restarted again meanwhile', () => {
    expect(restartRefusal('prefill', status({ verified: false, reasons: ['a', 'b'] }), 'e2', 100).reason).toBe(
      'prefill worker restarted as something else since it was verified: a; b',
    );
    expect(restartRefusal('decode', undefined, '0.12.0', 100).reason).toMatch(
      /it now reports vLLM "0.12.0"\), and a fresh probe did not finish within 100 ms/,
    );
    expect(restartRefusal('prefill', status({ engineId: 'e3' }), 'e2', 100).reason).toMatch(
      /restarted again .* saw NIXL engine e2, the fresh probe checked NIXL engine e3/,
    );
  });
});
