import { describe, expect, it } from 'vitest';
import type { ConfigIssue } from '../config/issues.js';
import { routeTableFromValue } from './load.js';
import { checkObservedEndpoints } from './compile.js';
import { checkRouteTable } from './semantic.js';
import { clone, fp8DynamicDescriptorInput, tableFromValue, testDescriptorInput, twoRevisionTableValue } from './testing.js';

type Value = Record<string, any>;

/** Every issue (errors and warnings) the loader reports after `mutate`. */
function issuesAfter(mutate: (v: Value) => void): ConfigIssue[] {
  const v = twoRevisionTableValue() as Value;
  mutate(v);
  const r = routeTableFromValue(v, { file: 't.yaml' });
  return r.ok ? [...r.value.warnings] : r.error;
}

function only(issues: ConfigIssue[], path: string): ConfigIssue {
  const found = issues.filter((i) => i.path === path);
  expect(
    found.map((i) => i.message),
    `issues at ${path} among ${JSON.stringify(issues.map((i) => i.path))}`,
  ).toHaveLength(1);
  return found[0]!;
}

const pool = (name: string, role: string, revision: string, addresses: string[], extra: Value = {}): Value => ({
  name,
  cluster: name.replace('-', '_'),
  role,
  revision,
  endpoints: addresses.map((address) => ({ address })),
  ...extra,
});

describe('checkRouteTable', () => {
  it('refuses names with invisible characters or edge spaces, and warns on look-alike scripts and non-NFC names', () => {
    const issues = issuesAfter((v) => {
      v['models']['llama-3-8b']['tenants'] = ['acme\u200b', 'globex', ' initech', '\u0430cme', 'cafe\u0301'];
    });
    const at = (i: number) => only(issues, `models.llama-3-8b.tenants[${i}]`);
    expect(at(0)).toMatchObject({
      severity: 'error',
      message: expect.stringContaining('tenant "acme\\u200b" contains an invisible character (U+200B)'),
    });
    expect(at(2)).toMatchObject({ severity: 'error', message: expect.stringContaining('a space at one end') });
    expect(at(3)).toMatchObject({ severity: 'warning', message: expect.stringContaining('U+0430 (\u0430), a Cyrillic or Greek letter') });
    expect(at(4)).toMatchObject({ severity: 'warning', message: expect.stringContaining('is not in Unicode NFC') });
    expect(issues.filter((i) => i.path === 'models.llama-3-8b.tenants[1]')).toEqual([]);
    // A model name with a bidi override: the name read is not the name matched.
    const model = issuesAfter((v) => {
      v['models']['llama\u202e-3-8b'] = v['models']['llama-3-8b'];
      delete v['models']['llama-3-8b'];
    });
    expect(only(model, 'models["llama\u202e-3-8b"]')).toMatchObject({ severity: 'error', message: expect.stringContaining('U+202E') });
  });

  it('accepts the sample table with no findings', () => {
    expect(checkRouteTable(tableFromValue(twoRevisionTableValue(), { semantic: false }).table).issues).toEqual([]);
  });

  it('names an unknown revision in a pool, with a suggestion', () => {
    const i = only(
      issuesAfter((v) => (v['pools'][3]['revision'] = 'llama-bb')),
      'pools[3].revision',
    );
    expect(i.message).toBe('pool "b-decode" names revision "llama-bb", which is not declared under revisions');
    expect(i.fix).toBe('did you mean "llama-b"? Declared revisions: llama-a, llama-b');
  });

  it('names unknown rollout and routeVia revisions', () => {
    const issues = issuesAfter((v) => {
      v['models']['llama-3-8b']['rollout'] = { stable: 'llama-c', candidate: 'zzz-unrelated', weight: 5 };
      v['fallback'] = [{ routeVia: { revisions: ['llama-z'] } }, { refuse: { retryAfterSeconds: 1 } }];
    });
    expect(only(issues, 'models.llama-3-8b.rollout.stable').message).toMatch(
      /rollout.stable\) names revision "llama-c", which is not declared/,
    );
    expect(only(issues, 'models.llama-3-8b.rollout.candidate').fix).toBe(
      'declare revisions.zzz-unrelated, or use one of: llama-a, llama-b',
    );
    expect(only(issues, 'fallback[0].routeVia.revisions[0]').message).toMatch(/fallback step 1 \(routeVia\) names revision "llama-z"/);
  });

  it('refuses two pools with one name', () => {
    const i = only(
      issuesAfter((v) => (v['pools'][3]['name'] = 'b-prefill')),
      'pools[3].name',
    );
    expect(i.message).toBe('pool name "b-prefill" is used twice');
  });

  it('refuses an endpoint whose declared descriptor is another group', () => {
    const i = only(
      issuesAfter((v) => (v['pools'][1]['endpoints'][1]['descriptor'] = testDescriptorInput({ weights: 'b' }))),
      'pools[1].endpoints[1].descriptor',
    );
    expect(i.message).toMatch(
      /^endpoint 10\.0\.2\.2:9090 of pool "a-decode" declares fingerprint [0-9a-f]{12}…, but the pool's revision "llama-a" is [0-9a-f]{12}…, so one pool would mix two compatibility groups/,
    );
    expect(i.message).toMatch(/weights revision: revision llama-a runs "5f0b/);
  });

  it('refuses one Envoy cluster shared by two revisions', () => {
    const i = only(
      issuesAfter((v) => (v['pools'][3]['cluster'] = 'a_decode')),
      'pools[3].cluster',
    );
    expect(i.message).toBe(
      'pools "a-decode" (revision llama-a) and "b-decode" (revision llama-b) share Envoy cluster "a_decode"; a cluster must hold one compatibility group, or Envoy could send a request of one revision to a worker of the other',
    );
  });

  it('refuses a revision split into P/D that lacks one half', () => {
    const noDecode = issuesAfter((v) => v['pools'].splice(3, 1));
    expect(only(noDecode, 'revisions.llama-b').message).toBe(
      'revision "llama-b" has prefill pools but no decode or both pool, so its prefilled KV has nowhere to go',
    );
    const noPrefill = issuesAfter((v) => v['pools'].splice(2, 1));
    expect(only(noPrefill, 'revisions.llama-b').message).toBe(
      'revision "llama-b" has decode pools but no prefill or both pool to compute its KV',
    );
    const bothCounts = issuesAfter((v) => (v['pools'][2]['role'] = 'both'));
    expect(bothCounts.filter((i) => i.severity === 'error')).toEqual([]);
  });

  it('refuses a rollout revision without pools', () => {
    const i = only(
      issuesAfter((v) => v['pools'].splice(2, 2)),
      'revisions.llama-b',
    );
    expect(i.message).toBe('revision "llama-b" is in model "llama-3-8b"\'s rollout but has no pools');
  });

  it('refuses FP8 dynamic per-block scales on a revision with separate prefill and decode pools', () => {
    const i = only(
      issuesAfter((v) => (v['revisions']['llama-b'] = { descriptor: fp8DynamicDescriptorInput('b') })),
      'revisions.llama-b.descriptor',
    );
    expect(i.message).toMatch(
      /^revision "llama-b" cannot be disaggregated, but pools b-prefill, b-decode split it into prefill and decode: .*dynamic per-block fp8 scales/,
    );
    expect(i.fix).toMatch(/role: both pools only/);
    const served = issuesAfter((v) => {
      v['revisions']['llama-b'] = { descriptor: fp8DynamicDescriptorInput('b') };
      v['pools'].splice(2, 2, pool('b-both', 'both', 'llama-b', ['10.0.6.1:9090']));
    });
    expect(served.filter((x) => x.severity === 'error')).toEqual([]);
  });

  it('refuses group members whose predicted NIXL handshake hashes differ (same revision declared twice, different model.path)', () => {
    const issues = issuesAfter((v) => {
      v['revisions']['llama-a'] = { descriptor: testDescriptorInput({ model: { path: '/models/llama-3-8b' } }) };
      v['revisions']['llama-a-hub'] = { descriptor: testDescriptorInput({ model: { path: 'meta-llama/Meta-Llama-3-8B-Instruct' } }) };
      v['pools'].push(
        pool('a2-prefill', 'prefill', 'llama-a-hub', ['10.0.7.1:9090']),
        pool('a2-decode', 'decode', 'llama-a-hub', ['10.0.8.1:9090']),
      );
    });
    const i = issues.find((x) => x.path === 'pools[5].revision' && /NIXL handshake/.test(x.message));
    expect(i, JSON.stringify(issues)).toBeDefined();
    expect(i!.message).toMatch(
      /^pool "a-prefill" \(revision llama-a\) and pool "a2-decode" \(revision llama-a-hub\) are one compatibility group, but KV cannot move from the first to the second: vLLM's NIXL handshake would reject this pair/,
    );
    expect(i!.message).toMatch(/model "\/models\/llama-3-8b" vs "meta-llama\/Meta-Llama-3-8B-Instruct"/);
  });

  it('refuses an endpoint of the group whose declared model path would fail the NIXL handshake', () => {
    const issues = issuesAfter(
      (v) => (v['pools'][1]['endpoints'][1]['descriptor'] = testDescriptorInput({ model: { path: '/mnt/llama' } })),
    );
    const i = only(issues, 'pools[1].endpoints[1].descriptor');
    expect(i.message).toMatch(
      /^pool "a-prefill" \(revision llama-a\) and endpoint 10\.0\.2\.2:9090 of pool "a-decode" are one compatibility group, but KV cannot move/,
    );
    expect(i.message).toMatch(/differing factors: model "\/models\/llama-3-8b-instruct" vs "\/mnt\/llama"/);
  });

  it('refuses a rollout whose candidate is the stable revision, and a weight without candidate', () => {
    const same = issuesAfter((v) => (v['models']['llama-3-8b']['rollout'] = { stable: 'llama-a', candidate: 'llama-a', weight: 5 }));
    expect(only(same, 'models.llama-3-8b.rollout.candidate').message).toBe(
      'model "llama-3-8b": the rollout candidate is the stable revision "llama-a", so there is nothing to roll out',
    );
    const orphan = issuesAfter((v) => (v['models']['llama-3-8b']['rollout'] = { stable: 'llama-a', weight: 5 }));
    expect(only(orphan, 'models.llama-3-8b.rollout.weight').message).toBe(
      'model "llama-3-8b": rollout.weight is 5 but there is no candidate revision to send that cohort to',
    );
  });

  it('warns about a revision with pools that no rollout or routeVia names: its pools can never take a request', () => {
    const idle = issuesAfter((v) => (v['models']['llama-3-8b']['rollout'] = { stable: 'llama-a' }));
    const w = only(idle, 'revisions.llama-b');
    expect([w.severity, w.message]).toEqual([
      'warning',
      'revision "llama-b" has pools (b-prefill, b-decode) but no model\'s rollout and no routeVia step names it, so they never take a request',
    ]);
    // Still named by a routeVia step (a promoted revision's old stable, kept as the fallback): nothing to say.
    const fallback = issuesAfter((v) => {
      v['models']['llama-3-8b']['rollout'] = { stable: 'llama-a' };
      v['fallback'] = [{ routeVia: { revisions: ['llama-b'] } }, { refuse: { retryAfterSeconds: 5 } }];
    });
    expect(fallback.filter((i) => i.path === 'revisions.llama-b')).toEqual([]);
  });

  it('warns about a candidate without a weight: it defaults to 0, so the candidate takes no new session', () => {
    const bare = issuesAfter((v) => (v['models']['llama-3-8b']['rollout'] = { stable: 'llama-a', candidate: 'llama-b' }));
    const w = only(bare, 'models.llama-3-8b.rollout.candidate');
    expect([w.severity, w.message]).toEqual([
      'warning',
      'model "llama-3-8b": candidate "llama-b" has no rollout.weight, so it takes no new sessions (the weight defaults to 0)',
    ]);
    // An explicit 0 is a deliberate state (a paused rollout): nothing to say.
    const paused = issuesAfter((v) => (v['models']['llama-3-8b']['rollout'] = { stable: 'llama-a', candidate: 'llama-b', weight: 0 }));
    expect(paused.filter((i) => i.path === 'models.llama-3-8b.rollout.candidate')).toEqual([]);
  });

  it('warns about a weight between 0 and 1: a percentage written as a fraction takes almost no session', () => {
    const frac = issuesAfter((v) => (v['models']['llama-3-8b']['rollout'] = { stable: 'llama-a', candidate: 'llama-b', weight: 0.1 }));
    const w = only(frac, 'models.llama-3-8b.rollout.weight');
    expect([w.severity, w.message, w.fix]).toEqual([
      'warning',
      'model "llama-3-8b": rollout.weight is 0.1, a percentage: candidate "llama-b" takes 0.1% of new sessions (10% written as a fraction?)',
      'write the percentage, e.g. weight: 10, if 10% of new sessions was meant',
    ]);
    // 1 and more, and 0, are percentages anybody means.
    for (const weight of [0, 1, 10])
      expect(
        issuesAfter((v) => (v['models']['llama-3-8b']['rollout']['weight'] = weight)).filter((i) => i.path.endsWith('rollout.weight')),
      ).toEqual([]);
  });

  it('warns (never refuses) about a KV cache dtype the declared vLLM does not accept, listing what it does', () => {
    const set = (version: string, dtype: string) =>
      issuesAfter((v) => {
        v['revisions']['llama-b']['descriptor']['engine'] = { ...v['revisions']['llama-b']['descriptor']['engine'], version };
        v['revisions']['llama-b']['descriptor']['kvCache'] = { ...v['revisions']['llama-b']['descriptor']['kvCache'], dtype };
      }).filter((i) => i.path === 'revisions.llama-b.descriptor.kvCache.dtype');
    const [w, ...more] = set('0.13.0', 'fp9');
    expect(more).toEqual([]);
    expect(w?.severity).toBe('warning');
    expect(w?.message).toMatch(
      /^revision "llama-b": kvCache\.dtype "fp9" is not a --kv-cache-dtype vLLM 0\.13\.0 accepts, .*accepts: auto, bfloat16, fp8, fp8_e4m3, fp8_e5m2, fp8_inc, fp8_ds_mla \(/,
    );
    expect(set('0.13.0', 'fp8_e4m3')).toEqual([]);
    // A version whose list was not read is held to what any release read accepts: fp9 is still a warning, nvfp4 is not.
    expect(set('0.11.0', 'fp9')[0]?.message).toContain('is not a --kv-cache-dtype any vLLM release kvgate read accepts');
    expect(set('0.18.1', 'nvfp4')).toEqual([]);
    // Older than any release kvgate models: not checked.
    expect(set('0.10.2', 'fp9')).toEqual([]);
  });

  it('warns about model or tenant names that differ only in letter case: matched exactly, they are two', () => {
    const models = issuesAfter((v) => (v['models']['Llama-3-8B'] = clone(v['models']['llama-3-8b'])));
    expect(only(models, 'models.Llama-3-8B')).toMatchObject({
      severity: 'warning',
      message: expect.stringContaining('model "Llama-3-8B" and model "llama-3-8b" differ only in letter case'),
    });
    const tenants = issuesAfter((v) => (v['pools'][0]['tenants'] = ['Acme', 'globex']));
    expect(only(tenants, 'pools[0].tenants[0]')).toMatchObject({
      severity: 'warning',
      message: expect.stringContaining('tenant "Acme" and tenant "acme" differ only in letter case'),
    });
  });

  it('refuses a model whose tenants no pool serves', () => {
    const i = only(
      issuesAfter((v) => {
        for (const p of v['pools']) p['tenants'] = ['acme'];
      }),
      'models.llama-3-8b.tenants',
    );
    expect(i.message).toBe(
      'model "llama-3-8b" accepts tenant(s) globex, but no prefill/decode (or both) pool of llama-a, llama-b serves them (its pools serve: acme)',
    );
    const open = issuesAfter((v) => {
      v['models']['llama-3-8b']['tenants'] = ['*'];
      v['pools'][0]['tenants'] = ['acme'];
      v['pools'][2]['tenants'] = ['acme'];
    });
    expect(only(open, 'models.llama-3-8b.tenants').message).toMatch(
      /accepts any tenant \('\*'\), but no prefill\/decode \(or both\) pool of llama-a, llama-b serves every tenant/,
    );
  });

  it('refuses an address in pools of two revisions, or twice in one pool', () => {
    const across = only(
      issuesAfter((v) => (v['pools'][3]['endpoints'][0] = { address: '10.0.2.1:9090', status: 'http://10.0.2.1:9090' })),
      'pools[3].endpoints[0].address',
    );
    expect(across.message).toBe(
      'endpoint 10.0.2.1:9090 is in pool "a-decode" (revision llama-a) and in pool "b-decode" (revision llama-b); one worker serves one revision',
    );
    const twice = only(
      issuesAfter((v) => (v['pools'][1]['endpoints'][1] = { address: '10.0.2.1:9090', status: 'http://10.0.2.1:9090' })),
      'pools[1].endpoints[1].address',
    );
    expect(twice.message).toBe('endpoint 10.0.2.1:9090 is listed twice in pool "a-decode"');
  });

  it('refuses gate-owned headers as tenant, user or session sources', () => {
    const issues = issuesAfter((v) => {
      v['tenancy'] = {
        source: { header: 'x-kvgate-tenant' },
        required: true,
        prefixScope: 'tenant-user',
        userHeader: 'x-gateway-destination-endpoint',
      };
      v['session'] = { header: 'X-KVGATE-SESSION' };
    });
    expect(only(issues, 'tenancy.source.header').message).toMatch(/^the tenant header "x-kvgate-tenant" is gate-owned/);
    expect(only(issues, 'tenancy.userHeader').message).toMatch(/^the user header "x-gateway-destination-endpoint" is gate-owned/);
    expect(only(issues, 'session.header').message).toMatch(/^the session header "x-kvgate-session" is gate-owned/);
    // Each fix names a header for that role: x-tenant-id as a user or session header would make every user, or
    // every session, of a tenant one.
    expect(only(issues, 'tenancy.source.header').fix).toMatch(/e\.g\. x-tenant-id$/);
    expect(only(issues, 'tenancy.userHeader').fix).toMatch(/e\.g\. x-user-id$/);
    expect(only(issues, 'session.header').fix).toMatch(/e\.g\. x-session-id \(the default\)$/);
  });

  it('warns when two revisions declare the same descriptor: one group under two names', () => {
    const issues = issuesAfter((v) => (v['revisions']['llama-b']['descriptor'] = clone(v['revisions']['llama-a']['descriptor'])));
    expect(only(issues, 'revisions.llama-b.descriptor')).toMatchObject({
      severity: 'warning',
      message: expect.stringMatching(
        /^revisions "llama-a" and "llama-b" declare the same descriptor \(fingerprint [0-9a-f]{12}…\): they are one compatibility group/,
      ),
    });
    expect(issuesAfter(() => {}).filter((i) => /same descriptor/.test(i.message))).toEqual([]);
  });

  it('refuses one header as two of tenant, user and session', () => {
    const issues = issuesAfter((v) => {
      v['tenancy'] = { source: { header: 'x-tenant-id' }, required: true, prefixScope: 'tenant-user', userHeader: 'x-user-id' };
      v['session'] = { header: 'X-Tenant-Id' };
    });
    expect(only(issues, 'session.header')).toMatchObject({
      severity: 'error',
      message: expect.stringMatching(/^the session header "x-tenant-id" is also the tenant header \(tenancy\.source\.header\)/),
      fix: expect.stringMatching(/x-session-id/),
    });
    const user = issuesAfter((v) => {
      v['tenancy'] = { source: { header: 'x-tenant-id' }, required: true, prefixScope: 'tenant-user', userHeader: 'x-session-id' };
    });
    expect(only(user, 'session.header').message).toMatch(/is also the user header/);
    const asTenant = issuesAfter((v) => {
      v['tenancy'] = { source: { header: 'x-tenant-id' }, required: true, prefixScope: 'tenant-user', userHeader: 'x-tenant-id' };
    });
    expect(only(asTenant, 'tenancy.userHeader').message).toMatch(/^the user header "x-tenant-id" is also the tenant header/);
    const distinct = issuesAfter((v) => {
      v['tenancy'] = { source: { header: 'x-tenant-id' }, required: true, prefixScope: 'tenant-user', userHeader: 'x-user-id' };
    });
    expect(distinct.filter((i) => i.severity === 'error')).toEqual([]);
  });

  it('warns about settings that cannot take effect or trust the client', () => {
    const issues = issuesAfter((v) => {
      v['tenancy'] = { source: { header: 'x-tenant-id' }, required: true, default: 'acme', prefixScope: 'tenant-user' };
      v['fallback'] = [{ refuse: { retryAfterSeconds: 1 } }, { queue: { deadlineMs: 100, maxDepth: 1 } }];
    });
    expect(issues.every((i) => i.severity === 'warning')).toBe(true);
    expect(only(issues, 'tenancy.default').message).toBe(
      'tenancy.default "acme" is never used because tenancy.required is true (a request without a tenant is refused)',
    );
    expect(only(issues, 'tenancy.userHeader').message).toMatch(
      /takes the user from the request body's `user` field, which the client controls/,
    );
    expect(only(issues, 'fallback[1]').message).toBe('fallback steps after step 1 (refuse) never run');
    expect(only(issues, 'fallback').message).toMatch(/does not end with refuse/);
  });

  it('refuses a descriptor that cannot be fingerprinted', () => {
    const i = only(
      issuesAfter((v) => (v['revisions']['llama-b'] = { descriptor: testDescriptorInput({ modelDtype: 'auto' }) })),
      'revisions.llama-b.descriptor',
    );
    expect(i.message).toMatch(/^revision "llama-b": descriptor cannot be fingerprinted: modelDtype: 'auto' is resolved by vLLM/);
  });

  it('refuses an unverified connector version in strict mode and warns in lenient mode', () => {
    const v99 = (v: Value) => {
      v['revisions']['llama-b'] = { descriptor: testDescriptorInput({ weights: 'b', connector: { version: 99 } }) };
    };
    const strict = only(issuesAfter(v99), 'revisions.llama-b.descriptor');
    expect(strict.severity).toBe('error');
    expect(strict.message).toMatch(/NixlConnector v99 is outside the versions kvgate's rules were checked against/);
    const lenient = issuesAfter((v) => {
      v99(v);
      v['connectorMode'] = 'lenient';
    });
    expect(lenient.length).toBeGreaterThan(0);
    expect(lenient.every((i) => i.severity === 'warning')).toBe(true);
  });
});

describe('checkObservedEndpoints', () => {
  it('reports a live endpoint whose fingerprint differs from its pool', () => {
    const compiled = tableFromValue(twoRevisionTableValue());
    const bFp = compiled.revisions.get('llama-b')!.fingerprint;
    const issues = checkObservedEndpoints(compiled, (p) =>
      p === 'a-decode'
        ? [
            { address: '10.0.2.1:9090', fingerprint: compiled.revisions.get('llama-a')!.fingerprint },
            { address: '10.0.2.2:9090', fingerprint: bFp },
            { address: '10.0.2.3:9090', fingerprint: null },
          ]
        : [],
    );
    expect(issues).toHaveLength(1);
    expect(issues[0]).toMatchObject({ path: 'pools[1].endpoints', severity: 'error' });
    expect(issues[0]!.message).toBe(
      `endpoint 10.0.2.2:9090 of pool "a-decode" reports fingerprint ${bFp.slice(0, 12)}…, but revision "llama-a" is ${compiled.revisions.get('llama-a')!.fingerprint.slice(0, 12)}…; the pool mixes two compatibility groups and kvgate will not route to that endpoint`,
    );
  });
});

describe('tenant names that look like typos', () => {
  it('a pool tenant no model of its revision accepts; the candidate then leaves that tenant out of the rollout', () => {
    // two-revisions: llama-3-8b accepts acme and globex; b-decode (pools[3]) mistyped globex.
    const issues = issuesAfter((v) => (v['pools'][3]['tenants'] = ['acme', 'globexx']));
    expect(only(issues, 'pools[3].tenants')).toMatchObject({
      severity: 'warning',
      message: expect.stringMatching(
        /^pool b-decode serves tenant\(s\) globexx, which no model of revision llama-b accepts \(they accept: acme, globex\); a typo\?/,
      ),
    });
    expect(only(issues, 'models.llama-3-8b.rollout.candidate')).toMatchObject({
      severity: 'warning',
      message: expect.stringMatching(
        /tenant\(s\) globex of model "llama-3-8b" never join its rollout: .* candidate llama-b .* always get llama-a/,
      ),
    });
    // Spelled right, neither is reported.
    const fine = issuesAfter((v) => (v['pools'][3]['tenants'] = ['acme', 'globex']));
    expect(fine.filter((i) => i.path === 'pools[3].tenants' || i.path === 'models.llama-3-8b.rollout.candidate')).toEqual([]);
  });

  it("a tenant the stable revision's pools do not serve is not on the rollout's weight: it always gets the candidate", () => {
    // two-revisions: llama-a's pools are pools[0] and [1]; restricting them to globex leaves acme to llama-b alone.
    const issues = issuesAfter((v) => {
      v['pools'][0]['tenants'] = ['globex'];
      v['pools'][1]['tenants'] = ['globex'];
    });
    expect(only(issues, 'models.llama-3-8b.rollout.stable')).toMatchObject({
      severity: 'warning',
      message: expect.stringMatching(
        /^tenant\(s\) acme of model "llama-3-8b" are served by no .* pool of the stable llama-a, so every session of theirs goes to the candidate llama-b, not the 10% the weight says/,
      ),
    });
    // A misspelt candidate or stable is its own error, without the tenant warnings its missing pools would add.
    const typo = issuesAfter((v) => (v['models']['llama-3-8b']['rollout']['candidate'] = 'llama-bb'));
    expect(typo.filter((i) => i.path.startsWith('models.llama-3-8b.rollout')).map((i) => i.severity)).toEqual(['error']);
    const fine = issuesAfter((v) => (v['pools'][0]['tenants'] = ['globex', 'acme']));
    expect(fine.filter((i) => i.path === 'models.llama-3-8b.rollout.stable')).toEqual([]);
  });

  it('tenancy.default naming a tenant no model accepts: every anonymous request would be refused', () => {
    const issues = issuesAfter((v) => (v['tenancy'] = { ...v['tenancy'], required: false, default: 'initech' }));
    expect(only(issues, 'tenancy.default')).toMatchObject({
      severity: 'warning',
      message: expect.stringContaining('tenancy.default "initech" is a tenant no model accepts'),
    });
    const ok = issuesAfter((v) => (v['tenancy'] = { ...v['tenancy'], required: false, default: 'acme' }));
    expect(ok.filter((i) => i.path === 'tenancy.default')).toEqual([]);
  });
});
