import { describe, expect, it } from 'vitest';
import type { TransferContract } from '../contract/contract.js';
import { exampleContractFields } from '../contract/testing.js';
import { isIpPort } from '../policy/schema.js';
import { backoffMs, prefillFailure, prefillTargetUrl } from './prefill-leg.js';

const contract = (endpoint: string | null, withLeg = true): TransferContract => ({
  kind: 'contract',
  ...exampleContractFields(),
  prefill: withLeg ? { cluster: 'prefill-a', endpoint } : null,
});

const reply = (status: number, body: unknown, headers: Record<string, string> = {}) => ({
  reply: { status, headers: new Headers(headers), text: JSON.stringify(body) },
});

describe('prefillTargetUrl (SSRF guard)', () => {
  it('through Envoy, always the configured internal listener, whatever the contract says', () => {
    expect(prefillTargetUrl({ envoy: 'http://127.0.0.1:10001/' }, contract('10.0.0.5:9090'), '/v1/completions')).toEqual({
      ok: true,
      value: 'http://127.0.0.1:10001/v1/completions',
    });
  });

  it('direct: only the ip:port literal the signed contract names', () => {
    expect(prefillTargetUrl('direct', contract('10.0.0.5:9090'), '/v1/chat/completions')).toEqual({
      ok: true,
      value: 'http://10.0.0.5:9090/v1/chat/completions',
    });
    expect(prefillTargetUrl('direct', contract('[::1]:8000'), '/v1/completions')).toEqual({
      ok: true,
      value: 'http://[::1]:8000/v1/completions',
    });
    for (const bad of [
      'metadata.google.internal:80',
      '169.254.169.254:80/latest',
      'user@10.0.0.5:80',
      '10.0.0.5',
      '10.0.0.5:0',
      '999.0.0.1:80',
    ]) {
      const r = prefillTargetUrl('direct', contract(bad), '/v1/completions');
      expect(r.ok ? 'ok' : r.error.code).toBe('contract_invalid');
    }
    const none = prefillTargetUrl('direct', contract(null), '/v1/completions');
    expect(none.ok ? '' : none.error.reason).toContain('set prefill.via');
    expect(isIpPort('127.0.0.1:65535')).toBe(true);
  });
});

describe('retry policy and failures', () => {
  it('backs off exponentially up to the cap', () => {
    expect([1, 2, 3, 4, 5].map((r) => backoffMs(r, { backoffMs: 50, maxBackoffMs: 300 }))).toEqual([50, 100, 200, 300, 300]);
  });

  it("keeps the prefill side's code and message", () => {
    const kvgate = prefillFailure(
      reply(
        409,
        { error: { type: 'kvgate_error', code: 'mixed_revision', message: 'the contract binds fingerprint x', request_id: 'r' } },
        { 'x-kvgate-reject-reason': 'mixed_revision' },
      ),
      3,
    );
    expect([kvgate.code, kvgate.reason]).toEqual(['mixed_revision', 'the prefill leg was refused: the contract binds fingerprint x']);
    const vllm400 = prefillFailure(
      reply(400, { error: { message: "This model's maximum context length is 2048 tokens", type: 'BadRequestError', code: 400 } }),
      3,
    );
    expect([vllm400.code, vllm400.reason]).toEqual([
      'bad_request',
      "the prefill worker refused the request (HTTP 400): This model's maximum context length is 2048 tokens",
    ]);
    expect(prefillFailure(reply(404, { error: { message: 'no such model' } }), 1).code).toBe('unknown_model');
    const exhausted = prefillFailure(
      reply(
        503,
        { error: { type: 'kvgate_error', code: 'worker_unverified', message: 'tokenizer canary differs', request_id: 'r' } },
        { 'x-kvgate-reject-reason': 'worker_unverified' },
      ),
      3,
    );
    expect([exhausted.code, exhausted.reason]).toEqual([
      'worker_unverified',
      'the prefill leg was refused after 3 attempts inside the bound group: tokenizer canary differs',
    ]);
    // A kvgate-shaped body without kvgate's header is the prefill worker's own answer, handed on as it came: its
    // status decides, never the code it wrote.
    const forged = { error: { type: 'kvgate_error', code: 'mixed_revision', message: 'revision r1 met r2', request_id: 'r' } };
    const worker409 = prefillFailure(reply(409, forged), 3);
    expect([worker409.code, worker409.reason]).toEqual([
      'bad_request',
      'the prefill worker refused the request (HTTP 409): revision r1 met r2',
    ]);
    expect(prefillFailure(reply(503, forged), 3).code).toBe('worker_error');
    // A header that names another code than the body: not kvgate's answer either.
    expect(prefillFailure(reply(409, forged, { 'x-kvgate-reject-reason': 'bad_request' }), 3).code).toBe('bad_request');
    expect(prefillFailure(reply(503, forged, { 'x-kvgate-reject-reason': 'attestation_invalid' }), 3).code).toBe('worker_error');
    const down = prefillFailure({ error: 'http://10.0.0.5:9090/v1/completions: ECONNREFUSED' }, 3);
    expect([down.code, down.status]).toEqual(['worker_error', 502]);
  });
});
