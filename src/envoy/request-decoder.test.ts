import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { extProcService } from './protos.js';
import { decodeRequest } from './request-decoder.js';
import type { WireProcessingRequest } from './wire.js';

const method = () => extProcService()['Process']!;
const encode = (m: unknown): Buffer => method().requestSerialize(m);
const generic = (b: Buffer): unknown => method().requestDeserialize(b);

const MODES = ['NONE', 'STREAMED', 'BUFFERED', 'BUFFERED_PARTIAL', 'FULL_DUPLEX_STREAMED', 'GRPC'] as const;

const headerValue = fc.record(
  { key: fc.string({ maxLength: 30 }), value: fc.string({ maxLength: 30 }), raw_value: fc.uint8Array({ maxLength: 200 }) },
  { requiredKeys: [] },
);
const headerMap = fc.record({ headers: fc.array(headerValue, { maxLength: 12 }) }, { requiredKeys: [] });
const httpHeaders = fc.record({ headers: headerMap, end_of_stream: fc.boolean() }, { requiredKeys: [] });
const httpBody = fc.record({ body: fc.uint8Array({ maxLength: 3000 }), end_of_stream: fc.boolean() }, { requiredKeys: [] });
const trailers = fc.record({ trailers: headerMap }, { requiredKeys: [] });
const member = fc.oneof(
  httpHeaders.map((v) => ({ request_headers: v })),
  httpHeaders.map((v) => ({ response_headers: v })),
  httpBody.map((v) => ({ request_body: v })),
  httpBody.map((v) => ({ response_body: v })),
  trailers.map((v) => ({ request_trailers: v })),
  trailers.map((v) => ({ response_trailers: v })),
);
const extras = fc.record(
  {
    observability_mode: fc.boolean(),
    protocol_config: fc.record(
      {
        request_body_mode: fc.constantFrom(...MODES),
        response_body_mode: fc.constantFrom(...MODES),
        send_body_without_waiting_for_header_response: fc.boolean(),
      },
      { requiredKeys: [] },
    ),
  },
  { requiredKeys: [] },
);
/** What Envoy sends on every request: one member of the `request` oneof, sometimes the mode and observability flag. */
const message = fc.tuple(member, extras).map(([m, e]) => ({ ...m, ...e }));

/** Both decoders on the same bytes: the direct one answers exactly what proto-loader answers, or leaves it to it. */
function sameOrGeneric(bytes: Buffer): 'direct' | 'generic' {
  const direct = decodeRequest(bytes);
  if (direct === undefined) return 'generic';
  expect(direct).toStrictEqual(generic(bytes));
  return 'direct';
}

const text = (s: string): Buffer => Buffer.from(s, 'utf8');

/** A request as Envoy's ext_proc filter sends it for a buffered completions call (the gate's everyday messages). */
function envoyMessages(): WireProcessingRequest[] {
  const body = text(JSON.stringify({ model: 'llama-3-8b', prompt: 'Summarise the incident. '.repeat(40), max_tokens: 128 }));
  const headers = Object.entries({
    ':authority': 'llm.example.com',
    ':path': '/v1/completions',
    ':method': 'POST',
    ':scheme': 'http',
    'content-type': 'application/json',
    'content-length': String(body.length),
    'x-request-id': '0c7f5a8e-1d2b-4c3d-9e8f-7a6b5c4d3e2f',
    'x-tenant-id': 'acme',
    'x-session-id': 'session-42',
  }).map(([key, v]) => ({ key, raw_value: text(v) }));
  return [
    {
      request_headers: { headers: { headers }, end_of_stream: false },
      protocol_config: { request_body_mode: 'BUFFERED', response_body_mode: 'NONE' },
    },
    { request_body: { body, end_of_stream: true } },
    { response_headers: { headers: { headers: [{ key: ':status', raw_value: text('200') }] } } },
    { response_body: { body: text('data: {"choices":[]}\n\n'), end_of_stream: false }, observability_mode: false },
    { request_trailers: { trailers: { headers: [{ key: 'grpc-status', raw_value: text('0') }] } } },
    { response_trailers: {} },
    { request_body: { body: Buffer.alloc(0), end_of_stream: true } },
  ];
}

describe('the direct ProcessingRequest decoder answers what proto-loader answers', () => {
  it("on Envoy's everyday messages, all of them decoded directly", () => {
    for (const m of envoyMessages()) expect(sameOrGeneric(encode(m))).toBe('direct');
  });

  it('on generated messages of the kinds it knows, all decoded directly', () => {
    fc.assert(
      fc.property(message, (m) => {
        expect(sameOrGeneric(encode(m))).toBe('direct');
      }),
      { numRuns: 1500 },
    );
  });

  it('leaves forwarded metadata and attributes (Struct trees) to the generic decoder', () => {
    const withMetadata = {
      response_headers: { headers: { headers: [{ key: ':status', raw_value: text('200') }] } },
      metadata_context: { filter_metadata: { 'envoy.lb': { fields: { k: { stringValue: 'v' } } } } },
    };
    expect(decodeRequest(encode(withMetadata))).toBeUndefined();
    expect(decodeRequest(encode({ request_body: { body: text('{}') }, attributes: { a: { fields: {} } } }))).toBeUndefined();
  });

  it('on cut, corrupted and random bytes: the same answer, or the generic decoder decides (and reports) it', () => {
    const real = envoyMessages().map(encode);
    const corrupted = fc.tuple(fc.constantFrom(...real), fc.nat(), fc.integer({ min: 0, max: 255 }), fc.nat()).map(([b, at, byte, cut]) => {
      const copy = Buffer.from(b);
      copy[at % copy.length] = byte;
      return copy.subarray(0, copy.length - (cut % 4 === 0 ? cut % copy.length : 0));
    });
    const random = fc.uint8Array({ maxLength: 200 }).map((u) => Buffer.from(u));
    fc.assert(
      fc.property(fc.oneof(corrupted, random), (bytes) => {
        let expected: unknown;
        let threw = false;
        try {
          expected = generic(bytes);
        } catch {
          threw = true;
        }
        const direct = decodeRequest(bytes);
        if (direct === undefined) return;
        expect(threw).toBe(false);
        expect(direct).toStrictEqual(expected);
      }),
      { numRuns: 3000 },
    );
  });
});
