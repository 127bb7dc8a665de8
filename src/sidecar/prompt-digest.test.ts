/**
 * A decode worker whose tokenizer changed but still counts the prompt the same: the prompt token count in the
 * attestation cannot see it, the digest of the prompt token ids can. Real simulated workers, the prefill leg in
 * direct mode; the refusal comes before the decode worker consumes any KV.
 */
import { afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import type { CompatDescriptorInput } from '../compat/descriptor.js';
import { promptTokenDigestOf, verifyAttestation } from '../contract/attestation.js';
import { verifyContract } from '../contract/contract.js';
import { metricValue, postJson, scrape, startTestSim, testDescriptor } from '../../testbed/sim/testing.js';
import type { SimServer } from '../../testbed/sim/server.js';
import { resolveTokenizerProfile } from '../../testbed/sim/tokenizer.js';
import { PREFILL_KV_PARAMS } from './openai-body.js';
import { measureCanaries } from './probe.js';
import {
  contractFor,
  endpointOf,
  restartSimInPlace,
  sidecarConfigFor,
  startTestSidecar,
  TEST_KEYS,
  type TestSidecar,
  bound,
} from './testing.js';

const MODEL = '/models/acme-llama-3-8b';
const PROMPT = 'The quick brown fox jumps over the lazy dog. Kubernetes operators reconcile state.';
const MESSAGES = [{ role: 'user', content: 'Explain KV caches in one sentence, please.' }];
const completion = { model: MODEL, prompt: PROMPT, max_tokens: 8 };
const chat = { model: MODEL, messages: MESSAGES, max_tokens: 8 };

/**
 * A tokenizer revision that keeps prompt token counts: the simulator picks a revision's base encoding from
 * sha256(`id@revision`) and renumbers its ids by an affine bijection from the same hash (testbed/sim/tokenizer.ts), so a
 * revision with the declared one's base encoding tokenizes every text into as many tokens, with other ids. The
 * first such candidate is found deterministically (today `tok-a-retrained-7`); the test checks the property on
 * real workers below, so a change in the simulator's derivation fails loudly here rather than passing vacuously.
 */
function sameCountRevision(): string {
  const declared = testDescriptor().tokenizer;
  const base = resolveTokenizerProfile(declared);
  for (let i = 0; i < 64; i++) {
    const revision = `tok-a-retrained-${i}`;
    const p = resolveTokenizerProfile({ id: declared.id, revision });
    if (p.encoding === base.encoding && (p.permutation?.a !== base.permutation?.a || p.permutation?.b !== base.permutation?.b))
      return revision;
  }
  throw new Error('no same-encoding tokenizer revision among 64 candidates; the simulator changed how it derives tokenizers');
}
const SAME_COUNT = sameCountRevision();

let withCanaries: CompatDescriptorInput;
beforeAll(async () => {
  // The declaration carries canary digests, as `kvgate fingerprint` records them, so a re-probe can tell.
  const honest = await startTestSim();
  const m = await measureCanaries(honest.url);
  await honest.close();
  expect(m.errors).toEqual({});
  withCanaries = testDescriptor({ canaries: m.digests });
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

/** `declared === undefined`: no canaries at all, which only the explicit `trust: declared-only` accepts. */
async function startRig(declared: CompatDescriptorInput | undefined, decodeSim: Record<string, unknown> = {}): Promise<Rig> {
  const [pSim, dSim] = await Promise.all([startTestSim(), startTestSim({}, decodeSim)]);
  const descriptor = declared === undefined ? { trust: 'declared-only' as const } : { descriptor: declared };
  const P = await startTestSidecar(sidecarConfigFor(pSim, 'prefill', descriptor));
  const D = await startTestSidecar(sidecarConfigFor(dSim, 'decode', descriptor));
  rig = { pSim, dSim, P, D };
  return rig;
}

let n = 0;
function send(r: Rig, path: string, body: Record<string, unknown>) {
  const c = contractFor(r.D.config.fingerprint, endpointOf(r.P.sidecar.url), { requestId: `digest-${++n}` });
  return postJson(`${r.D.sidecar.url}${path}`, ...bound(c, body));
}

async function tokenize(sim: SimServer, body: Record<string, unknown>): Promise<number[]> {
  const r = await postJson(`${sim.url}/tokenize`, body);
  expect(r.status).toBe(200);
  return r.body.tokens as number[];
}

const decodeCompletions = (r: Rig) =>
  r.D.spy.workCalls(r.dSim.url).filter((c) => /\/v1\/(chat\/)?completions$/.test(c.url) && c.headers['x-request-id'] !== undefined);
const pulled = async (sim: SimServer) => metricValue(await scrape(sim), 'kvgate_sim_kv_blocks_pulled_total');

describe('a decode tokenizer change that keeps the prompt token count', () => {
  it('is refused 409 before any KV is consumed, where the count check alone would have passed, and re-probes the worker', async () => {
    const r = await startRig(withCanaries);
    expect(r.D.sidecar.status().verified).toBe(true);
    r.dSim = await restartSimInPlace(r.dSim, { behaveAs: { tokenizer: { revision: SAME_COUNT } } });
    // Same count, other ids: the property this test stands on, checked on the live workers.
    const prefillIds = await tokenize(r.pSim, { model: MODEL, prompt: PROMPT });
    const decodeIds = await tokenize(r.dSim, { model: MODEL, prompt: PROMPT });
    expect(decodeIds).toHaveLength(prefillIds.length);
    expect(decodeIds).not.toEqual(prefillIds);

    // The count check alone passes the prefill side's attestation for this decode worker; the ids do not.
    const c = contractFor(r.D.config.fingerprint, endpointOf(r.P.sidecar.url), { requestId: `digest-${++n}` });
    const [prefillBody, headers] = bound(c, { ...completion, max_tokens: 1, stream: false, kv_transfer_params: { ...PREFILL_KV_PARAMS } });
    const prefilled = await postJson(`${r.P.sidecar.url}/v1/completions`, prefillBody, headers);
    expect(prefilled.status).toBe(200);
    const contract = verifyContract(headers['x-kvgate-contract']!, TEST_KEYS, Date.now());
    if (!contract.ok) throw new Error('the test contract does not verify');
    const token = (prefilled.body.kv_transfer_params as Record<string, unknown>)['kvgate'] as string;
    const expect0 = { contract: contract.value, fingerprint: r.D.config.fingerprint, promptTokens: decodeIds.length };
    expect(verifyAttestation(token, TEST_KEYS, Date.now(), expect0).ok).toBe(true);
    const withIds = verifyAttestation(token, TEST_KEYS, Date.now(), { ...expect0, promptTokenDigest: promptTokenDigestOf(decodeIds) });
    expect(withIds.ok ? 'ok' : withIds.error.reason).toBe('prompt_tokens_mismatch');

    // Through the decode sidecar: refused before its worker runs anything but /tokenize.
    const res = await send(r, '/v1/completions', completion);
    expect([res.status, res.body.error.code]).toEqual([409, 'incompatible_transfer']);
    expect(res.body.error.message).toMatch(
      new RegExp(
        `^prefill and this decode worker tokenized the prompt into different token ids \\(same count ${decodeIds.length}\\): tokenizer or chat template differ`,
      ),
    );
    expect(decodeCompletions(r)).toEqual([]);
    expect(await pulled(r.dSim)).toBe(0);
    expect(await scrape(r.D.sidecar)).toContain('kvgate_sidecar_attestation_failures_total{reason="prompt_tokens_mismatch"} 1');
    // Like a count mismatch, the refusal starts a fresh probe of this worker: its tokenizer canary finds the change.
    await vi.waitFor(() => expect(r.D.sidecar.status().verified).toBe(false), { timeout: 3_000 });
    expect(r.D.sidecar.status().reasons.join(' ')).toMatch(/tokenizer canary digest/);
  });

  it('is refused for chat prompts too, on every request, when no canary can tell the workers apart', async () => {
    // Declared without canaries and lying about its tokenizer revision: only the attestation can see it.
    const r = await startRig(undefined, { behaveAs: { tokenizer: { revision: SAME_COUNT } } });
    const chatIds = await tokenize(r.dSim, { model: MODEL, messages: MESSAGES });
    expect(chatIds).toHaveLength((await tokenize(r.pSim, { model: MODEL, messages: MESSAGES })).length);
    for (const [path, body, count] of [
      ['/v1/chat/completions', chat, chatIds.length],
      ['/v1/completions', completion, (await tokenize(r.dSim, { model: MODEL, prompt: PROMPT })).length],
    ] as const) {
      const res = await send(r, path, body);
      expect([res.status, res.body.error.code]).toEqual([409, 'incompatible_transfer']);
      expect(res.body.error.message).toContain(`different token ids (same count ${count})`);
    }
    expect(decodeCompletions(r)).toEqual([]);
    expect(await pulled(r.dSim)).toBe(0);
  });

  it('an unchanged decode worker is not refused (equal ids, equal digests): the non-disaggregated baseline, KV pulled', async () => {
    const r = await startRig(undefined);
    const base = await postJson(`${r.dSim.url}/v1/chat/completions`, { ...chat, return_token_ids: true });
    r.dSim.resetPrefixCache();
    const res = await send(r, '/v1/chat/completions', { ...chat, return_token_ids: true });
    expect(res.status).toBe(200);
    expect(res.body.choices[0].token_ids).toEqual(base.body.choices[0].token_ids);
    expect(res.body.prompt_token_ids).toEqual(await tokenize(r.dSim, { model: MODEL, messages: MESSAGES }));
    expect(await pulled(r.dSim)).toBeGreaterThan(0);
  });
});
