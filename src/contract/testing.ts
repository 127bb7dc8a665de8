/**
 * Test support: a valid contract to start from and a fixed clock, so tests change one field at a time. Not used
 * by product code.
 */
import { createHash } from 'node:crypto';
import { cacheSaltDigestOf, promptDigestOf } from './body-binding.js';
import { deriveCacheSalt } from './cache-salt.js';
import { mintContract, type TransferContract } from './contract.js';
import type { KeyRing } from './keys.js';
import { signStatus } from './status-signature.js';
import { H } from '../headers.js';
import type { Attestation } from './attestation.js';
import { TEST_NOW_MS } from '../../test/support/clock.js';

/** A fixed "now" for token tests (2026-01-01T00:00:00Z). */

/** Contract fields valid from `nowMs` for 60 s. A fresh object each call. */
export function exampleContractFields(nowMs = TEST_NOW_MS): Omit<TransferContract, 'kind'> {
  return {
    requestId: 'req-0001',
    groupId: 'g_0123456789abcdef01234567',
    fingerprint: 'a'.repeat(64),
    tenantScope: 'tenant:acme',
    tenant: 'acme',
    model: 'llama-3.1-8b',
    revision: 'rev-a',
    adapter: null,
    cacheSaltDigest: 'c'.repeat(64),
    promptDigest: 'd'.repeat(64),
    issuedAtMs: nowMs,
    expiresAtMs: nowMs + 60_000,
    decode: { cluster: 'decode-a', endpoint: '10.0.0.7:9090' },
    prefill: { cluster: 'prefill-a', endpoint: null },
  };
}

/** Attestation fields matching `exampleContractFields` (same request, group, fingerprint and scope). */
export function exampleAttestationFields(nowMs = TEST_NOW_MS): Omit<Attestation, 'kind'> {
  const c = exampleContractFields(nowMs);
  return {
    requestId: c.requestId,
    groupId: c.groupId,
    fingerprint: c.fingerprint,
    tenantScope: c.tenantScope,
    promptTokens: 812,
    blockSize: 16,
    layout: 'HND',
    engineId: 'prefill-engine-1',
    transferDigest: 'e'.repeat(64),
    issuedAtMs: nowMs,
    expiresAtMs: nowMs + 30_000,
  };
}

/**
 * A body as the gate would forward it (its `cache_salt` the gate's salt for the contract's group and scope) and the
 * contract token that binds it: model, salt digest and prompt digest taken from that body. For tests that play the
 * gate's part and send legs straight to sidecars.
 */
export function gateSigned(
  keys: KeyRing,
  fields: Omit<TransferContract, 'kind'>,
  body: Readonly<Record<string, unknown>>,
): { contract: string; body: Record<string, unknown> } {
  const salted = { ...body, cache_salt: deriveCacheSalt(keys, fields.groupId, fields.tenantScope) };
  const bound = { ...fields, cacheSaltDigest: cacheSaltDigestOf(salted.cache_salt), promptDigest: promptDigestOf(salted) };
  return { contract: mintContract(bound, keys), body: salted };
}

/** A 32-byte test secret, the same for the same label (so "the same secret under a new id" is easy to write). */
export function testSecret(label: string): Buffer {
  return createHash('sha256').update(`kvgate test secret\n${label}`).digest();
}

/**
 * A key file's text: `keys` maps each key id to the label of its secret (`testSecret`), `salt` is the label of the
 * cache-salt secret. `{ current: 'k2', keys: { k1: 'k1', k2: 'k2' }, salt: 'salt' }` is step 2 of a rotation.
 */
export function testKeyFileText(spec: { current: string; keys: Readonly<Record<string, string>>; salt?: string }): string {
  const keys = Object.fromEntries(Object.entries(spec.keys).map(([id, label]) => [id, testSecret(label).toString('base64')]));
  return JSON.stringify({ current: spec.current, keys, salt: testSecret(spec.salt ?? 'salt').toString('base64') });
}

/**
 * A fetch that answers as a sidecar holding `keys` does: `inner`'s answer, signed for the poll's nonce when the poll
 * sent one (`x-kvgate-status-nonce`), over the exact bytes passed on. For tests that fake sidecars with a fetch
 * function; HTTP servers that stand in for sidecars use `answerStatus` (src/sidecar/testing.ts).
 */
export function signingFetch(keys: KeyRing, inner: typeof fetch): typeof fetch {
  return (async (input: Parameters<typeof fetch>[0], init?: RequestInit) => {
    const res = await inner(input, init);
    const nonce = new Headers(init?.headers).get(H.statusNonce);
    if (nonce === null) return res;
    const bytes = Buffer.from(await res.arrayBuffer());
    const headers = new Headers(res.headers);
    headers.set(H.statusSignature, signStatus(keys, nonce, bytes));
    return new Response(bytes, { status: res.status, headers });
  }) as typeof fetch;
}
