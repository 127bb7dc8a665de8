import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { CompiledRouteTable } from '../policy/compile.js';
import { clone, tableFromValue, twoRevisionTableValue } from '../policy/testing.js';
import { decide } from './decide.js';
import { chooseRevision } from './revision.js';
import { createTestWorkerView, testFacts, testKeys, type TestFactsInput } from './testing.js';
import { TEST_NOW_MS } from '../../test/support/clock.js';
import type { CoreDecision, RouteDecision } from './types.js';

const keys = testKeys();
type Value = Record<string, any>;

function table(weight: number, mutate: (v: Value) => void = () => {}): CompiledRouteTable {
  const v = clone(twoRevisionTableValue()) as Value;
  v['models']['llama-3-8b']['rollout'] = { stable: 'llama-a', candidate: 'llama-b', weight };
  mutate(v);
  return tableFromValue(v);
}
const unverifiedB = (v: Value) => (v['revisions']['llama-b']['verification'] = { required: true, verified: false });
const run = (t: CompiledRouteTable, input: TestFactsInput, now = TEST_NOW_MS): CoreDecision =>
  decide(testFacts({ tenant: 'acme', ...input }), t, createTestWorkerView(t), { nowMs: now, keys });
function route(d: CoreDecision): RouteDecision {
  if (d.kind !== 'route') throw new Error(JSON.stringify(d));
  return d;
}
/** The revision chooseRevision gives a session at `t`, without minting tokens (fast enough for properties). */
function cohortOf(t: CompiledRouteTable, session: string): string {
  const model = t.models.get('llama-3-8b')!;
  const serving = [t.revisions.get('llama-a')!, t.revisions.get('llama-b')!];
  const c = chooseRevision({ table: t, model, serving, tenantScope: 'tenant:acme', session, requestId: 'r', keys, nowMs: TEST_NOW_MS }, []);
  if ('refuse' in c) throw new Error(c.refuse);
  return c.revision.name;
}

describe('cohorts', () => {
  const tables = new Map(Array.from({ length: 101 }, (_, w) => [w, table(w)]));

  it('raising the weight only ever moves sessions toward the candidate', () => {
    fc.assert(
      fc.property(fc.string({ minLength: 1 }), fc.integer({ min: 0, max: 100 }), fc.integer({ min: 0, max: 100 }), (session, a, b) => {
        const [lo, hi] = a <= b ? [a, b] : [b, a];
        return cohortOf(tables.get(lo)!, session) !== 'llama-b' || cohortOf(tables.get(hi)!, session) === 'llama-b';
      }),
      { numRuns: 500 },
    );
  });

  it('a weight change never moves a session that holds a valid binding', () => {
    fc.assert(
      fc.property(
        fc.string({ minLength: 1, maxLength: 40 }),
        fc.integer({ min: 0, max: 100 }),
        fc.integer({ min: 0, max: 100 }),
        (session, w1, w2) => {
          const first = route(run(tables.get(w1)!, { session }));
          const later = route(run(tables.get(w2)!, { session, binding: first.binding, requestId: 'req-2' }, TEST_NOW_MS + 1000));
          return later.group.revision === first.group.revision && later.group.id === first.group.id;
        },
      ),
      { numRuns: 60 },
    );
  });
});

describe('verification of a candidate', () => {
  it('an unverified candidate takes no cohort: its cohort goes to stable, and the trace says why', () => {
    const t = table(100, unverifiedB);
    for (let s = 0; s < 20; s++) {
      const d = route(run(t, { session: `s-${s}` }));
      expect(d.group.revision).toBe('llama-a');
      expect(d.trace).toContain(
        'candidate llama-b takes no cohort: is not verified (revisions.llama-b.verification requires it; set verified: true once kvgate verify passes)',
      );
      expect(d.trace).toContain('revision: llama-a (candidate llama-b is not verified)');
    }
    expect(
      route(
        run(
          table(100, (v) => (v['revisions']['llama-b']['verification'] = { verified: true, evidence: 'verify-2024-05-01' })),
          { session: 's-1' },
        ),
      ).group.revision,
    ).toBe('llama-b');
  });

  it('a binding to a candidate that became unverified is not honoured', () => {
    const first = route(run(table(100), { session: 's-1' }));
    expect(first.group.revision).toBe('llama-b');
    const d = route(run(table(100, unverifiedB), { session: 's-1', binding: first.binding }));
    expect(d.group.revision).toBe('llama-a');
    expect(d.trace).toContain(
      'binding to revision llama-b ignored: it is not verified (revisions.llama-b.verification requires it; set verified: true once kvgate verify passes)',
    );
  });

  it('a binding older than the bindingTtlMs of the table in use is not honoured, even when its own expiry is later', () => {
    // A binding carries the TTL of the table that signed it; lowering session.bindingTtlMs (to let pinned sessions go
    // sooner, e.g. during a rollback) must apply to bindings already out there too.
    const first = route(run(table(100), { session: 's-1' }));
    const shorter = table(0, (v) => (v['session'] = { header: 'x-session-id', bindingTtlMs: 60_000 }));
    const within = route(run(shorter, { session: 's-1', binding: first.binding }, TEST_NOW_MS + 59_000));
    expect(within.group.revision).toBe('llama-b');
    const d = route(run(shorter, { session: 's-1', binding: first.binding }, TEST_NOW_MS + 61_000));
    expect(d.group.revision).toBe('llama-a');
    expect(d.trace).toContain(
      'binding to revision llama-b ignored: it was issued 61000 ms ago, longer than session.bindingTtlMs (60000 ms) of the route table in use',
    );
  });

  it('refuses with 503 when the only revision open to the tenant is an unverified candidate', () => {
    const t = table(10, (v) => {
      unverifiedB(v);
      for (const p of v['pools']) p['tenants'] = p['revision'] === 'llama-a' ? ['globex'] : ['acme', 'globex'];
    });
    const d = run(t, { session: 's-1' });
    expect(d).toMatchObject({ kind: 'refuse', code: 'no_compatible_capacity', retryAfterSeconds: 5 });
    expect(d.kind === 'refuse' && d.message).toBe(
      "model llama-3-8b's only revision open to this tenant is candidate llama-b, which is not verified (revisions.llama-b.verification requires it; set verified: true once kvgate verify passes)",
    );
  });
});

describe('weight 0 with stable closed to the tenant', () => {
  it('refuses saying the verified candidate takes no sessions at weight 0, not that it is unverified', () => {
    const t = table(0, (v) => {
      for (const p of v['pools']) p['tenants'] = p['revision'] === 'llama-a' ? ['globex'] : ['acme', 'globex'];
    });
    const d = run(t, { session: 's-1' });
    expect(d).toMatchObject({ kind: 'refuse', code: 'no_compatible_capacity', retryAfterSeconds: 5 });
    expect(d.kind === 'refuse' && d.message).toBe(
      "model llama-3-8b's only revision open to this tenant is candidate llama-b, whose rollout weight is 0 (it takes no sessions); raise the weight or open stable llama-a to this tenant",
    );
  });
});

describe('drain', () => {
  it('a draining pool takes no new bindings; a decision made before the drain still stands as it was', () => {
    const before = table(0);
    const bound = route(run(before, { session: 's-1' }));
    const drained = table(0, (v) => (v['pools'][1]['draining'] = true));
    const after = run(drained, { session: 's-2' });
    expect(after).toMatchObject({ kind: 'refuse', code: 'no_compatible_capacity' });
    // The bound request's contract and targets are values: nothing about the drain reaches them. The gate never
    // decides a bound request again (see src/gate/admission.test.ts for the stream-level proof).
    expect(bound.decode.cluster).toBe('a_decode');
    expect(Object.isFrozen(bound)).toBe(true);
  });

  it('a worker-view drain of one endpoint moves new requests to its peer only', () => {
    const t = table(0);
    const view = createTestWorkerView(t, { '10.0.2.1:9090': { draining: true } });
    for (let i = 0; i < 10; i++) {
      const d = decide(testFacts({ tenant: 'acme', requestId: `r-${i}` }), t, view, { nowMs: TEST_NOW_MS, keys });
      expect(d.kind === 'route' && d.decode.endpoint).toBe('10.0.2.2:9090');
    }
  });
});
