/**
 * Test support: a valid contract to start from and a fixed clock, so tests change one field at a time. Not used
 * by product code.
 */
import type { TransferContract } from './contract.js';
import type { Attestation } from './attestation.js';

/** A fixed "now" for token tests (2026-01-01T00:00:00Z). */
export const TEST_NOW_MS = Date.UTC(2026, 0, 1);

/** Contract fields valid from `nowMs` for 60 s. A fresh object each call. */
export function exampleContractFields(nowMs = TEST_NOW_MS): Omit<TransferContract, 'kind'> {
  return {
    requestId: 'req-0001',
    groupId: 'g_0123456789abcdef01234567',
    fingerprint: 'a'.repeat(64),
    tenantScope: 'tenant:acme',
    tenant: 'acme',
    model: 'llama-3.1-8b',
    revision: 'rev-a',
    adapter: null,
    issuedAtMs: nowMs,
    expiresAtMs: nowMs + 60_000,
    decode: { cluster: 'decode-a', endpoint: '10.0.0.7:8000' },
    prefill: { cluster: 'prefill-a', endpoint: null },
  };
}

/** Attestation fields matching `exampleContractFields` (same request, group, fingerprint and scope). */
export function exampleAttestationFields(nowMs = TEST_NOW_MS): Omit<Attestation, 'kind'> {
  const c = exampleContractFields(nowMs);
  return {
    requestId: c.requestId,
    groupId: c.groupId,
    fingerprint: c.fingerprint,
    tenantScope: c.tenantScope,
    promptTokens: 812,
    blockSize: 16,
    layout: 'HND',
    engineId: 'prefill-engine-1',
    issuedAtMs: nowMs,
    expiresAtMs: nowMs + 30_000,
  };
}
