import { describe, expect, it } from 'vitest';
import { createKeyRing } from './keys.js';
import { mintContract, verifyContract, type TransferContract } from './contract.js';
import { mintAttestation, verifyAttestation, type AttestationExpectations } from './attestation.js';
import { exampleAttestationFields, exampleContractFields, TEST_NOW_MS } from './testing.js';

const ring = createKeyRing({ keys: [{ id: 'p1', secret: Buffer.alloc(32, 4) }], currentId: 'p1', saltSecret: Buffer.alloc(32, 5) });
const other = createKeyRing({ keys: [{ id: 'p1', secret: Buffer.alloc(32, 6) }], currentId: 'p1', saltSecret: Buffer.alloc(32, 5) });
const contract: TransferContract = { kind: 'contract', ...exampleContractFields() };
const fields = exampleAttestationFields();
const token = mintAttestation(fields, ring);
const now = TEST_NOW_MS + 500;
const expectations: AttestationExpectations = { contract, fingerprint: contract.fingerprint, promptTokens: 812, layout: 'HND' };

function reasonOf(t: string, e: AttestationExpectations = expectations, at = now, keys = ring): string {
  const r = verifyAttestation(t, keys, at, e);
  return r.ok ? 'ok' : r.error.reason;
}

describe('attestation', () => {
  it('round-trips and checks against the contract and the decode worker', () => {
    expect(verifyAttestation(token, ring, now, expectations)).toEqual({ ok: true, value: { kind: 'attestation', ...fields } });
    expect(verifyAttestation(token, ring, now, { contract, fingerprint: contract.fingerprint }).ok).toBe(true);
  });

  it('envelope failures', () => {
    expect(reasonOf('kvgate.v1.p1.e30')).toBe('malformed');
    expect(reasonOf(token, expectations, now, other)).toBe('bad_signature');
    expect(reasonOf(mintAttestation(fields, createKeyRing({ keys: [{ id: 'p2', secret: Buffer.alloc(32, 4) }], currentId: 'p2', saltSecret: Buffer.alloc(32) })))).toBe('unknown_key');
    expect(reasonOf(token, expectations, fields.expiresAtMs)).toBe('expired');
    expect(reasonOf(token, expectations, fields.issuedAtMs - 5_001)).toBe('not_yet_valid');
  });

  it('a contract is never an attestation, and an attestation never a contract', () => {
    const contractToken = mintContract(exampleContractFields(), ring);
    expect(reasonOf(contractToken)).toBe('wrong_kind');
    const asContract = verifyContract(token, ring, now);
    expect(asContract.ok ? 'ok' : asContract.error.reason).toBe('wrong_kind');
  });

  it.each([
    ['request_mismatch', { requestId: 'req-9' }],
    ['tenant_mismatch', { tenantScope: 'tenant:globex' }],
    ['group_mismatch', { groupId: 'g_ffffffffffffffffffffffff' }],
    ['fingerprint_mismatch', { fingerprint: 'c'.repeat(64) }],
    ['prompt_tokens_mismatch', { promptTokens: 811 }],
    ['layout_mismatch', { layout: 'NHD' as const }],
  ])('%s', (reason, change) => {
    const t = mintAttestation({ ...fields, ...change }, ring);
    expect(reasonOf(t)).toBe(reason);
  });

  it("fingerprint_mismatch when the decode worker's own fingerprint differs from the contract's", () => {
    expect(reasonOf(token, { ...expectations, fingerprint: 'd'.repeat(64) })).toBe('fingerprint_mismatch');
    const r = verifyAttestation(token, ring, now, { ...expectations, fingerprint: 'd'.repeat(64) });
    expect(r.ok ? '' : r.error.message).toMatch(/this decode worker runs dddddddddddd/);
  });

  it('explains prompt token and layout mismatches in actionable terms', () => {
    const r = verifyAttestation(token, ring, now, { ...expectations, promptTokens: 900, layout: 'HND' });
    expect(r.ok ? '' : r.error.message).toMatch(/812 prompt tokens, this worker counts 900; the tokenizers or templates disagree/);
  });

  it('refuses to mint an invalid attestation', () => {
    expect(() => mintAttestation({ ...fields, promptTokens: -1 }, ring)).toThrow();
    expect(() => mintAttestation({ ...fields, layout: 'XYZ' as 'HND' }, ring)).toThrow();
  });
});
