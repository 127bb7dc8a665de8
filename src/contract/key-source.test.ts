import { describe, expect, it } from 'vitest';
import { keyRingFrom } from './key-source.js';

const secret = Buffer.alloc(32, 7).toString('base64');
const salt = Buffer.alloc(32, 8).toString('base64'); // separate from the signing key, as keys.ts requires

describe('keyRingFrom', () => {
  it('reads the variable keys.env names, and names that variable (not KVGATE_KEYS) when its content is wrong', () => {
    const good = keyRingFrom({ env: 'MY_KEYS' }, { MY_KEYS: JSON.stringify({ current: 'k1', keys: { k1: secret }, salt }) });
    expect(good.ok && good.value.currentId).toBe('k1');
    const bad = keyRingFrom({ env: 'MY_KEYS' }, { MY_KEYS: JSON.stringify({ current: 'k9', keys: { k1: secret }, salt }) });
    expect(bad.ok).toBe(false);
    if (!bad.ok) {
      expect(bad.error).toMatch(/^environment variable MY_KEYS: invalid key file: current: key id "k9" is not among the keys/);
      expect(bad.error).not.toContain('KVGATE_KEYS');
      expect(bad.error).not.toContain(secret);
    }
  });

  it('a KVGATE_KEYS beside keys.env is not read instead of the named variable', () => {
    const r = keyRingFrom({ env: 'MY_KEYS' }, { KVGATE_KEYS: JSON.stringify({ current: 'k1', keys: { k1: secret }, salt }) });
    expect(r).toEqual({ ok: false, error: expect.stringContaining('MY_KEYS, which is not set') });
  });
});
