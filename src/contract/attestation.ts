/**
 * The attestation a prefill sidecar signs after its worker ran prefill: "I computed the KV for this request,
 * in this group, with this fingerprint, for this many prompt tokens, in this layout". The decode sidecar
 * verifies it against the contract and its own descriptor before any KV block is consumed, so KV produced by
 * the wrong revision, for the wrong request or with a tokenizer that counted differently is never read.
 *
 * The prompt token count alone misses a tokenizer or chat template change that keeps the count (a retrained
 * vocabulary renumbers ids; a template edit can trade one token for another), so an attestation can also carry
 * `promptTokenDigest`, a digest of the prompt token ids themselves (`promptTokenDigestOf`).
 */
import { createHash } from 'node:crypto';
import { canonicalJson } from '../compat/canonical-json.js';
import { z } from 'zod';
import type { KeyRing } from './keys.js';
import type { TransferContract } from './contract.js';
import { count, digest, epoch, failFor, object, onlyKeys, positive, text, window } from './mint-payload.js';
import { epochMs, hasValidWindow, nonEmpty, sha256Hex, WINDOW_MESSAGE } from './payload-schemas.js';
import { ENVELOPE_FAILURE_REASONS, openToken, signToken } from './token.js';
import { err, ok, type Result } from '../errors.js';

export interface Attestation {
  kind: 'attestation';
  requestId: string;
  groupId: string;
  fingerprint: string;
  tenantScope: string;
  promptTokens: number;
  /**
   * `promptTokenDigestOf` of the prompt token ids the prefill worker cached, when its worker returned them (vLLM's
   * `return_token_ids`). Absent only when the prefill worker does not return prompt token ids: then the prompt
   * is checked on its count alone.
   */
  promptTokenDigest?: string | undefined;
  /**
   * `transferParamsDigestOf` the `kv_transfer_params` the prefill worker returned (block ids, engine, side channel):
   * the decode side recomputes it over what it received, so blocks of another request on the same engine cannot be
   * substituted in transit. Always present: an attestation without it does not verify.
   */
  transferDigest: string;
  blockSize: number;
  layout: 'HND' | 'NHD';
  engineId: string;
  issuedAtMs: number;
  expiresAtMs: number;
}

/** Why an attestation does not verify: the envelope's reasons and the attestation's own. */
export const ATTESTATION_FAILURE_REASONS = [
  ...ENVELOPE_FAILURE_REASONS,
  'request_mismatch',
  'group_mismatch',
  'fingerprint_mismatch',
  'tenant_mismatch',
  'prompt_tokens_mismatch',
  'layout_mismatch',
] as const;

export type AttestationFailure = {
  reason: (typeof ATTESTATION_FAILURE_REASONS)[number];
  message: string;
};

/**
 * What the decode side knows: the verified contract, its own fingerprint, and (when it tokenised the prompt
 * itself) the prompt token count, the digest of its prompt token ids and its cache layout.
 */
export interface AttestationExpectations {
  contract: TransferContract;
  fingerprint: string;
  promptTokens?: number | undefined;
  /**
   * `promptTokenDigestOf` this worker's prompt token ids. Compared only when the attestation carries a digest too:
   * an attestation without one (an older prefill sidecar, a worker that does not return token ids) is checked on
   * `promptTokens` alone, as before.
   */
  promptTokenDigest?: string | undefined;
  layout?: 'HND' | 'NHD' | undefined;
}

/**
 * The canonical digest of a prompt's token ids: sha256, lowercase hex, of the ids in decimal joined with ','
 * (UTF-8). Both sidecars compute it the same way, so equal digests mean the same ids in the same order.
 */
export function promptTokenDigestOf(ids: readonly number[]): string {
  return createHash('sha256').update(ids.join(','), 'utf8').digest('hex');
}

/**
 * The canonical digest of a `kv_transfer_params` object (without kvgate's own key): sha256 hex of its canonical
 * JSON (keys sorted at every level), so key order on the wire does not matter and any changed value does.
 */
export function transferParamsDigestOf(params: Readonly<Record<string, unknown>>): string {
  return createHash('sha256').update(canonicalJson(params), 'utf8').digest('hex');
}

export const AttestationSchema = z
  .object({
    kind: z.literal('attestation'),
    requestId: nonEmpty,
    groupId: nonEmpty,
    fingerprint: nonEmpty,
    tenantScope: nonEmpty,
    promptTokens: z.number().int().nonnegative(),
    promptTokenDigest: sha256Hex.optional(),
    transferDigest: sha256Hex,
    blockSize: z.number().int().positive(),
    layout: z.enum(['HND', 'NHD']),
    engineId: nonEmpty,
    issuedAtMs: epochMs,
    expiresAtMs: epochMs,
  })
  .strict()
  .refine(hasValidWindow, WINDOW_MESSAGE);

/** Sign an attestation with the ring's current key. Throws on invalid fields (a caller bug). */
export function mintAttestation(fields: Omit<Attestation, 'kind'>, keys: KeyRing): string {
  return signToken(attestationPayload(fields), keys);
}

const ATTESTATION_KEYS: ReadonlySet<string> = new Set([
  'requestId',
  'groupId',
  'fingerprint',
  'tenantScope',
  'promptTokens',
  'promptTokenDigest',
  'transferDigest',
  'blockSize',
  'layout',
  'engineId',
  'issuedAtMs',
  'expiresAtMs',
]);

/**
 * The attestation payload for `fields`, `AttestationSchema`'s rules by hand in its key order (mint-payload.ts); throws
 * what the schema would refuse. Both sidecars run it on every transfer: the prefill side to mint, the decode side to
 * verify (token.ts `openToken`).
 */
export function attestationPayload(fields: Omit<Attestation, 'kind'>): Attestation {
  const fail = failFor('attestation');
  const f = object(fields, '(root)', fail);
  onlyKeys(f, ATTESTATION_KEYS, '', fail);
  const promptTokenDigest = f['promptTokenDigest'];
  const payload: Attestation = {
    kind: 'attestation',
    requestId: text(f['requestId'], 'requestId', fail),
    groupId: text(f['groupId'], 'groupId', fail),
    fingerprint: text(f['fingerprint'], 'fingerprint', fail),
    tenantScope: text(f['tenantScope'], 'tenantScope', fail),
    promptTokens: count(f['promptTokens'], 'promptTokens', fail),
    ...(promptTokenDigest === undefined ? {} : { promptTokenDigest: digest(promptTokenDigest, 'promptTokenDigest', fail) }),
    transferDigest: digest(f['transferDigest'], 'transferDigest', fail),
    blockSize: positive(f['blockSize'], 'blockSize', fail),
    layout: f['layout'] === 'HND' || f['layout'] === 'NHD' ? f['layout'] : fail('layout', 'must be HND or NHD'),
    engineId: text(f['engineId'], 'engineId', fail),
    issuedAtMs: epoch(f['issuedAtMs'], 'issuedAtMs', fail),
    expiresAtMs: epoch(f['expiresAtMs'], 'expiresAtMs', fail),
  };
  window(payload.issuedAtMs, payload.expiresAtMs, fail);
  return payload;
}

/**
 * Verify an attestation against the contract and the decode worker's own facts. Never throws. The prompt is
 * checked by count when `expect.promptTokens` is given, then by token ids when both `expect.promptTokenDigest`
 * and the attestation's `promptTokenDigest` are present (an attestation without a digest passes on its count).
 */
export function verifyAttestation(
  token: string,
  keys: KeyRing,
  nowMs: number,
  expect: AttestationExpectations,
): Result<Attestation, AttestationFailure> {
  const opened = openToken(
    token,
    keys,
    nowMs,
    'attestation',
    AttestationSchema,
    attestationPayload as (f: Record<string, unknown>) => Attestation,
  );
  if (!opened.ok) return opened;
  const mismatch = attestationMismatch(opened.value, expect);
  return mismatch === undefined ? ok(opened.value) : err(mismatch);
}

function attestationMismatch(a: Attestation, expect: AttestationExpectations): AttestationFailure | undefined {
  const c = expect.contract;
  if (a.requestId !== c.requestId) {
    return {
      reason: 'request_mismatch',
      message: `the attestation is for request ${a.requestId}, the contract for ${c.requestId}; discard this KV and retry the prefill leg`,
    };
  }
  if (a.tenantScope !== c.tenantScope) {
    return {
      reason: 'tenant_mismatch',
      message: `the attestation is scoped to ${a.tenantScope}, the contract to ${c.tenantScope}; a prefix is never shared across tenant scopes, discard this KV`,
    };
  }
  if (a.groupId !== c.groupId) {
    return {
      reason: 'group_mismatch',
      message: `the prefill ran in group ${a.groupId}, the contract binds ${c.groupId}; discard this KV, the prefill leg left its group`,
    };
  }
  if (a.fingerprint !== c.fingerprint || a.fingerprint !== expect.fingerprint) {
    return {
      reason: 'fingerprint_mismatch',
      message: `the prefill worker runs fingerprint ${a.fingerprint.slice(0, 12)}…, the contract binds ${c.fingerprint.slice(0, 12)}… and this decode worker runs ${expect.fingerprint.slice(0, 12)}…; its KV would mean something else here, discard it`,
    };
  }
  const prompt = promptMismatch(a, expect);
  if (prompt !== undefined) return prompt;
  if (expect.layout !== undefined && a.layout !== expect.layout) {
    return {
      reason: 'layout_mismatch',
      message: `the prefill worker wrote ${a.layout} blocks, this worker reads ${expect.layout}; configure the same kv_cache_layout on both pools`,
    };
  }
  return undefined;
}

/** Count first (it names both numbers), then ids: a digest mismatch with equal counts is a same-length retokenisation. */
function promptMismatch(a: Attestation, expect: AttestationExpectations): AttestationFailure | undefined {
  if (expect.promptTokens !== undefined && a.promptTokens !== expect.promptTokens) {
    return {
      reason: 'prompt_tokens_mismatch',
      message: `prefill tokenized ${a.promptTokens} tokens, this decode worker's tokenizer gives ${expect.promptTokens}: tokenizer or chat template differ; the prefilled KV would be read against the wrong positions, discard it`,
    };
  }
  if (expect.promptTokenDigest !== undefined && a.promptTokenDigest !== undefined && a.promptTokenDigest !== expect.promptTokenDigest) {
    const count = expect.promptTokens === undefined ? `prefill count ${a.promptTokens}` : `same count ${a.promptTokens}`;
    return {
      reason: 'prompt_tokens_mismatch',
      message: `prefill and this decode worker tokenized the prompt into different token ids (${count}): tokenizer or chat template differ; the prefilled KV describes a prompt this worker never saw, discard it`,
    };
  }
  return undefined;
}
