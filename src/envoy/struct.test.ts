import { describe, expect, it } from 'vitest';
import { tenantOf } from '../decide/request-facts.js';
import { extProcService } from './protos.js';
import { fromFilterMetadata } from './struct.js';

const JWT = 'envoy.filters.http.jwt_authn';
const tenancy = { source: { metadata: { namespace: JWT, path: ['payload', 'tenant'] } } } as unknown as Parameters<typeof tenantOf>[1];

/** A ProcessingRequest whose JWT payload Struct has a claim named `__proto__` holding `{tenant: "acme"}`. */
function wireWithProtoClaim(): Buffer {
  const fields: Record<string, unknown> = { sub: { stringValue: 'mallory' } };
  Object.defineProperty(fields, '__proto__', {
    value: { structValue: { fields: { tenant: { stringValue: 'acme' } } } },
    enumerable: true,
    writable: true,
    configurable: true,
  });
  const msg = {
    request_headers: { headers: { headers: [{ key: ':path', raw_value: Buffer.from('/v1/completions') }] }, end_of_stream: false },
    metadata_context: { filter_metadata: { [JWT]: { fields: { payload: { structValue: { fields } } } } } },
  };
  return extProcService()['Process']!.requestSerialize(msg);
}

describe('Struct metadata from Envoy', () => {
  it('keeps a key named __proto__ as an own field: its contents never become inherited fields, so never a tenant', () => {
    const decoded = extProcService()['Process']!.requestDeserialize(wireWithProtoClaim()) as {
      metadata_context: { filter_metadata: Parameters<typeof fromFilterMetadata>[0] };
    };
    const md = fromFilterMetadata(decoded.metadata_context.filter_metadata);
    const payload = md[JWT]!['payload'] as Record<string, unknown>;
    expect(Object.getPrototypeOf(payload)).toBe(Object.prototype);
    expect(Object.keys(payload).sort()).toEqual(['__proto__', 'sub']);
    expect(payload['tenant']).toBeUndefined();
    expect(tenantOf({ headers: {}, metadata: md }, tenancy)).toEqual({ kind: 'missing', from: `metadata ${JWT} payload.tenant` });
  });

  it('never reads an inherited property as a path step or a tenant', () => {
    const inherited = Object.create({ tenant: 'acme' }) as Record<string, unknown>;
    expect(tenantOf({ headers: {}, metadata: { [JWT]: { payload: inherited } } }, tenancy).kind).toBe('missing');
    const ctor = { source: { metadata: { namespace: JWT, path: ['payload', 'constructor', 'name'] } } } as unknown as Parameters<
      typeof tenantOf
    >[1];
    expect(tenantOf({ headers: {}, metadata: { [JWT]: { payload: {} } } }, ctor).kind).toBe('missing');
    expect(tenantOf({ headers: {}, metadata: { [JWT]: { payload: { tenant: 'acme' } } } }, tenancy)).toMatchObject({
      kind: 'found',
      tenant: 'acme',
    });
  });
});
