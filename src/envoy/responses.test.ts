import { describe, expect, it } from 'vitest';
import type { RouteDecision } from '../decide/types.js';
import { responseHeadersMutation, routeMutation } from './responses.js';
import type { WireHeaderValueOption } from './wire.js';

function decision(requestId: string, contract: string): RouteDecision {
  return {
    kind: 'route',
    requestId,
    group: {
      id: 'g_0123456789abcdef01234567',
      fingerprint: 'f',
      tenantScope: 'shared',
      tenant: null,
      model: 'm',
      revision: 'r1',
      adapter: null,
    },
    decode: { pool: 'd', cluster: 'kvgate_d', endpoint: '10.0.0.2:9090' },
    prefill: { pool: 'p', cluster: 'kvgate_p', endpoint: '10.0.0.1:9090' },
    cacheSalt: 'salt',
    contract,
    binding: `binding-${requestId}`,
    pendingBinding: { token: () => `binding-${requestId}` },
    trace: [],
  };
}

const text = (set: readonly WireHeaderValueOption[]): [string, string][] =>
  set.map((o) => [o.header.key, Buffer.from(o.header.raw_value ?? new Uint8Array()).toString('utf8')]);

describe('routeMutation', () => {
  it('writes every header as raw_value bytes, the same for repeated table constants and per-request values', () => {
    for (const id of ['r1', 'r2']) {
      const m = routeMutation(decision(id, `c-${id}`), undefined, ['x-kvgate-group', 'x-kvgate-forged'], { gieHeaders: true });
      const set = m.common.header_mutation?.set_headers ?? [];
      expect(text(set)).toEqual([
        ['x-request-id', id],
        ['x-kvgate-group', 'g_0123456789abcdef01234567'],
        ['x-kvgate-revision', 'r1'],
        ['x-kvgate-decode-cluster', 'kvgate_d'],
        ['x-kvgate-decode-endpoint', '10.0.0.2:9090'],
        ['x-kvgate-prefill-cluster', 'kvgate_p'],
        ['x-kvgate-prefill-endpoint', '10.0.0.1:9090'],
        ['x-kvgate-contract', `c-${id}`],
        ['x-gateway-destination-endpoint', '10.0.0.2:9090'],
        ['x-prefiller-host-port', '10.0.0.1:9090'],
      ]);
      expect(set.every((o) => o.append_action === 'OVERWRITE_IF_EXISTS_OR_ADD' && o.header.value === undefined)).toBe(true);
      expect(m.common.header_mutation?.remove_headers).toEqual(['x-kvgate-forged']);
      expect(m.common.clear_route_cache).toBe(true);
    }
  });

  it('response headers carry the group, the revision and the per-request binding', () => {
    const set = responseHeadersMutation(decision('r3', 'c')).header_mutation?.set_headers ?? [];
    expect(text(set)).toEqual([
      ['x-kvgate-group', 'g_0123456789abcdef01234567'],
      ['x-kvgate-revision', 'r1'],
      ['x-kvgate-binding', 'binding-r3'],
    ]);
  });
});
