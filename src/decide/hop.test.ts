import { describe, expect, it } from 'vitest';
import { mintContract } from '../contract/contract.js';
import { createDevKeyRing } from '../contract/keys.js';
import { tableFromValue, twoRevisionTableValue, clone } from '../policy/testing.js';
import { decide } from './decide.js';
import { decideRequest } from './decide-request.js';
import { createTestWorkerView, testFacts, testKeys } from './testing.js';
import { TEST_NOW_MS } from '../../test/support/clock.js';
import type { CoreDecision, HopFacts, RouteDecision } from './types.js';
import type { WorkerView } from './worker-view.js';

const keys = testKeys();
const ctx = { nowMs: TEST_NOW_MS, keys };
const v = clone(twoRevisionTableValue()) as Record<string, any>;
v['models']['llama-3-8b']['rollout'] = { stable: 'llama-a' };
const table = tableFromValue(v);
const view = createTestWorkerView(table);

/** Route a request through the gate, as the public listener would. */
function routed(requestId = 'req-hop'): RouteDecision {
  const d = decide(testFacts({ tenant: 'acme', requestId }), table, view, ctx);
  if (d.kind !== 'route') throw new Error(JSON.stringify(d));
  return d;
}
/** The sidecar's prefill leg coming back through the internal listener. */
function hop(h: HopFacts, requestId = 'req-hop', now = TEST_NOW_MS): CoreDecision {
  return decide(testFacts({ requestId, hop: h }), table, view, { ...ctx, nowMs: now });
}

describe('internal hop', () => {
  it('accepts the prefill leg the contract names', () => {
    const r = routed();
    const d = hop({ contract: r.contract, prefillCluster: r.prefill!.cluster, prefillEndpoint: r.prefill!.endpoint! });
    expect(d).toMatchObject({ kind: 'hop', requestId: 'req-hop', group: r.group, prefill: r.prefill, contract: r.contract });
  });

  it("uses the contract's prefill target when the hop names none", () => {
    const r = routed();
    expect(hop({ contract: r.contract })).toMatchObject({ kind: 'hop', prefill: r.prefill });
  });

  it('picks another endpoint of the same cluster when the planned one is no longer usable', () => {
    const r = routed();
    const planned = r.prefill!.endpoint!;
    const other = planned === '10.0.1.1:9090' ? '10.0.1.2:9090' : '10.0.1.1:9090';
    const drained = createTestWorkerView(table, { [planned]: { draining: true } });
    const d = decide(testFacts({ requestId: 'req-hop', hop: { contract: r.contract, prefillCluster: 'a_prefill' } }), table, drained, ctx);
    expect(d).toMatchObject({ kind: 'hop', prefill: { cluster: 'a_prefill', endpoint: other } });
    expect(d.trace).toContain(`the contract's prefill endpoint ${planned} is draining; picking another in cluster a_prefill`);
    const gone = createTestWorkerView(table, { [planned]: { verified: false } });
    const replaced = decide(testFacts({ requestId: 'req-hop', hop: { contract: r.contract } }), table, gone, ctx);
    expect(replaced).toMatchObject({ kind: 'hop', prefill: { endpoint: other } });
    expect(replaced.trace).toContain(
      `the contract's prefill endpoint ${planned} is no longer usable; picking another in cluster a_prefill`,
    );
    gone.set(other, { draining: true });
    const none = decide(testFacts({ requestId: 'req-hop', hop: { contract: r.contract } }), table, gone, ctx);
    expect(none).toMatchObject({ kind: 'refuse', code: 'no_compatible_capacity', retryAfterSeconds: 5 });
  });

  it('keeps the planned prefill endpoint whose sidecar drains when no other endpoint of the group can take the leg', () => {
    // docs/operator-guide.md §6: a draining sidecar admits for drainAnnounceMs what was routed before the gate saw the
    // drain, so a worker drain is no client-visible refusal, even for a group's last prefill endpoint.
    const r = routed();
    const planned = r.prefill!.endpoint!;
    const other = planned === '10.0.1.1:9090' ? '10.0.1.2:9090' : '10.0.1.1:9090';
    const both = createTestWorkerView(table, { [planned]: { draining: true }, [other]: { draining: true } });
    const d = decide(testFacts({ requestId: 'req-hop', hop: { contract: r.contract } }), table, both, ctx);
    expect(d).toMatchObject({ kind: 'hop', prefill: r.prefill });
    expect(d.trace.join('\n')).toContain(`the leg stays on ${planned}, whose sidecar still admits requests routed before its drain`);
    // Never past what the group allows: another fingerprint or an unverified sidecar there is still no way in, and a
    // retry that excludes it (its window has passed: it answered 503 draining) is refused.
    for (const patch of [{ fingerprint: 'f'.repeat(64) }, { verified: false }]) {
      const bad = createTestWorkerView(table, { [planned]: { draining: true, ...patch }, [other]: { draining: true } });
      expect(decide(testFacts({ requestId: 'req-hop', hop: { contract: r.contract } }), table, bad, ctx)).toMatchObject({
        kind: 'refuse',
        code: 'no_compatible_capacity',
      });
    }
    const retried = decide(testFacts({ requestId: 'req-hop', hop: { contract: r.contract, retryExclude: [planned] } }), table, both, ctx);
    expect(retried).toMatchObject({ kind: 'refuse', code: 'no_compatible_capacity' });
    // A new request never goes to a draining endpoint.
    expect(decide(testFacts({ tenant: 'acme', requestId: 'req-new' }), table, both, ctx)).toMatchObject({ kind: 'refuse' });
  });

  it("keeps the contract's prefill endpoint while its pod is terminating but still serves; never picks such a pod anew", () => {
    const r = routed();
    const planned = r.prefill!.endpoint!;
    const other = planned === '10.0.1.1:9090' ? '10.0.1.2:9090' : '10.0.1.1:9090';
    const base = createTestWorkerView(table, { [other]: { draining: true } });
    // The gate's watch saw the planned pod's deletionTimestamp after the decision: it left the pool's endpoints, and
    // is listed as terminating (Ready, inside its grace period) instead.
    const terminating: WorkerView = {
      endpoints: (pool) => base.endpoints(pool).filter((e) => e.address !== planned),
      terminating: (pool) => base.endpoints(pool).filter((e) => e.address === planned),
    };
    const d = decide(testFacts({ requestId: 'req-hop', hop: { contract: r.contract } }), table, terminating, ctx);
    expect(d).toMatchObject({ kind: 'hop', group: r.group, prefill: r.prefill });
    expect(d.trace).toContain(`prefill endpoint ${planned} (pool a-prefill), as the contract planned`);
    // Still checked like a listed one: another fingerprint or unverified there is no way in (a draining sidecar is
    // only the last resort, as for any planned endpoint: the test above).
    for (const patch of [{ fingerprint: 'f'.repeat(64) }, { verified: false }]) {
      const bad = createTestWorkerView(table, { [other]: { draining: true }, [planned]: patch });
      const view: WorkerView = {
        endpoints: terminating.endpoints,
        terminating: (pool) => bad.endpoints(pool).filter((e) => e.address === planned),
      };
      expect(decide(testFacts({ requestId: 'req-hop', hop: { contract: r.contract } }), table, view, ctx)).toMatchObject({
        kind: 'refuse',
        code: 'no_compatible_capacity',
      });
    }
    // A retry that excludes it, and a new request, never go there.
    expect(
      decide(testFacts({ requestId: 'req-hop', hop: { contract: r.contract, retryExclude: [planned] } }), table, terminating, ctx),
    ).toMatchObject({
      kind: 'refuse',
    });
    const fresh = decide(testFacts({ tenant: 'acme', requestId: 'req-new' }), table, terminating, ctx);
    expect(fresh).toMatchObject({ kind: 'refuse', code: 'no_compatible_capacity' });
  });

  it('a named prefill endpoint whose pod is being deleted: the planned one keeps its leg, another is replaced, neither is "not a member"', () => {
    const r = routed();
    const planned = r.prefill!.endpoint!;
    const other = planned === '10.0.1.1:9090' ? '10.0.1.2:9090' : '10.0.1.1:9090';
    const base = createTestWorkerView(table);
    const leaving = (address: string): WorkerView => ({
      endpoints: (pool) => base.endpoints(pool).filter((e) => e.address !== address),
      terminating: (pool) => base.endpoints(pool).filter((e) => e.address === address),
    });
    // The sidecar names the contract's own endpoint, deleted since the decision: the leg goes there (its grace period).
    const kept = decide(
      testFacts({ requestId: 'req-hop', hop: { contract: r.contract, prefillEndpoint: planned } }),
      table,
      leaving(planned),
      ctx,
    );
    expect(kept).toMatchObject({ kind: 'hop', prefill: r.prefill });
    // It names another endpoint whose pod is being deleted: replaced inside the group, not refused as a stranger.
    const replaced = decide(
      testFacts({ requestId: 'req-hop', hop: { contract: r.contract, prefillEndpoint: other } }),
      table,
      leaving(other),
      ctx,
    );
    expect(replaced).toMatchObject({ kind: 'hop', prefill: { endpoint: planned } });
    expect(replaced.trace.join('\n')).toContain(`the named prefill endpoint ${other} is being deleted`);
    // An address the cluster never had is still refused.
    const stranger = decide(
      testFacts({ requestId: 'req-hop', hop: { contract: r.contract, prefillEndpoint: '10.9.9.9:9090' } }),
      table,
      base,
      ctx,
    );
    expect(stranger).toMatchObject({ kind: 'refuse', code: 'mixed_revision' });
  });

  it('a retry excludes the endpoints that failed and stays inside the group, or is refused', () => {
    const r = routed();
    const planned = r.prefill!.endpoint!;
    const other = planned === '10.0.1.1:9090' ? '10.0.1.2:9090' : '10.0.1.1:9090';
    const retry = hop({ contract: r.contract, retryExclude: [planned] });
    expect(retry).toMatchObject({ kind: 'hop', group: r.group, prefill: { cluster: 'a_prefill', endpoint: other } });
    expect(retry.trace.join('\n')).toContain(`excluding prefill endpoints that already failed (${planned})`);
    // A named endpoint that is excluded is not used either.
    expect(hop({ contract: r.contract, prefillEndpoint: planned, retryExclude: [planned] })).toMatchObject({
      prefill: { endpoint: other },
    });
    // Every endpoint of the group failed: refused, never sent to revision B's prefill pool.
    const none = hop({ contract: r.contract, retryExclude: [planned, other] });
    expect(none).toMatchObject({ kind: 'refuse', code: 'no_compatible_capacity' });
    expect(none.kind === 'refuse' && none.message).toMatch(/excluded by the sidecar after a failed attempt/);
  });

  it('a named prefill endpoint that drains or is at its limit is replaced by another of the group', () => {
    const r = routed();
    const planned = r.prefill!.endpoint!;
    const other = planned === '10.0.1.1:9090' ? '10.0.1.2:9090' : '10.0.1.1:9090';
    const draining = createTestWorkerView(table, { [planned]: { draining: true } });
    const d = decide(testFacts({ requestId: 'req-hop', hop: { contract: r.contract, prefillEndpoint: planned } }), table, draining, ctx);
    expect(d).toMatchObject({ kind: 'hop', prefill: { endpoint: other } });
    expect(d.trace.join('\n')).toContain(`the named prefill endpoint ${planned} is draining`);
  });

  it('replacing a named endpoint that drains still honours the retry exclusions: never the endpoint that failed', () => {
    const r = routed();
    const planned = r.prefill!.endpoint!;
    const other = planned === '10.0.1.1:9090' ? '10.0.1.2:9090' : '10.0.1.1:9090';
    // `other` already failed this request; the sidecar names `planned`, which is draining now.
    const draining = createTestWorkerView(table, { [planned]: { draining: true } });
    const h = { contract: r.contract, prefillEndpoint: planned, retryExclude: [other] };
    const d = decide(testFacts({ requestId: 'req-hop', hop: h }), table, draining, ctx);
    // Nothing else is left: the leg stays on the named endpoint, whose sidecar still admits (its own drain), never on
    // `other`, which failed.
    expect(d).toMatchObject({ kind: 'hop', prefill: { endpoint: planned } });
    expect(d.trace.join('\n')).toContain('excluded by the sidecar after a failed attempt');
    // Drained by the table instead (an operator's decision, not a sidecar's announced window): refused.
    const drainedValue = clone(v) as { pools: { name: string; draining?: boolean }[] };
    for (const p of drainedValue.pools) if (p.name === r.prefill!.pool) p.draining = true;
    const tableDrained = tableFromValue(drainedValue);
    const viaTable = decide(testFacts({ requestId: 'req-hop', hop: h }), tableDrained, createTestWorkerView(tableDrained), ctx);
    expect(viaTable).toMatchObject({ kind: 'refuse', code: 'no_compatible_capacity' });
  });

  it("refuses a prefill cluster outside the contract's group with 409 mixed_revision", () => {
    const r = routed();
    const d = hop({ contract: r.contract, prefillCluster: 'b_prefill' });
    expect(d).toMatchObject({ kind: 'refuse', code: 'mixed_revision', tenant: 'acme' });
    expect(d.kind === 'refuse' && d.message).toMatch(
      new RegExp(
        `^prefill cluster b_prefill serves revision llama-b, another compatibility group, but request req-hop is bound to group ${r.group.id} \\(model llama-3-8b, revision llama-a\\); KV from it would be fed to a decode worker of another revision\\. Send the prefill leg to a prefill cluster of the bound group \\(prefill clusters of this group: a_prefill\\)$`,
      ),
    );
    expect(hop({ contract: r.contract, prefillCluster: 'nowhere' })).toMatchObject({ code: 'mixed_revision' });
  });

  it('refuses a prefill endpoint that is not in the cluster, or runs another fingerprint', () => {
    const r = routed();
    expect(hop({ contract: r.contract, prefillCluster: 'a_prefill', prefillEndpoint: '10.0.3.1:9090' })).toMatchObject({
      code: 'mixed_revision',
    });
    const mixed = createTestWorkerView(table, { '10.0.1.2:9090': { fingerprint: table.revisions.get('llama-b')!.fingerprint } });
    const d = decide(
      testFacts({ requestId: 'req-hop', hop: { contract: r.contract, prefillCluster: 'a_prefill', prefillEndpoint: '10.0.1.2:9090' } }),
      table,
      mixed,
      ctx,
    );
    expect(d).toMatchObject({ kind: 'refuse', code: 'mixed_revision' });
  });

  it('refuses a decode cluster as a prefill target', () => {
    const r = routed();
    expect(hop({ contract: r.contract, prefillCluster: 'a_decode' })).toMatchObject({ code: 'bad_request' });
  });

  it('refuses an expired contract with 403 contract_invalid and the reason', () => {
    const r = routed();
    const d = hop({ contract: r.contract }, 'req-hop', TEST_NOW_MS + 31_000);
    expect(d).toMatchObject({ kind: 'refuse', code: 'contract_invalid' });
    expect(d.kind === 'refuse' && d.message).toMatch(/^transfer contract rejected \(expired\): /);
  });

  it('refuses a forged contract (signed with another key) and a tampered one', () => {
    const r = routed();
    const forged = mintContract(
      {
        requestId: 'req-hop',
        groupId: r.group.id,
        fingerprint: r.group.fingerprint,
        tenantScope: 'tenant:acme',
        tenant: 'acme',
        model: 'llama-3-8b',
        revision: 'llama-a',
        adapter: null,
        cacheSaltDigest: '0'.repeat(64),
        promptDigest: '0'.repeat(64),
        issuedAtMs: TEST_NOW_MS,
        expiresAtMs: TEST_NOW_MS + 1000,
        decode: { cluster: 'a_decode', endpoint: null },
        prefill: { cluster: 'b_prefill', endpoint: null },
      },
      createDevKeyRing('attacker'),
    );
    expect(hop({ contract: forged })).toMatchObject({ code: 'contract_invalid' });
    const tampered = r.contract.slice(0, -3) + (r.contract.endsWith('AAA') ? 'BBB' : 'AAA');
    expect(hop({ contract: tampered })).toMatchObject({ code: 'contract_invalid' });
  });

  it('refuses a contract presented for another request', () => {
    const r = routed('req-1');
    const d = hop({ contract: r.contract }, 'req-2');
    expect(d).toMatchObject({ code: 'contract_invalid' });
    expect(d.kind === 'refuse' && d.message).toMatch(/request_mismatch/);
  });

  it('is decided on the contract alone: the prefill body carries kv_transfer_params legitimately', () => {
    const r = routed();
    const body = new TextEncoder().encode(
      JSON.stringify({ model: 'llama-3-8b', messages: [{ role: 'user', content: 'x' }], kv_transfer_params: { do_remote_decode: true } }),
    );
    const out = decideRequest(
      {
        requestId: 'req-hop',
        method: 'POST',
        path: '/v1/chat/completions',
        headers: {},
        metadata: {},
        body,
        hop: { contract: r.contract },
      },
      table,
      view,
      ctx,
    );
    expect(out.decision.kind).toBe('hop');
  });
});
