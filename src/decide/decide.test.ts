import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { verifyBinding } from '../contract/binding.js';
import { deriveCacheSalt } from '../contract/cache-salt.js';
import { verifyContract } from '../contract/contract.js';
import { groupIdOf } from '../compat/fingerprint.js';
import type { CompiledRouteTable } from '../policy/compile.js';
import {
  clone,
  compiledFixture,
  fp8DynamicDescriptorInput,
  tableFromValue,
  testDescriptorInput,
  twoRevisionTableValue,
} from '../policy/testing.js';
import { decide } from './decide.js';
import { decideRequest } from './decide-request.js';
import { createTestWorkerView, testFacts, testKeys, type TestFactsInput } from './testing.js';
import { TEST_NOW_MS } from '../../test/support/clock.js';
import type { CoreDecision, Refusal, RouteDecision } from './types.js';
import type { WorkerView } from './worker-view.js';

type Value = Record<string, any>;
const keys = testKeys();
const ctx = { nowMs: TEST_NOW_MS, keys };

function compiled(mutate: (v: Value) => void = () => {}, semantic = true): CompiledRouteTable {
  const v = clone(twoRevisionTableValue()) as Value;
  mutate(v);
  return tableFromValue(v, { semantic });
}
const onlyA = compiled((v) => (v['models']['llama-3-8b']['rollout'] = { stable: 'llama-a' }));
const onlyB = compiled((v) => (v['models']['llama-3-8b']['rollout'] = { stable: 'llama-b' }));

function run(table: CompiledRouteTable, input: TestFactsInput = {}, view: WorkerView = createTestWorkerView(table)): CoreDecision {
  return decide(testFacts({ tenant: 'acme', ...input }), table, view, ctx);
}
function route(d: CoreDecision): RouteDecision {
  if (d.kind !== 'route') throw new Error(`expected a route, got ${JSON.stringify(d)}`);
  return d;
}
function refusal(d: CoreDecision): Refusal {
  if (d.kind !== 'refuse') throw new Error(`expected a refusal, got ${JSON.stringify(d)}`);
  return d;
}
const fpOf = (t: CompiledRouteTable, r: string) => t.revisions.get(r)!.fingerprint;

describe('decide: routes inside one group', () => {
  it('A only: binds to llama-a and picks A prefill and decode, with a verifiable contract and binding', () => {
    const d = route(run(onlyA, { requestId: 'r-a', cacheSalt: 'mine' }));
    const fp = fpOf(onlyA, 'llama-a');
    expect(d.group).toEqual({
      id: groupIdOf(fp, 'tenant:acme'),
      fingerprint: fp,
      tenantScope: 'tenant:acme',
      tenant: 'acme',
      model: 'llama-3-8b',
      revision: 'llama-a',
      adapter: null,
    });
    expect(d.decode.cluster).toBe('a_decode');
    expect(d.prefill?.cluster).toBe('a_prefill');
    expect(['10.0.2.1:9090', '10.0.2.2:9090']).toContain(d.decode.endpoint);
    const c = verifyContract(d.contract, keys, TEST_NOW_MS, { requestId: 'r-a', groupId: d.group.id });
    expect(c.ok && c.value).toMatchObject({
      revision: 'llama-a',
      decode: { cluster: 'a_decode', endpoint: d.decode.endpoint },
      prefill: { cluster: 'a_prefill', endpoint: d.prefill!.endpoint },
      expiresAtMs: TEST_NOW_MS + 30000,
    });
    const b = verifyBinding(d.binding, keys, TEST_NOW_MS, { model: 'llama-3-8b', tenantScope: 'tenant:acme' });
    expect(b.ok && b.value.revision).toBe('llama-a');
    expect(d.cacheSalt).toBe(deriveCacheSalt(keys, d.group.id, 'tenant:acme', 'mine'));
    expect(d.cacheSalt).not.toBe(deriveCacheSalt(keys, d.group.id, 'tenant:acme'));
    expect(d.trace.join('\n')).toMatch(
      /tenant: acme \(from header x-tenant-id\)[\s\S]*revision: llama-a[\s\S]*group: g_[\s\S]*decode: [\s\S]*prefill: /,
    );
  });

  it('B only: binds to llama-b and never leaves it', () => {
    for (let i = 0; i < 50; i++) {
      const d = route(run(onlyB, { requestId: `r-${i}` }));
      expect(d.group.revision).toBe('llama-b');
      expect([d.decode.cluster, d.prefill?.cluster]).toEqual(['b_decode', 'b_prefill']);
    }
  });

  it('gives two tenants on the same revision different groups and salts', () => {
    const acme = route(run(onlyA));
    const globex = route(run(onlyA, { tenant: 'globex' }));
    expect(acme.group.fingerprint).toBe(globex.group.fingerprint);
    expect(acme.group.id).not.toBe(globex.group.id);
    expect(acme.cacheSalt).not.toBe(globex.cacheSalt);
  });

  it('mixed pool: an endpoint whose live fingerprint differs is never used, even when it is the least loaded', () => {
    const view = createTestWorkerView(onlyA, {
      '10.0.2.1:9090': { fingerprint: fpOf(onlyA, 'llama-b') },
      '10.0.2.2:9090': { inFlight: 40 },
    });
    for (let i = 0; i < 50; i++) expect(route(run(onlyA, { requestId: `r-${i}` }, view)).decode.endpoint).toBe('10.0.2.2:9090');
    view.set('10.0.2.2:9090', { fingerprint: fpOf(onlyA, 'llama-b') });
    const r = refusal(run(onlyA, {}, view));
    expect(r.code).toBe('no_compatible_capacity');
    expect(r.message).toMatch(
      /^no decode endpoint of group g_[0-9a-f]+ \(model llama-3-8b, revision llama-a\) is available: pool a-decode: 2 endpoints \(10\.0\.2\.1:9090, 10\.0\.2\.2:9090\) are running another fingerprint \([0-9a-f]{12}…\), never used for this group; retry after 5 s or ask the operator to add capacity$/,
    );
  });

  it('skips unverified, unobserved and draining endpoints, and endpoints at their in-flight limit', () => {
    const t = compiled((v) => (v['pools'][1]['maxInFlightPerEndpoint'] = 4));
    const view = createTestWorkerView(t, { '10.0.2.1:9090': { verified: false }, '10.0.2.2:9090': { inFlight: 4 } });
    const r = refusal(run(t, {}, view));
    expect(r.message).toMatch(
      /pool a-decode: endpoint 10\.0\.2\.1:9090 is not verified; pool a-decode: endpoint 10\.0\.2\.2:9090 is at its in-flight limit of 4/,
    );
    view.set('10.0.2.1:9090', { verified: true, fingerprint: null });
    expect(refusal(run(t, {}, view)).message).toMatch(/endpoint 10\.0\.2\.1:9090 is not yet observed/);
    view.set('10.0.2.1:9090', { fingerprint: fpOf(t, 'llama-a'), draining: true });
    expect(refusal(run(t, {}, view)).message).toMatch(/endpoint 10\.0\.2\.1:9090 is draining/);
    view.set('10.0.2.2:9090', { inFlight: 3 });
    expect(route(run(t, {}, view)).decode.endpoint).toBe('10.0.2.2:9090');
  });

  it('drained pool: refuses with 503, the reason, and retry-after from the fallback chain', () => {
    const t = compiled((v) => {
      v['models']['llama-3-8b']['rollout'] = { stable: 'llama-b' };
      v['pools'][3]['draining'] = true;
      v['fallback'] = [{ queue: { deadlineMs: 1000, maxDepth: 10 } }, { refuse: { retryAfterSeconds: 7 } }];
    });
    const r = refusal(run(t));
    expect(r).toMatchObject({ code: 'no_compatible_capacity', retryAfterSeconds: 7, tenant: 'acme' });
    expect(r.message).toMatch(
      /^no decode endpoint of group g_[0-9a-f]+ \(model llama-3-8b, revision llama-b\) is available: pool b-decode is draining; the fallback queue was skipped \(nothing_to_wait_for\): no decode endpoint of the group is merely at its in-flight limit, so waiting frees nothing \(pool b-decode is draining\); retry after 7 s or ask the operator to add capacity$/,
    );
    expect(r.trace).toContain(
      'fallback step 1 (queue): passed: no decode endpoint of the group is merely at its in-flight limit, so waiting frees nothing (pool b-decode is draining)',
    );
    expect(r.trace).toContain('fallback step 2 (refuse): refuse with retry-after 7 s');
  });

  it('a drained prefill pool is refused too: the decode worker is never handed a request without its prefill', () => {
    const r = refusal(
      run(compiled((v) => ((v['models']['llama-3-8b']['rollout'] = { stable: 'llama-a' }), (v['pools'][0]['draining'] = true)))),
    );
    expect(r.message).toMatch(/^no prefill endpoint of group .* revision llama-a\) is available: pool a-prefill is draining;/);
  });

  it('a both pool serves without disaggregation when no separate prefill capacity exists', () => {
    const t = compiled((v) => {
      v['models']['llama-3-8b']['rollout'] = { stable: 'llama-b' };
      v['pools'].splice(2, 2, {
        name: 'b-both',
        cluster: 'b_both',
        role: 'both',
        revision: 'llama-b',
        endpoints: [{ address: '10.0.6.1:9090' }],
      });
    });
    const d = route(run(t));
    expect(d.decode).toEqual({ pool: 'b-both', cluster: 'b_both', endpoint: '10.0.6.1:9090' });
    expect(d.prefill).toBeNull();
    const c = verifyContract(d.contract, keys, TEST_NOW_MS);
    expect(c.ok && c.value.prefill).toBeNull();
  });

  it('a both pool acts as the prefill side for a decode pool when no prefill-role capacity exists', () => {
    const t = compiled((v) => {
      v['models']['llama-3-8b']['rollout'] = { stable: 'llama-a' };
      v['pools'][0] = { name: 'a-both', cluster: 'a_both', role: 'both', revision: 'llama-a', endpoints: [{ address: '10.0.1.1:9090' }] };
    });
    const view = createTestWorkerView(t, { '10.0.1.1:9090': { inFlight: 9 } });
    const d = route(run(t, {}, view));
    expect(d.decode.cluster).toBe('a_decode');
    expect(d.prefill).toEqual({ pool: 'a-both', cluster: 'a_both', endpoint: '10.0.1.1:9090' });
  });
});

describe('decide: LoRA adapters', () => {
  it('routes a model name that names an adapter to its revision, and binds the adapter into the group', () => {
    const t = compiled((v) => {
      v['revisions']['sql-lora-r1'] = { descriptor: testDescriptorInput({ adapter: { id: 'acme/sql-lora', revision: 'r1' } }) };
      v['models']['llama-3-8b-sql'] = { tenants: ['acme'], rollout: { stable: 'sql-lora-r1' } };
      v['pools'].push(
        {
          name: 'sql-prefill',
          cluster: 'sql_prefill',
          role: 'prefill',
          revision: 'sql-lora-r1',
          endpoints: [{ address: '10.0.7.1:9090' }],
        },
        { name: 'sql-decode', cluster: 'sql_decode', role: 'decode', revision: 'sql-lora-r1', endpoints: [{ address: '10.0.8.1:9090' }] },
      );
    });
    const d = route(run(t, { model: 'llama-3-8b-sql' }));
    expect(d.group).toMatchObject({ model: 'llama-3-8b-sql', revision: 'sql-lora-r1', adapter: 'acme/sql-lora' });
    expect(d.group.fingerprint).not.toBe(fpOf(t, 'llama-a'));
    expect([d.decode.cluster, d.prefill?.cluster]).toEqual(['sql_decode', 'sql_prefill']);
    const c = verifyContract(d.contract, keys, TEST_NOW_MS);
    expect(c.ok && c.value.adapter).toBe('acme/sql-lora');
    expect(refusal(run(t, { model: 'llama-3-8b-sql', tenant: 'globex' })).code).toBe('tenant_scope_denied');
  });
});

describe('decide: refusals before any target is chosen', () => {
  const table = onlyA;

  it('missing tenant -> 401 tenant_required', () => {
    const r = refusal(decide(testFacts(), table, createTestWorkerView(table), ctx));
    expect(r.code).toBe('tenant_required');
    expect(r.message).toBe(
      'this gateway requires a tenant identity (header x-tenant-id) and the request has none; authenticate through the gateway so it is set',
    );
  });

  it('ambiguous tenant header -> 401 tenant_required', () => {
    expect(refusal(run(table, { tenant: 'acme,globex' })).message).toMatch(/carries more than one value/);
  });

  it('tenant not allowed for the model -> 403 tenant_scope_denied', () => {
    const r = refusal(run(table, { tenant: 'initech' }));
    expect(r).toMatchObject({
      code: 'tenant_scope_denied',
      tenant: 'initech',
      message: 'tenant initech may not use model llama-3-8b; ask the gateway operator for access',
    });
  });

  it('tenant allowed on the model but on none of its pools -> 403', () => {
    const t = compiled((v) => {
      v['models']['llama-3-8b']['rollout'] = { stable: 'llama-a' };
      for (const p of v['pools']) p['tenants'] = ['acme'];
      v['models']['llama-3-8b']['tenants'] = ['acme', 'globex'];
    }, false);
    expect(refusal(run(t, { tenant: 'globex' }))).toMatchObject({
      code: 'tenant_scope_denied',
      message: 'no pool serving model llama-3-8b is open to tenant globex; ask the gateway operator for access',
    });
  });

  it('unknown model -> 404 without listing tenant-restricted models, but says how to find them', () => {
    const r = refusal(run(table, { model: 'gpt-5' }));
    expect(r.code).toBe('unknown_model');
    expect(r.message).not.toContain('llama-3-8b');
    expect(r.message).toBe(
      'model "gpt-5" is not served by this gateway. Check the name; models are not listed here because access is per tenant: ask the gateway operator which models tenant acme may use',
    );
  });

  it('unknown model on an open table lists the served models', () => {
    const t = compiledFixture('fp8-both.yaml');
    const r = refusal(decide(testFacts({ model: 'llama-4' }), t, createTestWorkerView(t), ctx));
    expect(r.message).toBe('model "llama-4" is not served by this gateway; served models: llama-3-8b, llama-3-8b-fp8');
  });

  it('a body "user" that is not valid Unicode (a lone surrogate escape) -> 400 under tenant-user scope, never a throw', () => {
    const t = compiled((v) => {
      v['models']['llama-3-8b']['rollout'] = { stable: 'llama-a' };
      v['tenancy']['prefixScope'] = 'tenant-user';
    }, false);
    for (const user of ['\ud800', 'u-\udc00-1', '\ud83d']) {
      const r = refusal(run(t, { user }));
      expect(r).toMatchObject({ code: 'bad_request', tenant: 'acme' });
      expect(r.message).toBe(
        'the body field user is not valid Unicode text (it holds a lone surrogate, e.g. an unpaired \\ud800 escape); send the id as valid UTF-8',
      );
    }
    // A well-formed pair (an emoji) is a user like any other; the tenant scope ignores the field.
    expect(route(run(t, { user: 'u-\ud83d\ude00' })).group.tenantScope).toBe('tenant-user:acme/u-%F0%9F%98%80');
    expect(route(run(onlyA, { user: '\ud800' })).group.tenantScope).toBe('tenant:acme');
  });

  it('a user header with more than one value -> 401 under tenant-user scope, as for the tenant header', () => {
    // A client copy that survived next to the one the authentication layer adds would otherwise pick the user, and with
    // it the prefix-cache scope (tenant-user:acme/<joined ids>): refused as the tenant header is, never joined.
    const t = compiled((v) => {
      v['models']['llama-3-8b']['rollout'] = { stable: 'llama-a' };
      v['tenancy']['prefixScope'] = 'tenant-user';
      v['tenancy']['userHeader'] = 'x-user-id';
    }, false);
    const r = refusal(run(t, { headers: { 'x-user-id': 'mallory,alice' } }));
    expect(r).toMatchObject({ code: 'tenant_required', tenant: 'acme' });
    expect(r.message).toBe(
      'the user identity (header x-user-id) is unusable: it carries more than one value; exactly one user id is required',
    );
    expect(route(run(t, { headers: { 'x-user-id': 'alice' } })).group.tenantScope).toBe('tenant-user:acme/alice');
    // Outside tenant-user scope the user is not read at all.
    expect(route(run(onlyA, { headers: { 'x-user-id': 'a,b' } })).group.tenantScope).toBe('tenant:acme');
  });

  it('a request without a body -> 400', () => {
    const { body: _unused, ...noBody } = testFacts({ tenant: 'acme' });
    expect(refusal(decide(noBody, table, createTestWorkerView(table), ctx)).code).toBe('bad_request');
  });
});

describe('decide: FP8 dynamic per-block scales', () => {
  it('is served by a both pool, without disaggregation', () => {
    const t = compiledFixture('fp8-both.yaml');
    const d = route(decide(testFacts({ model: 'llama-3-8b-fp8', headers: { 'x-user-id': 'u1' } }), t, createTestWorkerView(t), ctx));
    expect(d.decode.cluster).toBe('fp8_both');
    expect(d.prefill).toBeNull();
    expect(d.group).toMatchObject({ tenant: 'public', tenantScope: 'tenant-user:public/u1', revision: 'llama-fp8' });
    expect(d.trace.join('\n')).toMatch(/connector rules: revision llama-fp8 is not transferable/);
  });

  it('is refused with 409 incompatible_transfer when only prefill/decode pools exist', () => {
    const t = compiled((v) => {
      v['revisions']['llama-b'] = { descriptor: fp8DynamicDescriptorInput('b') };
      v['models']['llama-3-8b']['rollout'] = { stable: 'llama-b' };
    }, false);
    const r = refusal(run(t));
    expect(r.code).toBe('incompatible_transfer');
    expect(r.message).toMatch(
      /^model llama-3-8b \(revision llama-b\) cannot be served with disaggregated prefill\/decode: descriptor: KV uses dynamic per-block fp8 scales.*It needs a role: both pool; ask the operator to add one$/,
    );
  });
});

describe('decideRequest: body checks run before any decision', () => {
  const table = onlyA;
  const raw = (body: unknown, extra: Record<string, unknown> = {}) => ({
    requestId: 'r1',
    method: 'POST',
    path: '/v1/chat/completions',
    headers: { 'x-tenant-id': 'acme' },
    metadata: {},
    body: new TextEncoder().encode(typeof body === 'string' ? body : JSON.stringify(body)),
    ...extra,
  });
  const chat = { model: 'llama-3-8b', messages: [{ role: 'user', content: 'hi' }] };
  const view = createTestWorkerView(table);

  it('routes a good body and hands back the parsed request', () => {
    const out = decideRequest(raw(chat), table, view, ctx);
    expect(out.decision.kind).toBe('route');
    expect(out.request?.model).toBe('llama-3-8b');
  });

  it('a completion path with another method than POST is refused: the sidecars serve POST only', () => {
    // Routed, it would be minted a contract and answered 404 by the sidecar, with no kvgate code and no audit line.
    for (const method of ['GET', 'PUT', 'PATCH', 'DELETE']) {
      const r = refusal(decideRequest(raw(chat, { method }), table, view, ctx).decision);
      expect([r.code, r.message]).toEqual([
        'bad_request',
        `kvgate routes only POST /v1/completions and /v1/chat/completions, not ${method} "/v1/chat/completions"; send the request as a POST`,
      ]);
    }
  });

  it('kv_transfer_params forbidden, malformed JSON, oversized and truncated bodies are refused', () => {
    expect(refusal(decideRequest(raw({ ...chat, kv_transfer_params: null }), table, view, ctx).decision).code).toBe('kv_params_forbidden');
    expect(refusal(decideRequest(raw('{"model":'), table, view, ctx).decision).code).toBe('bad_request');
    const big = compiled((v) => ((v['models']['llama-3-8b']['rollout'] = { stable: 'llama-a' }), (v['limits'] = { maxBodyBytes: 64 })));
    expect(refusal(decideRequest(raw({ ...chat, pad: 'x'.repeat(100) }), big, view, ctx).decision)).toMatchObject({
      code: 'body_too_large',
    });
    expect(refusal(decideRequest(raw(chat, { bodyTruncated: true }), table, view, ctx).decision).code).toBe('body_too_large');
  });

  it("a media URL is refused before any decision unless the route table's media.allowedOrigins lists its origin", () => {
    const image = {
      model: 'llama-3-8b',
      messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'https://media.example.com/cat.png' } }] }],
    };
    const r = refusal(decideRequest(raw(image), table, view, ctx).decision);
    expect([r.code, r.tenant]).toEqual(['bad_request', 'acme']);
    expect(r.message).toMatch(/^messages\[0\]\.content\[0\]\.image_url: its URL is on "https:\/\/media\.example\.com", which is not one/);
    const allowing = compiled((v) => {
      v['models']['llama-3-8b']['rollout'] = { stable: 'llama-a' };
      v['media'] = { allowedOrigins: ['https://media.example.com'] };
    });
    expect(decideRequest(raw(image), allowing, createTestWorkerView(allowing), ctx).decision.kind).toBe('route');
  });
});

describe('the prompt prefix the affinity key reads (decide.ts affinityKey)', () => {
  it('is the same whether the whole prompt or only its first 512 characters is JSON-encoded', () => {
    // Escapes, control characters and surrogate pairs (lone and split at the cut) are where the two could differ.
    const unit = fc.oneof(
      fc.string({ unit: 'grapheme', maxLength: 4 }),
      fc.constantFrom('"', '\\', '\n', '\u0001', '\u2028', '😀', '\ud83d', '\ude00'),
    );
    const prompt = fc.array(unit, { minLength: 200, maxLength: 600 }).map((a) => a.join(''));
    fc.assert(
      fc.property(prompt, (p) => {
        expect(JSON.stringify(p.length > 512 ? p.slice(0, 512) : p).slice(0, 512)).toBe(JSON.stringify(p).slice(0, 512));
      }),
      { numRuns: 500 },
    );
  });
});

describe('decide: tenant priorities from the route table', () => {
  const priorities = { tenants: { acme: -10 }, default: 0 };
  const declaring = (pools: readonly string[]) => (v: Value) => {
    v['models']['llama-3-8b']['rollout'] = { stable: 'llama-a' };
    v['priorities'] = priorities;
    for (const p of v['pools'] as Value[]) if (pools.includes(p['name'])) p['schedulingPolicy'] = 'priority';
  };
  const contractOf = (d: RouteDecision) => {
    const c = verifyContract(d.contract, keys, TEST_NOW_MS);
    if (!c.ok) throw new Error(c.error.message);
    return c.value;
  };

  it("stamps the tenant's priority only when every pool of the route (prefill and decode) declares schedulingPolicy: priority", () => {
    const all = compiled(declaring(['a-prefill', 'a-decode']));
    const d = route(run(all, { requestId: 'p-1' }));
    expect(contractOf(d).priority).toBe(-10);
    expect(d.trace.join('\n')).toMatch(/priority -10 \(the route table's for this tenant/);
    for (const [pools, missing] of [
      [['a-decode'], 'a-prefill'],
      [['a-prefill'], 'a-decode'],
      [[], 'a-decode, a-prefill'],
    ] as const) {
      const partial = route(run(compiled(declaring(pools)), { requestId: 'p-2' }));
      expect(contractOf(partial)).not.toHaveProperty('priority');
      expect(partial.trace.join('\n')).toContain(`priority -10 not stamped (runs at 0): pool(s) ${missing} do not declare`);
    }
  });

  it('a tenant without an entry gets the default; at 0 (and without priorities) the contract carries none', () => {
    const all = compiled(declaring(['a-prefill', 'a-decode']));
    expect(contractOf(route(run(all, { tenant: 'globex' })))).not.toHaveProperty('priority');
    const withDefault = compiled((v) => {
      declaring(['a-prefill', 'a-decode'])(v);
      v['priorities'] = { tenants: { acme: -10 }, default: 5 };
    });
    expect(contractOf(route(run(withDefault, { tenant: 'globex' }))).priority).toBe(5);
    expect(contractOf(route(run(onlyA)))).not.toHaveProperty('priority');
  });

  it('never changes the group, the endpoints or the cache_salt: the same request binds alike with or without a priority', () => {
    const all = compiled(declaring(['a-prefill', 'a-decode']));
    const facts = { requestId: 'p-3', cacheSalt: 'mine' };
    const [plain, prioritised] = [route(run(onlyA, facts)), route(run(all, facts))];
    expect(prioritised.group).toEqual(plain.group);
    expect([prioritised.decode, prioritised.prefill]).toEqual([plain.decode, plain.prefill]);
    expect(prioritised.cacheSalt).toBe(plain.cacheSalt);
    const { priority, ...rest } = contractOf(prioritised);
    expect(priority).toBe(-10);
    expect(rest).toEqual(contractOf(plain));
  });
});

describe('decide: a priority and the GIE fallback list', () => {
  it('the fallback decode endpoints count as pools of the route: one that does not declare it keeps the request at 0', () => {
    const table = (both: boolean) =>
      compiled((v) => {
        v['models']['llama-3-8b']['rollout'] = { stable: 'llama-a' };
        v['priorities'] = { tenants: { acme: -10 } };
        const pools = v['pools'] as Value[];
        const aDecode = pools.find((p) => p['name'] === 'a-decode')!;
        // A second pool of the same revision behind the same Envoy cluster (what a GIE fallback list draws from).
        pools.push({ ...clone(aDecode), name: 'a-decode-2', endpoints: [{ address: '10.0.2.9:9090', status: 'http://10.0.2.9:9090' }] });
        for (const p of pools) if (p['name'] !== 'a-decode-2' || both) p['schedulingPolicy'] = 'priority';
      });
    const priorityOf = (t: CompiledRouteTable) => {
      const d = route(decide(testFacts({ tenant: 'acme', requestId: 'gie-1' }), t, createTestWorkerView(t), { ...ctx, alternates: 3 }));
      expect(d.decode.alternates?.length).toBe(2);
      const c = verifyContract(d.contract, keys, TEST_NOW_MS);
      return c.ok ? c.value.priority : 'refused';
    };
    expect(priorityOf(table(true))).toBe(-10);
    expect(priorityOf(table(false))).toBeUndefined();
  });
});
