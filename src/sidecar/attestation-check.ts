/**
 * The decode side's last check before its worker consumes any KV: the prefill sidecar's signed attestation against
 * the contract, this worker's own fingerprint, prompt token count and prompt token ids (by digest, when both sides
 * have one), the `kv_transfer_params` it came with, and the connector's transfer rules for the attested block size
 * and layout. Pure.
 *
 * Codes: a fingerprint or group that is not the contract's is 409 `mixed_revision`; a prompt token count or ids,
 * layout or connector rule that does not fit is 409 `incompatible_transfer` (the KV would be read as something
 * else); a missing, forged, expired or misdirected attestation is 409 `attestation_invalid`.
 */
import { BoundedCache } from '../bounded-cache.js';
import { normalizeKvLayout } from '../compat/normalize.js';
import type { CompatDescriptor } from '../compat/descriptor.js';
import { checkTransfer, type CompatMode, type CompatVerdict } from '../compat/connector-rules.js';
import {
  ATTESTATION_FAILURE_REASONS,
  transferParamsDigestOf,
  verifyAttestation,
  type Attestation,
  type AttestationFailure,
} from '../contract/attestation.js';
import type { TransferContract } from '../contract/contract.js';
import type { KeyRing } from '../contract/keys.js';
import { err, KvgateError, ok, type ErrorCode, type Result } from '../errors.js';
import { ATTESTATION_KEY } from './openai-body.js';

export interface AttestationCheckInput {
  /** The `kv_transfer_params` the prefill leg returned (with the attestation under `kvgate`). */
  readonly params: Readonly<Record<string, unknown>>;
  readonly contract: TransferContract;
  readonly descriptor: CompatDescriptor;
  readonly fingerprint: string;
  /** The prompt token count THIS worker's tokenizer and template give for the request. */
  readonly localPromptTokens: number;
  /**
   * `promptTokenDigestOf` the prompt token ids THIS worker gives, when it listed them. Compared with the attested
   * digest when the attestation has one; otherwise (older prefill sidecar, worker without token ids) the count alone
   * decides, as before.
   */
  readonly localPromptTokenDigest?: string | undefined;
  readonly compatMode: CompatMode;
  readonly keys: KeyRing;
  readonly nowMs: number;
}

/** Every reason the decode side refuses an attestation for (a list, so the metric can start each at 0). */
export const ATTESTATION_REFUSAL_REASONS = [
  ...ATTESTATION_FAILURE_REASONS,
  'missing',
  'engine_mismatch',
  'params_mismatch',
  'transfer_rules',
] as const;

export interface AttestationRefusal {
  readonly error: KvgateError;
  readonly reason: (typeof ATTESTATION_REFUSAL_REASONS)[number];
}

const refuse = (reason: AttestationRefusal['reason'], code: ErrorCode, message: string): { ok: false; error: AttestationRefusal } =>
  err({ reason, error: new KvgateError(code, message) });

const CODE_BY_REASON: Partial<Record<AttestationFailure['reason'], ErrorCode>> = {
  fingerprint_mismatch: 'mixed_revision',
  group_mismatch: 'mixed_revision',
  prompt_tokens_mismatch: 'incompatible_transfer',
  layout_mismatch: 'incompatible_transfer',
};

/** Verify an attested transfer; on success, the `kv_transfer_params` to give the local worker (attestation removed). */
export function checkAttestedTransfer(
  input: AttestationCheckInput,
): Result<{ attestation: Attestation; params: Record<string, unknown> }, AttestationRefusal> {
  return checkTransferOf(input, input.localPromptTokens, input.localPromptTokenDigest);
}

/**
 * Whether `kv_transfer_params` are the ones a prefill sidecar attested for this contract and group (signature, expiry,
 * request, tenant, group, fingerprint, engine, digest of the parameters, connector rules), without the prompt token
 * check: what it takes to NOTIFY that prefill worker, never to read its KV (prefill-release.ts). Its prompt count may
 * be unknown (the client left before this worker counted it) or different (the refusal it follows).
 */
export function checkReleasableTransfer(
  input: Omit<AttestationCheckInput, 'localPromptTokens' | 'localPromptTokenDigest'>,
): Result<{ attestation: Attestation; params: Record<string, unknown> }, AttestationRefusal> {
  return checkTransferOf(input, undefined, undefined);
}

function checkTransferOf(
  input: Omit<AttestationCheckInput, 'localPromptTokens' | 'localPromptTokenDigest'>,
  localPromptTokens: number | undefined,
  localPromptTokenDigest: string | undefined,
): Result<{ attestation: Attestation; params: Record<string, unknown> }, AttestationRefusal> {
  const { [ATTESTATION_KEY]: token, ...params } = input.params;
  if (typeof token !== 'string') {
    return refuse(
      'missing',
      'attestation_invalid',
      'the prefill leg returned kv_transfer_params without a kvgate attestation; KV of unknown origin is never consumed',
    );
  }
  const verified = verifyAttestation(token, input.keys, input.nowMs, {
    contract: input.contract,
    fingerprint: input.fingerprint,
    promptTokens: localPromptTokens,
    promptTokenDigest: localPromptTokenDigest,
    layout: normalizeKvLayout(input.descriptor.kvCache.layout) === 'NHD' ? 'NHD' : 'HND',
  });
  if (!verified.ok) {
    const f = verified.error;
    return refuse(f.reason, CODE_BY_REASON[f.reason] ?? 'attestation_invalid', f.message);
  }
  const a = verified.value;
  if (params['remote_engine_id'] !== a.engineId) {
    return refuse(
      'engine_mismatch',
      'attestation_invalid',
      `the attestation covers engine ${a.engineId}, but kv_transfer_params point at engine ${String(params['remote_engine_id'])}; the parameters were not the ones attested`,
    );
  }
  if (transferParamsDigestOf(params) !== a.transferDigest) {
    return refuse(
      'params_mismatch',
      'attestation_invalid',
      'the kv_transfer_params that arrived are not the ones the prefill sidecar attested (block ids, engine or side channel changed in transit); no KV is read',
    );
  }
  const verdict = transferVerdict(input.descriptor, a.blockSize, a.layout, input.compatMode);
  if (verdict.verdict === 'refuse') {
    return refuse(
      'transfer_rules',
      'incompatible_transfer',
      `the attested transfer breaks the connector's rules: ${verdict.reasons.join('; ')}`,
    );
  }
  return ok({ attestation: a, params });
}

/** Verdicts by local descriptor, then attested block size, layout and mode: the same few inputs on every request. */
const VERDICTS = new WeakMap<CompatDescriptor, BoundedCache<CompatVerdict>>();

/**
 * The connector's rules for KV of `blockSize` and `layout` (what the prefill side attested) read by this worker.
 * Deterministic in its inputs, and two descriptor normalisations and fingerprints per call, so it is remembered per
 * descriptor (a bounded handful of entries: the attested values come from signed attestations of this deployment).
 */
function transferVerdict(descriptor: CompatDescriptor, blockSize: number, layout: 'HND' | 'NHD', mode: CompatMode): CompatVerdict {
  let byInput = VERDICTS.get(descriptor);
  if (byInput === undefined) {
    byInput = new BoundedCache<CompatVerdict>(32);
    VERDICTS.set(descriptor, byInput);
  }
  return byInput.get(`${blockSize}|${layout}|${mode}`, () => {
    const mine = {
      ...descriptor,
      kvCache: { ...descriptor.kvCache, layout: normalizeKvLayout(descriptor.kvCache.layout) as CompatDescriptor['kvCache']['layout'] },
    };
    const prefillSide: CompatDescriptor = { ...mine, kvCache: { ...mine.kvCache, blockSize, layout } };
    return checkTransfer(prefillSide, mine, mode);
  });
}
