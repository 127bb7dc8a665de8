/**
 * Requests the gateway answers itself: `GET /v1/models` and `GET /health`. An OpenAI SDK lists models before it
 * sends anything (`client.models.list()`), and load balancers probe `/health` as they would a vLLM server; both got
 * 400 `bad_request` before. The model list comes from the route table and shows only what the caller's tenant (from
 * the same trusted source as every request) may use, in OpenAI's shape
 * (`{"object":"list","data":[{"id","object":"model","created","owned_by"}]}`, as vLLM's
 * `vllm/entrypoints/openai/protocol.py` `ModelList` / `ModelCard` also answer).
 */
import type { CompiledRouteTable } from '../policy/compile.js';
import { tenantAllowed } from '../policy/schema.js';
import { refuse } from './refusal.js';
import { tenantOf } from './request-facts.js';
import { servingRevisions } from './revision.js';
import type { AnswerDecision, Refusal, RequestFacts } from './types.js';

/** The gateway's own answer for this request, or undefined when it is not one the gateway answers. */
export function answerLocally(
  facts: Pick<RequestFacts, 'requestId' | 'method' | 'path' | 'headers' | 'metadata' | 'invalidHeaders' | 'sanitizedHeaders'>,
  table: CompiledRouteTable,
  nowMs: number,
): AnswerDecision | Refusal | undefined {
  const route = facts.path.split('?')[0]!.replace(/\/+$/, '');
  if (facts.method !== 'GET' || (route !== '/v1/models' && route !== '/health')) return undefined;
  const trace = [`request ${facts.requestId}: ${facts.method} ${facts.path}`];
  if (route === '/health') {
    trace.push('answered by the gateway: healthy');
    return { kind: 'answer', requestId: facts.requestId, status: 200, trace };
  }
  const who = tenantOf(facts, table.tenancy);
  let tenant: string | null;
  if (who.kind === 'found') tenant = who.tenant;
  else if (who.kind === 'invalid') {
    // As on the routing path (decide.ts): never read as "no tenant", which would answer for the default tenant.
    return refuse(facts.requestId, 'bad_request', `the tenant identity (${who.from}) ${who.why}`, trace);
  } else if (who.kind === 'ambiguous') {
    return refuse(
      facts.requestId,
      'tenant_required',
      `the tenant identity (${who.from}) is unusable: ${who.detail}; exactly one tenant id is required`,
      trace,
    );
  } else if (table.tenancy.required) {
    return refuse(
      facts.requestId,
      'tenant_required',
      `this gateway requires a tenant identity (${who.from}) to list models and the request has none; authenticate through the gateway so it is set`,
      trace,
    );
  } else tenant = table.tenancy.default ?? null;
  const created = Math.floor(nowMs / 1000);
  const data = [...table.models.values()]
    .filter((m) => tenantAllowed(m.tenants, tenant) && servingRevisions(table, m, tenant).length > 0)
    .map((m) => ({ id: m.name, object: 'model', created, owned_by: 'kvgate' }))
    .sort((a, b) => a.id.localeCompare(b.id));
  trace.push(`answered by the gateway: ${data.length} model(s) open to ${tenant === null ? 'anonymous requests' : `tenant ${tenant}`}`);
  return { kind: 'answer', requestId: facts.requestId, status: 200, json: { object: 'list', data }, tenant, trace };
}
