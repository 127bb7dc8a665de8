import { describe, expect, it } from 'vitest';
import { receiveHeaders } from './headers.js';
import { toRequestFacts, type Listener } from './inbound.js';

const sent = (extra: Record<string, string>) =>
  receiveHeaders(Object.entries({ ':method': 'POST', ':path': '/v1/completions', 'x-tenant-id': 'acme', ...extra }));
const facts = (listener: Listener, extra: Record<string, string>) =>
  toRequestFacts({ requestId: 'r1', listener, headers: sent(extra), metadata: {}, bodyTruncated: false });

describe('ext_proc messages -> request facts', () => {
  const hopHeaders = {
    'x-kvgate-contract': 'tok',
    'x-kvgate-prefill-cluster': 'a_prefill',
    'x-kvgate-prefill-endpoint': '10.0.1.1:9090',
    'x-kvgate-retry-exclude': ' 10.0.1.2:9090, ,10.0.1.3:9090',
  };

  it('a hop is read from gate-owned headers on the internal listener only', () => {
    expect(facts('internal', hopHeaders).hop).toEqual({
      contract: 'tok',
      prefillCluster: 'a_prefill',
      prefillEndpoint: '10.0.1.1:9090',
      retryExclude: ['10.0.1.2:9090', '10.0.1.3:9090'],
    });
    const pub = facts('public', hopHeaders);
    expect(pub.hop).toBeUndefined();
    expect(pub.listener).toBe('public');
    // Gate-owned headers never reach the facts' header map, on either listener.
    expect(Object.keys(pub.headers).filter((k) => k.startsWith('x-kvgate-'))).toEqual([]);
  });

  it('a binding is read on any listener; method and path come from the pseudo-headers', () => {
    const f = facts('public', { 'x-kvgate-binding': 'kvgate.v1.k1.b.sig' });
    expect(f).toMatchObject({ binding: 'kvgate.v1.k1.b.sig', method: 'POST', path: '/v1/completions', requestId: 'r1' });
    expect(f.body).toBeUndefined();
    const bare = toRequestFacts({
      requestId: 'r2',
      listener: 'public',
      headers: receiveHeaders([]),
      metadata: {},
      bodyTruncated: true,
      body: new Uint8Array([1]),
    });
    expect(bare).toMatchObject({ method: 'GET', path: '/', bodyTruncated: true, body: new Uint8Array([1]) });
  });
});
