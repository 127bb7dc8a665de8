import { describe, expect, it } from 'vitest';
import { mayRerunPrefill, rerunsAfter } from './prefill-rerun.js';

const cfg = (via: 'direct' | { envoy: string }, onTransferFailure: 'fail' | 'recompute') => ({
  prefill: { via, maxAttempts: 3, backoffMs: 1, maxBackoffMs: 5, timeoutMs: 1000 },
  onTransferFailure,
});

describe('when a prefill leg may run a second time', () => {
  it('only through the gate (never direct), only under fail, never for a coordinated prefill', () => {
    const envoy = { envoy: 'http://127.0.0.1:10001' };
    expect(mayRerunPrefill(cfg(envoy, 'fail'), false)).toBe(true);
    // Direct: the signed contract names one prefill endpoint, and no other may be called.
    expect(mayRerunPrefill(cfg('direct', 'fail'), false)).toBe(false);
    // Recompute: the worker prefills locally, as the operator chose.
    expect(mayRerunPrefill(cfg(envoy, 'recompute'), false)).toBe(false);
    // A P/D coordinator in front ran the prefill; this sidecar has no leg of its own to run again.
    expect(mayRerunPrefill(cfg(envoy, 'fail'), true)).toBe(false);
  });

  it('not after a reported compatibility-hash mismatch, a safety signal rather than a fault', () => {
    expect(rerunsAfter('HTTP 500: Internal server error')).toBe(true);
    expect(rerunsAfter('handshake with 10.0.0.5:5600 failed: connect ECONNREFUSED')).toBe(true);
    expect(rerunsAfter('NIXL compatibility hash mismatch: 1a2b != 3c4d')).toBe(false);
  });
});
