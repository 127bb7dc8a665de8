/**
 * The transfer contract: the gate's signed statement that one request is bound to one compatibility group and
 * to these prefill and decode targets. Minted once per request before prefill (`x-kvgate-contract`); every
 * sidecar checks it before any KV is produced or consumed, so a request cannot be re-routed into another group,
 * tenant or request id after the gate decided.
 */
import { z } from 'zod';
import type { KeyRing } from './keys.js';
import { epochMs, hasValidWindow, nonEmpty, sha256Hex, WINDOW_MESSAGE } from './payload-schemas.js';
import { digest, epoch, failFor, type Fail, MAX_ALTERNATES, object, onlyKeys, text, textOrNull, window } from './mint-payload.js';
import { ENVELOPE_FAILURE_REASONS, openToken, signToken } from './token.js';
import { err, ok, type Result } from '../errors.js';

export interface TransferContract {
  kind: 'contract';
  requestId: string;
  groupId: string;
  fingerprint: string;
  tenantScope: string;
  tenant: string | null;
  model: string;
  revision: string;
  adapter: string | null;
  /** sha256 (hex) of the `cache_salt` the gate wrote into the body: the tenant's cache scope (body-binding.ts). */
  cacheSaltDigest: string;
  /** sha256 (hex) of the prompt fields as the gate saw them (body-binding.ts `promptDigestOf`). */
  promptDigest: string;
  issuedAtMs: number;
  expiresAtMs: number;
  /** `alternates`: the EPP fallback list (same cluster and group); a decode worker listed there may serve it. */
  decode: { cluster: string; endpoint: string | null; alternates?: string[] | undefined };
  prefill: { cluster: string; endpoint: string | null } | null;
  /**
   * The tenant's scheduling priority, set by the route table's `priorities` (vLLM's order: lower first), which each
   * sidecar writes into the body of every call to its worker. Absent when 0, so a contract without a priority is byte
   * for byte what it was before the field existed; never 0 when present (one spelling per value).
   */
  priority?: number | undefined;
}

/** Why a contract does not verify: the envelope's reasons and the contract's own. */
export const CONTRACT_FAILURE_REASONS = [
  ...ENVELOPE_FAILURE_REASONS,
  'request_mismatch',
  'group_mismatch',
  'fingerprint_mismatch',
  'tenant_mismatch',
] as const;

export type ContractFailure = {
  reason: (typeof CONTRACT_FAILURE_REASONS)[number];
  message: string;
};

/** What the verifier knows independently; each given field must equal the contract's. */
export interface ContractExpectations {
  requestId?: string | undefined;
  fingerprint?: string | undefined;
  tenantScope?: string | undefined;
  groupId?: string | undefined;
}

/**
 * The largest priority a contract carries, either way, and so the route table's bound too (src/policy/schema.ts
 * `PrioritiesSchema`): well inside the signed 64-bit range vLLM's request models accept.
 */
export const MAX_PRIORITY = 1000;

const TargetSchema = z.object({ cluster: nonEmpty, endpoint: nonEmpty.nullable() }).strict();

export const TransferContractSchema = z
  .object({
    kind: z.literal('contract'),
    requestId: nonEmpty,
    groupId: nonEmpty,
    fingerprint: nonEmpty,
    tenantScope: nonEmpty,
    tenant: nonEmpty.nullable(),
    model: nonEmpty,
    revision: nonEmpty,
    adapter: nonEmpty.nullable(),
    cacheSaltDigest: sha256Hex,
    promptDigest: sha256Hex,
    issuedAtMs: epochMs,
    expiresAtMs: epochMs,
    decode: TargetSchema.extend({ alternates: z.array(nonEmpty).max(8).optional() }).strict(),
    prefill: TargetSchema.nullable(),
    priority: z
      .number()
      .int()
      .min(-MAX_PRIORITY)
      .max(MAX_PRIORITY)
      .refine((p) => p !== 0, 'is left out when 0')
      .optional(),
  })
  .strict()
  .refine(hasValidWindow, WINDOW_MESSAGE);

/**
 * Sign a contract with the ring's current key. Throws if the fields are invalid (a bug in the caller: the verifier
 * would refuse the token anyway).
 */
export function mintContract(fields: Omit<TransferContract, 'kind'>, keys: KeyRing): string {
  // The schema's checks, by hand (mint-payload.ts): this runs on every routed request.
  return signToken(contractPayload(fields), keys);
}

const CONTRACT_KEYS: ReadonlySet<string> = new Set([
  'requestId',
  'groupId',
  'fingerprint',
  'tenantScope',
  'tenant',
  'model',
  'revision',
  'adapter',
  'cacheSaltDigest',
  'promptDigest',
  'issuedAtMs',
  'expiresAtMs',
  'decode',
  'prefill',
  'priority',
]);
const TARGET_KEYS: ReadonlySet<string> = new Set(['cluster', 'endpoint']);
const DECODE_KEYS: ReadonlySet<string> = new Set(['cluster', 'endpoint', 'alternates']);

function decodeTarget(v: unknown, fail: Fail): TransferContract['decode'] {
  const d = object(v, 'decode', fail);
  onlyKeys(d, DECODE_KEYS, 'decode.', fail);
  const out: TransferContract['decode'] = {
    cluster: text(d['cluster'], 'decode.cluster', fail),
    endpoint: textOrNull(d['endpoint'], 'decode.endpoint', fail),
  };
  const alternates = d['alternates'];
  if (alternates !== undefined) {
    if (!Array.isArray(alternates) || alternates.length > MAX_ALTERNATES)
      fail('decode.alternates', `must be a list of at most ${MAX_ALTERNATES}`);
    out.alternates = (alternates as unknown[]).map((a, i) => text(a, `decode.alternates.${i}`, fail));
  }
  return out;
}

function prefillTarget(v: unknown, fail: Fail): TransferContract['prefill'] {
  if (v === null) return null;
  const p = object(v, 'prefill', fail);
  onlyKeys(p, TARGET_KEYS, 'prefill.', fail);
  return { cluster: text(p['cluster'], 'prefill.cluster', fail), endpoint: textOrNull(p['endpoint'], 'prefill.endpoint', fail) };
}

function priorityOf(v: unknown, fail: Fail): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v === 0 || Math.abs(v) > MAX_PRIORITY)
    fail('priority', `must be a non-zero integer from -${MAX_PRIORITY} to ${MAX_PRIORITY} (left out when 0)`);
  return v as number;
}

/** The contract payload for `fields`, in `TransferContractSchema`'s key order; throws what the schema would refuse. */
export function contractPayload(fields: Omit<TransferContract, 'kind'>): TransferContract {
  const fail = failFor('contract');
  const f = object(fields, '(root)', fail);
  onlyKeys(f, CONTRACT_KEYS, '', fail);
  const payload: TransferContract = {
    kind: 'contract',
    requestId: text(f['requestId'], 'requestId', fail),
    groupId: text(f['groupId'], 'groupId', fail),
    fingerprint: text(f['fingerprint'], 'fingerprint', fail),
    tenantScope: text(f['tenantScope'], 'tenantScope', fail),
    tenant: textOrNull(f['tenant'], 'tenant', fail),
    model: text(f['model'], 'model', fail),
    revision: text(f['revision'], 'revision', fail),
    adapter: textOrNull(f['adapter'], 'adapter', fail),
    cacheSaltDigest: digest(f['cacheSaltDigest'], 'cacheSaltDigest', fail),
    promptDigest: digest(f['promptDigest'], 'promptDigest', fail),
    issuedAtMs: epoch(f['issuedAtMs'], 'issuedAtMs', fail),
    expiresAtMs: epoch(f['expiresAtMs'], 'expiresAtMs', fail),
    decode: decodeTarget(f['decode'], fail),
    prefill: prefillTarget(f['prefill'], fail),
  };
  if (f['priority'] !== undefined) payload.priority = priorityOf(f['priority'], fail);
  window(payload.issuedAtMs, payload.expiresAtMs, fail);
  return payload;
}

/** Verify signature, kind, shape and time window, then each expectation given. Never throws. */
export function verifyContract(
  token: string,
  keys: KeyRing,
  nowMs: number,
  expect?: ContractExpectations,
): Result<TransferContract, ContractFailure> {
  const opened = openToken(
    token,
    keys,
    nowMs,
    'contract',
    TransferContractSchema,
    contractPayload as (f: Record<string, unknown>) => TransferContract,
  );
  if (!opened.ok) return opened;
  const c = opened.value;
  const mismatch = contractMismatch(c, expect ?? {});
  return mismatch === undefined ? ok(c) : err(mismatch);
}

function contractMismatch(c: TransferContract, expect: ContractExpectations): ContractFailure | undefined {
  if (expect.requestId !== undefined && expect.requestId !== c.requestId) {
    return {
      reason: 'request_mismatch',
      message: `the contract was minted for request ${c.requestId}, not ${expect.requestId}; a contract covers exactly one request, send this one through the gate`,
    };
  }
  if (expect.tenantScope !== undefined && expect.tenantScope !== c.tenantScope) {
    return {
      reason: 'tenant_mismatch',
      message: `the contract is scoped to ${c.tenantScope}, not ${expect.tenantScope}; a prefix is never shared across tenant scopes`,
    };
  }
  if (expect.groupId !== undefined && expect.groupId !== c.groupId) {
    return {
      reason: 'group_mismatch',
      message: `the contract binds group ${c.groupId}, this hop is group ${expect.groupId}; route within the bound group or refuse`,
    };
  }
  if (expect.fingerprint !== undefined && expect.fingerprint !== c.fingerprint) {
    return {
      reason: 'fingerprint_mismatch',
      message: `the contract binds fingerprint ${c.fingerprint.slice(0, 12)}…, this worker runs ${expect.fingerprint.slice(0, 12)}…; its KV would mean something else, fix the pool's revision or its routing`,
    };
  }
  return undefined;
}
