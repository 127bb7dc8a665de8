import { pino } from 'pino';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import { createDevKeyRing } from '../contract/keys.js';
import type { Decision } from '../decide/types.js';
import { createInFlightTracker, createStaticWorkerView, type InFlightTracker } from '../decide/worker-view.js';
import type { CompiledRouteTable } from '../policy/compile.js';
import { tableFromValue } from '../policy/testing.js';
import { createPolicyStore, type PolicyStore } from './policy-store.js';
import { createRolloutMetrics } from './rollout-metrics.js';
import { type AdmissionControl, createAdmission } from './admission.js';
import type { Admitted, RoutingState } from './admission-types.js';
import { createTableFile, queueTableValue, chatFacts, recordingHooks, tick, type TableFile, type TableValue } from './testing.js';

const keys = createDevKeyRing('admission-test');
const B_DECODE = '10.0.4.1:9090';

interface Rig {
  readonly admission: AdmissionControl;
  readonly inFlight: InFlightTracker;
  readonly registry: Registry;
  setTable(t: CompiledRouteTable): void;
}

function rig(value: TableValue, opts: { maxMessageTimeoutMs?: number; now?: () => number; traceDecisions?: boolean } = {}): Rig {
  const inFlight = createInFlightTracker();
  const registry = new Registry();
  const metrics = createRolloutMetrics(registry);
  const compiled = tableFromValue(value);
  let state: RoutingState = { table: compiled, view: createStaticWorkerView(compiled, inFlight) };
  metrics.updateVerification(compiled);
  // Traced: these tests read where a request waited from its decision's steps.
  const admission = createAdmission({
    state: () => state,
    keys: () => keys,
    inFlight,
    now: Date.now,
    metrics,
    recheckMs: 0,
    traceDecisions: true,
    ...opts,
  });
  return {
    admission,
    inFlight,
    registry,
    setTable(t) {
      state = { table: t, view: createStaticWorkerView(t, inFlight) };
      metrics.updateVerification(t);
      admission.notifyChanged();
    },
  };
}
const compiled = (v: TableValue) => tableFromValue(v);
const signal = () => new AbortController().signal;
async function metric(registry: Registry, name: string, labels: Record<string, string>): Promise<number> {
  const m = (await registry.getMetricsAsJSON()).find((x) => x.name === name);
  const v = m?.values.find((x) => Object.entries(labels).every(([k, l]) => x.labels[k] === l));
  return v?.value ?? 0;
}
function route(d: Admitted): Extract<Decision, { kind: 'route' }> {
  if (d.decision.kind !== 'route') throw new Error(JSON.stringify(d.decision));
  return d.decision;
}
const settled = <T>(p: Promise<T>) => {
  const s = { done: false, value: undefined as T | undefined };
  void p.then((v) => Object.assign(s, { done: true, value: v }));
  return s;
};

describe('admission: the fallback queue', () => {
  let r: Rig | undefined;
  afterEach(() => r?.admission.close());

  it('keeps no decision trace unless asked (nothing on the request path reads one), and decides the same', async () => {
    const plain = rig(queueTableValue(), { traceDecisions: false });
    const traced = rig(queueTableValue());
    const a = (await plain.admission.admit(chatFacts('t1'), signal(), recordingHooks())).decision;
    const b = (await traced.admission.admit(chatFacts('t1'), signal(), recordingHooks())).decision;
    expect(a.trace).toEqual([]);
    expect(b.trace.length).toBeGreaterThan(3);
    if (a.kind !== 'route' || b.kind !== 'route') throw new Error('both route');
    expect([a.group, a.decode, a.prefill]).toEqual([b.group, b.decode, b.prefill]);
    // A refusal without a trace still carries its code and reason (its audit line reads those).
    const unknown = { model: 'nope', messages: [{ role: 'user', content: 'hi' }] };
    const refused = (await plain.admission.admit(chatFacts('t2', {}, unknown), signal(), recordingHooks())).decision;
    expect(refused).toMatchObject({ kind: 'refuse', code: 'unknown_model', trace: [] });
    const bad = (await plain.admission.admit(chatFacts('t3', {}, { model: 'llama-3-8b' }), signal(), recordingHooks())).decision;
    expect(bad).toMatchObject({ kind: 'refuse', code: 'bad_request', trace: [] });
  });

  it("parks a request when its group is busy, extends Envoy's timer, and routes it inside the group when capacity frees", async () => {
    r = rig(queueTableValue());
    const first = await r.admission.admit(chatFacts('r1'), signal(), recordingHooks());
    expect(route(first).decode.endpoint).toBe(B_DECODE);
    const hooks = recordingHooks();
    const waiting = settled(Promise.resolve(r.admission.admit(chatFacts('r2'), signal(), hooks)));
    await tick();
    expect(waiting.done).toBe(false);
    expect(hooks.extended).toHaveLength(1);
    expect(hooks.extended[0]).toBeGreaterThan(2000); // the 2000 ms deadline plus the margin, within max_message_timeout
    expect(hooks.extended[0]).toBeLessThanOrEqual(2250);
    expect(r.admission.queueStatus()).toMatchObject({ waiting: 1, groups: [{ groupId: route(first).group.id, depth: 1 }] });
    expect(await metric(r.registry, 'kvgate_queue_depth', { group: route(first).group.id })).toBe(1);
    first.hold!.release();
    await tick();
    expect(waiting.done).toBe(true);
    const second = route(waiting.value!);
    expect(second.group).toEqual(route(first).group);
    expect(second.decode.endpoint).toBe(B_DECODE);
    expect(r.inFlight.inFlight(B_DECODE)).toBe(1);
    expect(second.trace).toContain(`revision: llama-b (kept: the request waits in the queue of group ${second.group.id})`);
    expect(await metric(r.registry, 'kvgate_fallback_total', { step: 'queue', outcome: 'waiting' })).toBe(1);
    expect(await metric(r.registry, 'kvgate_fallback_total', { step: 'queue', outcome: 'served' })).toBe(1);
    expect(r.admission.queueStatus().waiting).toBe(0);
    waiting.value!.hold!.release();
    expect(r.inFlight.inFlight(B_DECODE)).toBe(0);
  });

  it('answers 504 queue_deadline_exceeded when nothing frees before the deadline', async () => {
    r = rig(queueTableValue((v) => (v['fallback'][0]['queue']['deadlineMs'] = 40)));
    await r.admission.admit(chatFacts('r1'), signal(), recordingHooks());
    const d = await r.admission.admit(chatFacts('r2'), signal(), recordingHooks());
    expect(d.decision).toMatchObject({ kind: 'refuse', code: 'queue_deadline_exceeded' });
    expect(d.hold).toBeUndefined();
    expect(await metric(r.registry, 'kvgate_fallback_total', { step: 'queue', outcome: 'deadline_exceeded' })).toBe(1);
    expect(await r.registry.getSingleMetricAsString('kvgate_queue_wait_seconds')).toMatch(
      /^kvgate_queue_wait_seconds_count\{outcome="deadline_exceeded"\} 1$/m,
    );
  });

  it('refuses 429 queue_full past maxDepth', async () => {
    r = rig(queueTableValue());
    await r.admission.admit(chatFacts('r1'), signal(), recordingHooks());
    void r.admission.admit(chatFacts('r2'), signal(), recordingHooks());
    void r.admission.admit(chatFacts('r3'), signal(), recordingHooks());
    const full = await r.admission.admit(chatFacts('r4'), signal(), recordingHooks());
    expect(full.decision).toMatchObject({ kind: 'refuse', code: 'queue_full', retryAfterSeconds: 7 });
    expect(await metric(r.registry, 'kvgate_fallback_total', { step: 'queue', outcome: 'queue_full' })).toBe(1);
  });

  it('takes a request out of the queue when its stream is cancelled (client gone)', async () => {
    r = rig(queueTableValue());
    const first = await r.admission.admit(chatFacts('r1'), signal(), recordingHooks());
    const abort = new AbortController();
    const gone = r.admission.admit(chatFacts('r2'), abort.signal, recordingHooks());
    await tick();
    expect(r.admission.queueStatus().waiting).toBe(1);
    abort.abort();
    await gone;
    expect(r.admission.queueStatus().waiting).toBe(0);
    expect(await metric(r.registry, 'kvgate_fallback_total', { step: 'queue', outcome: 'cancelled' })).toBe(1);
    first.hold!.release();
    await tick();
    expect(r.inFlight.inFlight(B_DECODE)).toBe(0); // nobody took the freed slot
  });

  it("never holds a request when the stream cannot extend Envoy's timer", async () => {
    r = rig(queueTableValue());
    await r.admission.admit(chatFacts('r1'), signal());
    const d = await r.admission.admit(chatFacts('r2'), signal());
    expect(d.decision).toMatchObject({ kind: 'refuse', code: 'no_compatible_capacity', retryAfterSeconds: 7 });
    expect(d.decision.trace).toContain(
      "fallback step 1 (queue): passed: this caller cannot hold requests (an internal hop, or Envoy's max_message_timeout is 0)",
    );
    expect(await metric(r.registry, 'kvgate_queue_skipped_total', { reason: 'cannot_hold' })).toBe(1);
    const disabled = rig(queueTableValue(), { maxMessageTimeoutMs: 0 });
    await disabled.admission.admit(chatFacts('r1'), signal(), recordingHooks());
    expect((await disabled.admission.admit(chatFacts('r2'), signal(), recordingHooks())).decision.kind).toBe('refuse');
    disabled.admission.close();
  });

  it("caps the wait below Envoy's max_message_timeout", async () => {
    r = rig(
      queueTableValue((v) => (v['fallback'][0]['queue']['deadlineMs'] = 10_000)),
      { maxMessageTimeoutMs: 80 },
    );
    await r.admission.admit(chatFacts('r1'), signal(), recordingHooks());
    const hooks = recordingHooks();
    const d = await r.admission.admit(chatFacts('r2'), signal(), hooks);
    expect(hooks.extended[0]).toBeLessThanOrEqual(80);
    expect(d.decision).toMatchObject({ kind: 'refuse', code: 'queue_deadline_exceeded' });
    expect(d.decision.kind === 'refuse' && d.decision.message).toMatch(/its queue deadline of 60 ms passed/);
  });

  it('queues whatever the traffic history: sparse traffic no longer turns a wait into an immediate 503', async () => {
    let now = 1_700_000_000_000;
    r = rig(queueTableValue(), { now: () => now });
    for (let i = 0; i < 3; i++) {
      (await r.admission.admit(chatFacts(`warm-${i}`), signal(), recordingHooks())).hold!.release();
      now += 5000; // sparse: one request every 5 s, each long gone before the next
    }
    await r.admission.admit(chatFacts('r1'), signal(), recordingHooks());
    const waiting = settled(Promise.resolve(r.admission.admit(chatFacts('r2'), signal(), recordingHooks())));
    await tick();
    expect(waiting.done).toBe(false);
    expect(r.admission.queueStatus().waiting).toBe(1);
    expect(await metric(r.registry, 'kvgate_queue_skipped_total', {})).toBe(0);
  });

  it('a reload that makes a queued request unreadable answers it (400), never throws out of the queue', async () => {
    r = rig(queueTableValue());
    await r.admission.admit(chatFacts('r1'), signal(), recordingHooks());
    const body = { model: 'llama-3-8b', user: '\ud800', messages: [{ role: 'user', content: 'Say hello.' }] };
    const waiting = r.admission.admit(chatFacts('r2', {}, body), signal(), recordingHooks());
    await tick();
    expect(r.admission.queueStatus().waiting).toBe(1);
    // tenant-user scope takes the user from the body: a lone surrogate cannot be part of a tenant scope.
    r.setTable(compiled(queueTableValue((v) => (v['tenancy']['prefixScope'] = 'tenant-user'))));
    expect((await waiting).decision).toMatchObject({ kind: 'refuse', code: 'bad_request' });
    expect(r.admission.queueStatus().waiting).toBe(0);
  });

  it('a decision that throws while a request is queued answers that request (fail closed) and frees its slot', async () => {
    const inFlight = createInFlightTracker();
    const table = compiled(queueTableValue());
    let broken = false;
    const admission = createAdmission({
      state: () => {
        if (broken) throw new Error('kvgate bug: simulated');
        return { table, view: createStaticWorkerView(table, inFlight) };
      },
      keys: () => keys,
      inFlight,
      now: Date.now,
      recheckMs: 0,
    });
    try {
      const first = await admission.admit(chatFacts('r1'), signal(), recordingHooks());
      const waiting = admission.admit(chatFacts('r2'), signal(), recordingHooks());
      await tick();
      broken = true;
      expect(() => admission.notifyChanged()).not.toThrow();
      expect((await waiting).decision).toMatchObject({ kind: 'refuse', code: 'internal' });
      expect(admission.queueStatus().waiting).toBe(0);
      broken = false;
      first.hold!.release();
    } finally {
      admission.close();
    }
  });

  it('answers every queued request with 503 when the gate closes', async () => {
    r = rig(queueTableValue());
    await r.admission.admit(chatFacts('r1'), signal(), recordingHooks());
    const waiting = r.admission.admit(chatFacts('r2'), signal(), recordingHooks());
    await tick();
    r.admission.close();
    expect((await waiting).decision).toMatchObject({ kind: 'refuse', code: 'no_compatible_capacity', retryAfterSeconds: 1 });
  });

  it('counts routeVia and recompute, and exports kvgate_revision_verified', async () => {
    r = rig(
      queueTableValue((v) => {
        v['fallback'] = [{ recompute: { prefillMsPerToken: 1, maxPromptTokens: 1000 } }, { routeVia: { revisions: ['llama-a'] } }];
        v['pools'][2]['maxInFlightPerEndpoint'] = 1;
        v['revisions']['llama-b']['verification'] = { required: true, verified: true, evidence: 'verify #7' };
      }),
    );
    const first = route(await r.admission.admit(chatFacts('r1'), signal(), recordingHooks()));
    expect(first.group.revision).toBe('llama-b');
    const via = route(await r.admission.admit(chatFacts('r2'), signal(), recordingHooks())); // B decode full
    expect([via.group.revision, via.decode.cluster, via.prefill?.cluster]).toEqual(['llama-a', 'a_decode', 'a_prefill']);
    expect(await metric(r.registry, 'kvgate_fallback_total', { step: 'recompute', outcome: 'passed' })).toBe(1);
    expect(await metric(r.registry, 'kvgate_fallback_total', { step: 'routeVia', outcome: 'routed' })).toBe(1);
    expect(await metric(r.registry, 'kvgate_revision_verified', { model: 'llama-3-8b', revision: 'llama-b' })).toBe(1);
    r.setTable(compiled(queueTableValue((v) => (v['revisions']['llama-b']['verification'] = { required: true }))));
    expect(await metric(r.registry, 'kvgate_revision_verified', { model: 'llama-3-8b', revision: 'llama-b' })).toBe(0);
    expect(await metric(r.registry, 'kvgate_revision_verified', { model: 'llama-3-8b', revision: 'llama-a' })).toBe(1);
  });
});

describe('admission: reloads and drains under traffic', () => {
  let file: TableFile | undefined;
  let store: PolicyStore | undefined;
  let r: AdmissionControl | undefined;
  afterEach(async () => {
    r?.close();
    store?.close();
    await file?.remove();
  });

  async function live(value: TableValue) {
    file = await createTableFile(value);
    const created = await createPolicyStore({ file: file.path, logger: pino({ level: 'silent' }), registry: new Registry() });
    if (!created.ok) throw new Error(created.message);
    store = created.store;
    const inFlight = createInFlightTracker();
    let state: RoutingState = { table: store.current(), view: createStaticWorkerView(store.current(), inFlight) };
    const admission = createAdmission({ state: () => state, keys: () => keys, inFlight, now: Date.now, recheckMs: 0 });
    store.onSwap((table) => {
      state = { table, view: createStaticWorkerView(table, inFlight) };
      admission.notifyChanged();
    });
    r = admission;
    return { admission, inFlight, store: store, file: file };
  }

  it('in-flight requests keep their decision and queued ones their group across a good reload that changes the cohort', async () => {
    const g = await live(queueTableValue());
    const first = await g.admission.admit(chatFacts('r1'), signal(), recordingHooks());
    const queued = settled(Promise.resolve(g.admission.admit(chatFacts('r2'), signal(), recordingHooks())));
    await tick();
    await g.file.write(queueTableValue((v) => (v['models']['llama-3-8b']['rollout']['weight'] = 0)));
    expect((await g.store.reload('test')).ok).toBe(true);
    // New requests follow the new cohort; the queued one is still waiting for its own group.
    expect(route(await g.admission.admit(chatFacts('r3'), signal(), recordingHooks())).group.revision).toBe('llama-a');
    await tick();
    expect(queued.done).toBe(false);
    expect(route(first).group.revision).toBe('llama-b');
    first.hold!.release();
    await tick();
    expect(route(queued.value!).group).toEqual(route(first).group);
    expect(g.inFlight.inFlight(B_DECODE)).toBe(1);
  });

  it('a bad reload changes nothing: the queued request is still served from the table in use', async () => {
    const g = await live(queueTableValue());
    const first = await g.admission.admit(chatFacts('r1'), signal(), recordingHooks());
    const queued = settled(Promise.resolve(g.admission.admit(chatFacts('r2'), signal(), recordingHooks())));
    await tick();
    await g.file.writeText('version: 1\nrevisions: [\n');
    const reload = await g.store.reload('test');
    expect(reload.ok).toBe(false);
    await g.file.write(queueTableValue((v) => (v['pools'][3]['revision'] = 'llama-z')));
    expect((await g.store.reload('test')).ok).toBe(false);
    first.hold!.release();
    await tick();
    expect(route(queued.value!).group.revision).toBe('llama-b');
  });

  it("a reload that no longer serves the queued request's group refuses it clearly, at once", async () => {
    const g = await live(queueTableValue());
    await g.admission.admit(chatFacts('r1'), signal(), recordingHooks());
    const queued = g.admission.admit(chatFacts('r2'), signal(), recordingHooks());
    await tick();
    await g.file.write(queueTableValue((v) => (v['models']['llama-3-8b']['rollout'] = { stable: 'llama-a' })));
    expect((await g.store.reload('test')).ok).toBe(true);
    const d = (await queued).decision;
    expect(d).toMatchObject({ kind: 'refuse', code: 'no_compatible_capacity' });
    expect(d.kind === 'refuse' && d.message).toMatch(
      /^request r2 waited in the queue of group g_[0-9a-f]+ \(model llama-3-8b, revision llama-b\) and the route table changed: revision llama-b no longer serves model llama-3-8b for this tenant/,
    );
  });

  it('a drain in the middle of a stream leaves the bound request alone and takes no new ones', async () => {
    const g = await live(queueTableValue((v) => (v['pools'][3]['maxInFlightPerEndpoint'] = 8)));
    const bound = await g.admission.admit(chatFacts('r1'), signal(), recordingHooks());
    const before = route(bound);
    await g.file.write(queueTableValue((v) => (v['pools'][3]['draining'] = true)));
    expect((await g.store.reload('drain b-decode')).ok).toBe(true);
    const next = await g.admission.admit(chatFacts('r2'), signal(), recordingHooks());
    expect(next.decision).toMatchObject({ kind: 'refuse', code: 'no_compatible_capacity' });
    expect(next.decision.kind === 'refuse' && next.decision.message).toMatch(/pool b-decode is draining/);
    // The bound request's decision is the one it was given; its end releases the endpoint it was counted on.
    expect(route(bound)).toBe(before);
    expect(g.inFlight.inFlight(B_DECODE)).toBe(1);
    bound.hold!.release();
    expect(g.inFlight.inFlight(B_DECODE)).toBe(0);
  });
});

describe('the internal listener', () => {
  it('refuses a request without a transfer contract (it carries only prefill legs)', async () => {
    const r = rig(queueTableValue());
    const d = await r.admission.admit({ ...chatFacts('int-1'), listener: 'internal' }, signal());
    expect(d.decision).toMatchObject({ kind: 'refuse', code: 'contract_invalid' });
    expect(d.decision.kind === 'refuse' && d.decision.message).toMatch(/internal listener carries only prefill legs/);
    // The same request on the public listener is bound as usual.
    const pub = await r.admission.admit(chatFacts('pub-1'), signal());
    expect(pub.decision.kind).toBe('route');
    r.admission.close();
  });
});
