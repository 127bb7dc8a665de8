/**
 * What a vLLM worker's `GET /metrics` answers for a query, version by version (flavour.ts `metricsNameFilter`,
 * config.ts `apiServerCount`): the whole exposition; or, where prometheus_client's `make_asgi_app` serves the route
 * and the query has `name[]`, only the samples with those exact names (prometheus/client_python
 * `prometheus_client/exposition.py` `_bake_output` and `prometheus_client/registry.py` `RestrictedRegistry`), with
 * the `# HELP`/`# TYPE` lines of the families that kept a sample; or nothing at all under several API servers, whose
 * multiprocess registry registers no names to restrict by.
 */
import type { FlavourTraits } from './flavour.js';

/** The body `/metrics?query` answers, given the full exposition the registry renders. */
export function metricsFor(full: string, query: URLSearchParams, traits: FlavourTraits, apiServerCount: number): string {
  const names = query.getAll('name[]');
  if (names.length === 0 || traits.metricsNameFilter === 'ignored') return full;
  if (apiServerCount > 1) return '';
  return restricted(full, new Set(names));
}

/** Keep the sample lines named in `names`, with their family's comment lines. Pure. */
export function restricted(full: string, names: ReadonlySet<string>): string {
  const out: string[] = [];
  let comments: string[] = [];
  let kept = false;
  for (const line of full.split('\n')) {
    if (line.startsWith('# HELP ')) {
      comments = [line];
      kept = false;
      continue;
    }
    if (line.startsWith('#')) {
      comments.push(line);
      continue;
    }
    if (line === '') continue;
    const name = /^[^{\s]+/.exec(line)?.[0] ?? '';
    if (!names.has(name)) continue;
    if (!kept) out.push(...comments);
    kept = true;
    out.push(line);
  }
  return out.length === 0 ? '' : `${out.join('\n')}\n`;
}
