import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { createKeyRing, type KeyRing } from './keys.js';
import { mintContract, verifyContract, type ContractFailure } from './contract.js';
import { mintAttestation } from './attestation.js';
import { mintBinding } from './binding.js';
import { CLOCK_SKEW_MS, signToken } from './token.js';
import { exampleAttestationFields, exampleContractFields } from './testing.js';
import { TEST_NOW_MS } from '../../test/support/clock.js';

const s1 = Buffer.alloc(32, 1);
const s2 = Buffer.alloc(32, 2);
const salt = Buffer.alloc(32, 3);
const ring1 = createKeyRing({ keys: [{ id: 'k1', secret: s1 }], currentId: 'k1', saltSecret: salt });
const ring12 = createKeyRing({
  keys: [
    { id: 'k1', secret: s1 },
    { id: 'k2', secret: s2 },
  ],
  currentId: 'k2',
  saltSecret: salt,
});
const forged = createKeyRing({ keys: [{ id: 'k1', secret: Buffer.alloc(32, 9) }], currentId: 'k1', saltSecret: salt });

const fields = exampleContractFields();
const token = mintContract(fields, ring1);
const now = TEST_NOW_MS + 1_000;

function failure(t: string, keys: KeyRing = ring1, at = now, expect?: Parameters<typeof verifyContract>[3]): ContractFailure {
  const r = verifyContract(t, keys, at, expect);
  if (r.ok) throw new Error('expected verification to fail');
  return r.error;
}

describe('contract round trip', () => {
  it('verifies and returns exactly the minted fields', () => {
    expect(token.startsWith('kvgate.v1.k1.')).toBe(true);
    expect(token.split('.')).toHaveLength(5);
    const r = verifyContract(token, ring1, now, {
      requestId: fields.requestId,
      fingerprint: fields.fingerprint,
      tenantScope: fields.tenantScope,
      groupId: fields.groupId,
    });
    expect(r).toEqual({ ok: true, value: { kind: 'contract', ...fields } });
  });

  it('accepts a contract without a prefill leg', () => {
    const t = mintContract({ ...fields, prefill: null, tenant: null }, ring1);
    expect(verifyContract(t, ring1, now).ok).toBe(true);
  });

  it('carries a priority when the gate sets one, and none at all when it is 0 (contracts without one are as before)', () => {
    const withPriority = mintContract({ ...fields, priority: -10 }, ring1);
    expect(verifyContract(withPriority, ring1, now)).toEqual({ ok: true, value: { kind: 'contract', ...fields, priority: -10 } });
    const payloadOf = (t: string): Record<string, unknown> =>
      JSON.parse(Buffer.from(t.split('.')[3]!, 'base64url').toString('utf8')) as Record<string, unknown>;
    expect(Object.keys(payloadOf(withPriority)).at(-1)).toBe('priority');
    expect(payloadOf(token)).not.toHaveProperty('priority');
    const plain = verifyContract(token, ring1, now);
    expect(plain.ok && 'priority' in plain.value).toBe(false);
    // One spelling per value: 0 is left out, and a priority outside the route table's bounds is never minted.
    for (const priority of [0, 1001, -1001, 1.5]) expect(() => mintContract({ ...fields, priority }, ring1)).toThrow(/priority/);
    const zero = signToken({ kind: 'contract', ...fields, priority: 0 } as { kind: 'contract' }, ring1);
    expect(failure(zero).reason).toBe('malformed');
  });

  it('refuses to mint an invalid contract', () => {
    expect(() => mintContract({ ...fields, requestId: '' }, ring1)).toThrow();
    expect(() => mintContract({ ...fields, expiresAtMs: fields.issuedAtMs }, ring1)).toThrow();
    expect(() => mintContract({ ...fields, extra: 1 } as typeof fields, ring1)).toThrow();
  });
});

describe('each failure reason', () => {
  it('malformed', () => {
    for (const bad of ['', 'nope', 'kvgate.v1.k1.abc', 'kvgate.v2.k1.e30.AAAA', `${token}.x`, 'kvgate.v1.k 1.e30.AAAA', 'x'.repeat(9000)]) {
      expect(failure(bad).reason).toBe('malformed');
    }
    expect(failure(undefined as unknown as string).reason).toBe('malformed');
  });

  it('malformed: a signed payload of the wrong shape', () => {
    const t = signToken({ kind: 'contract', requestId: 'r' } as never, ring1);
    const f = failure(t);
    expect(f.reason).toBe('malformed');
    expect(f.message).toMatch(/groupId/);
  });

  it('is never minted longer than a verifier accepts: the signer refuses with a coded error instead', () => {
    expect(() => signToken({ kind: 'contract', requestId: 'r'.repeat(7000) } as never, ring1)).toThrow(
      expect.objectContaining({ code: 'bad_request', reason: expect.stringMatching(/over the 8192 a verifier accepts/) }),
    );
    expect(signToken({ kind: 'contract', requestId: 'r'.repeat(5000) } as never, ring1).length).toBeLessThanOrEqual(8192);
  });

  it('unknown_key', () => {
    const f = failure(mintContract(fields, ring12), ring1);
    expect(f.reason).toBe('unknown_key');
    expect(f.message).toMatch(/key id k2.*distribute the current key ring/);
  });

  it('bad_signature', () => {
    expect(failure(token, forged).reason).toBe('bad_signature');
  });

  it('wrong_kind: an attestation or binding is never a contract', () => {
    const att = mintAttestation(exampleAttestationFields(), ring1);
    expect(failure(att).reason).toBe('wrong_kind');
    expect(failure(att).message).toMatch(/expected a contract token but got a token of kind "attestation"/);
    const binding = mintBinding(
      {
        model: 'm',
        revision: 'r',
        fingerprint: 'f',
        tenantScope: 's',
        session: null,
        issuedAtMs: TEST_NOW_MS,
        expiresAtMs: TEST_NOW_MS + 1,
      },
      ring1,
    );
    expect(failure(binding).reason).toBe('wrong_kind');
  });

  it('expired, at and after expiresAtMs', () => {
    expect(failure(token, ring1, fields.expiresAtMs).reason).toBe('expired');
    expect(failure(token, ring1, fields.expiresAtMs + 1).message).toMatch(/expired 1 ms ago/);
    expect(verifyContract(token, ring1, fields.expiresAtMs - 1).ok).toBe(true);
  });

  it('not_yet_valid, beyond the clock skew only', () => {
    expect(verifyContract(token, ring1, fields.issuedAtMs - CLOCK_SKEW_MS).ok).toBe(true);
    const f = failure(token, ring1, fields.issuedAtMs - CLOCK_SKEW_MS - 1);
    expect(f.reason).toBe('not_yet_valid');
    expect(f.message).toMatch(/synchronise the clocks/);
  });

  it.each([
    ['request_mismatch', { requestId: 'req-other' }, /minted for request req-0001, not req-other/],
    ['group_mismatch', { groupId: 'g_ffffffffffffffffffffffff' }, /binds group g_0123/],
    ['fingerprint_mismatch', { fingerprint: 'b'.repeat(64) }, /this worker runs bbbbbbbbbbbb/],
    ['tenant_mismatch', { tenantScope: 'tenant:globex' }, /scoped to tenant:acme, not tenant:globex/],
  ] as const)('%s', (reason, expectation, message) => {
    const f = failure(token, ring1, now, expectation);
    expect(f.reason).toBe(reason);
    expect(f.message).toMatch(message);
  });

  it('never puts a secret in a message', () => {
    const messages = [
      failure(token, forged).message,
      failure(mintContract(fields, ring12), ring1).message,
      failure('garbage').message,
      failure(token, ring1, now, { fingerprint: 'x' }).message,
    ];
    for (const m of messages) {
      for (const s of [s1, s2, Buffer.alloc(32, 9)]) {
        expect(m).not.toContain(s.toString('base64url'));
        expect(m).not.toContain(s.toString('hex'));
      }
    }
  });
});

describe('key rotation', () => {
  it('old tokens still verify after rotation; new tokens use the current key', () => {
    expect(verifyContract(token, ring12, now).ok).toBe(true);
    const fresh = mintContract(fields, ring12);
    expect(fresh.split('.')[2]).toBe('k2');
    expect(verifyContract(fresh, ring12, now).ok).toBe(true);
  });

  it('a token cannot be moved to another key id', () => {
    const [p, v, , body, sig] = token.split('.');
    expect(failure([p, v, 'k2', body, sig].join('.'), ring12).reason).toBe('bad_signature');
  });
});

describe('tampering', () => {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.';

  it('changing any single character of the token fails', () => {
    for (let i = 0; i < token.length; i++) {
      for (const delta of [1, 17]) {
        const replacement = alphabet[(alphabet.indexOf(token[i]!) + delta) % alphabet.length]!;
        const mutated = token.slice(0, i) + replacement + token.slice(i + 1);
        expect(verifyContract(mutated, ring1, now).ok, `position ${i}`).toBe(false);
      }
    }
  });

  it('flipping any bit of the payload or signature bytes fails', () => {
    const [p, v, kid, body, sig] = token.split('.') as [string, string, string, string, string];
    for (const which of ['body', 'sig'] as const) {
      const bytes = Buffer.from(which === 'body' ? body : sig, 'base64url');
      for (let i = 0; i < bytes.length; i++) {
        const copy = Buffer.from(bytes);
        copy[i] = copy[i]! ^ (1 << (i % 8));
        const part = copy.toString('base64url');
        const mutated = which === 'body' ? [p, v, kid, part, sig] : [p, v, kid, body, part];
        expect(verifyContract(mutated.join('.'), ring1, now).ok).toBe(false);
      }
    }
  });

  it('property: random edits of a valid token never verify', () => {
    const edit = fc.oneof(
      fc.record({
        op: fc.constant('replace' as const),
        at: fc.nat(),
        ch: fc.string({ minLength: 1, maxLength: 1, unit: 'grapheme-ascii' }),
      }),
      fc.record({ op: fc.constant('insert' as const), at: fc.nat(), ch: fc.string({ minLength: 1, maxLength: 3 }) }),
      fc.record({ op: fc.constant('delete' as const), at: fc.nat(), ch: fc.constant('') }),
    );
    fc.assert(
      fc.property(fc.array(edit, { minLength: 1, maxLength: 4 }), (edits) => {
        let t = token;
        for (const e of edits) {
          const at = e.at % (t.length + 1);
          if (e.op === 'replace') t = t.slice(0, at) + e.ch + t.slice(at + 1);
          else if (e.op === 'insert') t = t.slice(0, at) + e.ch + t.slice(at);
          else t = t.slice(0, at) + t.slice(at + 1);
        }
        fc.pre(t !== token);
        expect(verifyContract(t, ring1, now).ok).toBe(false);
      }),
      { numRuns: 300 },
    );
  });

  it('property: verify never throws, whatever the input', () => {
    const tokenish = fc
      .tuple(fc.string(), fc.string(), fc.base64String(), fc.string())
      .map(([a, kid, b, c]) => `kvgate.v1.${kid}.${b.replace(/=/g, '')}.${c}${a}`);
    fc.assert(
      fc.property(fc.oneof(fc.string(), fc.string({ unit: 'binary' }), tokenish, fc.anything()), (input) => {
        const r = verifyContract(input as string, ring1, now);
        expect(r.ok).toBe(false);
      }),
      { numRuns: 300 },
    );
  });
});
