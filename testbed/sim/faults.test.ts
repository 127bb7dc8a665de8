import { describe, expect, it } from 'vitest';
import { NO_FAULTS, parseFaultHeader, parseFaultPatch } from './faults.js';

describe('x-sim-fault', () => {
  it('parses kinds with and without values', () => {
    const r = parseFaultHeader('error=503, drop=3,slow=10,handshake-fail,transfer-timeout,transfer-delay=5,lease-ms=0');
    expect(r).toEqual({
      ok: true,
      value: { error: 503, dropAfterTokens: 3, slowMs: 10, handshakeFail: true, transferTimeout: true, transferDelayMs: 5, leaseMs: 0 },
    });
    expect(parseFaultHeader(undefined)).toEqual({ ok: true, value: {} });
  });

  it('rejects unknown kinds and bad values with the accepted list', () => {
    const bad = parseFaultHeader('explode');
    expect(bad.ok).toBe(false);
    if (!bad.ok) expect(bad.error).toMatch(/handshake-fail.*error=<integer>/);
    expect(parseFaultHeader('error=200').ok).toBe(false);
    expect(parseFaultHeader('drop=x').ok).toBe(false);
    expect(parseFaultHeader('handshake-fail=1').ok).toBe(false);
  });
});

describe('admin fault patch', () => {
  it('accepts partial state and actions, rejects unknown keys with a fix', () => {
    expect(parseFaultPatch({ errorRate: 0.5, reset: true, expireLeasesNow: true }).ok).toBe(true);
    const r = parseFaultPatch({ errorRat: 1 });
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.error).toMatch(/faults\.errorRat: unknown key "errorRat"\. Fix: did you mean "errorRate"\?/);
    expect(parseFaultPatch({ errorRate: 2 }).ok).toBe(false);
    expect(NO_FAULTS.errorRate).toBe(0);
  });
});
