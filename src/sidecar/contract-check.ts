/**
 * The sidecar's check of the gate's transfer contract, before any worker is called: signature and window, the
 * request id it was minted for, the group and fingerprint it binds (which must be THIS worker's), and whether this
 * worker may serve the contract's tenant scope. Pure: keys, clock and config come in as arguments.
 *
 * A contract for another fingerprint is a mixed-revision route (409 `mixed_revision`): the request was bound to a
 * group this worker is not in. Everything else wrong with a contract (missing, forged, expired, replayed for another
 * request) is 403 `contract_invalid`; a scope this worker does not serve is 403 `tenant_scope_denied`.
 */
import { groupIdOf } from '../compat/fingerprint.js';
import { CONTRACT_FAILURE_REASONS, verifyContract, type TransferContract } from '../contract/contract.js';
import type { KeyRing } from '../contract/keys.js';
import { err, KvgateError, ok, type Result } from '../errors.js';

export interface ContractCheckInput {
  /** The `x-kvgate-contract` header. */
  readonly token: string | undefined;
  /** The `x-request-id` header. */
  readonly requestId: string | undefined;
  /** The `x-kvgate-group` header, when the gate stamped one. */
  readonly groupHeader: string | undefined;
  /** This worker's declared fingerprint. */
  readonly fingerprint: string;
  /** Tenant scopes this worker serves; `*` alone means any. */
  readonly tenantScopes: readonly string[];
  readonly keys: KeyRing;
  readonly nowMs: number;
}

/** Every reason a sidecar refuses a contract for, from its headers (a list, so the metric can start each at 0). */
export const CONTRACT_REFUSAL_REASONS = [
  ...CONTRACT_FAILURE_REASONS,
  'missing',
  'missing_request_id',
  'tenant_scope',
  'group_inconsistent',
] as const;

/** A refused contract: the client-facing error, and a bounded reason for the metric. */
export interface ContractRefusal {
  readonly error: KvgateError;
  readonly reason: (typeof CONTRACT_REFUSAL_REASONS)[number];
}

const refuse = (reason: ContractRefusal['reason'], error: KvgateError): { ok: false; error: ContractRefusal } => err({ reason, error });

/** Verify the contract a request presents to this sidecar. */
export function checkContract(input: ContractCheckInput): Result<TransferContract, ContractRefusal> {
  if (input.token === undefined || input.token === '') {
    return refuse(
      'missing',
      new KvgateError(
        'contract_invalid',
        'no x-kvgate-contract header: every request to a kvgate worker must come through the gate, which binds it to a compatibility group',
      ),
    );
  }
  if (input.requestId === undefined || input.requestId === '') {
    return refuse(
      'missing_request_id',
      new KvgateError(
        'contract_invalid',
        'no x-request-id header: the contract names the request it covers, so the id must travel with it',
      ),
    );
  }
  const expect = {
    requestId: input.requestId,
    fingerprint: input.fingerprint,
    ...(input.groupHeader === undefined ? {} : { groupId: input.groupHeader }),
  };
  const verified = verifyContract(input.token, input.keys, input.nowMs, expect);
  if (!verified.ok) {
    const f = verified.error;
    const code = f.reason === 'fingerprint_mismatch' || f.reason === 'group_mismatch' ? 'mixed_revision' : 'contract_invalid';
    return refuse(f.reason, new KvgateError(code, f.message));
  }
  const c = verified.value;
  if (c.groupId !== groupIdOf(c.fingerprint, c.tenantScope)) {
    return refuse(
      'group_inconsistent',
      new KvgateError(
        'contract_invalid',
        `the contract's group ${c.groupId} is not the group of its fingerprint and tenant scope; the gate that minted it is inconsistent, check its version`,
      ),
    );
  }
  if (!scopeAllowed(input.tenantScopes, c.tenantScope)) {
    return refuse(
      'tenant_scope',
      new KvgateError(
        'tenant_scope_denied',
        `this worker serves tenant scopes [${input.tenantScopes.join(', ')}], not ${c.tenantScope}; the route table sends this tenant to a pool that does not serve it`,
      ),
    );
  }
  return ok(c);
}

/** `*` trusts the gate's tenant binding; otherwise the worker serves only the listed prefix scopes. */
export function scopeAllowed(allowed: readonly string[], scope: string): boolean {
  return allowed.includes('*') || allowed.includes(scope);
}
