/**
 * The parts of `kvgate policy diff` outside revisions, models and pools: tenancy, session stickiness, the fallback
 * chain and table-wide settings, plus the small helpers the diff shares (verification wording, leaf changes of a
 * descriptor).
 */
import { canonicalJson } from '../compat/canonical-json.js';
import type { CompiledRouteTable, TenantPriorities } from './compile.js';
import type { FallbackStep, RevisionVerification } from './schema.js';

/** Tenancy, session, fallback chain and settings changes, each under its area. */
/** The part of a route table a change belongs to (the sections of `kvgate policy diff`). */
export type DiffArea = 'revisions' | 'models' | 'pools' | 'tenancy' | 'fallback' | 'settings';

export function diffSettings(before: CompiledRouteTable, after: CompiledRouteTable, add: (area: DiffArea) => (text: string) => void): void {
  const tenancy = add('tenancy');
  const [a, b] = [before.tenancy, after.tenancy];
  if (canonicalJson(a.source) !== canonicalJson(b.source)) tenancy(`tenant source ${sourceText(a.source)} -> ${sourceText(b.source)}`);
  if (a.required !== b.required)
    tenancy(b.required ? 'a tenant is now required: requests without one are refused with 401' : 'a tenant is no longer required');
  if (a.default !== b.default) tenancy(`default tenant ${a.default ?? '(none)'} -> ${b.default ?? '(none)'}`);
  if (a.prefixScope !== b.prefixScope) {
    tenancy(
      `prefix scope ${a.prefixScope} -> ${b.prefixScope}: every group id changes, so prefix caches start cold, bindings are re-checked and queued requests are refused`,
    );
  }
  if (a.userHeader !== b.userHeader)
    tenancy(`user header ${a.userHeader ?? '(body user field)'} -> ${b.userHeader ?? '(body user field)'}`);
  priorityChanges(before.priorities, after.priorities, tenancy);
  const session = add('settings');
  if (before.session.header !== after.session.header) {
    session(
      `session header ${before.session.header} -> ${after.session.header}: cohorts are keyed by the new header, so sessions may change cohort`,
    );
  }
  if (before.session.bindingTtlMs !== after.session.bindingTtlMs)
    session(`binding lifetime ${before.session.bindingTtlMs} ms -> ${after.session.bindingTtlMs} ms`);
  const [f0, f1] = [chainText(before.fallback), chainText(after.fallback)];
  if (f0 !== f1) add('fallback')(`fallback chain ${f0} -> ${f1}`);
  if (before.connectorMode !== after.connectorMode) session(`connector mode ${before.connectorMode} -> ${after.connectorMode}`);
  if (before.contractTtlMs !== after.contractTtlMs) session(`contract lifetime ${before.contractTtlMs} ms -> ${after.contractTtlMs} ms`);
  if (before.limits.maxBodyBytes !== after.limits.maxBodyBytes)
    session(`limits.maxBodyBytes ${before.limits.maxBodyBytes} -> ${after.limits.maxBodyBytes}`);
  const [m0, m1] = [before.media.allowedOrigins, after.media.allowedOrigins];
  const added = m1.filter((o) => !m0.includes(o));
  const removed = m0.filter((o) => !m1.includes(o));
  if (added.length > 0) session(`media.allowedOrigins: workers may now fetch client media from ${added.join(', ')}`);
  if (removed.length > 0) session(`media.allowedOrigins: client media URLs on ${removed.join(', ')} are now refused`);
}

/**
 * Tenant priorities set, changed or removed (in vLLM's order, lower first). An entry left out is the default, and no
 * `priorities` at all is every tenant at 0; both are written out so a reviewer sees who moves ahead of whom.
 */
function priorityChanges(a: TenantPriorities | null, b: TenantPriorities | null, add: (text: string) => void): void {
  const [d0, d1] = [a?.default ?? 0, b?.default ?? 0];
  if (d0 !== d1) add(`default priority ${d0} -> ${d1} (lower goes first; tenants without their own priority)`);
  const tenants = new Set([...(a?.tenants.keys() ?? []), ...(b?.tenants.keys() ?? [])]);
  for (const t of [...tenants].sort()) {
    const [p0, p1] = [a?.tenants.get(t), b?.tenants.get(t)];
    if (p0 === p1) continue;
    const was = p0 === undefined ? `the default ${d0}` : `${p0}`;
    const now = p1 === undefined ? `the default ${d1}` : `${p1}`;
    add(`tenant ${t} priority ${was} -> ${now} (lower goes first)`);
  }
}

function sourceText(s: CompiledRouteTable['tenancy']['source']): string {
  return s.header !== undefined ? `header ${s.header}` : `metadata ${s.metadata!.namespace} ${s.metadata!.path.join('.')}`;
}

/** A fallback chain in one line, e.g. `[queue 2000 ms, depth 50, fifo -> refuse, retry after 5 s]`. */
export function chainText(chain: readonly FallbackStep[]): string {
  return `[${chain.map(stepText).join(' -> ')}]`;
}

export function stepText(s: FallbackStep): string {
  switch (s.kind) {
    case 'queue':
      return `queue ${s.deadlineMs} ms, depth ${s.maxDepth}, ${s.order}`;
    case 'routeVia': {
      const rules = [s.eligible.notPinned ? 'not pinned' : '', s.eligible.noAdapter ? 'no adapter' : ''].filter(Boolean).join(', ');
      return `routeVia ${s.revisions.join(', ')}${rules === '' ? '' : ` (${rules})`}`;
    }
    case 'recompute':
      return `recompute ${s.prefillMsPerToken} ms/token up to ${s.maxPromptTokens} tokens`;
    case 'refuse':
      return `refuse, retry after ${s.retryAfterSeconds} s`;
  }
}

/** `required, not passed`, `verified (evidence)`, or `not required`. */
export function describeVerification(v: RevisionVerification): string {
  if (!v.required) return v.verified ? 'not required (recorded as verified)' : 'not required';
  return v.verified ? `verified${v.evidence === null ? '' : ` (${v.evidence})`}` : 'required, not passed';
}

/** Leaf fields that differ between two plain values, as `path: old -> new` (for descriptor changes outside the fingerprint). */
export function leafChanges(a: unknown, b: unknown, path = ''): string[] {
  const isObj = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);
  if (isObj(a) && isObj(b)) {
    const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])].sort();
    return keys.flatMap((k) => leafChanges(a[k], b[k], path === '' ? k : `${path}.${k}`));
  }
  const [ja, jb] = [canonicalJson(a ?? null), canonicalJson(b ?? null)];
  return ja === jb ? [] : [`${path || '(value)'}: ${ja} -> ${jb}`];
}
