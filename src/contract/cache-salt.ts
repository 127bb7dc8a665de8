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
import { createHmac } from 'node:crypto';
import type { KeyRing } from './keys.js';
import { KvgateError } from '../errors.js';

export function deriveCacheSalt(keys: KeyRing, groupId: string, tenantScope: string, clientSalt?: string): string {
  if (groupId.includes('\n') || tenantScope.includes('\n')) {
    throw new KvgateError('internal', 'deriveCacheSalt: group id and tenant scope must not contain a newline');
  }
  const message = clientSalt === undefined ? `${groupId}\n${tenantScope}` : `${groupId}\n${tenantScope}\n${clientSalt}`;
  return createHmac('sha256', keys.saltSecret).update(message, 'utf8').digest('base64url');
}
