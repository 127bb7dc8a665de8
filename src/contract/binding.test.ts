import { describe, expect, it } from 'vitest';
import { createKeyRing } from './keys.js';
import { mintBinding, PendingBinding, reuseWindowMs, verifyBinding, type Binding } from './binding.js';
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

  describe('reuse of a recent signature', () => {
    // A ring of its own per test: the reuse cache is per ring.
    const freshRing = () =>
      createKeyRing({ keys: [{ id: 'r1', secret: Buffer.alloc(32, 3) }], currentId: 'r1', saltSecret: Buffer.alloc(32, 4) });
    const at = (f: Omit<Binding, 'kind'>, issuedAtMs: number): Omit<Binding, 'kind'> => ({
      ...f,
      issuedAtMs,
      expiresAtMs: issuedAtMs + (f.expiresAtMs - f.issuedAtMs),
    });
    const payloadOf = (t: string, r: ReturnType<typeof freshRing>): Binding => {
      const v = verifyBinding(t, r, TEST_NOW_MS + 1);
      if (!v.ok) throw new Error(v.error.message);
      return v.value;
    };

    it('the window is a tenth of the lifetime, at most a minute', () => {
      expect(reuseWindowMs(3_600_000)).toBe(60_000);
      expect(reuseWindowMs(300_000)).toBe(30_000);
      expect(reuseWindowMs(5)).toBe(0);
    });

    it('hands out the same token within the window, a fresh one after it', () => {
      const r = freshRing();
      const first = new PendingBinding(fields, r).token();
      expect(payloadOf(first, r).issuedAtMs).toBe(TEST_NOW_MS);
      expect(new PendingBinding(at(fields, TEST_NOW_MS + 60_000), r).token()).toBe(first);
      const later = new PendingBinding(at(fields, TEST_NOW_MS + 60_001), r).token();
      expect(later).not.toBe(first);
      expect(later).toBe(mintBinding(at(fields, TEST_NOW_MS + 60_001), r));
      // The newest signature is the one handed out from then on.
      expect(new PendingBinding(at(fields, TEST_NOW_MS + 90_000), r).token()).toBe(later);
    });

    it('never hands out a binding issued after the request (a clock that stepped back signs afresh)', () => {
      const r = freshRing();
      const first = new PendingBinding(at(fields, TEST_NOW_MS + 10_000), r).token();
      const earlier = new PendingBinding(fields, r).token();
      expect(earlier).not.toBe(first);
      expect(payloadOf(earlier, r).issuedAtMs).toBe(TEST_NOW_MS);
    });

    it('never gives one session, scope, model, revision, group or lifetime the binding of another', () => {
      const r = freshRing();
      const base = new PendingBinding(fields, r).token();
      const variants: Omit<Binding, 'kind'>[] = [
        { ...fields, session: 'sess-43' },
        { ...fields, session: null },
        { ...fields, tenantScope: 'tenant:globex' },
        { ...fields, model: 'llama-3.1-70b' },
        { ...fields, revision: 'rev-b' },
        { ...fields, fingerprint: 'b'.repeat(64) },
        { ...fields, expiresAtMs: fields.expiresAtMs - 1 },
        // Separators inside client-chosen ids cannot make two field sets one key.
        { ...fields, tenantScope: 'tenant:acme|5:sess', session: '42' },
        { ...fields, tenantScope: 'tenant:acme', session: 'sess-42|x' },
      ];
      for (const v of variants) {
        const t = new PendingBinding(v, r).token();
        expect(t).not.toBe(base);
        expect(t).toBe(mintBinding(v, r));
      }
    });

    it('is kept per key ring', () => {
      const r1 = freshRing();
      const other = createKeyRing({ keys: [{ id: 'r1', secret: Buffer.alloc(32, 9) }], currentId: 'r1', saltSecret: Buffer.alloc(32, 4) });
      new PendingBinding(fields, r1).token();
      const t = new PendingBinding(fields, other).token();
      expect(verifyBinding(t, other, TEST_NOW_MS + 1).ok).toBe(true);
      expect(verifyBinding(t, r1, TEST_NOW_MS + 1).ok).toBe(false);
    });
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
