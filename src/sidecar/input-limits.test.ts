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

describe('sidecar: ec_transfer_params wherever vLLM would read them', () => {
  it('refuses them at the top level, under vllm_xargs, nested or in another spelling, in both roles', () => {
    const ec = { h: { do_remote_encode: true, remote_host: '10.0.0.9', remote_port: 1 } };
    for (const role of ['prefill', 'decode'] as const) {
      for (const b of [
        { ...body, ec_transfer_params: ec },
        { ...body, ec_transfer_params: null },
        { ...body, vllm_xargs: { ec_transfer_params: 'x' } },
        { ...body, a: [{ EC_TRANSFER_PARAMS: {} }] },
      ]) {
        const r = checkClientKvParams(b, role);
        expect(code(r), `${role} ${JSON.stringify(b)}`).toBe('kv_params_forbidden');
        expect(r.ok ? '' : r.error.reason).toMatch(/^ec_transfer_params /);
      }
      // Next to the prefill request shape too: the one thing a prefill sidecar accepts is exactly that, nothing more.
      expect(code(checkClientKvParams({ ...body, kv_transfer_params: { ...PREFILL_KV_PARAMS }, ec_transfer_params: ec }, role))).toBe(
        'kv_params_forbidden',
      );
    }
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
