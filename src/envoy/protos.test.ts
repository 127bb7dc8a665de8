import { describe, expect, it } from 'vitest';
import { extProcService, EXT_PROC_METHOD } from './protos.js';

describe('vendored ext_proc protos', () => {
  it('load the Process bidi method with the patched protocol_config field', () => {
    const svc = extProcService();
    const process = svc['Process']!;
    expect(process.path).toBe(EXT_PROC_METHOD);
    expect(process.requestStream).toBe(true);
    expect(process.responseStream).toBe(true);
    const encoded = process.requestSerialize({
      request_headers: { headers: { headers: [{ key: ':path', raw_value: Buffer.from('/v1/completions') }] } },
      protocol_config: { request_body_mode: 'BUFFERED' },
    });
    const decoded = process.requestDeserialize(encoded) as Record<string, any>;
    expect(decoded['request']).toBe('request_headers');
    expect(decoded['protocol_config'].request_body_mode).toBe('BUFFERED');
    expect(Buffer.from(decoded['request_headers'].headers.headers[0].raw_value).toString()).toBe('/v1/completions');
  });
});
