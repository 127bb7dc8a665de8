import { describe, expect, it } from 'vitest';
import { verifyAttestation } from './attestation.js';
import { verifyBinding } from './binding.js';
import { verifyContract } from './contract.js';
import { createKeyRing } from './keys.js';
import { TEST_NOW_MS } from '../../test/support/clock.js';
import { exampleAttestationFields, exampleContractFields } from './testing.js';
import { MAX_LIFETIME_MS, signToken } from './token.js';

const ring = createKeyRing({ keys: [{ id: 'k1', secret: Buffer.alloc(32, 1) }], currentId: 'k1', saltSecret: Buffer.alloc(32, 3) });
const now = TEST_NOW_MS + 1_000;
const CENTURY = 100 * 365 * 86_400_000;
const binding = {
  model: 'm',
  revision: 'r',
  fingerprint: 'a'.repeat(64),
  tenantScope: 'tenant:acme',
  session: null,
  issuedAtMs: TEST_NOW_MS,
};
/** Sign any payload, as a misconfigured or compromised issuer would. */
const sign = (payload: Record<string, unknown> & { kind: 'contract' | 'attestation' | 'binding' }) => signToken(payload, ring);
const reasonOf = (r: { ok: boolean; error?: { reason: string } }) => (r.ok ? 'ok' : r.error!.reason);

describe('maximum token lifetimes, enforced at verification', () => {
  it('a validly signed contract, attestation or binding valid for 100 years is refused: lifetime_exceeded', () => {
    // signToken signs whatever it is given: this is a misconfigured or compromised issuer, not kvgate's minting path.
    const contract = sign({ kind: 'contract', ...exampleContractFields(), expiresAtMs: TEST_NOW_MS + CENTURY });
    const attestation = sign({ kind: 'attestation', ...exampleAttestationFields(), expiresAtMs: TEST_NOW_MS + CENTURY });
    const bindingToken = sign({ kind: 'binding', ...binding, expiresAtMs: TEST_NOW_MS + CENTURY });
    const c = verifyContract(contract, ring, now);
    expect(reasonOf(c)).toBe('lifetime_exceeded');
    expect(!c.ok && c.error.message).toMatch(/longer than the 600000 ms any contract may live/);
    const fields = exampleContractFields();
    expect(
      reasonOf(
        verifyAttestation(attestation, ring, now, {
          contract: { kind: 'contract', ...fields },
          fingerprint: fields.fingerprint,
          promptTokens: 812,
        }),
      ),
    ).toBe('lifetime_exceeded');
    expect(reasonOf(verifyBinding(bindingToken, ring, now))).toBe('lifetime_exceeded');
  });

  it('exactly the maximum is accepted', () => {
    const contract = sign({ kind: 'contract', ...exampleContractFields(), expiresAtMs: TEST_NOW_MS + MAX_LIFETIME_MS.contract });
    expect(reasonOf(verifyContract(contract, ring, now))).toBe('ok');
    const b = sign({ kind: 'binding', ...binding, expiresAtMs: TEST_NOW_MS + MAX_LIFETIME_MS.binding });
    expect(reasonOf(verifyBinding(b, ring, now))).toBe('ok');
  });
});
