import { describe, expect, it } from 'vitest';
import { parseJsonObject } from './http-io.js';
import { checkClientKvParams, PREFILL_KV_PARAMS } from './openai-body.js';

const body = { model: 'm', prompt: 'hi' };
const code = (r: ReturnType<typeof checkClientKvParams>) => (r.ok ? 'ok' : r.error.code);

describe('sidecar: kv_transfer_params wherever vLLM would read them', () => {
  it('refuses them under vllm_xargs, nested or in another spelling, in both roles', () => {
    for (const role of ['prefill', 'decode'] as const) {
      expect(code(checkClientKvParams({ ...body, vllm_xargs: { kv_transfer_params: 'x' } }, role))).toBe('kv_params_forbidden');
      expect(code(checkClientKvParams({ ...body, a: [{ b: { KV_TRANSFER_PARAMS: {} } }] }, role))).toBe('kv_params_forbidden');
      expect(code(checkClientKvParams({ ...body, 'Kv-Transfer-Params': {} }, role))).toBe('kv_params_forbidden');
    }
    // The prefill request shape at the top level is still the one thing a prefill sidecar accepts.
    expect(code(checkClientKvParams({ ...body, kv_transfer_params: { ...PREFILL_KV_PARAMS } }, 'prefill'))).toBe('ok');
    expect(code(checkClientKvParams({ ...body, kv_transfer_params: { ...PREFILL_KV_PARAMS } }, 'decode'))).toBe('kv_params_forbidden');
    expect(
      code(
        checkClientKvParams({ ...body, kv_transfer_params: { ...PREFILL_KV_PARAMS }, vllm_xargs: { kv_transfer_params: 1 } }, 'prefill'),
      ),
    ).toBe('kv_params_forbidden');
  });
});

describe('sidecar: JSON nesting', () => {
  it('refuses 20,000 levels with 400 before parsing, and reads ordinary bodies', () => {
    const deep = `{"model":"m","x":${'['.repeat(20_000)}${']'.repeat(20_000)}}`;
    const r = parseJsonObject(deep);
    expect(r.ok ? 'ok' : [r.error.code, r.error.status]).toEqual(['bad_request', 400]);
    expect(parseJsonObject(JSON.stringify({ ...body, s: '[[[[{{{{' })).ok).toBe(true);
  });
});
