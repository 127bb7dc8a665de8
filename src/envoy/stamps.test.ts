import { describe, expect, it } from 'vitest';
import { refusalStamps, retryAfterValue } from './stamps.js';

describe('refusal stamps', () => {
  it('retry-after is whole seconds, at least one', () => {
    expect([0, 0.2, 1, 2.5, 7].map(retryAfterValue)).toEqual(['1', '1', '1', '3', '7']);
  });

  it('status, reason header and JSON body come from the one closed error set', () => {
    const s = refusalStamps({ kind: 'refuse', requestId: 'r9', code: 'queue_full', message: 'full', trace: [] });
    expect(s.status).toBe(429);
    expect(s.headers).toEqual([
      ['content-type', 'application/json'],
      ['x-kvgate-reject-reason', 'queue_full'],
      ['x-request-id', 'r9'],
    ]);
    expect(JSON.parse(Buffer.from(s.bodyBytes).toString())).toEqual(s.body);
    expect(s.details).toBe('kvgate_queue_full');
  });
});
