/**
 * Node.js process metrics under their standard, unprefixed names (`process_*`, `nodejs_*`), so the stock Node.js
 * and process dashboards find the gate and every sidecar without relabelling.
 *
 * prom-client's default collectors also export `nodejs_active_handles_total`, `nodejs_active_requests_total` and
 * `nodejs_active_resources_total` as gauges (prom-client 15.1.3, lib/metrics/processHandles.js,
 * processRequests.js, processResources.js). A gauge named `_total` fails `promtool check metrics` (client_golang
 * prometheus/testutil/promlint/validations/counter_validations.go @c39535eb: "non-counter metrics should not have
 * _total suffix"), and each carries the same number as its unsuffixed sibling (`nodejs_active_handles` etc.,
 * which keeps a per-type label), so those three are removed.
 */
import { collectDefaultMetrics, type Registry } from 'prom-client';

/** Gauges prom-client names `_total`; each duplicates the sum of its unsuffixed sibling's series. */
export const NON_COUNTER_TOTALS = ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total'] as const;

/** Register the process and Node.js runtime metrics on `registry` (one call per registry; no global registry). */
export function registerProcessMetrics(registry: Registry): void {
  collectDefaultMetrics({ register: registry });
  for (const name of NON_COUNTER_TOTALS) if (registry.getSingleMetric(name) !== undefined) registry.removeSingleMetric(name);
}
