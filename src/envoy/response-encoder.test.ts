import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { extProcService } from './protos.js';
import { encodeAnswer } from './response-encoder.js';
import type { WireCommonResponse, WireHeaderValueOption, WireProcessingResponse } from './wire.js';

const generic = (r: WireProcessingResponse): Buffer => extProcService()['Process']!.responseSerialize(r);
const decode = (b: Buffer): unknown => extProcService()['Process']!.responseDeserialize(b);

const bytes = fc.uint8Array({ maxLength: 300 });
const option: fc.Arbitrary<WireHeaderValueOption> = fc.record(
  {
    header: fc.record({ key: fc.string({ maxLength: 40 }), raw_value: bytes }, { requiredKeys: ['key'] }),
    append_action: fc.constantFrom('APPEND_IF_EXISTS_OR_ADD', 'ADD_IF_ABSENT', 'OVERWRITE_IF_EXISTS_OR_ADD', 'OVERWRITE_IF_EXISTS'),
  },
  { requiredKeys: ['header'] },
);
const common: fc.Arbitrary<WireCommonResponse> = fc.record(
  {
    header_mutation: fc.record(
      { set_headers: fc.array(option, { maxLength: 12 }), remove_headers: fc.array(fc.string({ maxLength: 30 }), { maxLength: 4 }) },
      { requiredKeys: [] },
    ),
    body_mutation: fc.record({ body: fc.uint8Array({ maxLength: 5000 }) }, { requiredKeys: [] }),
    clear_route_cache: fc.boolean(),
  },
  { requiredKeys: [] },
);
const answer: fc.Arbitrary<WireProcessingResponse> = fc.oneof(
  fc.record({ request_headers: fc.record({ response: common }, { requiredKeys: [] }) }),
  fc.record({ response_headers: fc.record({ response: common }, { requiredKeys: [] }) }),
  fc.record({ request_body: fc.record({ response: common }, { requiredKeys: [] }) }),
  fc.record({ response_body: fc.record({ response: common }, { requiredKeys: [] }) }),
  fc.constant({ request_trailers: {} }),
  fc.constant({ response_trailers: {} }),
);

describe('the gate answer encoder writes what the generic serializer writes', () => {
  it('byte for byte, on generated answers', () => {
    fc.assert(
      fc.property(answer, (r) => {
        const fast = encodeAnswer(r);
        expect(fast).toBeDefined();
        expect(fast!.equals(generic(r))).toBe(true);
      }),
      { numRuns: 1500 },
    );
  });

  it('a routed answer as the gate sends it decodes to what was meant', () => {
    const enc = new TextEncoder();
    const r: WireProcessingResponse = {
      request_body: {
        response: {
          clear_route_cache: true,
          body_mutation: { body: enc.encode('{"model":"m","cache_salt":"s"}') },
          header_mutation: {
            set_headers: [{ header: { key: 'x-kvgate-group', raw_value: enc.encode('g_1') }, append_action: 'OVERWRITE_IF_EXISTS_OR_ADD' }],
            remove_headers: ['x-kvgate-binding'],
          },
        },
      },
    };
    const fast = encodeAnswer(r)!;
    expect(fast.equals(generic(r))).toBe(true);
    expect(decode(fast)).toMatchObject({
      request_body: {
        response: {
          clear_route_cache: true,
          header_mutation: {
            set_headers: [{ header: { key: 'x-kvgate-group' }, append_action: 'OVERWRITE_IF_EXISTS_OR_ADD' }],
            remove_headers: ['x-kvgate-binding'],
          },
        },
      },
    });
  });

  it('leaves every other shape to the generic serializer', () => {
    const others: WireProcessingResponse[] = [
      { immediate_response: { status: { code: 403 } } },
      { request_headers: { response: {} }, dynamic_metadata: { fields: {} } },
      { override_message_timeout: { seconds: 1, nanos: 0 } },
      { request_body: { response: { body_mutation: { streamed_response: { body: new Uint8Array(1), end_of_stream: true } } } } },
      { request_headers: { response: { status: 'CONTINUE_AND_REPLACE' } } },
      { request_trailers: { header_mutation: { set_headers: [] } } },
      {},
    ];
    for (const r of others) expect(encodeAnswer(r)).toBeUndefined();
  });
});
