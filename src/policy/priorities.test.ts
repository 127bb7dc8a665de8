/**
 * The route table's `priorities` and pools' `schedulingPolicy`: the schema (bounded integers, typos named with a
 * suggestion) and `policy check`'s warnings where a priority does nothing.
 */
import { describe, expect, it } from 'vitest';
import type { ConfigIssue } from '../config/issues.js';
import { routeTableFromValue } from './load.js';
import { twoRevisionTableValue } from './testing.js';

type Value = Record<string, any>;

function load(mutate: (v: Value) => void) {
  const v = twoRevisionTableValue() as Value;
  mutate(v);
  return routeTableFromValue(v, { file: 't.yaml' });
}
const errors = (mutate: (v: Value) => void): ConfigIssue[] => {
  const r = load(mutate);
  return r.ok ? [] : r.error.filter((i) => i.severity === 'error');
};
const warnings = (mutate: (v: Value) => void): ConfigIssue[] => {
  const r = load(mutate);
  if (!r.ok) throw new Error(JSON.stringify(r.error));
  return r.value.warnings.filter((i) => i.path.startsWith('priorities'));
};
const allPriority = (v: Value) => {
  for (const p of v['pools'] as Value[]) p['schedulingPolicy'] = 'priority';
};

describe('priorities: schema', () => {
  it('none unless the table sets them; tenants and default parse, the default defaulting to 0', () => {
    const plain = load(() => {});
    expect(plain.ok && plain.value.priorities).toBeNull();
    expect(plain.ok && plain.value.table.priorities).toBeUndefined();
    const set = load((v) => {
      v['priorities'] = { tenants: { acme: -10 } };
      allPriority(v);
    });
    expect(set.ok && set.value.table.priorities).toEqual({ tenants: { acme: -10 }, default: 0 });
    expect(set.ok && set.value.priorities).toEqual({ tenants: new Map([['acme', -10]]), default: 0 });
    expect(set.ok && set.value.table.pools.map((p) => p.schedulingPolicy)).toEqual(['priority', 'priority', 'priority', 'priority']);
  });

  it('integers from -1000 to 1000 only, and no "*" tenant', () => {
    for (const bad of [1.5, 1001, -1001, '5']) {
      const issues = errors((v) => (v['priorities'] = { tenants: { acme: bad } }));
      expect(issues.map((i) => i.path)).toEqual(['priorities.tenants.acme']);
    }
    expect(errors((v) => (v['priorities'] = { default: 2000 })).map((i) => [i.path, i.message])).toEqual([
      ['priorities.default', expect.stringMatching(/between -1000 and 1000/)],
    ]);
    expect(errors((v) => (v['priorities'] = { tenants: { '*': 1 } })).map((i) => i.message)).toEqual([
      expect.stringMatching(/'\*' is not a tenant here/),
    ]);
  });

  it('typos are named with a suggestion: a key of priorities, and a scheduling policy', () => {
    const key = errors((v) => (v['priorities'] = { tenant: { acme: -10 } }));
    expect(key.map((i) => [i.path, i.message, i.fix])).toEqual([
      ['priorities.tenant', 'unknown key "tenant"', expect.stringMatching(/^did you mean "tenants"\?/)],
    ]);
    const policy = errors((v) => ((v['pools'] as Value[])[0]!['schedulingPolicy'] = 'priorty'));
    expect(policy.map((i) => [i.path, i.fix])).toEqual([['pools[0].schedulingPolicy', expect.stringMatching(/did you mean "priority"/)]]);
    const poolKey = errors((v) => ((v['pools'] as Value[])[0]!['schedulingPolicies'] = 'priority'));
    expect(poolKey.map((i) => i.fix)).toEqual([expect.stringMatching(/did you mean "schedulingPolicy"/)]);
  });
});

describe('priorities: policy check warnings', () => {
  it('warns, per tenant, where the priority does nothing: the pools it may be routed to that do not declare schedulingPolicy: priority', () => {
    const w = warnings((v) => {
      v['priorities'] = { tenants: { acme: -10 }, default: 3 };
      (v['pools'] as Value[])[0]!['schedulingPolicy'] = 'priority';
    });
    expect(w.map((i) => [i.path, i.message, i.severity])).toEqual([
      [
        'priorities.tenants.acme',
        `tenant "acme"'s priority -10 does nothing on pool(s) a-decode, b-prefill, b-decode: they do not declare schedulingPolicy: priority, so a request routed to any of them runs at 0`,
        'warning',
      ],
      [
        'priorities.default',
        expect.stringMatching(/^the default priority 3 does nothing on pool\(s\) a-decode, b-prefill, b-decode/),
        'warning',
      ],
    ]);
    expect(w[0]!.fix).toMatch(/--scheduling-policy priority/);
  });

  it('no warning once every pool declares it, or for a priority of 0', () => {
    expect(
      warnings((v) => {
        v['priorities'] = { tenants: { acme: -10, globex: 0 }, default: 3 };
        allPriority(v);
      }),
    ).toEqual([]);
    expect(warnings((v) => (v['priorities'] = { tenants: { globex: 0 } }))).toEqual([]);
  });

  it('a tenant no model accepts is a likely typo: named with the closest tenant', () => {
    const w = warnings((v) => {
      v['priorities'] = { tenants: { acmee: -10 } };
      allPriority(v);
    });
    expect(w.map((i) => [i.path, i.fix])).toEqual([['priorities.tenants.acmee', 'did you mean "acme"?']]);
  });
});
