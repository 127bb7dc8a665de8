/**
 * The `cache_salt` kvgate writes into every request body. vLLM mixes the salt into its prefix-cache block hashes,
 * so requests with different salts never share cached blocks.
 *
 *     cache_salt = base64url(HMAC-SHA256(saltSecret, groupId + "\n" + tenantScope [+ "\n" + clientSalt]))
 *
 * Why this shape:
 * - `tenantScope` is in it, so two tenants never share a prefix cache entry even on the same workers; a
 *   timing side channel on cache hits cannot reveal another tenant's prompts.
 * - `groupId` is in it, so a prefix cached under one revision is never looked up under another (no retagging).
 * - The client's own `cache_salt` is folded in *after* the gate's parts: it can split its scope further (narrow),
 *   but since the gate's parts always come first under a secret key, no client value can reproduce another
 *   scope's salt (widen). A client-supplied salt is never used alone.
 * - Keyed with a secret, so a salt seen on the wire cannot be linked to a tenant or recomputed for another one.
 * Group ids and tenant scopes must not contain a newline (the separator); a violation is a caller bug and throws.
 */
import { createHmac, type KeyObject } from 'node:crypto';
import type { KeyRing } from './keys.js';
import { KvgateError } from '../errors.js';
import { BoundedCache } from '../bounded-cache.js';

export function deriveCacheSalt(keys: KeyRing, groupId: string, tenantScope: string, clientSalt?: string): string {
  if (groupId.includes('\n') || tenantScope.includes('\n')) {
    throw new KvgateError('internal', 'deriveCacheSalt: group id and tenant scope must not contain a newline');
  }
  if (clientSalt !== undefined) return hmac(keys.saltMacKey, `${groupId}\n${tenantScope}\n${clientSalt}`);
  // Without a client salt the salt is a function of (ring's salt secret, group, scope), and those repeat across
  // requests: kept per key ring (its salt secret is fixed for its life), so another ring never sees these. A key
  // reload (src/key-store.ts) makes a new ring, so a new salt is never answered from the old ring's cache. Salts
  // with a client part are not kept: the client picks them.
  let cache = saltsByRing.get(keys);
  if (cache === undefined) {
    cache = new BoundedCache<string>(4096);
    saltsByRing.set(keys, cache);
  }
  return cache.get(`${groupId}\n${tenantScope}`, (message) => hmac(keys.saltMacKey, message));
}

const saltsByRing = new WeakMap<KeyRing, BoundedCache<string>>();

function hmac(key: KeyObject, message: string): string {
  return createHmac('sha256', key).update(message, 'utf8').digest('base64url');
}
