/** Admission in GIE endpoint-picker mode: the subset hint, the ordered fallback list and the served endpoint. */
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { createDevKeyRing } from '../contract/keys.js';
import { verifyContract } from '../contract/contract.js';
import type { Decision } from '../decide/types.js';
import { createInFlightTracker, createStaticWorkerView } from '../decide/worker-view.js';
import { tableFromValue } from '../policy/testing.js';
import { createAdmission } from './admission.js';
import type { Admitted } from './admission-types.js';
import { createRolloutMetrics } from './rollout-metrics.js';
import { chatFacts, queueTableValue, recordingHooks } from './testing.js';

const keys = createDevKeyRing('admission-gie');
const A = ['10.0.2.1:9090', '10.0.2.2:9090'];

function rig(listedAlternates?: number) {
  const inFlight = createInFlightTracker();
  const table = tableFromValue(queueTableValue((v) => (v['models']['llama-3-8b']['rollout'] = { stable: 'llama-a' })));
  const admission = createAdmission({
    state: () => ({ table, view: createStaticWorkerView(table, inFlight) }),
    keys: () => keys,
    inFlight,
    now: Date.now,
    metrics: createRolloutMetrics(new Registry()),
    recheckMs: 0,
    ...(listedAlternates === undefined ? {} : { listedAlternates }),
  });
  return { admission, inFlight };
}
const hint = (list: string[]) => ({ 'envoy.lb.subset_hint': { 'x-gateway-destination-endpoint-subset': list } });
const signal = () => new AbortController().signal;
const decisionOf = async (p: Admitted | Promise<Admitted>): Promise<Decision> => (await p).decision;

describe('admission as an endpoint picker', () => {
  it('lists the other endpoints of the group after the pick, and the contract admits them', async () => {
    const { admission } = rig();
    const d = await decisionOf(admission.admit(chatFacts('r1'), signal()));
    if (d.kind !== 'route') throw new Error(d.kind);
    expect([d.decode.endpoint, ...(d.decode.alternates ?? [])].sort()).toEqual(A);
    const c = verifyContract(d.contract, keys, Date.now(), { requestId: 'r1' });
    expect(c.ok && c.value.decode.alternates).toEqual(d.decode.alternates);
  });

  it('moves the in-flight count to the endpoint that served, only if kvgate listed it', async () => {
    const { admission, inFlight } = rig();
    const a = await admission.admit(chatFacts('r2'), signal());
    if (a.decision.kind !== 'route') throw new Error(a.decision.kind);
    const [pick, alt] = [a.decision.decode.endpoint!, a.decision.decode.alternates![0]!];
    expect(inFlight.inFlight(pick)).toBe(1);
    expect(a.hold!.served('10.9.9.9:8000')).toBe(false);
    expect(inFlight.inFlight(pick)).toBe(1);
    expect(a.hold!.served(alt)).toBe(true);
    expect([inFlight.inFlight(pick), inFlight.inFlight(alt)]).toEqual([0, 1]);
    a.hold!.release();
    expect(inFlight.snapshot().size).toBe(0);
  });

  it('lists, signs and believes as served only the alternates the data plane is given (envoy.gieFallbackEndpoints)', async () => {
    // The protocol's served endpoint is one the data plane tried from the EPP's list (docs/proposals/004-endpoint-
    // picker-protocol, "Destination Endpoint Served", gateway-api-inference-extension @84436a96); an alternate kvgate
    // ranked but did not put in x-gateway-destination-endpoint was never offered, so a report of it is not believed.
    const { admission, inFlight } = rig(0);
    const a = await admission.admit(chatFacts('r6'), signal());
    if (a.decision.kind !== 'route') throw new Error(a.decision.kind);
    const pick = a.decision.decode.endpoint!;
    const other = A.find((e) => e !== pick)!;
    // Nothing after the pick is offered, so nothing after it is listed or signed: the contract admits the pick alone.
    expect(a.decision.decode.alternates).toBeUndefined();
    const c = verifyContract(a.decision.contract, keys, Date.now(), { requestId: 'r6' });
    expect(c.ok && c.value.decode.alternates).toBeUndefined();
    expect(a.hold!.served(other)).toBe(false);
    expect([inFlight.inFlight(pick), inFlight.inFlight(other)]).toEqual([1, 0]);
    expect(a.hold!.served(pick)).toBe(true);
    a.hold!.release();
    const { admission: one } = rig(1);
    const b = await one.admit(chatFacts('r7'), signal());
    if (b.decision.kind !== 'route') throw new Error(b.decision.kind);
    expect(b.decision.decode.alternates).toHaveLength(1);
    const cb = verifyContract(b.decision.contract, keys, Date.now(), { requestId: 'r7' });
    expect(cb.ok && cb.value.decode.alternates).toEqual(b.decision.decode.alternates);
    expect(b.hold!.served(b.decision.decode.alternates![0]!)).toBe(true);
    b.hold!.release();
  });

  it('picks only inside the subset hint; none eligible or an empty list is an immediate 503, never a wait', async () => {
    const { admission } = rig();
    const only = await decisionOf(admission.admit({ ...chatFacts('r3'), metadata: hint([A[1]!]) }, signal()));
    expect(only.kind === 'route' && [only.decode.endpoint, only.decode.alternates]).toEqual([A[1], undefined]);
    const bare = await decisionOf(admission.admit({ ...chatFacts('r4'), metadata: hint(['10.0.2.1']) }, signal()));
    expect(bare.kind === 'route' && bare.decode.endpoint).toBe(A[0]); // a bare IP allows any port (lwepp's rule)
    const hooks = recordingHooks();
    for (const list of [['10.9.9.9:8000'], []]) {
      const d = await decisionOf(admission.admit({ ...chatFacts(`r5-${list.length}`), metadata: hint(list) }, signal(), hooks));
      expect(d.kind === 'refuse' && d.code).toBe('no_compatible_capacity');
    }
    expect(hooks.extended).toEqual([]);
  });

  it('a refusal under a subset hint says the view was narrowed to it, not that the pool has no endpoints', async () => {
    // A gateway whose endpoint list lags the pods (a rollout: GIE data planes list EndpointSlice endpoints on their own
    // schedule) lists none of the group's routable endpoints. The audit reason must not send the operator to add
    // capacity the pool has: it names the hint and what it listed.
    const { admission } = rig();
    const d = await decisionOf(admission.admit({ ...chatFacts('r8'), metadata: hint(['10.9.9.9:8000', '10.9.9.8']) }, signal()));
    if (d.kind !== 'refuse') throw new Error(d.kind);
    expect(d.code).toBe('no_compatible_capacity');
    expect(d.message).toContain('pool a-decode has no endpoints in the worker view');
    expect(d.message).toMatch(
      /^the data plane's subset hint \(envoy\.lb\.subset_hint x-gateway-destination-endpoint-subset\) narrows the worker view to its 2 listed endpoints, the only ones kvgate may pick: no decode endpoint/,
    );
    // Without a hint the same pool routes: the refusal came from the hint alone.
    expect((await decisionOf(admission.admit(chatFacts('r9'), signal()))).kind).toBe('route');
  });
});
