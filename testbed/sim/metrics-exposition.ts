/**
 * What a vLLM worker's `GET /metrics` answers for a query, version by version (flavour.ts `metricsNameFilter`,
 * config.ts `apiServerCount`): the whole exposition; or, where prometheus_client's `make_asgi_app` serves the route
 * and the query has `name[]`, only the samples with those exact names (prometheus/client_python
 * `prometheus_client/exposition.py` `_bake_output` and `prometheus_client/registry.py` `RestrictedRegistry`), with
 * the `# HELP`/`# TYPE` lines of the families that kept a sample; or nothing at all under several API servers, whose
 * multiprocess registry registers no names to restrict by.
 */
import type { Registry } from 'prom-client';
import type { FlavourTraits } from './flavour.js';

/** Sample-name suffixes prometheus_client registers a family under besides its name (`CollectorRegistry._get_names`). */
const SUFFIXES = ['_total', '_created', '_bucket', '_sum', '_count', '_gsum', '_gcount', '_info'];

/**
 * The body `/metrics?query` answers. Like a restricted prometheus_client registry, a filtered answer collects only the
 * families a requested sample name belongs to, so it costs what it returns, not a whole exposition.
 */
export async function metricsExposition(
  registry: Registry,
  query: URLSearchParams,
  traits: FlavourTraits,
  apiServerCount: number,
): Promise<string> {
  const names = query.getAll('name[]');
  if (names.length === 0 || traits.metricsNameFilter === 'ignored') return registry.metrics();
  if (apiServerCount > 1) return '';
  const families = new Set<string>();
  for (const n of names) {
    for (const base of [n, ...SUFFIXES.filter((x) => n.endsWith(x)).map((x) => n.slice(0, -x.length))]) {
      if (registry.getSingleMetric(base) !== undefined) families.add(base);
    }
  }
  const texts = await Promise.all([...families].map((f) => registry.getSingleMetricAsString(f)));
  return restricted(texts.join('\n'), new Set(names));
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
