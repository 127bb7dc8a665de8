import { describe, expect, it } from 'vitest';
import { createKeyRing, type KeyRing } from './keys.js';
import { mintContract, verifyContract } from './contract.js';
import { newStatusNonce, parseStatusNonce, signStatus, verifyStatus } from './status-signature.js';
import { exampleContractFields, testSecret } from './testing.js';
import { TEST_NOW_MS } from '../../test/support/clock.js';

const ring = (current: string, ids: readonly string[]): KeyRing =>
  createKeyRing({ keys: ids.map((id) => ({ id, secret: testSecret(id) })), currentId: current, saltSecret: testSecret('salt') });
const k1 = ring('k1', ['k1']);
const body = Buffer.from('{"fingerprint":"f","verified":true,"draining":false}\n');

const reasonOf = (keys: KeyRing, nonce: string, bytes: Uint8Array, header: string | null): string => {
  const r = verifyStatus(keys, nonce, bytes, header);
  return r.ok ? `ok ${r.value.keyId}` : r.error.reason;
};

describe('status signature', () => {
  it('verifies the bytes signed for the nonce under the signer current key', () => {
    const nonce = newStatusNonce();
    expect(nonce).toMatch(/^[A-Za-z0-9_-]{22}$/);
    expect(reasonOf(k1, nonce, body, signStatus(k1, nonce, body))).toBe('ok k1');
  });

  it('refuses a tampered body, another nonce (a replay) and another secret under the same id', () => {
    const nonce = newStatusNonce();
    const sig = signStatus(k1, nonce, body);
    const tampered = Buffer.from(body.toString().replace('"verified":true', '"verified":!0 '));
    expect(reasonOf(k1, nonce, tampered, sig)).toBe('bad_signature');
    expect(reasonOf(k1, nonce, Buffer.concat([body, Buffer.from(' ')]), sig)).toBe('bad_signature');
    expect(reasonOf(k1, newStatusNonce(), body, sig)).toBe('bad_signature');
    const forged = createKeyRing({ keys: [{ id: 'k1', secret: testSecret('not-k1') }], currentId: 'k1', saltSecret: testSecret('salt') });
    expect(reasonOf(k1, nonce, body, signStatus(forged, nonce, body))).toBe('bad_signature');
    const r = verifyStatus(k1, newStatusNonce(), body, sig);
    expect(r.ok ? '' : r.error.message).toMatch(/replayed, altered or forged/);
  });

  it('refuses a missing, truncated, oversized or otherwise malformed header, naming what it is', () => {
    const nonce = newStatusNonce();
    const sig = signStatus(k1, nonce, body);
    expect(reasonOf(k1, nonce, body, null)).toBe('missing');
    expect(reasonOf(k1, nonce, body, '')).toBe('missing');
    for (const bad of [
      sig.slice(0, -1), // truncated
      `${sig}A`, // one character too many
      `${sig}=`,
      sig.slice(0, sig.indexOf('.')), // the id alone
      sig.slice(sig.indexOf('.')), // no id
      `k 1${sig.slice(2)}`,
      `${'k'.repeat(65)}${sig.slice(2)}`, // an id longer than any key id
      `${'x'.repeat(10_000)}.${sig.slice(3)}`, // oversized
      `${sig.slice(0, -1)}B`, // non-canonical last character (unused low bits)
    ]) {
      expect(reasonOf(k1, nonce, body, bad), bad.slice(0, 80)).toBe('malformed');
    }
    const r = verifyStatus(k1, nonce, body, 'x'.repeat(10_000));
    expect(r.ok ? '' : r.error.message).toContain('10000 characters');
    expect(r.ok ? '' : r.error.message).not.toContain('xxxx');
  });

  it('rotation: a sidecar signing with a new current id verifies at a gate that holds it; an id the gate lacks fails naming it', () => {
    const nonce = newStatusNonce();
    const sidecar = ring('k2', ['k1', 'k2']);
    const header = signStatus(sidecar, nonce, body);
    expect(header.startsWith('k2.')).toBe(true);
    expect(reasonOf(ring('k1', ['k1', 'k2']), nonce, body, header)).toBe('ok k2'); // gate not switched yet, holds k2
    const r = verifyStatus(k1, nonce, body, header); // gate that was never given k2
    expect(r.ok ? '' : r.error.reason).toBe('unknown_key');
    expect(r.ok ? '' : r.error.message).toContain('key id k2');
    // Once the sidecar drops k1, answers signed before under k1 (same nonce) still verify at a gate holding k1 only.
    expect(reasonOf(k1, nonce, body, signStatus(ring('k1', ['k1', 'k2']), nonce, body))).toBe('ok k1');
  });

  it('is useless as a token MAC and a token MAC is useless as a status signature (domain separation)', () => {
    const fields = exampleContractFields();
    const token = mintContract(fields, k1);
    const [, , kid, payload, mac] = token.split('.');
    const expected = {
      requestId: fields.requestId,
      groupId: fields.groupId,
      fingerprint: fields.fingerprint,
      tenantScope: fields.tenantScope,
    };
    // The contract's own MAC, offered as the status signature of its payload bytes, for any nonce.
    expect(reasonOf(k1, newStatusNonce(), Buffer.from(payload!), `${kid}.${mac}`)).toBe('bad_signature');
    // A status signature over those same payload bytes, offered as the contract's MAC.
    const statusMac = signStatus(k1, newStatusNonce(), Buffer.from(payload!)).split('.')[1]!;
    const spliced = ['kvgate', 'v1', kid, payload, statusMac].join('.');
    const opened = verifyContract(spliced, k1, TEST_NOW_MS + 1_000, expected);
    expect(opened.ok ? '' : opened.error.reason).toBe('bad_signature');
    expect(verifyContract(token, k1, TEST_NOW_MS + 1_000, expected).ok).toBe(true);
  });

  it('accepts only a 128-bit base64url nonce', () => {
    expect(parseStatusNonce(newStatusNonce()).ok).toBe(true);
    for (const bad of [undefined, '', 'short', 'A'.repeat(23), `${'A'.repeat(21)}B`, `${'A'.repeat(21)}=`, 'a\nb'.repeat(8)]) {
      expect(parseStatusNonce(bad).ok, String(bad)).toBe(false);
    }
  });
});
