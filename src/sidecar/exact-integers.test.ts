import { describe, expect, it } from 'vitest';
import { keepExactIntegers, serializeBody } from './exact-integers.js';

function parsed(text: string): Record<string, unknown> {
  const body = JSON.parse(text) as Record<string, unknown>;
  keepExactIntegers(text, body);
  return body;
}

describe('integers beyond 2^53 reach the worker as the client wrote them', () => {
  it('a 64-bit seed survives the parse, a spread that adds kv_transfer_params, and a rest that drops fields', () => {
    const body = parsed('{"model":"m","prompt":"hi","seed":9007199254740993,"min_tokens":2,"big":-18446744073709551615}');
    expect(body['seed']).toBe(9007199254740992); // what the checks see: a double
    expect(JSON.stringify(body)).toContain('"seed":9007199254740992');
    const decode = { ...body, kv_transfer_params: { remote_block_ids: [1, 2] } };
    expect(JSON.parse(serializeBody(decode).replace(/(-?\d{16,})/g, '"$1"'))).toMatchObject({
      seed: '9007199254740993',
      big: '-18446744073709551615',
    });
    const { min_tokens: _m, ...prefill } = body;
    const text = serializeBody({ ...prefill, max_tokens: 1 });
    expect(text).toContain('"seed":9007199254740993');
    expect(text).toContain('"big":-18446744073709551615');
    expect(text).not.toContain('min_tokens');
    expect(Object.keys(body)).toEqual(['model', 'prompt', 'seed', 'min_tokens', 'big']);
  });

  it('a member the sidecar rewrote keeps the rewrite; safe integers, nested ones and strings are left to JSON', () => {
    const body = parsed('{"seed":12345678901234567,"n":9007199254740991,"x":{"seed":12345678901234567},"s":"12345678901234567"}');
    expect(serializeBody({ ...body, seed: 7 })).toBe(
      '{"seed":7,"n":9007199254740991,"x":{"seed":12345678901234568},"s":"12345678901234567"}',
    );
    expect(serializeBody(body)).toBe(
      '{"seed":12345678901234567,"n":9007199254740991,"x":{"seed":12345678901234568},"s":"12345678901234567"}',
    );
  });

  it('takes the last of duplicate keys, as JSON.parse does, and notes nothing without a long digit run', () => {
    expect(serializeBody(parsed('{"seed":12345678901234567,"seed":3}'))).toBe('{"seed":3}');
    expect(serializeBody(parsed('{"seed":3,"seed":12345678901234567}'))).toBe('{"seed":12345678901234567}');
    expect(serializeBody(parsed('{"seed":1.2345678901234567e20}'))).toBe('{"seed":123456789012345670000}');
    const plain = parsed('{"model":"m","seed":42}');
    expect(Object.getOwnPropertySymbols(plain)).toEqual([]);
    expect(serializeBody(plain)).toBe(JSON.stringify(plain));
    expect(serializeBody(undefined)).toBe(JSON.stringify(undefined));
  });
});
