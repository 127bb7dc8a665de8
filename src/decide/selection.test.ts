import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { CompiledRouteTable } from '../policy/compile.js';
import { clone, tableFromValue, twoRevisionTableValue } from '../policy/testing.js';
import { decide } from './decide.js';
import { createTestWorkerView, testFacts, testKeys, type TestFactsInput } from './testing.js';
import { TEST_NOW_MS } from '../../test/support/clock.js';
import type { CoreDecision, RouteDecision } from './types.js';
import { createInFlightTracker, createStaticWorkerView, type InFlightTicket, type WorkerView } from './worker-view.js';

const keys = testKeys();
const ctx = { nowMs: TEST_NOW_MS, keys };
function compiled(mutate: (v: Record<string, any>) => void = () => {}): CompiledRouteTable {
  const v = clone(twoRevisionTableValue()) as Record<string, any>;
  mutate(v);
  return tableFromValue(v);
}
const withWeight = (weight: number) =>
  compiled((v) => (v['models']['llama-3-8b']['rollout'] = { stable: 'llama-a', candidate: 'llama-b', weight }));
function route(
  table: CompiledRouteTable,
  input: TestFactsInput,
  view: WorkerView = createTestWorkerView(table),
  now = TEST_NOW_MS,
): RouteDecision {
  const d: CoreDecision = decide(testFacts({ tenant: 'acme', ...input }), table, view, { ...ctx, nowMs: now });
  if (d.kind !== 'route') throw new Error(JSON.stringify(d));
  return d;
}

describe('determinism', () => {
  it('the same facts, table, view and time give the same decision, on any replica', () => {
    const a = withWeight(30);
    const b = withWeight(30); // a second replica compiling the same table
    for (let i = 0; i < 20; i++) {
      const input = { requestId: `r-${i}`, session: `s-${i % 7}` };
      expect(route(b, input)).toEqual(route(a, input));
    }
  });
});

describe('least-in-flight picking', () => {
  it('picks the endpoint with the fewest requests in flight', () => {
    const t = withWeight(0);
    const view = createTestWorkerView(t, {
      '10.0.2.1:9090': { inFlight: 3 },
      '10.0.2.2:9090': { inFlight: 2 },
      '10.0.1.1:9090': { inFlight: 0 },
      '10.0.1.2:9090': { inFlight: 1 },
    });
    for (let i = 0; i < 20; i++) {
      const d = route(t, { requestId: `r-${i}` }, view);
      expect([d.decode.endpoint, d.prefill?.endpoint]).toEqual(['10.0.2.2:9090', '10.0.1.1:9090']);
    }
  });

  it('breaks ties by a stable hash of request and address, not by list order', () => {
    const t = withWeight(0);
    const forward = createTestWorkerView(t);
    const backward = createTestWorkerView(t, {}, { reverse: true });
    const counts = new Map<string, number>();
    for (let i = 0; i < 200; i++) {
      const d = route(t, { requestId: `r-${i}` }, forward);
      expect(route(t, { requestId: `r-${i}` }, backward).decode).toEqual(d.decode);
      counts.set(d.decode.endpoint!, (counts.get(d.decode.endpoint!) ?? 0) + 1);
    }
    expect(counts.get('10.0.2.1:9090')).toBeGreaterThan(60);
    expect(counts.get('10.0.2.2:9090')).toBeGreaterThan(60);
  });

  it('follows the in-flight tracker the gate updates around each request', () => {
    const t = withWeight(0);
    const tracker = createInFlightTracker();
    const view = createStaticWorkerView(t, tracker);
    const releases: InFlightTicket[] = [];
    const seen: string[] = [];
    for (let i = 0; i < 4; i++) {
      const d = route(t, { requestId: `r-${i}` }, view);
      seen.push(d.decode.endpoint!);
      releases.push(tracker.acquire(d.decode.endpoint!));
    }
    expect(seen.filter((a) => a === '10.0.2.1:9090')).toHaveLength(2);
    expect(seen.filter((a) => a === '10.0.2.2:9090')).toHaveLength(2);
    for (const r of releases) tracker.release(r);
    expect(tracker.snapshot().size).toBe(0);
  });
});

describe('rollout cohorts', () => {
  it('a session always lands in the same cohort, whatever its request ids', () => {
    const t = withWeight(50);
    for (let s = 0; s < 30; s++) {
      const revisions = new Set(
        Array.from({ length: 5 }, (_, i) => route(t, { requestId: `r-${s}-${i}`, session: `sess-${s}` }).group.revision),
      );
      expect(revisions.size).toBe(1);
    }
  });

  it('sends about weight% of sessions to the candidate, and raising the weight only moves sessions to it', () => {
    const t10 = withWeight(10);
    const t40 = withWeight(40);
    let in10 = 0;
    for (let s = 0; s < 1000; s++) {
      const at10 = route(t10, { session: `s-${s}` }).group.revision;
      const at40 = route(t40, { session: `s-${s}` }).group.revision;
      if (at10 === 'llama-b') {
        in10++;
        expect(at40).toBe('llama-b');
      }
    }
    expect(in10).toBeGreaterThan(60);
    expect(in10).toBeLessThan(140);
  });

  it('without a session, the request id decides the cohort', () => {
    const t = withWeight(50);
    const byId = (id: string) => route(t, { requestId: id }).group.revision;
    expect(byId('fixed-id')).toBe(byId('fixed-id'));
    const revs = new Set(Array.from({ length: 40 }, (_, i) => byId(`id-${i}`)));
    expect(revs).toEqual(new Set(['llama-a', 'llama-b']));
  });

  it('weight 0 and 100 are absolute', () => {
    for (let s = 0; s < 50; s++) {
      expect(route(withWeight(0), { session: `s-${s}` }).group.revision).toBe('llama-a');
      expect(route(withWeight(100), { session: `s-${s}` }).group.revision).toBe('llama-b');
    }
  });
});

describe('binding stickiness', () => {
  it('keeps a session on its bound revision when the cohort would move it', () => {
    const first = route(withWeight(0), { session: 'sess-1' });
    expect(first.group.revision).toBe('llama-a');
    const later = withWeight(100);
    expect(route(later, { session: 'sess-1' }).group.revision).toBe('llama-b');
    const sticky = route(later, { session: 'sess-1', binding: first.binding }, undefined, TEST_NOW_MS + 60_000);
    expect(sticky.group.revision).toBe('llama-a');
    expect(sticky.trace).toContain("revision: llama-a (kept by the session's binding, issued 60000 ms ago)");
  });

  it('ignores a binding from another tenant, another session, an expired one, or one whose revision left the rollout', () => {
    const first = route(withWeight(0), { session: 'sess-1' });
    const later = withWeight(100);
    const globex = route(later, { tenant: 'globex', session: 'sess-1', binding: first.binding });
    expect(globex.group.revision).toBe('llama-b');
    expect(globex.trace.some((l) => l.startsWith('binding ignored: the binding belongs to tenant scope tenant:acme'))).toBe(true);
    expect(route(later, { session: 'sess-2', binding: first.binding }).group.revision).toBe('llama-b');
    expect(route(later, { session: 'sess-1', binding: first.binding }, undefined, TEST_NOW_MS + 3_600_001).group.revision).toBe('llama-b');
    const retired = compiled((v) => (v['models']['llama-3-8b']['rollout'] = { stable: 'llama-b' }));
    const d = route(retired, { session: 'sess-1', binding: first.binding });
    expect(d.group.revision).toBe('llama-b');
    expect(d.trace).toContain('binding to revision llama-a ignored: it no longer serves model llama-3-8b for this tenant');
  });

  it('issues a binding for every routed request, carrying its session', () => {
    const d = route(withWeight(0), { session: 'sess-9' });
    const again = route(withWeight(100), { session: 'sess-9', binding: d.binding });
    expect(again.group.revision).toBe('llama-a');
    expect(again.binding).not.toBe('');
  });

  it('signs the binding when it is read: the stream keeps it unsigned, and printing a decision shows the token', () => {
    const d = route(withWeight(0), { session: 'sess-9' });
    expect(d.pendingBinding.token()).toBe(d.binding);
    const printed = JSON.parse(JSON.stringify(d)) as Record<string, unknown>;
    expect(printed['binding']).toBe(d.binding);
    expect(Object.keys(printed)).not.toContain('pendingBinding');
  });
});

describe('worker views', () => {
  it('the static view declares every endpoint verified with its pool fingerprint and live in-flight counts', () => {
    const t = withWeight(0);
    const tracker = createInFlightTracker();
    const release = tracker.acquire('10.0.2.1:9090');
    tracker.acquire('10.0.2.1:9090');
    const view = createStaticWorkerView(t, tracker);
    expect(view.endpoints('a-decode')).toEqual([
      {
        address: '10.0.2.1:9090',
        fingerprint: t.revisions.get('llama-a')!.fingerprint,
        verified: true,
        draining: false,
        inFlight: 2,
        observedAtMs: 0,
      },
      {
        address: '10.0.2.2:9090',
        fingerprint: t.revisions.get('llama-a')!.fingerprint,
        verified: true,
        draining: false,
        inFlight: 0,
        observedAtMs: 0,
      },
    ]);
    tracker.release(release);
    tracker.release(release); // idempotent
    expect(tracker.inFlight('10.0.2.1:9090')).toBe(1);
    expect(view.endpoints('no-such-pool')).toEqual([]);
  });
});

describe('the group invariant', () => {
  it('never routes to an endpoint of another group, whatever the live view says', () => {
    const base = compiled((v) => {
      v['pools'].push({ name: 'b-both', cluster: 'b_both', role: 'both', revision: 'llama-b', endpoints: [{ address: '10.0.9.1:9090' }] });
    });
    const fps = [base.revisions.get('llama-a')!.fingerprint, base.revisions.get('llama-b')!.fingerprint, null];
    const addresses = [...base.pools.values()].flatMap((p) => p.endpoints.map((e) => e.address));
    const patch = fc.record({ fp: fc.constantFrom(...fps), verified: fc.boolean(), draining: fc.boolean(), inFlight: fc.nat(70) });
    fc.assert(
      fc.property(
        fc.array(patch, { minLength: addresses.length, maxLength: addresses.length }),
        fc.string(),
        fc.constantFrom('acme', 'globex'),
        (patches, requestId, tenant) => {
          const view = createTestWorkerView(
            base,
            Object.fromEntries(addresses.map((a, i) => [a, { ...patches[i]!, fingerprint: patches[i]!.fp }])),
          );
          const d = decide(testFacts({ tenant, requestId: `r${requestId}`, session: requestId || 'none' }), base, view, ctx);
          if (d.kind !== 'route') return d.kind === 'refuse';
          for (const target of [d.decode, d.prefill]) {
            if (target === null) continue;
            const pool = base.pools.get(target.pool)!;
            const live = view.endpoints(pool.name).find((e) => e.address === target.endpoint)!;
            if (pool.fingerprint !== d.group.fingerprint || live.fingerprint !== d.group.fingerprint || pool.revision !== d.group.revision)
              return false;
            if (!live.verified || live.draining || live.inFlight >= pool.maxInFlightPerEndpoint) return false;
          }
          return true;
        },
      ),
      { numRuns: 300 },
    );
  });
});

describe('prefix affinity', () => {
  const long = `You are a careful assistant. ${'Context paragraph. '.repeat(30)}`;
  const fourDecode = () =>
    compiled((v) => {
      v['models']['llama-3-8b']['rollout'] = { stable: 'llama-a' };
      v['pools'][1]['endpoints'] = [1, 2, 3, 4].map((i) => ({ address: `10.0.2.${i}:8000` }));
    });

  it('keeps a long shared prefix of one tenant on one endpoint while loads are even', () => {
    const t = fourDecode();
    const picks = new Set(Array.from({ length: 20 }, (_, i) => route(t, { requestId: `r-${i}`, content: long }).decode.endpoint));
    expect(picks.size).toBe(1);
  });

  it('never spans tenants: the key is the group, whose id carries the tenant scope', () => {
    const t = fourDecode();
    // Over many prefixes, the two tenants' preferred endpoints are independent (they would agree every time if the
    // key ignored the tenant).
    let same = 0;
    for (let i = 0; i < 40; i++) {
      const content = `${i} ${long}`;
      const a = route(t, { requestId: `a-${i}`, content, tenant: 'acme' });
      const g = route(t, { requestId: `g-${i}`, content, tenant: 'globex' });
      expect(a.group.id).not.toBe(g.group.id);
      if (a.decode.endpoint === g.decode.endpoint) same++;
    }
    expect(same).toBeLessThan(25);
  });
});
