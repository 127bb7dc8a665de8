import { createHmac } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inspect } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { createDevKeyRing, createKeyRing, isInsecureKeyRing, loadKeyRing, parseKeyRing, type KeyRing } from './keys.js';
import { mintContract, verifyContract } from './contract.js';
import { exampleContractFields } from './testing.js';
import { TEST_NOW_MS } from '../../test/support/clock.js';
import { PACKAGE_ROOT } from '../package-root.js';

const secretA = Buffer.alloc(32, 0xa1);
const secretB = Buffer.alloc(48, 0xb2);
const salt = Buffer.alloc(32, 0x5a);

/** Every printable form a secret could leak in. */
function leakForms(...secrets: Buffer[]): string[] {
  return secrets.flatMap((s) => [s.toString('base64'), s.toString('base64url'), s.toString('hex'), s.toString('latin1')]);
}

function expectNoLeak(text: string, ...secrets: Buffer[]): void {
  for (const form of leakForms(...secrets)) expect(text).not.toContain(form);
}

const keyFile = (over: Record<string, unknown> = {}) =>
  JSON.stringify({
    current: 'k2',
    keys: { k1: secretA.toString('base64'), k2: secretB.toString('base64') },
    salt: salt.toString('base64'),
    ...over,
  });

describe('createKeyRing', () => {
  const ring = createKeyRing({
    keys: [
      { id: 'k1', secret: secretA },
      { id: 'k2', secret: secretB },
    ],
    currentId: 'k2',
    saltSecret: salt,
  });

  it('looks secrets up by id and keeps the salt secret separate', () => {
    expect(ring.currentId).toBe('k2');
    expect(ring.secret('k1')).toEqual(secretA);
    expect(ring.secret('k2')).toEqual(secretB);
    expect(ring.secret('k3')).toBeUndefined();
    expect(ring.saltSecret).toEqual(salt);
  });

  it('gives each signing key and the salt secret as a KeyObject that MACs exactly as the secret does', () => {
    const msg = 'kvgate.v1.k1.eyJraW5kIjoiY29udHJhY3QifQ';
    const hex = (key: Parameters<typeof createHmac>[1]) => createHmac('sha256', key).update(msg, 'utf8').digest('hex');
    expect(hex(ring.macKey('k1')!)).toBe(hex(secretA));
    expect(hex(ring.macKey('k2')!)).toBe(hex(secretB));
    expect(ring.macKey('k3')).toBeUndefined();
    expect(hex(ring.saltMacKey)).toBe(hex(salt));
  });

  it('signs a token with HMAC-SHA256 of everything before its last dot, under the current secret', () => {
    const token = mintContract(exampleContractFields(), ring);
    const parts = token.split('.');
    expect(parts[2]).toBe('k2');
    const signed = parts.slice(0, 4).join('.'); // kvgate.v1.<kid>.<payload>
    expect(parts[4]).toBe(createHmac('sha256', secretB).update(signed, 'utf8').digest('base64url'));
  });

  it('hands out copies, so a caller cannot corrupt the ring', () => {
    ring.secret('k1')!.fill(0);
    ring.saltSecret.fill(0);
    expect(ring.secret('k1')).toEqual(secretA);
    expect(ring.saltSecret).toEqual(salt);
  });

  it('never shows secrets in JSON, inspect or String', () => {
    const shown = [JSON.stringify(ring), inspect(ring, { depth: 10, showHidden: true }), String(ring), JSON.stringify({ nested: ring })];
    for (const text of shown) {
      expectNoLeak(text, secretA, secretB, salt);
      expect(text).toContain('k2');
    }
    expect(JSON.parse(JSON.stringify(ring))).toEqual({ currentId: 'k2', keyIds: ['k1', 'k2'], secrets: '[redacted]', insecure: false });
  });

  it.each([
    [{ keys: [{ id: 'k1', secret: Buffer.alloc(16, 7) }], currentId: 'k1', saltSecret: salt }, /keys\.k1: secret is 16 bytes, at least 32/],
    [
      { keys: [{ id: 'k1', secret: secretA }], currentId: 'k9', saltSecret: salt },
      /current: key id "k9" is not among the keys; set it to one of \[k1\]/,
    ],
    [{ keys: [{ id: 'k1', secret: secretA }], currentId: 'k1', saltSecret: Buffer.alloc(8) }, /salt: cache-salt secret is 8 bytes/],
    [{ keys: [{ id: 'k.1', secret: secretA }], currentId: 'k.1', saltSecret: salt }, /must be 1-64 characters/],
    [
      {
        keys: [
          { id: 'k1', secret: secretA },
          { id: 'k1', secret: secretB },
        ],
        currentId: 'k1',
        saltSecret: salt,
      },
      /duplicate key id/,
    ],
    [{ keys: [], currentId: 'k1', saltSecret: salt }, /at least one signing key/],
  ])('rejects invalid input with a fix and no secret (%#)', (opts, message) => {
    let thrown: unknown;
    try {
      createKeyRing(opts);
    } catch (e) {
      thrown = e;
    }
    expect(thrown).toBeInstanceOf(Error);
    expect((thrown as Error).message).toMatch(message);
    expectNoLeak((thrown as Error).message, ...opts.keys.map((k) => k.secret), opts.saltSecret);
  });
});

describe('parseKeyRing and loadKeyRing', () => {
  const dir = mkdtempSync(join(tmpdir(), 'kvgate-keys-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('reads a JSON key file', () => {
    const path = join(dir, 'keys.json');
    writeFileSync(path, keyFile());
    const r = loadKeyRing({ file: path });
    expect(r.ok).toBe(true);
    if (r.ok) {
      expect(r.value.currentId).toBe('k2');
      expect(r.value.secret('k1')).toEqual(secretA);
      expect(r.value.saltSecret).toEqual(salt);
      expect(isInsecureKeyRing(r.value)).toBe(false);
    }
  });

  it('reads a YAML key file, and base64url secrets', () => {
    const path = join(dir, 'keys.yaml');
    writeFileSync(path, `current: k1\nkeys:\n  k1: ${secretA.toString('base64url')}\nsalt: ${salt.toString('base64')}\n`);
    const r = loadKeyRing({ file: path });
    expect(r.ok && r.value.secret('k1')).toEqual(secretA);
  });

  it('reads KVGATE_KEYS when no file is given, and prefers the file', () => {
    const r = loadKeyRing({ env: { KVGATE_KEYS: keyFile({ current: 'k1' }) } });
    expect(r.ok && r.value.currentId).toBe('k1');
    const path = join(dir, 'pref.json');
    writeFileSync(path, keyFile());
    const both = loadKeyRing({ file: path, env: { KVGATE_KEYS: keyFile({ current: 'k1' }) } });
    expect(both.ok && both.value.currentId).toBe('k2');
  });

  it('says how to provide keys when there are none', () => {
    const r = loadKeyRing({ env: {} });
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.error.message).toMatch(/set KVGATE_KEYS .*openssl rand -base64 32/);
  });

  it('names an unreadable file without throwing', () => {
    const r = loadKeyRing({ file: join(dir, 'missing.json') });
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.error.message).toMatch(/missing\.json: cannot be read \(ENOENT\)/);
  });

  it.each([
    ['not JSON or YAML', '{ current: [', /not valid JSON or YAML/],
    ['not an object', '"just a string"', /\(root\): must be an object/],
    ['unknown field', keyFile({ extra: 1 }), /unknown field\(s\) extra; allowed: current, keys, salt/],
    [
      'missing current',
      JSON.stringify({ keys: { k1: secretA.toString('base64') }, salt: salt.toString('base64') }),
      /current: must be the id/,
    ],
    ['short secret', keyFile({ keys: { k2: Buffer.alloc(31, 3).toString('base64') } }), /keys\.k2: secret is 31 bytes/],
    ['not base64', keyFile({ keys: { k2: 'not base64!!' } }), /keys\.k2: is not valid base64/],
    ['short salt', keyFile({ salt: Buffer.alloc(4, 9).toString('base64') }), /salt: cache-salt secret is 4 bytes/],
    ['current not a key', keyFile({ current: 'k7' }), /current: key id "k7" is not among the keys/],
  ])('rejects a file that is %s, with a fix and no secret', (_what, text, message) => {
    const r = parseKeyRing(text, 'test.json');
    expect(r.ok).toBe(false);
    if (!r.ok) {
      expect(r.error.message).toMatch(message);
      expect(r.error.message).toMatch(/^\[internal\] test\.json: /);
      expectNoLeak(r.error.message, secretA, secretB, salt, Buffer.alloc(31, 3), Buffer.alloc(4, 9));
      expect(r.error.message).not.toContain('not base64!!');
    }
  });

  it('says where a syntax error is, by line and column, and never quotes the file (its lines are secrets)', () => {
    const a = secretA.toString('base64');
    const b = secretB.toString('base64');
    const dupJson = `{"current":"k1","keys":{"k1":"${a}","k1":"${b}"},"salt":"${salt.toString('base64')}"}`;
    const dupYaml = `current: k1\nkeys:\n  k1: ${a}\n  k1: ${b}\nsalt: ${salt.toString('base64')}\n`;
    const broken = `current: k1\nkeys:\n  k1: "${a}\n`;
    const cases: Array<[string, RegExp]> = [
      [dupJson, /not valid JSON or YAML \(a key appears twice \(each key id and field once\) at line 1, column \d+\)/],
      [dupYaml, /not valid JSON or YAML \(a key appears twice \(each key id and field once\) at line 4, column 3\)/],
      [broken, /not valid JSON or YAML \([A-Z_]+ at line \d+, column \d+\)/],
    ];
    for (const [text, message] of cases) {
      const r = parseKeyRing(text, 'keys.yaml');
      expect(r.ok).toBe(false);
      if (!r.ok) {
        expect(r.error.message).toMatch(message);
        expectNoLeak(r.error.message, secretA, secretB, salt);
      }
    }
  });

  it('refuses a salt secret equal to a signing key, saying to generate a separate one, without the secret', () => {
    const r = parseKeyRing(keyFile({ salt: secretA.toString('base64url') }), 'k.json');
    expect(r.ok).toBe(false);
    if (!r.ok) {
      expect(r.error.message).toMatch(/salt: is the same secret as signing key k1; .*separate .*openssl rand -base64 32/);
      expectNoLeak(r.error.message, secretA, secretB, salt);
    }
    // The typed constructor applies the same rule.
    expect(() => createKeyRing({ keys: [{ id: 'k1', secret: secretA }], currentId: 'k1', saltSecret: Buffer.from(secretA) })).toThrow(
      /salt: is the same secret as signing key k1/,
    );
  });

  it('refuses a key id "__proto__" by name, in JSON and YAML, instead of losing it (never "at least one signing key is required")', () => {
    const a = secretA.toString('base64');
    const texts = [
      `{"current":"__proto__","keys":{"__proto__":"${a}"},"salt":"${salt.toString('base64')}"}`,
      `current: __proto__\nkeys:\n  __proto__: ${a}\nsalt: ${salt.toString('base64')}\n`,
      `{"current":"k1","keys":{"k1":"${a}","__proto__":"${secretB.toString('base64')}"},"salt":"${salt.toString('base64')}"}`,
    ];
    for (const text of texts) {
      const r = parseKeyRing(text, 'keys.json');
      expect(r.ok).toBe(false);
      if (!r.ok) {
        expect(r.error.message).toMatch(/keys: key id "__proto__" is not allowed \(.*\); rename it/);
        expect(r.error.message).not.toMatch(/at least one signing key|is not among the keys/);
        expectNoLeak(r.error.message, secretA, secretB, salt);
      }
    }
    // Its value is checked like any other (zod's records skip a "__proto__" entry without looking at it).
    const notAString = parseKeyRing(`{"current":"k1","keys":{"k1":"${a}","__proto__":7},"salt":"${salt.toString('base64')}"}`, 'k.json');
    expect(notAString.ok ? '' : notAString.error.message).toMatch(/keys\.__proto__: must be a base64 string/);
    // The typed constructor refuses it too.
    expect(() => createKeyRing({ keys: [{ id: '__proto__', secret: secretA }], currentId: '__proto__', saltSecret: salt })).toThrow(
      /key id "__proto__" is not allowed/,
    );
  });

  it.each(['constructor', 'prototype', 'toString', 'hasOwnProperty'])('keeps %s a key id like any other', (id) => {
    const r = parseKeyRing(keyFile({ current: id, keys: { [id]: secretA.toString('base64') } }), 'k.json');
    expect(r.ok && r.value.secret(id)).toEqual(secretA);
    if (r.ok) expect(verifyContract(mintContract(exampleContractFields(), r.value), r.value, TEST_NOW_MS).ok).toBe(true);
  });

  it('does not report an undecodable secret twice', () => {
    const r = parseKeyRing(keyFile({ keys: { k2: '%%%' } }), 'k.json');
    expect(r.ok ? '' : r.error.message.match(/keys\.k2/g)).toHaveLength(1);
  });
});

describe('createDevKeyRing', () => {
  it('is deterministic per seed, marked insecure, and signs verifiable tokens', () => {
    const a: KeyRing = createDevKeyRing('demo');
    const b = createDevKeyRing('demo');
    const c = createDevKeyRing('other');
    expect(a.currentId).toBe('dev-insecure');
    expect(a.secret('dev-insecure')).toEqual(b.secret('dev-insecure'));
    expect(a.secret('dev-insecure')).not.toEqual(c.secret('dev-insecure'));
    expect(a.saltSecret).not.toEqual(a.secret('dev-insecure'));
    expect(isInsecureKeyRing(a)).toBe(true);
    expect(inspect(a)).toMatch(/INSECURE/);
    const token = mintContract(exampleContractFields(), a);
    expect(verifyContract(token, b, TEST_NOW_MS).ok).toBe(true);
    expect(verifyContract(token, c, TEST_NOW_MS).ok).toBe(false);
  });

  it('passes the checks a key file gets, whatever the seed (its salt secret is derived apart from its signing key)', () => {
    const dev = createDevKeyRing('kvgate-local-demo'); // the demo's seed (testbed/demo/topology.ts)
    const parts = {
      keys: [{ id: dev.currentId, secret: dev.secret(dev.currentId)! }],
      currentId: dev.currentId,
      saltSecret: dev.saltSecret,
    };
    expect(createKeyRing(parts).currentId).toBe('dev-insecure');
  });
});

describe('the example key Secret (deploy/kubernetes/secret-keys.example.yaml)', () => {
  it('is refused for its placeholders only: two equal placeholders are not reported as a shared salt', () => {
    const secret = parseYaml(readFileSync(join(PACKAGE_ROOT, 'deploy', 'kubernetes', 'secret-keys.example.yaml'), 'utf8')) as {
      stringData: Record<string, string>;
    };
    const r = parseKeyRing(secret.stringData['keys.json']!, 'keys.json');
    expect(r.ok ? '' : r.error.message).toMatch(/keys\.k1: is not valid base64.*; salt: is not valid base64/);
    expect(r.ok ? '' : r.error.message).not.toMatch(/same secret/);
  });
});
