import { describe, expect, it } from 'vitest';
import { routeTableFromValue } from './load.js';
import { clone, twoRevisionTableValue } from './testing.js';

function withStatus(address: string, status: string) {
  const v = clone(twoRevisionTableValue()) as { pools: { endpoints: unknown[] }[] };
  v.pools[0]!.endpoints = [{ address, status }];
  return routeTableFromValue(v, { file: 't.yaml' });
}

describe("an endpoint's status URL", () => {
  it("must be on the endpoint's own host: another worker's sidecar must not vouch for it", () => {
    const r = withStatus('10.0.1.1:9090', 'http://10.0.9.9:9090');
    expect(r.ok).toBe(false);
    const issue = !r.ok ? r.error.find((i) => String(i.path).includes('status')) : undefined;
    expect(issue?.message).toMatch(/is on host 10\.0\.9\.9, but the endpoint's address is 10\.0\.1\.1:9090/);
  });

  it('may use another port of the same host (the sidecar beside the worker), IPv6 included', () => {
    expect(withStatus('10.0.1.1:9090', 'http://10.0.1.1:9090').ok).toBe(true);
    expect(withStatus('[fd00::1]:8000', 'http://[fd00::1]:9090').ok).toBe(true);
    expect(withStatus('[fd00::1]:8000', 'http://[fd00::2]:9090').ok).toBe(false);
  });

  it('is not compared against an address that is itself invalid: one error, on the address', () => {
    // A forgotten port made the host check read "is on host 10.0.1.1, but the endpoint's address is 10.0.1.1" and
    // suggest http://10.0.1.:9090.
    const r = withStatus('10.0.1.1', 'http://10.0.1.1:9090');
    expect(!r.ok && r.error.map((i) => i.path)).toEqual(['pools[0].endpoints[0].address']);
  });
});

describe('an endpoint without a status URL', () => {
  const withEndpoint = (e: Record<string, unknown>) => {
    const v = clone(twoRevisionTableValue()) as { pools: { endpoints: unknown[] }[] };
    v.pools[0]!.endpoints = [e];
    return routeTableFromValue(v, { file: 't.yaml' });
  };

  it('is warned about: the live worker view never routes to it', () => {
    const r = withEndpoint({ address: '10.0.1.1:9090' });
    expect(r.ok).toBe(true);
    const w = r.ok ? r.value.warnings.find((i) => String(i.path) === 'pools[0].endpoints[0]') : undefined;
    expect(w?.message).toMatch(/endpoint 10\.0\.1\.1:9090 has no status URL, so the gate's live worker view never routes to it/);
    expect(w?.fix).toMatch(/status: http:\/\/10\.0\.1\.1:9090\), or declare unverified: true/);
  });

  it('is routed unchecked only by the explicit opt-in unverified: true, which every check reports', () => {
    const r = withEndpoint({ address: '10.0.1.1:9090', unverified: true });
    expect(r.ok).toBe(true);
    const w = r.ok ? r.value.warnings.find((i) => String(i.path) === 'pools[0].endpoints[0].unverified') : undefined;
    expect(w?.message).toMatch(/routes to endpoint 10\.0\.1\.1:9090 with NO check that the worker is verified/);
    expect(r.ok && r.value.pools.get('a-prefill')!.endpoints[0]).toMatchObject({ unverified: true, status: null });
  });

  it('unverified: true beside a status URL is a contradiction, refused', () => {
    const r = withEndpoint({ address: '10.0.1.1:9090', status: 'http://10.0.1.1:9090', unverified: true });
    expect(r.ok).toBe(false);
    expect(!r.ok && r.error.find((i) => String(i.path).endsWith('unverified'))?.message).toMatch(/contradicts status/);
    expect(withEndpoint({ address: '10.0.1.1:9090', unverified: false }).ok).toBe(false);
  });

  it('a pool of many is one warning per kind, naming the first few', () => {
    const v = clone(twoRevisionTableValue()) as { pools: { endpoints: unknown[] }[] };
    v.pools[0]!.endpoints = Array.from({ length: 50 }, (_, i) => ({ address: `10.0.7.${i}:9090`, unverified: true }));
    const r = routeTableFromValue(v, { file: 't.yaml' });
    const mine = r.ok ? r.value.warnings.filter((i) => String(i.path).startsWith('pools[0].endpoints')) : [];
    expect(mine).toHaveLength(1);
    expect(mine[0]!.message).toContain('routes to 50 endpoints 10.0.7.0:9090, 10.0.7.1:9090, 10.0.7.2:9090, ... with NO check');
  });
});
