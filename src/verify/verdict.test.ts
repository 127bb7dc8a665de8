import { describe, expect, it } from 'vitest';
import { toOutcome, verdictOf, type Reply } from './verdict.js';

const reply = (ids: number[], revision: string | null = 'rev-a', text = 'some text'): Reply => ({
  ok: true,
  status: 200,
  generated: { ids, source: 'token_ids', text, finishReason: 'length' },
  revision,
  group: revision === null ? null : `g-${revision}`,
});
const failed: Reply = { ok: false, status: 503, error: 'HTTP 503' };

describe('toOutcome', () => {
  it('compares ids when both sides have them and adds text context only on a difference', () => {
    const same = toOutcome('p1', 'completion', reply([1, 2]), reply([1, 2], null));
    expect(same.comparison).toEqual({ kind: 'equal', length: 2 });
    expect(same.context).toBeUndefined();
    const diff = toOutcome('p2', 'completion', reply([1, 3], 'rev-a', 'a cat'), reply([1, 2], null, 'a dog'));
    expect(diff.comparison).toMatchObject({ kind: 'diverged', position: 1, via: 3, baseline: 2 });
    expect(diff.context).toMatchObject({ common: 'a ', via: 'cat', baseline: 'dog' });
    expect(toOutcome('p3', 'chat', failed, reply([1])).comparison).toBeUndefined();
  });
});

describe('verdictOf', () => {
  it('verifies only when every prompt matched on one revision (exit 0)', () => {
    const v = verdictOf([
      toOutcome('a', 'completion', reply([1, 2, 3]), reply([1, 2, 3], null)),
      toOutcome('b', 'chat', reply([4]), reply([4], null)),
    ]);
    expect(v).toMatchObject({ verified: true, exitCode: 0, revisions: ['rev-a'], groups: ['g-rev-a'], reasons: [] });
    expect(v.summary).toEqual({ prompts: 2, matched: 2, divergent: 0, failed: 0, tokensCompared: 4 });
  });

  it('exits 1 on any divergence or length mismatch, even alongside endpoint failures', () => {
    const v = verdictOf([
      toOutcome('a', 'completion', reply([1, 2, 3]), reply([1, 9, 3], null)),
      toOutcome('b', 'completion', reply([1, 2]), reply([1, 2, 3], null)),
      toOutcome('c', 'completion', failed, reply([1], null)),
    ]);
    expect(v.exitCode).toBe(1);
    expect(v.verified).toBe(false);
    expect(v.summary).toEqual({ prompts: 3, matched: 0, divergent: 2, failed: 1, tokensCompared: 5 });
    expect(v.reasons.join('\n')).toMatch(/2 of 3 prompts diverged/);
    expect(v.reasons.join('\n')).toMatch(/1 of 3 prompts could not be compared/);
  });

  it('exits 3 when an endpoint failed and nothing diverged: no proof either way', () => {
    const v = verdictOf([toOutcome('a', 'completion', reply([1]), reply([1], null)), toOutcome('b', 'completion', reply([1]), failed)]);
    expect(v).toMatchObject({ verified: false, exitCode: 3 });
  });

  it('refuses to verify a run whose via responses were bound to different revisions, although each matched', () => {
    const v = verdictOf([
      toOutcome('a', 'completion', reply([1], 'rev-a'), reply([1], null)),
      toOutcome('b', 'completion', reply([2], 'rev-b'), reply([2], null)),
    ]);
    expect(v).toMatchObject({ verified: false, exitCode: 1, revisions: ['rev-a', 'rev-b'] });
    expect(v.reasons[0]).toMatch(/bound to different revisions \(rev-a, rev-b\)/);
    const partly = verdictOf([
      toOutcome('a', 'completion', reply([1], 'rev-a'), reply([1], null)),
      toOutcome('b', 'completion', reply([2], null), reply([2], null)),
    ]);
    expect(partly.exitCode).toBe(1);
    expect(partly.reasons[0]).toMatch(/rev-a, \(none\)/);
  });

  it('with an expected revision, fails a run bound to another revision or to none, although every prompt matched', () => {
    const onA = [toOutcome('a', 'completion', reply([1], 'rev-a'), reply([1], null))];
    expect(verdictOf(onA, { expectRevision: 'rev-a' })).toMatchObject({ verified: true, exitCode: 0 });
    const wrong = verdictOf(onA, { expectRevision: 'rev-b' });
    expect(wrong).toMatchObject({ verified: false, exitCode: 1 });
    expect(wrong.reasons).toEqual(['via responses were bound to rev-a, not the expected revision rev-b']);
    const unbound = verdictOf([toOutcome('a', 'completion', reply([1], null), reply([1], null))], { expectRevision: 'rev-a' });
    expect(unbound.reasons).toEqual(['via responses were bound to (none), not the expected revision rev-a']);
  });

  it('passes a path that stamps no kvgate headers, reporting it as unbound', () => {
    const v = verdictOf([toOutcome('a', 'completion', reply([1], null), reply([1], null))]);
    expect(v).toMatchObject({ verified: true, exitCode: 0, revisions: [null] });
  });
});
