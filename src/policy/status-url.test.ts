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
    const r = withStatus('10.0.1.1:8000', 'http://10.0.9.9:9090');
    expect(r.ok).toBe(false);
    const issue = !r.ok ? r.error.find((i) => String(i.path).includes('status')) : undefined;
    expect(issue?.message).toMatch(/is on host 10\.0\.9\.9, but the endpoint's address is 10\.0\.1\.1:8000/);
  });

  it('may use another port of the same host (the sidecar beside the worker), IPv6 included', () => {
    expect(withStatus('10.0.1.1:8000', 'http://10.0.1.1:9090').ok).toBe(true);
    expect(withStatus('[fd00::1]:8000', 'http://[fd00::1]:9090').ok).toBe(true);
    expect(withStatus('[fd00::1]:8000', 'http://[fd00::2]:9090').ok).toBe(false);
  });
});
