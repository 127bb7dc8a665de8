/**
 * Issue 8, tenancy and contracts through the full topology: prefix-cache reuse only inside one tenant's group
 * (the gate's per-tenant `cache_salt`), a contract or attestation of one tenant presented for another, and contracts
 * replayed after their request finished or after they expired. Where the topology cannot express the fault (a
 * worker scoped to other tenants, a prefill side that answers with another tenant's attestation) a sidecar is
 * started beside revision A's real workers, with the demo's keys, exactly as the topology starts its own.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { groupIdOf } from '../../src/compat/fingerprint.js';
import { deriveCacheSalt } from '../../src/contract/cache-salt.js';
import { mintContract, type TransferContract } from '../../src/contract/contract.js';
import { gateSigned } from '../../src/contract/testing.js';
import { baseline, completion, firstDivergence, post, PROMPTS, tokenIds } from '../../testbed/demo/scenarios.js';
import { TOY_PROXY_PREFILL_KV } from '../../testbed/sim/testing.js';
import { DEMO_KEY_SEED, loadExampleDescriptor, SERVED_MODEL, startTopology, type Topology } from '../../testbed/demo/topology.js';
import { H } from '../../src/headers.js';
import { parseSidecarConfig, type SidecarConfigInput } from '../../src/sidecar/config.js';
import { createSidecar, type Sidecar } from '../../src/sidecar/server.js';
import { client, complete, counter, silent } from './failure-matrix-support.js';

const SHARED = 'You are the support assistant of a company that runs disaggregated inference. '.repeat(6);
const LONG = [
  `${SHARED}Question: what does a KV cache hold?`,
  `${SHARED}Question: why must prefill and decode agree?`,
  `${SHARED}Question: who may reuse a cached prefix?`,
] as const;

let t: Topology;
const extra: Array<{ close(): Promise<void> }> = [];
beforeAll(async () => {
  t = await startTopology({ logger: silent, candidateWeight: 0, sidecarProbeIntervalMs: 60_000 });
});
afterAll(async () => {
  for (const x of extra.reverse()) await x.close();
  await t.close();
});

/** Contract fields for a request of `tenant` bound to revision A, as the gate would mint them. */
function contractFields(
  requestId: string,
  tenant: string,
  edit: Partial<Omit<TransferContract, 'kind'>> = {},
): Omit<TransferContract, 'kind'> {
  const fingerprint = t.gate.policy.current().revisions.get('llama-a')!.fingerprint;
  const tenantScope = `tenant:${tenant}`;
  const now = Date.now();
  return {
    requestId,
    groupId: groupIdOf(fingerprint, tenantScope),
    fingerprint,
    tenantScope,
    tenant,
    model: SERVED_MODEL,
    revision: 'llama-a',
    adapter: null,
    // Placeholders until a body is bound (gateSigned).
    cacheSaltDigest: '0'.repeat(64),
    promptDigest: '0'.repeat(64),
    issuedAtMs: now,
    expiresAtMs: now + 30_000,
    decode: { cluster: 'a_decode', endpoint: t.worker('llama-a', 'decode').address },
    prefill: { cluster: 'a_prefill', endpoint: t.worker('llama-a', 'prefill').address },
    ...edit,
  };
}

/** A sidecar beside revision A's worker of `role`, with overrides (scopes, direct prefill...). */
async function extraSidecar(role: 'prefill' | 'decode', overrides: Partial<SidecarConfigInput> = {}): Promise<Sidecar> {
  const cfg = parseSidecarConfig(
    {
      role,
      worker: t.worker('llama-a', role).sim.url,
      listen: '127.0.0.1:0',
      admin: '',
      metrics: '',
      descriptor: await loadExampleDescriptor('llama-a'),
      servedModelName: SERVED_MODEL,
      keys: { devSeed: DEMO_KEY_SEED },
      probe: { intervalMs: 60_000, timeoutMs: 2_000, generation: 'declared' },
      ...overrides,
    },
    `extra ${role} sidecar`,
  );
  if (!cfg.ok) throw new Error(JSON.stringify(cfg.error));
  const s = await createSidecar(cfg.value, { logger: silent, registry: new Registry(), keys: t.keys });
  extra.push(s);
  return s;
}

/** A prefill leg exactly as a decode sidecar sends it (prefill body shape, contract, request id). */
function legBody(prompt: string): Record<string, unknown> {
  return {
    ...completion(prompt, 1),
    stream: false,
    kv_transfer_params: TOY_PROXY_PREFILL_KV,
  };
}

/** A prefill leg's body as a decode sidecar sends it, with the contract the gate would have minted for it. */
function signedLeg(
  fields: Omit<TransferContract, 'kind'>,
  prompt: string = PROMPTS[2],
): { contract: string; body: Record<string, unknown> } {
  return gateSigned(t.keys, fields, legBody(prompt));
}

function prefillLeg(
  url: string,
  requestId: string,
  leg: { contract: string; body: Record<string, unknown> },
  headers: Record<string, string> = {},
) {
  return post(`${url}/v1/completions`, leg.body, { 'x-request-id': requestId, [H.contract]: leg.contract, ...headers });
}

describe('partial prefix-cache reuse', () => {
  it('reuses a cached prefix only for the same tenant and group; every answer has the baseline token ids', async () => {
    const P = t.worker('llama-a', 'prefill').sim;
    const D = t.worker('llama-a', 'decode').sim;
    const expected = await Promise.all(LONG.map(async (p) => baseline(t, 'llama-a', p, 8)));
    const tokens = await Promise.all(
      LONG.map(async (prompt) => (await post(`${D.url}/tokenize`, { model: SERVED_MODEL, prompt })).json.tokens as number[]),
    );
    const common = tokens[1]!.findIndex((id, i) => id !== tokens[0]![i]);
    const sharedBlocks = Math.floor(common / 16);
    expect(sharedBlocks).toBeGreaterThanOrEqual(4);
    P.resetPrefixCache();
    D.resetPrefixCache();
    const read = async () => ({
      pHits: await counter(P.url, 'vllm:prefix_cache_hits_total'),
      dHits: await counter(D.url, 'vllm:prefix_cache_hits_total'),
      pulled: await counter(D.url, 'kvgate_sim_kv_blocks_pulled_total'),
    });
    const steps: Array<{ tenant: string; pHits: number; dHits: number; pulled: number }> = [];
    for (const [i, tenant] of [
      [0, 'acme'],
      [1, 'acme'],
      [2, 'globex'],
    ] as const) {
      const before = await read();
      const r = await complete(t, LONG[i], 8, client(tenant, `reuse-${tenant}`));
      expect(r.status, JSON.stringify(r.json)).toBe(200);
      expect(firstDivergence(tokenIds(r), expected[i]!)).toBe(-1);
      const after = await read();
      steps.push({ tenant, pHits: after.pHits - before.pHits, dHits: after.dHits - before.dHits, pulled: after.pulled - before.pulled });
    }
    const blocks = tokens.map((x) => Math.ceil(x.length / 16));
    expect(steps).toEqual([
      // Cold: P computes everything, D pulls every block.
      { tenant: 'acme', pHits: 0, dHits: 0, pulled: blocks[0] },
      // Same tenant, same group: P reuses the shared prefix and D reads only the blocks it lacks.
      { tenant: 'acme', pHits: sharedBlocks * 16, dHits: sharedBlocks * 16, pulled: blocks[1]! - sharedBlocks },
      // Another tenant, same prefix: another cache_salt, so nothing is reused on either side.
      { tenant: 'globex', pHits: 0, dHits: 0, pulled: blocks[2] },
    ]);
  });
});

describe('one tenant presented for another', () => {
  it("on the internal listener a contract is refused for another tenant's request, before any prefill", async () => {
    const P = t.worker('llama-a', 'prefill').sim;
    const promptBefore = await counter(P.url, 'vllm:prompt_tokens_total');
    const acmeContract = signedLeg(contractFields('acme-req-1', 'acme'));
    // The globex request's id, its tenant header and its group header, with acme's contract.
    const globexGroup = contractFields('globex-req-1', 'globex').groupId;
    const r = await prefillLeg(t.internalUrl, 'globex-req-1', acmeContract, { 'x-tenant-id': 'globex', [H.group]: globexGroup });
    expect([r.status, r.json.error?.code, r.headers.get(H.rejectReason)]).toEqual([403, 'contract_invalid', 'contract_invalid']);
    expect(r.json.error.message).toMatch(/minted for request acme-req-1, not globex-req-1/);
    // Straight to the prefill sidecar (a caller inside the cluster, no gate): the stamped group is globex's, not the contract's.
    const direct = await prefillLeg(`http://${t.worker('llama-a', 'prefill').address}`, 'acme-req-1', acmeContract, {
      [H.group]: globexGroup,
    });
    expect([direct.status, direct.json.error?.code]).toEqual([409, 'mixed_revision']);
    expect(await counter(P.url, 'vllm:prompt_tokens_total')).toBe(promptBefore);
  });

  it("a worker scoped to other tenants refuses a contract for acme's scope: 403 tenant_scope_denied, worker untouched", async () => {
    const P = t.worker('llama-a', 'prefill').sim;
    const scoped = await extraSidecar('prefill', { tenantScopes: ['tenant:globex'] });
    const promptBefore = await counter(P.url, 'vllm:prompt_tokens_total');
    const r = await prefillLeg(scoped.url, 'acme-req-2', signedLeg(contractFields('acme-req-2', 'acme')));
    expect([r.status, r.json.error?.code]).toEqual([403, 'tenant_scope_denied']);
    expect(r.json.error.message).toMatch(/not tenant:acme/);
    expect(await counter(scoped.url, 'kvgate_sidecar_contract_failures_total', { reason: 'tenant_scope' })).toBe(1);
    expect(await counter(P.url, 'vllm:prompt_tokens_total')).toBe(promptBefore);
  });

  it("an attestation signed for acme's request is refused for globex's, before the decode worker reads any KV", async () => {
    const D = t.worker('llama-a', 'decode').sim;
    const requestId = 'shared-id-1';
    // A genuine prefill for acme through Envoy's internal listener: its answer carries a signed attestation for acme.
    const acme = await prefillLeg(t.internalUrl, requestId, signedLeg(contractFields(requestId, 'acme'), PROMPTS[4]));
    expect(acme.status).toBe(200);
    expect(typeof acme.json.kv_transfer_params?.kvgate).toBe('string');
    // A prefill side that answers globex's leg with acme's KV and attestation (a replay, or a confused worker).
    const fake = http.createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify(acme.json));
      });
    });
    await new Promise<void>((resolve) => fake.listen(0, '127.0.0.1', resolve));
    extra.push({ close: () => new Promise<void>((resolve) => fake.close(() => resolve())) });
    const decode = await extraSidecar('decode', {
      prefill: { via: 'direct', maxAttempts: 1, backoffMs: 0, maxBackoffMs: 0, timeoutMs: 5_000 },
    });
    const globex = contractFields(requestId, 'globex', {
      prefill: { cluster: 'a_prefill', endpoint: `127.0.0.1:${(fake.address() as AddressInfo).port}` },
    });
    const pulledBefore = await counter(D.url, 'kvgate_sim_kv_blocks_pulled_total');
    const generatedBefore = await counter(D.url, 'vllm:generation_tokens_total');
    const signed = gateSigned(t.keys, globex, completion(PROMPTS[4], 8));
    const r = await post(`${decode.url}/v1/completions`, signed.body, {
      'x-request-id': requestId,
      [H.contract]: signed.contract,
      [H.group]: globex.groupId,
    });
    expect([r.status, r.json.error?.code]).toEqual([409, 'attestation_invalid']);
    expect(r.json.error.message).toMatch(/scoped to tenant:acme, the contract to tenant:globex/);
    expect(await counter(decode.url, 'kvgate_sidecar_attestation_failures_total', { reason: 'tenant_mismatch' })).toBe(1);
    expect(await counter(D.url, 'kvgate_sim_kv_blocks_pulled_total')).toBe(pulledBefore);
    expect(await counter(D.url, 'vllm:generation_tokens_total')).toBe(generatedBefore);
  });
});

describe('replayed and expired contracts', () => {
  it('on the public listener a replayed contract is removed: the request is bound afresh with baseline ids', async () => {
    const requestId = 'replay-public-1';
    const old = mintContract(contractFields(requestId, 'globex'), t.keys);
    const r = await complete(t, PROMPTS[3], 8, client('acme', 'replay', { 'x-request-id': requestId, [H.contract]: old }));
    expect(r.status).toBe(200);
    // Bound to acme's group (the trusted tenant header), not to the globex group the replayed contract named.
    expect(r.headers.get(H.group)).toBe(contractFields(requestId, 'acme').groupId);
    expect(firstDivergence(tokenIds(r), await baseline(t, 'llama-a', PROMPTS[3], 8))).toBe(-1);
  });

  it('an expired contract sent straight to a prefill sidecar is 403 contract_invalid, counted by reason', async () => {
    const sidecar = `http://${t.worker('llama-a', 'prefill').address}`;
    const before = await counter(sidecar, 'kvgate_sidecar_contract_failures_total', { reason: 'expired' });
    const now = Date.now();
    const expired = signedLeg(contractFields('expired-direct-1', 'acme', { issuedAtMs: now - 120_000, expiresAtMs: now - 60_000 }));
    const r = await prefillLeg(sidecar, 'expired-direct-1', expired);
    expect([r.status, r.json.error?.code]).toEqual([403, 'contract_invalid']);
    expect(r.json.error.message).toMatch(/expired/);
    expect(await counter(sidecar, 'kvgate_sidecar_contract_failures_total', { reason: 'expired' })).toBe(before + 1);
  });

  it("a finished request's contract replayed to the prefill side is refused, through Envoy or straight to the sidecar", async () => {
    const P = t.worker('llama-a', 'prefill').sim;
    const sidecar = `http://${t.worker('llama-a', 'prefill').address}`;
    const requestId = 'replay-internal-1';
    const contract = signedLeg(contractFields(requestId, 'acme'));
    const first = await prefillLeg(t.internalUrl, requestId, contract);
    expect(first.status).toBe(200);
    const promptBefore = await counter(P.url, 'vllm:prompt_tokens_total');
    const replayedBefore = await counter(sidecar, 'kvgate_sidecar_contract_failures_total', { reason: 'replayed' });
    // The same leg again, through Envoy and straight to the sidecar: admitted once only.
    const viaEnvoy = await prefillLeg(t.internalUrl, requestId, contract);
    const direct = await prefillLeg(sidecar, requestId, contract);
    for (const r of [viaEnvoy, direct]) {
      expect([r.status, r.json.error?.code]).toEqual([403, 'contract_invalid']);
      expect(r.json.error.message).toMatch(/already admitted/);
    }
    expect(await counter(sidecar, 'kvgate_sidecar_contract_failures_total', { reason: 'replayed' })).toBe(replayedBefore + 2);
    // With another prompt it is refused just the same, from its headers, before the body is read.
    const other = await prefillLeg(sidecar, requestId, { contract: contract.contract, body: { ...contract.body, prompt: PROMPTS[0] } });
    expect([other.status, other.json.error?.code]).toEqual([403, 'contract_invalid']);
    expect(other.json.error.message).toMatch(/already admitted/);
    // A contract this worker never admitted buys no other prompt either: it binds the prompt the gate saw.
    const unused = signedLeg(contractFields('replay-internal-2', 'acme'));
    const swapped = await prefillLeg(sidecar, 'replay-internal-2', {
      contract: unused.contract,
      body: { ...unused.body, prompt: PROMPTS[0] },
    });
    expect([swapped.status, swapped.json.error?.code]).toEqual([403, 'contract_invalid']);
    expect(swapped.json.error.message).toMatch(/prompt is not the one the gate saw/);
    expect(await counter(P.url, 'vllm:prompt_tokens_total')).toBe(promptBefore);
  });
});

describe("a contract binds its tenant's cache scope and prompt (cross-tenant prefix-cache probing)", () => {
  it("globex's contract with acme's cache_salt, or with no salt, is refused at both sidecars before any worker call", async () => {
    const P = t.worker('llama-a', 'prefill');
    const D = t.worker('llama-a', 'decode');
    const promptBefore = [await counter(P.sim.url, 'vllm:prompt_tokens_total'), await counter(D.sim.url, 'vllm:prompt_tokens_total')];
    const acmeSalt = deriveCacheSalt(t.keys, contractFields('x', 'acme').groupId, 'tenant:acme');
    const attempts = [
      { url: `http://${P.address}`, id: 'globex-probe-p', body: legBody(PROMPTS[4]) },
      { url: `http://${D.address}`, id: 'globex-probe-d', body: completion(PROMPTS[4], 8) },
    ];
    for (const a of attempts) {
      // globex's genuine contract for this very prompt (what the gate mints for a globex request)...
      const globex = gateSigned(t.keys, contractFields(a.id, 'globex', { prefill: null }), a.body);
      const send = (body: Record<string, unknown>) =>
        post(`${a.url}/v1/completions`, body, { 'x-request-id': a.id, [H.contract]: globex.contract });
      // ...presented with acme's salt (to read acme's cached prefixes), and with no salt (the unsalted, shared cache).
      const salted = await send({ ...globex.body, cache_salt: acmeSalt });
      expect([salted.status, salted.json.error?.code]).toEqual([403, 'contract_invalid']);
      expect(salted.json.error.message).toMatch(/cache_salt is not the one the contract/);
      const { cache_salt: _dropped, ...unsalted } = globex.body;
      const bare = await send(unsalted);
      expect([bare.status, bare.json.error?.code]).toEqual([403, 'contract_invalid']);
      expect(bare.json.error.message).toMatch(/has no cache_salt/);
      expect(await counter(a.url, 'kvgate_sidecar_contract_failures_total', { reason: 'salt_mismatch' })).toBe(1);
      expect(await counter(a.url, 'kvgate_sidecar_contract_failures_total', { reason: 'salt_missing' })).toBe(1);
    }
    // Neither worker computed a single prompt token for the probes.
    expect([await counter(P.sim.url, 'vllm:prompt_tokens_total'), await counter(D.sim.url, 'vllm:prompt_tokens_total')]).toEqual(
      promptBefore,
    );
  });
});
