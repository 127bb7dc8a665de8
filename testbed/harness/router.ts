/**
 * Route resolution as the HCM and router filter do it, pure: pick the virtual host by `:authority` (exact, then
 * longest suffix wildcard, then longest prefix wildcard, then "*"), then the first route whose match fits `:path`,
 * and read the cluster name — for `cluster_header` routes *at resolution time*, from the headers as they are then.
 * The data plane caches the result before ext_proc runs and re-resolves only when the route cache was cleared,
 * which is exactly why a `cluster_header` set by ext_proc without `clear_route_cache` does not move the request.
 */
import type { HcmConfig, RouteEntry, VirtualHost } from './envoy-config-types.js';
import type { HeaderMap } from './header-map.js';

export interface ResolvedRoute {
  readonly virtualHost: VirtualHost;
  readonly route: RouteEntry;
  /** The target cluster name; `undefined` when a `cluster_header` route found no header (-> no_cluster). */
  readonly clusterName: string | undefined;
}

export interface RouteTable {
  /** `undefined` = no route (the router answers 404 `route_not_found`). */
  resolve(headers: HeaderMap): ResolvedRoute | undefined;
}

export function createRouteTable(hcm: HcmConfig): RouteTable {
  return {
    resolve(headers) {
      const vh = findVirtualHost(hcm.virtualHosts, (headers.get(':authority') ?? '').toLowerCase());
      if (vh === undefined) return undefined;
      const path = headers.get(':path') ?? '/';
      const route = vh.routes.find((r) => matches(r, path));
      if (route === undefined) return undefined;
      const a = route.action;
      const clusterName = a.cluster ?? (a.clusterHeader === undefined ? undefined : headers.get(a.clusterHeader));
      return { virtualHost: vh, route, clusterName: clusterName === '' ? undefined : clusterName };
    },
  };
}

function matches(route: RouteEntry, path: string): boolean {
  const m = route.match;
  if ('prefix' in m) return path.startsWith(m.prefix);
  return (path.split('?')[0] ?? '') === m.path;
}

/** Envoy's domain order: exact, `*.suffix` (longest first), `prefix.*` (longest first), then `*`. */
export function findVirtualHost(hosts: readonly VirtualHost[], authority: string): VirtualHost | undefined {
  let best: { vh: VirtualHost; rank: number; len: number } | undefined;
  const consider = (vh: VirtualHost, rank: number, len: number): void => {
    if (best === undefined || rank < best.rank || (rank === best.rank && len > best.len)) best = { vh, rank, len };
  };
  for (const vh of hosts) {
    for (const raw of vh.domains) {
      const d = raw.toLowerCase();
      if (d === authority) consider(vh, 0, d.length);
      else if (d === '*') consider(vh, 3, 0);
      else if (d.startsWith('*') && authority.endsWith(d.slice(1)) && authority.length > d.length - 1) consider(vh, 1, d.length);
      else if (d.endsWith('*') && authority.startsWith(d.slice(0, -1)) && authority.length > d.length - 1) consider(vh, 2, d.length);
    }
  }
  return best?.vh;
}
