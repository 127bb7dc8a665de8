import { describe, expect, it } from 'vitest';
import { createKeyRing } from './keys.js';
import { mintBinding, PendingBinding, verifyBinding, type Binding } from './binding.js';
import { mintContract } from './contract.js';
import { exampleContractFields } from './testing.js';
import { TEST_NOW_MS } from '../../test/support/clock.js';

const ring = createKeyRing({ keys: [{ id: 'b1', secret: Buffer.alloc(32, 7) }], currentId: 'b1', saltSecret: Buffer.alloc(32, 8) });
const fields: Omit<Binding, 'kind'> = {
  model: 'llama-3.1-8b',
  revision: 'rev-a',
  fingerprint: 'a'.repeat(64),
  tenantScope: 'tenant:acme',
  session: 'sess-42',
  issuedAtMs: TEST_NOW_MS,
  expiresAtMs: TEST_NOW_MS + 3_600_000,
};
const token = mintBinding(fields, ring);
const now = TEST_NOW_MS + 60_000;

const reasonOf = (t: string, e?: Parameters<typeof verifyBinding>[3], at = now): string => {
  const r = verifyBinding(t, ring, at, e);
  return r.ok ? 'ok' : r.error.reason;
};

describe('binding', () => {
  it('round-trips', () => {
    expect(verifyBinding(token, ring, now, { model: fields.model, tenantScope: fields.tenantScope, session: 'sess-42' })).toEqual({
      ok: true,
      value: { kind: 'binding', ...fields },
    });
    const sessionless = mintBinding({ ...fields, session: null }, ring);
    expect(reasonOf(sessionless, { session: null })).toBe('ok');
  });

  it('a pending binding signs, when first asked, the token mintBinding gives for the same fields and ring', () => {
    const pending = new PendingBinding(fields, ring);
    expect(pending.token()).toBe(token);
    expect(pending.token()).toBe(token);
    expect(new PendingBinding({ ...fields, session: null }, ring).token()).toBe(mintBinding({ ...fields, session: null }, ring));
  });

  it('a pending binding refuses invalid fields when made, not when signed', () => {
    expect(() => new PendingBinding({ ...fields, expiresAtMs: fields.issuedAtMs }, ring)).toThrow(/expiresAtMs must be after issuedAtMs/);
    expect(() => new PendingBinding({ ...fields, model: '' }, ring)).toThrow();
  });

  it('fails on each mismatch and time bound', () => {
    expect(reasonOf(token, { tenantScope: 'tenant:globex' })).toBe('tenant_mismatch');
    expect(reasonOf(token, { model: 'other-model' })).toBe('model_mismatch');
    expect(reasonOf(token, { session: 'sess-43' })).toBe('session_mismatch');
    expect(reasonOf(token, { session: null })).toBe('session_mismatch');
    expect(reasonOf(token, undefined, fields.expiresAtMs)).toBe('expired');
    expect(reasonOf(token, undefined, fields.issuedAtMs - 10_000)).toBe('not_yet_valid');
  });

  it('a contract is never a binding', () => {
    expect(reasonOf(mintContract(exampleContractFields(), ring))).toBe('wrong_kind');
  });

  it('cannot be forged by editing the revision in the payload', () => {
    const [p, v, kid, , sig] = token.split('.');
    const body = Buffer.from(JSON.stringify({ kind: 'binding', ...fields, revision: 'rev-b' })).toString('base64url');
    expect(reasonOf([p, v, kid, body, sig].join('.'))).toBe('bad_signature');
  });
});
