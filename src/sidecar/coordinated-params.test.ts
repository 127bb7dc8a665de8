import { describe, expect, it } from 'vitest';
import { coordinatedParams } from './decode-role.js';
import { checkClientKvParams } from './openai-body.js';

describe('coordinatedParams', () => {
  it('takes kv_transfer_params only when a kvgate prefill sidecar attested them', () => {
    const attested = { do_remote_prefill: true, remote_engine_id: 'e', remote_block_ids: [1], kvgate: 'a.b.c' };
    expect(coordinatedParams({ kv_transfer_params: attested })).toBe(attested);
    expect(coordinatedParams({ kv_transfer_params: { ...attested, kvgate: undefined } })).toBeUndefined();
    expect(coordinatedParams({ kv_transfer_params: { ...attested, do_remote_prefill: false } })).toBeUndefined();
    expect(coordinatedParams({ kv_transfer_params: [attested] })).toBeUndefined();
    expect(coordinatedParams({})).toBeUndefined();
  });

  it('accepts the decode request llm-d sends when the prefill answer had no kv_transfer_params (JSON null)', () => {
    // llm-d-router connector_nixlv2.go @ebab687: completionRequest[kv_transfer_params] = pKVTransferParams (nil -> null).
    const body = { prompt: 'p', kv_transfer_params: null };
    expect(coordinatedParams(body)).toBeUndefined();
    expect(checkClientKvParams(body, 'decode').ok).toBe(true);
  });
});
