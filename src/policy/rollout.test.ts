import { describe, expect, it } from 'vitest';
import type { ConfigIssue } from '../config/issues.js';
import { routeTableFromValue } from './load.js';
import { formatRolloutStatus, rolloutStatus } from './rollout-status.js';
import { tableFromValue, twoRevisionTableValue } from './testing.js';

type Value = Record<string, any>;

function issuesAfter(mutate: (v: Value) => void): ConfigIssue[] {
  const v = twoRevisionTableValue() as Value;
  mutate(v);
  const r = routeTableFromValue(v, { file: 't.yaml' });
  return r.ok ? [...r.value.warnings] : r.error;
}
const at = (issues: ConfigIssue[], path: string) => issues.filter((i) => i.path === path);

describe('verification in the route table', () => {
  it('defaults: no block means nothing is required; a block means required, not yet verified', () => {
    const t = tableFromValue(twoRevisionTableValue());
    expect(t.revisions.get('llama-b')).toMatchObject({
      verification: { required: false, verified: false, evidence: null },
      verified: true,
    });
    const v = twoRevisionTableValue() as Value;
    v['revisions']['llama-b']['verification'] = {};
    const u = tableFromValue(v);
    expect(u.revisions.get('llama-b')).toMatchObject({
      verification: { required: true, verified: false, evidence: null },
      verified: false,
    });
  });

  it('rejects unknown keys in the block, naming the path', () => {
    const issues = issuesAfter((v) => (v['revisions']['llama-b']['verification'] = { verifed: true }));
    expect(issues.some((i) => i.path.startsWith('revisions.llama-b.verification') && i.severity === 'error')).toBe(true);
  });

  it('an unverified stable revision is an error; an unverified candidate is a warning that says where its cohort goes', () => {
    const stable = at(
      issuesAfter((v) => (v['revisions']['llama-a']['verification'] = { required: true })),
      'revisions.llama-a.verification.verified',
    );
    expect(stable).toHaveLength(1);
    expect(stable[0]).toMatchObject({
      severity: 'error',
      message:
        'revision "llama-a" is model "llama-3-8b"\'s stable revision, but its verification is required and has not passed; the stable revision takes every request outside the candidate cohort',
    });
    const candidate = at(
      issuesAfter((v) => (v['revisions']['llama-b']['verification'] = { required: true })),
      'revisions.llama-b.verification.verified',
    );
    expect(candidate).toHaveLength(1);
    expect(candidate[0]).toMatchObject({
      severity: 'warning',
      message: 'model "llama-3-8b"\'s candidate "llama-b" is not verified, so it takes no cohort traffic: its 10% goes to stable "llama-a"',
    });
    expect(issuesAfter((v) => (v['revisions']['llama-b']['verification'] = { verified: true, evidence: 'verify run 42' }))).toEqual([]);
  });

  it('warns about fallback steps that cannot do what they say', () => {
    const issues = issuesAfter((v) => {
      v['revisions']['llama-c'] = v['revisions']['llama-b'];
      v['revisions']['llama-b'] = { ...v['revisions']['llama-b'], verification: { required: true } };
      v['fallback'] = [
        { queue: { deadlineMs: 60_000, maxDepth: 10 } },
        { routeVia: { revisions: ['llama-c', 'llama-b'] } },
        { refuse: { retryAfterSeconds: 5 } },
      ];
    });
    expect(at(issues, 'fallback[0].queue.deadlineMs')[0]?.message).toMatch(
      /waits up to 60000 ms, but the gate holds a request at most a little under Envoy's max_message_timeout/,
    );
    expect(at(issues, 'fallback[1].routeVia.revisions[0]')[0]?.message).toBe(
      'fallback step 2 (routeVia) names revision "llama-c", which has no pools, so it can never take a request',
    );
    expect(at(issues, 'fallback[1].routeVia.revisions[1]')[0]?.message).toBe(
      'fallback step 2 (routeVia) names revision "llama-b", which is not verified; it is skipped until it is',
    );
    expect(issues.every((i) => i.severity === 'warning')).toBe(true);
  });
});

describe('rolloutStatus', () => {
  it('reports configured and effective cohort shares, verification and draining pools', () => {
    const v = twoRevisionTableValue() as Value;
    v['revisions']['llama-b']['verification'] = { required: true };
    v['pools'][3]['draining'] = true;
    const states = rolloutStatus(tableFromValue(v));
    expect(states.map(({ fingerprint: _f, ...s }) => s)).toEqual([
      {
        model: 'llama-3-8b',
        revision: 'llama-a',
        role: 'stable',
        verified: true,
        verification: { required: false, verified: false, evidence: null },
        configuredPercent: 90,
        effectivePercent: 100,
        drainingPools: [],
        trust: 'recorded',
      },
      {
        model: 'llama-3-8b',
        revision: 'llama-b',
        role: 'candidate',
        verified: false,
        verification: { required: true, verified: false, evidence: null },
        configuredPercent: 10,
        effectivePercent: 0,
        drainingPools: ['b-decode'],
        trust: 'recorded',
      },
    ]);
    expect(formatRolloutStatus(states)).toEqual([
      'llama-3-8b: stable llama-a 90% configured, 100% effective; verification not required',
      'llama-3-8b: candidate llama-b 10% configured, 0% effective; verification required, not passed; draining pools: b-decode',
    ]);
  });
});
