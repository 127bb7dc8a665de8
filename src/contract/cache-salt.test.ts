import { createHmac } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { createKeyRing } from './keys.js';
import { deriveCacheSalt } from './cache-salt.js';

const saltSecret = Buffer.alloc(32, 0x33);
const ring = createKeyRing({ keys: [{ id: 'k1', secret: Buffer.alloc(32, 1) }], currentId: 'k1', saltSecret });
const g = 'g_0123456789abcdef01234567';

describe('deriveCacheSalt', () => {
  it('is base64url(HMAC-SHA256(saltSecret, group \\n scope [\\n client]))', () => {
    const expected = createHmac('sha256', saltSecret).update(`${g}\ntenant:acme`).digest('base64url');
    expect(deriveCacheSalt(ring, g, 'tenant:acme')).toBe(expected);
    const withClient = createHmac('sha256', saltSecret).update(`${g}\ntenant:acme\nconv-1`).digest('base64url');
    expect(deriveCacheSalt(ring, g, 'tenant:acme', 'conv-1')).toBe(withClient);
    expect(deriveCacheSalt(ring, g, 'tenant:acme')).toMatch(/^[A-Za-z0-9_-]{43}$/);
  });

  it('separates tenants, groups, client salts and key rings', () => {
    const base = deriveCacheSalt(ring, g, 'tenant:acme');
    expect(deriveCacheSalt(ring, g, 'tenant:globex')).not.toBe(base);
    expect(deriveCacheSalt(ring, 'g_ffffffffffffffffffffffff', 'tenant:acme')).not.toBe(base);
    expect(deriveCacheSalt(ring, g, 'tenant:acme', '')).not.toBe(base);
    expect(deriveCacheSalt(ring, g, 'tenant:acme', 'x')).not.toBe(base);
    const otherRing = createKeyRing({
      keys: [{ id: 'k1', secret: Buffer.alloc(32, 1) }],
      currentId: 'k1',
      saltSecret: Buffer.alloc(32, 0x44),
    });
    expect(deriveCacheSalt(otherRing, g, 'tenant:acme')).not.toBe(base);
  });

  it('refuses a newline in the group or scope, so a client salt can never forge another scope', () => {
    expect(() => deriveCacheSalt(ring, g, 'tenant:acme\nx')).toThrow(/newline/);
    expect(() => deriveCacheSalt(ring, `${g}\n`, 'tenant:acme')).toThrow(/newline/);
  });

  it('property: no client salt reproduces another tenant scope or the unsalted scope', () => {
    const scopes = ['tenant:acme', 'tenant:globex', 'shared', 'tenant-user:acme/u1'];
    const forbidden = new Set(scopes.map((s) => deriveCacheSalt(ring, g, s)));
    for (const s of scopes.slice(1)) forbidden.add(deriveCacheSalt(ring, g, s, 'conv'));
    fc.assert(
      fc.property(fc.string({ maxLength: 40 }), (clientSalt) => {
        expect(forbidden.has(deriveCacheSalt(ring, g, 'tenant:acme', clientSalt))).toBe(false);
      }),
      { numRuns: 200 },
    );
  });
});

describe('deriveCacheSalt, repeated', () => {
  it('answers a repeated (group, scope) with the same salt as a fresh derivation, per ring', () => {
    const expected = createHmac('sha256', saltSecret).update(`${g}\ntenant:repeat`).digest('base64url');
    for (let i = 0; i < 3; i++) expect(deriveCacheSalt(ring, g, 'tenant:repeat')).toBe(expected);
    const other = createKeyRing({ keys: [{ id: 'k1', secret: Buffer.alloc(32, 1) }], currentId: 'k1', saltSecret: Buffer.alloc(32, 0x55) });
    const otherExpected = createHmac('sha256', Buffer.alloc(32, 0x55)).update(`${g}\ntenant:repeat`).digest('base64url');
    expect(deriveCacheSalt(other, g, 'tenant:repeat')).toBe(otherExpected);
    expect(deriveCacheSalt(ring, g, 'tenant:repeat')).toBe(expected);
  });

  it('still refuses a newline in the scope after the same pair was derived without one', () => {
    deriveCacheSalt(ring, g, 'tenant:nl');
    expect(() => deriveCacheSalt(ring, g, 'tenant:nl\n')).toThrow(/newline/);
  });
});
