import { describe, expect, it } from 'vitest';
import { createKeyRing } from './keys.js';
import { mintContract, verifyContract, type TransferContract } from './contract.js';
import { AttestationSchema, mintAttestation, promptTokenDigestOf, verifyAttestation, type AttestationExpectations } from './attestation.js';
import { signToken } from './token.js';
import { exampleAttestationFields, exampleContractFields } from './testing.js';
import { TEST_NOW_MS } from '../../test/support/clock.js';

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
    expect(
      reasonOf(
        mintAttestation(
          fields,
          createKeyRing({ keys: [{ id: 'p2', secret: Buffer.alloc(32, 4) }], currentId: 'p2', saltSecret: Buffer.alloc(32) }),
        ),
      ),
    ).toBe('unknown_key');
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
    expect(r.ok ? '' : r.error.message).toMatch(
      /^prefill tokenized 812 tokens, this decode worker's tokenizer gives 900: tokenizer or chat template differ/,
    );
  });

  it('refuses to mint an invalid attestation', () => {
    expect(() => mintAttestation({ ...fields, promptTokens: -1 }, ring)).toThrow();
    expect(() => mintAttestation({ ...fields, layout: 'XYZ' as 'HND' }, ring)).toThrow();
    expect(() => mintAttestation({ ...fields, promptTokenDigest: 'not-a-digest' }, ring)).toThrow();
    expect(() => mintAttestation({ ...fields, promptTokenDigest: 'A'.repeat(64) }, ring)).toThrow();
  });
});

describe('prompt token digest', () => {
  const ids = [128000, 791, 4062, 14198, 39935];
  const digest = promptTokenDigestOf(ids);
  const withDigest = mintAttestation({ ...fields, promptTokens: ids.length, promptTokenDigest: digest }, ring);
  const sameCount: AttestationExpectations = { contract, fingerprint: contract.fingerprint, promptTokens: ids.length, layout: 'HND' };

  it('is sha256 hex of the ids joined with "," (UTF-8)', () => {
    // printf '1,2,3' | sha256sum
    expect(promptTokenDigestOf([1, 2, 3])).toBe('8a6ae15122001229edb8866f56e342af12ae8187203c3e3b33931743e7c0c48d');
    expect(promptTokenDigestOf([])).toBe('e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855');
    // Order and grouping matter: [12, 3] and [1, 23] must not collide with [1, 2, 3].
    expect(
      new Set([promptTokenDigestOf([1, 2, 3]), promptTokenDigestOf([3, 2, 1]), promptTokenDigestOf([12, 3]), promptTokenDigestOf([1, 23])])
        .size,
    ).toBe(4);
  });

  it('verifies when the decode worker got the same ids', () => {
    const r = verifyAttestation(withDigest, ring, now, { ...sameCount, promptTokenDigest: digest });
    expect(r.ok && r.value.promptTokenDigest).toBe(digest);
  });

  it('refuses the same count with other ids, naming the count', () => {
    const renumbered = promptTokenDigestOf(ids.map((id) => id + 1));
    const r = verifyAttestation(withDigest, ring, now, { ...sameCount, promptTokenDigest: renumbered });
    expect(r.ok ? 'ok' : r.error.reason).toBe('prompt_tokens_mismatch');
    expect(r.ok ? '' : r.error.message).toMatch(
      /^prefill and this decode worker tokenized the prompt into different token ids \(same count 5\): tokenizer or chat template differ/,
    );
  });

  it('reports a count mismatch as such, even when the digests differ too', () => {
    const r = verifyAttestation(withDigest, ring, now, {
      ...sameCount,
      promptTokens: 6,
      promptTokenDigest: promptTokenDigestOf([...ids, 1]),
    });
    expect(r.ok ? '' : r.error.message).toMatch(/^prefill tokenized 5 tokens, this decode worker's tokenizer gives 6/);
  });

  it('checks the digest even without a count to compare, and says the count is only the prefill one', () => {
    const r = verifyAttestation(withDigest, ring, now, {
      contract,
      fingerprint: contract.fingerprint,
      promptTokenDigest: promptTokenDigestOf([9]),
    });
    expect(r.ok ? '' : r.error.message).toMatch(/different token ids \(prefill count 5\)/);
  });

  it('an attestation without a digest (older prefill sidecar, worker without token ids) is checked on its count alone', () => {
    expect(verifyAttestation(token, ring, now, { ...expectations, promptTokenDigest: promptTokenDigestOf([9]) }).ok).toBe(true);
    expect(reasonOf(token, { ...expectations, promptTokens: 811, promptTokenDigest: promptTokenDigestOf([9]) })).toBe(
      'prompt_tokens_mismatch',
    );
    // A decode side that could not compute a digest accepts a digest-carrying attestation on its count.
    expect(verifyAttestation(withDigest, ring, now, sameCount).ok).toBe(true);
  });

  it('a token signed before the field existed (no promptTokenDigest key at all) still verifies', () => {
    const legacy = signToken({ kind: 'attestation', ...fields }, ring);
    expect(verifyAttestation(legacy, ring, now, { ...expectations, promptTokenDigest: digest })).toEqual({
      ok: true,
      value: { kind: 'attestation', ...fields },
    });
    expect(AttestationSchema.safeParse({ kind: 'attestation', ...fields, promptTokenDigest: digest }).success).toBe(true);
  });
});
