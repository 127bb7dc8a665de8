import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { isGateOwnedHeader, isGateOwnedLowerCase } from '../headers.js';
import { headerFieldOf, headerValueOf, inValueField, readHeaderMap, receiveHeaders, setHeader } from './headers.js';

const raw = (key: string, value: string) => ({ key, raw_value: new TextEncoder().encode(value) });

describe('readHeaderMap', () => {
  it('reads raw_value, falls back to value, joins repeats, and sets gate-owned headers apart once each', () => {
    const r = readHeaderMap({
      headers: [
        raw(':path', '/v1/completions'),
        { key: 'X-Legacy', value: 'old-envoy' },
        raw('accept', 'a'),
        raw('Accept', 'b'),
        raw('X-KVGATE-Group', 'g1'),
        raw('x-prefiller-host-port', '10.0.0.1:1'),
        raw('x-kvgate-group', 'g2'),
        raw('__proto__', 'p'),
      ],
    });
    expect({ ...r.headers }).toEqual({ ':path': '/v1/completions', 'x-legacy': 'old-envoy', accept: 'a,b', ['__proto__']: 'p' });
    expect({ ...r.gateOwned }).toEqual({ 'x-kvgate-group': 'g1,g2', 'x-prefiller-host-port': '10.0.0.1:1' });
    expect(r.forged).toEqual(['x-kvgate-group', 'x-prefiller-host-port']);
  });

  it('names headers whose bytes are not UTF-8, once each, and still reads them (lossily)', () => {
    const bad = { key: 'X-Tenant', raw_value: new Uint8Array([0x61, 0xff]) };
    const r = readHeaderMap({ headers: [bad, { ...bad }, raw('accept', 'ok')] });
    expect(r.invalid).toEqual(['x-tenant']);
    expect(r.headers['x-tenant']).toBe('a\uFFFD,a\uFFFD');
    expect(readHeaderMap({ headers: [raw('accept', 'ok')] }).invalid).toEqual([]);
  });

  it("with send_header_raw_value off (values only in `value`) names every header holding a '!': Envoy's mark for a byte that is not UTF-8", () => {
    // envoyproxy/envoy mutation_utils.cc headersToProto at 4519ef40: value = MessageUtil::sanitizeUtf8String(bytes).
    const r = readHeaderMap({
      headers: [
        { key: ':path', value: '/v1/completions' },
        { key: 'X-Tenant', value: 'acme!' },
        { key: 'x-user', value: 'bob' },
      ],
    });
    expect(r.headers['x-tenant']).toBe('acme!');
    expect(r.sanitized).toEqual(['x-tenant']);
    expect(r.invalid).toEqual([]);
    // The same '!' in raw_value is the byte itself: nothing to doubt.
    expect(readHeaderMap({ headers: [raw(':path', '/'), raw('x-tenant', 'acme!')] }).sanitized).toEqual([]);
    // A map whose values are all empty says nothing about the field.
    expect(readHeaderMap({ headers: [{ key: 'x-tenant', value: '' }] }).sanitized).toEqual([]);
  });

  it('tells which field Envoy filled: raw_value (guard on, 1.27 on), value (guard off), or nothing to tell', () => {
    expect(headerFieldOf({ headers: [raw(':path', '/'), { key: 'x', value: '' }] })).toBe('raw_value');
    expect(headerFieldOf({ headers: [{ key: ':path', value: '/' }] })).toBe('value');
    expect(headerFieldOf({ headers: [{ key: 'x', value: '' }] })).toBeUndefined();
    expect(headerFieldOf(undefined)).toBeUndefined();
  });

  it('inValueField moves every header the answer sets into `value`, the one field a guard-off Envoy reads', () => {
    const stamp = setHeader('x-kvgate-group', 'g_1');
    const moved = inValueField({
      request_headers: { response: { header_mutation: { set_headers: [stamp], remove_headers: ['x-a'] }, clear_route_cache: true } },
      immediate_response: { status: { code: 403 }, headers: { set_headers: [setHeader('x-kvgate-reject-reason', 'tenant_scope_denied')] } },
      request_trailers: { header_mutation: { set_headers: [setHeader('x-t', 'é')] } },
    });
    expect(moved.request_headers?.response).toEqual({
      header_mutation: {
        set_headers: [{ header: { key: 'x-kvgate-group', value: 'g_1' }, append_action: 'OVERWRITE_IF_EXISTS_OR_ADD' }],
        remove_headers: ['x-a'],
      },
      clear_route_cache: true,
    });
    expect(moved.immediate_response?.headers?.set_headers?.[0]?.header).toEqual({
      key: 'x-kvgate-reject-reason',
      value: 'tenant_scope_denied',
    });
    expect(moved.request_trailers?.header_mutation?.set_headers?.[0]?.header).toEqual({ key: 'x-t', value: 'é' });
    // The input is left as it was; an answer that sets nothing comes back as it is.
    expect(stamp.header.raw_value).toBeDefined();
    const plain = { request_body: { response: {} } };
    expect(inValueField(plain)).toBe(plain);
  });

  it('an empty or absent map gives no headers and nothing forged', () => {
    expect(readHeaderMap(undefined).forged).toEqual([]);
    expect(Object.keys(readHeaderMap({ headers: [] }).headers)).toEqual([]);
  });

  it('reads a dry run the same way', () => {
    const r = receiveHeaders([
      ['X-Gateway-Destination-Endpoint', '1.2.3.4:5'],
      ['x-request-id', 'r'],
    ]);
    expect(r.forged).toEqual(['x-gateway-destination-endpoint']);
    expect(r.headers['x-request-id']).toBe('r');
  });
});

describe('headerValueOf', () => {
  it('reads one header exactly as readHeaderMap reads it: case, repeats, raw_value or value, invalid UTF-8', () => {
    const name = fc.constantFrom(':status', ':STATUS', 'x-kvgate-reject-reason', 'X-KvGate-Reject-Reason', 'content-type', 'x-other');
    const bytes = fc.oneof(
      fc.string({ maxLength: 12 }).map((t) => Buffer.from(t)),
      fc.uint8Array({ maxLength: 6 }).map((b) => Buffer.from(b)),
    );
    const header = fc.record({
      key: name,
      raw: fc.option(bytes, { nil: undefined }),
      value: fc.option(fc.string({ maxLength: 6 }), { nil: undefined }),
    });
    fc.assert(
      fc.property(fc.array(header, { maxLength: 6 }), (hs) => {
        const map = {
          headers: hs.map((h) => ({
            key: h.key,
            ...(h.raw === undefined ? {} : { raw_value: h.raw }),
            ...(h.value === undefined ? {} : { value: h.value }),
          })),
        };
        const all = readHeaderMap(map);
        expect(headerValueOf(map, ':status')).toBe(all.headers[':status']);
        expect(headerValueOf(map, 'x-kvgate-reject-reason')).toBe(all.gateOwned['x-kvgate-reject-reason']);
        expect(headerValueOf(map, 'content-type')).toBe(all.headers['content-type']);
      }),
      { numRuns: 400 },
    );
    expect(headerValueOf(undefined, ':status')).toBeUndefined();
  });
});

describe('gate-owned header names', () => {
  it("own x-kvgate-*, the two routing aliases and llm-d's other routing headers, in any case, and nothing else", () => {
    for (const n of [
      'x-kvgate-anything',
      'X-KvGate-Contract',
      'x-gateway-destination-endpoint',
      'X-Prefiller-Host-Port',
      'x-encoder-hosts-ports',
      'X-KV-Cache-Source-Host-Port',
      'x-data-parallel-host-port',
    ]) {
      expect(isGateOwnedHeader(n)).toBe(true);
    }
    for (const n of ['x-request-id', 'kvgate-x', 'content-type', '', 'x-kvgate', 'xx-kvgate-group'])
      expect(isGateOwnedHeader(n)).toBe(false);
    expect(isGateOwnedLowerCase('x-kvgate-group')).toBe(true);
  });
});
