/**
 * Does an Envoy bootstrap have a cluster for every cluster a route table routes to? The gate stamps the table's
 * cluster names (`x-kvgate-decode-cluster`, `x-kvgate-prefill-cluster`) and Envoy's `cluster_header` routes answer a
 * name they do not know with 503 (`cluster_not_found_response_code`, NC), so a table renamed or extended without
 * rendering Envoy again fails every request of that pool. `npm run testbed -- harness --policy FILE` checks it before
 * it opens a port.
 */
import type { CompiledRouteTable } from '../../src/policy/compile.js';
import type { EnvoyConfig } from '../harness/envoy-config.js';

/** One line per route-table cluster the Envoy config lacks or cannot route by its endpoint header; empty when all match. */
export function clusterMismatches(table: CompiledRouteTable, config: EnvoyConfig, policyFile: string): string[] {
  const out: string[] = [];
  for (const [name, c] of table.clusters) {
    const pools = c.pools.map((p) => p.name).join(', ');
    const cluster = config.clusters[name];
    if (cluster === undefined) {
      out.push(
        `route table cluster "${name}" (pools ${pools}) has no Envoy cluster: the gate routes requests there and Envoy ` +
          `would answer 503 NC; render the config again: kvgate envoy render bootstrap --policy ${policyFile}`,
      );
      continue;
    }
    // Prefill pools are reached from the internal listener by x-kvgate-prefill-endpoint (src/envoy/render/input.ts).
    const want = c.pools.every((p) => p.role === 'prefill') ? 'x-kvgate-prefill-endpoint' : 'x-kvgate-decode-endpoint';
    const header = cluster.originalDst?.httpHeaderName;
    if (cluster.type === 'ORIGINAL_DST' && header !== undefined && header !== want) {
      out.push(`Envoy cluster "${name}" reads the endpoint from ${header}, but the gate stamps ${want} for pools ${pools}`);
    }
  }
  return out;
}
