import { describe, expect, it } from 'vitest';
import { clone, tableFromValue, twoRevisionTableValue } from '../policy/testing.js';
import { decideRequest } from './decide-request.js';
import { answerLocally } from './local-answer.js';
import { createStaticWorkerView, createInFlightTracker } from './worker-view.js';
import { testKeys } from './testing.js';

/** Two models: llama-3-8b for acme and globex, mistral-7b for globex only. */
function table() {
  const v = clone(twoRevisionTableValue()) as Record<string, any>;
  v['models']['mistral-7b'] = { tenants: ['globex'], rollout: { stable: 'llama-b' } };
  return tableFromValue(v);
}
const get = (path: string, headers: Record<string, string> = {}) => ({ requestId: 'r1', method: 'GET', path, headers, metadata: {} });
const NOW = 1_700_000_000_000;

describe('answers the gateway gives itself', () => {
  it('GET /v1/models lists the models the caller\u2019s tenant may use, in OpenAI\u2019s list shape', () => {
    const t = table();
    expect(answerLocally(get('/v1/models', { 'x-tenant-id': 'acme' }), t, NOW)).toMatchObject({
      kind: 'answer',
      status: 200,
      tenant: 'acme',
      json: { object: 'list', data: [{ id: 'llama-3-8b', object: 'model', created: NOW / 1000, owned_by: 'kvgate' }] },
    });
    const globex = answerLocally(get('/v1/models?limit=5', { 'x-tenant-id': 'globex' }), t, NOW);
    expect((globex as { json: { data: { id: string }[] } }).json.data.map((m) => m.id)).toEqual(['llama-3-8b', 'mistral-7b']);
    const other = answerLocally(get('/v1/models/', { 'x-tenant-id': 'initech' }), t, NOW);
    expect(other).toMatchObject({ kind: 'answer', json: { object: 'list', data: [] } });
  });

  it('a table that requires a tenant refuses an anonymous model list (401), as it refuses any request', () => {
    expect(answerLocally(get('/v1/models'), table(), NOW)).toMatchObject({ kind: 'refuse', code: 'tenant_required' });
  });

  it('a tenant header that is not valid UTF-8 is refused 400, as on the routing path, never read as no tenant', () => {
    const bad = { ...get('/v1/models', { 'x-tenant-id': 't-\ufffd' }), invalidHeaders: ['x-tenant-id'] };
    const message = 'the tenant identity (header x-tenant-id) is not valid UTF-8';
    expect(answerLocally(bad, table(), NOW)).toMatchObject({ kind: 'refuse', code: 'bad_request', message });
    // Where anonymous requests get a default tenant, an undecodable tenant is still not that tenant.
    const v = clone(twoRevisionTableValue()) as Record<string, any>;
    v['tenancy'] = { ...v['tenancy'], required: false, default: 'acme' };
    expect(answerLocally(bad, tableFromValue(v), NOW)).toMatchObject({ kind: 'refuse', code: 'bad_request', message });
  });

  it('GET /health is 200 with an empty body; other paths and methods are not answered here', () => {
    expect(answerLocally(get('/health'), table(), NOW)).toMatchObject({ kind: 'answer', status: 200 });
    expect(answerLocally({ ...get('/v1/models'), method: 'POST' }, table(), NOW)).toBeUndefined();
    expect(answerLocally(get('/v1/files'), table(), NOW)).toBeUndefined();
  });

  it('decideRequest answers a GET /v1/models before the routing path (which would refuse it 400)', () => {
    const t = table();
    const view = createStaticWorkerView(t, createInFlightTracker());
    const ctx = { nowMs: NOW, keys: testKeys() };
    expect(decideRequest(get('/v1/models', { 'x-tenant-id': 'acme' }), t, view, ctx).decision.kind).toBe('answer');
    expect(decideRequest(get('/v1/files', { 'x-tenant-id': 'acme' }), t, view, ctx).decision).toMatchObject({
      kind: 'refuse',
      code: 'bad_request',
    });
  });
});
