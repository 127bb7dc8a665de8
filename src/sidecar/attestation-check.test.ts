import { describe, expect, it } from 'vitest';
import { fingerprintOf, groupIdOf } from '../compat/fingerprint.js';
import { exampleDescriptor } from '../compat/testing.js';
import { mintAttestation, promptTokenDigestOf, transferParamsDigestOf } from '../contract/attestation.js';
import type { TransferContract } from '../contract/contract.js';
import { createDevKeyRing } from '../contract/keys.js';
import { signToken } from '../contract/token.js';
import { exampleAttestationFields, exampleContractFields } from '../contract/testing.js';
import { TEST_NOW_MS } from '../../test/support/clock.js';
import { checkAttestedTransfer, checkReleasableTransfer, type AttestationCheckInput } from './attestation-check.js';

const keys = createDevKeyRing('sidecar-test');
const descriptor = exampleDescriptor();
const FP = fingerprintOf(descriptor);
const contractFields = { ...exampleContractFields(), fingerprint: FP, groupId: groupIdOf(FP, 'tenant:acme') };
const contract: TransferContract = { kind: 'contract', ...contractFields };

function params(edit: Partial<ReturnType<typeof exampleAttestationFields>> = {}, signer = keys): Record<string, unknown> {
  const engineId = edit.engineId ?? exampleAttestationFields().engineId;
  const raw = { do_remote_prefill: true, remote_engine_id: engineId, remote_block_ids: [1, 2, 3], remote_host: 'h', remote_port: 5600 };
  const a = {
    ...exampleAttestationFields(),
    fingerprint: FP,
    groupId: contract.groupId,
    promptTokens: 41,
    transferDigest: transferParamsDigestOf(raw),
    ...edit,
  };
  return { ...raw, kvgate: mintAttestation(a, signer) };
}

function input(p: Record<string, unknown>, edit: Partial<AttestationCheckInput> = {}): AttestationCheckInput {
  return {
    params: p,
    contract,
    descriptor,
    fingerprint: FP,
    localPromptTokens: 41,
    compatMode: 'strict',
    keys,
    nowMs: TEST_NOW_MS + 1,
    ...edit,
  };
}

const codeOf = (r: ReturnType<typeof checkAttestedTransfer>) => (r.ok ? 'ok' : `${r.error.error.code}/${r.error.reason}`);

describe('checkAttestedTransfer', () => {
  it('accepts a matching attestation and strips it from the params the worker gets', () => {
    const r = checkAttestedTransfer(input(params()));
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.value.params).not.toHaveProperty('kvgate');
    expect(r.value.params['remote_block_ids']).toEqual([1, 2, 3]);
    expect(r.value.attestation.promptTokens).toBe(41);
  });

  it('refuses a prompt token count this worker does not reproduce, naming both counts', () => {
    const r = checkAttestedTransfer(input(params(), { localPromptTokens: 39 }));
    expect(codeOf(r)).toBe('incompatible_transfer/prompt_tokens_mismatch');
    expect(r.ok ? '' : r.error.error.reason).toContain(
      "prefill tokenized 41 tokens, this decode worker's tokenizer gives 39: tokenizer or chat template differ",
    );
  });

  it('refuses the same prompt token count with other token ids, naming the count', () => {
    const ids = Array.from({ length: 41 }, (_, i) => 1000 + i);
    const attested = params({ promptTokenDigest: promptTokenDigestOf(ids) });
    expect(checkAttestedTransfer(input(attested, { localPromptTokenDigest: promptTokenDigestOf(ids) })).ok).toBe(true);
    const r = checkAttestedTransfer(input(attested, { localPromptTokenDigest: promptTokenDigestOf(ids.map((id) => id + 7)) }));
    expect(codeOf(r)).toBe('incompatible_transfer/prompt_tokens_mismatch');
    expect(r.ok ? '' : r.error.error.reason).toMatch(
      /^prefill and this decode worker tokenized the prompt into different token ids \(same count 41\): tokenizer or chat template differ/,
    );
    // A different count is still reported as such, not as an id mismatch.
    const fewer = checkAttestedTransfer(
      input(attested, { localPromptTokens: 40, localPromptTokenDigest: promptTokenDigestOf(ids.slice(1)) }),
    );
    expect(fewer.ok ? '' : fewer.error.error.reason).toMatch(/^prefill tokenized 41 tokens, this decode worker's tokenizer gives 40/);
  });

  it('refuses kv_transfer_params changed in transit (other block ids of the same engine), before any KV is read', () => {
    const raw = {
      do_remote_prefill: true,
      remote_engine_id: exampleAttestationFields().engineId,
      remote_block_ids: [1, 2, 3],
      remote_host: 'h',
      remote_port: 5600,
    };
    const a = {
      ...exampleAttestationFields(),
      fingerprint: FP,
      groupId: contract.groupId,
      promptTokens: 41,
      transferDigest: transferParamsDigestOf(raw),
    };
    const signed = { ...raw, kvgate: mintAttestation(a, keys) };
    expect(checkAttestedTransfer(input(signed)).ok).toBe(true);
    // Key order on the wire does not matter.
    expect(
      checkAttestedTransfer(
        input({
          kvgate: signed.kvgate,
          remote_port: 5600,
          remote_host: 'h',
          remote_block_ids: [1, 2, 3],
          remote_engine_id: raw.remote_engine_id,
          do_remote_prefill: true,
        }),
      ).ok,
    ).toBe(true);
    // An added key is a change too: vLLM main's decode renderer takes a chat prompt from
    // kv_transfer_params.prompt_token_ids when present (vllm-project/vllm vllm/renderers/online_renderer.py
    // @01063cd0, PR #48145), so a coordinator that slipped ids in would choose the prompt D decodes.
    const swaps = [{ remote_block_ids: [7, 8, 9] }, { remote_host: 'elsewhere' }, { remote_port: 5601 }, { prompt_token_ids: [9, 9, 9] }];
    for (const swap of swaps) {
      expect(codeOf(checkAttestedTransfer(input({ ...signed, ...swap })))).toBe('attestation_invalid/params_mismatch');
    }
  });

  it('falls back to the count when either side has no token-id digest (a worker that does not return token ids)', () => {
    expect(checkAttestedTransfer(input(params(), { localPromptTokenDigest: promptTokenDigestOf([1, 2, 3]) })).ok).toBe(true);
    expect(checkAttestedTransfer(input(params({ promptTokenDigest: promptTokenDigestOf([1, 2, 3]) }))).ok).toBe(true);
  });

  it('refuses missing, forged, expired, misdirected and spliced attestations', () => {
    const { kvgate: _t, ...bare } = params();
    expect(codeOf(checkAttestedTransfer(input(bare)))).toBe('attestation_invalid/missing');
    expect(codeOf(checkAttestedTransfer(input(params({}, createDevKeyRing('other')))))).toBe('attestation_invalid/bad_signature');
    expect(codeOf(checkAttestedTransfer(input(params(), { nowMs: TEST_NOW_MS + 31_000 })))).toBe('attestation_invalid/expired');
    expect(codeOf(checkAttestedTransfer(input(params({ requestId: 'req-9' }))))).toBe('attestation_invalid/request_mismatch');
    expect(codeOf(checkAttestedTransfer(input({ ...params(), remote_engine_id: 'other-engine' })))).toBe(
      'attestation_invalid/engine_mismatch',
    );
    // The transfer digest is not optional: a validly signed attestation without one does not verify.
    const { transferDigest: _omitted, ...noDigest } = {
      ...exampleAttestationFields(),
      fingerprint: FP,
      groupId: contract.groupId,
      promptTokens: 41,
    };
    const undigested = { ...params(), kvgate: signToken({ kind: 'attestation', ...noDigest }, keys) };
    expect(codeOf(checkAttestedTransfer(input(undigested)))).toBe('attestation_invalid/malformed');
  });

  it('refuses another revision or group as mixed_revision', () => {
    expect(codeOf(checkAttestedTransfer(input(params({ fingerprint: 'e'.repeat(64) }))))).toBe('mixed_revision/fingerprint_mismatch');
    expect(codeOf(checkAttestedTransfer(input(params({ groupId: 'g_x' }))))).toBe('mixed_revision/group_mismatch');
  });

  it("applies the connector's rules to the attested geometry", () => {
    expect(codeOf(checkAttestedTransfer(input(params({ layout: 'NHD' }))))).toBe('incompatible_transfer/layout_mismatch');
    // A larger prefill block size than decode's cannot be pulled by NixlConnector.
    const r = checkAttestedTransfer(input(params({ blockSize: 32 })));
    expect(codeOf(r)).toBe('incompatible_transfer/transfer_rules');
    expect(r.ok ? '' : r.error.error.reason).toContain('block size');
  });
});

describe('checkReleasableTransfer (what it takes to notify a prefill worker, never to read its KV)', () => {
  const releasable = (p: Record<string, unknown>, edit: Partial<AttestationCheckInput> = {}) => {
    const { localPromptTokens: _n, localPromptTokenDigest: _d, ...rest } = input(p, edit);
    return codeOf(checkReleasableTransfer(rest));
  };

  it('passes attested parameters whatever this worker counted (the count is not asked)', () => {
    expect(codeOf(checkAttestedTransfer(input(params(), { localPromptTokens: 39 })))).toBe('incompatible_transfer/prompt_tokens_mismatch');
    expect(releasable(params())).toBe('ok');
  });

  it('refuses parameters changed in transit, a forged attestation, another group or an expired one', () => {
    const p = params();
    expect(releasable({ ...p, remote_host: 'elsewhere' })).toBe('attestation_invalid/params_mismatch');
    expect(releasable(params({}, createDevKeyRing('attacker')))).toMatch(/^attestation_invalid\//);
    expect(releasable(params({ groupId: 'g-other' }))).toBe('mixed_revision/group_mismatch');
    expect(releasable(p, { nowMs: TEST_NOW_MS + 24 * 3600_000 })).toMatch(/^attestation_invalid\//);
  });
});
