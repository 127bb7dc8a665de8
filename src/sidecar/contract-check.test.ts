import { describe, expect, it } from 'vitest';
import { groupIdOf } from '../compat/fingerprint.js';
import { mintContract } from '../contract/contract.js';
import { createDevKeyRing } from '../contract/keys.js';
import { exampleContractFields } from '../contract/testing.js';
import { TEST_NOW_MS } from '../../test/support/clock.js';
import { checkContract, type ContractCheckInput } from './contract-check.js';

const keys = createDevKeyRing('sidecar-test');
const FP = 'f'.repeat(64);

function fields(edit: Partial<ReturnType<typeof exampleContractFields>> = {}) {
  const f = { ...exampleContractFields(), fingerprint: FP, ...edit };
  return { ...f, groupId: edit.groupId ?? groupIdOf(f.fingerprint, f.tenantScope) };
}

function input(token: string | undefined, edit: Partial<ContractCheckInput> = {}): ContractCheckInput {
  return {
    token,
    requestId: 'req-0001',
    groupHeader: undefined,
    fingerprint: FP,
    tenantScopes: ['*'],
    keys,
    nowMs: TEST_NOW_MS + 1,
    ...edit,
  };
}

const codeOf = (r: ReturnType<typeof checkContract>) => (r.ok ? 'ok' : `${r.error.error.code}/${r.error.reason}`);

describe('checkContract', () => {
  it('accepts a contract for this request, this fingerprint and an allowed scope', () => {
    const r = checkContract(input(mintContract(fields(), keys)));
    expect(r.ok && r.value.requestId).toBe('req-0001');
  });

  it('refuses a missing contract or request id', () => {
    expect(codeOf(checkContract(input(undefined)))).toBe('contract_invalid/missing');
    expect(codeOf(checkContract(input(mintContract(fields(), keys), { requestId: undefined })))).toBe(
      'contract_invalid/missing_request_id',
    );
  });

  it('refuses forged, expired and replayed contracts as contract_invalid', () => {
    const forged = mintContract(fields(), createDevKeyRing('someone-else'));
    expect(codeOf(checkContract(input(forged)))).toBe('contract_invalid/bad_signature');
    expect(codeOf(checkContract(input(mintContract(fields(), keys), { nowMs: TEST_NOW_MS + 61_000 })))).toBe('contract_invalid/expired');
    expect(codeOf(checkContract(input(mintContract(fields(), keys), { requestId: 'req-other' })))).toBe(
      'contract_invalid/request_mismatch',
    );
  });

  it("refuses another revision's contract as mixed_revision, naming both fingerprints", () => {
    const r = checkContract(input(mintContract(fields({ fingerprint: 'e'.repeat(64) }), keys)));
    expect(codeOf(r)).toBe('mixed_revision/fingerprint_mismatch');
    expect(r.ok ? '' : r.error.error.reason).toContain('eeeeeeeeeeee');
    expect(codeOf(checkContract(input(mintContract(fields(), keys), { groupHeader: 'g_other' })))).toBe('mixed_revision/group_mismatch');
  });

  it('refuses a group id that is not the group of its fingerprint and scope', () => {
    expect(codeOf(checkContract(input(mintContract(fields({ groupId: 'g_0123456789abcdef01234567' }), keys))))).toBe(
      'contract_invalid/group_inconsistent',
    );
  });

  it('refuses a tenant scope this worker does not serve', () => {
    const token = mintContract(fields(), keys);
    expect(codeOf(checkContract(input(token, { tenantScopes: ['tenant:other'] })))).toBe('tenant_scope_denied/tenant_scope');
    expect(checkContract(input(token, { tenantScopes: ['tenant:acme'] })).ok).toBe(true);
  });
});
