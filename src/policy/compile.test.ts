import { describe, expect, it } from 'vitest';
import { fingerprintOf } from '../compat/fingerprint.js';
import { compiledFixture, tableFromValue, testDescriptor, twoRevisionTableValue } from './testing.js';

describe('compileRouteTable', () => {
  const compiled = tableFromValue(twoRevisionTableValue());

  it('precomputes one fingerprint per revision, equal to fingerprintOf its descriptor', () => {
    expect(compiled.revisions.get('llama-a')!.fingerprint).toBe(fingerprintOf(testDescriptor({ weights: 'a' })));
    expect(compiled.revisions.get('llama-b')!.fingerprint).toBe(fingerprintOf(testDescriptor({ weights: 'b' })));
    expect(compiled.revisions.get('llama-a')!.fingerprint).not.toBe(compiled.revisions.get('llama-b')!.fingerprint);
  });

  it('indexes pools per revision and role, and clusters to their group', () => {
    const a = compiled.revisions.get('llama-a')!;
    expect(a.pools.prefill.map((p) => p.name)).toEqual(['a-prefill']);
    expect(a.pools.decode.map((p) => p.name)).toEqual(['a-decode']);
    expect(a.pools.both).toEqual([]);
    expect(compiled.clusters.get('b_decode')).toMatchObject({
      revision: 'llama-b',
      fingerprint: compiled.revisions.get('llama-b')!.fingerprint,
    });
    expect(compiled.pools.get('a-decode')!.endpoints.map((e) => e.fingerprint)).toEqual([a.fingerprint, a.fingerprint]);
    expect(compiled.models.get('llama-3-8b')).toEqual({
      name: 'llama-3-8b',
      tenants: ['acme', 'globex'],
      stable: 'llama-a',
      candidate: 'llama-b',
      weight: 10,
    });
    expect(compiled.servedModels).toEqual(['llama-3-8b']);
    expect(compiled.tenantRestricted).toBe(true);
    expect(compiled.contractTtlMs).toBe(30000);
  });

  it('records which revisions the connector can transfer', () => {
    const fp8 = compiledFixture('fp8-both.yaml').revisions.get('llama-fp8')!;
    expect(fp8.transfer.allowed).toBe(false);
    expect(fp8.transfer.reasons.join(' ')).toMatch(/dynamic per-block fp8 scales/);
    expect(fp8.pools.both.map((p) => p.name)).toEqual(['fp8-both']);
    expect(compiled.revisions.get('llama-a')!.transfer).toEqual({ allowed: true, reasons: [], warnings: [] });
  });

  it('is frozen, so the hot path can share it across requests', () => {
    expect(Object.isFrozen(compiled)).toBe(true);
    expect(Object.isFrozen(compiled.pools.get('a-decode'))).toBe(true);
    expect(Object.isFrozen(compiled.pools.get('a-decode')!.endpoints[0])).toBe(true);
    expect(Object.isFrozen(compiled.revisions.get('llama-a')!.pools.decode)).toBe(true);
  });

  it('sees a model open to every tenant as unrestricted', () => {
    expect(compiledFixture('fp8-both.yaml').tenantRestricted).toBe(false);
  });
});
