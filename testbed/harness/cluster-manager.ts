/**
 * Host selection per cluster, pure apart from load-balancer state:
 * - STATIC / STRICT_DNS: round robin (starting at the first endpoint, so tests are deterministic) or least request
 *   (Envoy's default: best of two random choices by active requests; randomness injected);
 * - ORIGINAL_DST: `metadata_key` (request dynamic metadata), then the configured header, read at load-balancing
 *   time; the value must be `IP:port` — hostnames are refused, and nothing usable means no host (503);
 * - override_host: the first source (metadata or header) naming a member of the cluster (a comma-separated list is
 *   tried in order), otherwise the fallback policy.
 * Health checks are recorded but not run: every configured endpoint counts as healthy.
 */
import { isIP } from 'node:net';
import { requestLimit } from './circuit-breakers.js';
import { parseHostPort } from './cluster-config.js';
import type { ClusterConfig, Endpoint, MetadataKey } from './envoy-config-types.js';
import type { Json } from './ext-proc-messages.js';
import type { DynamicMetadata } from './ext-proc-request.js';
import type { HeaderMap } from './header-map.js';

export interface LbContext {
  readonly headers: HeaderMap;
  readonly metadata: DynamicMetadata;
}

export interface ClusterManager {
  get(name: string): ClusterConfig | undefined;
  /** `undefined` = no healthy upstream. */
  chooseHost(cluster: ClusterConfig, ctx: LbContext): Endpoint | undefined;
  /** True when the cluster's circuit breakers take no further request (circuit-breakers.ts). */
  overflowed(cluster: ClusterConfig): boolean;
  /** Active-request bookkeeping for LEAST_REQUEST and the breakers; call `release` when the upstream request ends. */
  acquire(cluster: ClusterConfig, host: Endpoint): () => void;
  /** Replace a cluster's hosts (an EDS update); `get` returns the cluster with them from now on. */
  setEndpoints(name: string, endpoints: readonly string[]): void;
}

export function createClusterManager(
  clusters: Readonly<Record<string, ClusterConfig>>,
  random: () => number = Math.random,
): ClusterManager {
  const rr = new Map<string, number>();
  const active = new Map<string, number>();
  const perCluster = new Map<string, number>();
  const key = (c: ClusterConfig, h: Endpoint): string => `${c.name}|${h.address}:${h.port}`;
  const live = new Map(Object.entries(clusters));

  const balance = (c: ClusterConfig, policy: 'ROUND_ROBIN' | 'LEAST_REQUEST' | 'CLUSTER_PROVIDED'): Endpoint | undefined => {
    const hosts = c.endpoints;
    if (hosts.length === 0) return undefined;
    if (policy === 'LEAST_REQUEST' && hosts.length > 1) {
      const a = hosts[Math.floor(random() * hosts.length)];
      const b = hosts[Math.floor(random() * hosts.length)];
      if (a === undefined || b === undefined) return hosts[0];
      return (active.get(key(c, b)) ?? 0) < (active.get(key(c, a)) ?? 0) ? b : a;
    }
    const i = rr.get(c.name) ?? 0;
    rr.set(c.name, i + 1);
    return hosts[i % hosts.length];
  };

  return {
    get: (name) => live.get(name),
    setEndpoints(name, list) {
      const c = live.get(name);
      if (c === undefined || c.type === 'ORIGINAL_DST') throw new Error(`setEndpoints: no STATIC or STRICT_DNS cluster ${name}`);
      const endpoints = list.map((text) => {
        const ep = ipPort(text);
        if (ep === undefined) throw new Error(`setEndpoints: ${text} is not IP:port`);
        return ep;
      });
      live.set(name, Object.freeze({ ...c, endpoints: Object.freeze(endpoints) }));
    },
    chooseHost(c, ctx) {
      if (c.type === 'ORIGINAL_DST') return originalDst(c, ctx);
      if (c.overrideHost !== undefined) {
        for (const source of c.overrideHost.sources) {
          const value = 'header' in source ? ctx.headers.get(source.header) : metadataString(ctx.metadata, source.metadata);
          const member = value
            ?.split(',')
            .map((s) => s.trim())
            .map((s) => parseHostPort(s))
            .find((ep) => ep !== undefined && c.endpoints.some((h) => h.address === ep.address && h.port === ep.port));
          if (member !== undefined) return member;
        }
        return balance(c, c.overrideHost.fallback);
      }
      return balance(c, c.lbPolicy);
    },
    overflowed: (c) => (perCluster.get(c.name) ?? 0) >= requestLimit(c.circuitBreakers, c.http2),
    acquire(c, host) {
      const k = key(c, host);
      active.set(k, (active.get(k) ?? 0) + 1);
      perCluster.set(c.name, (perCluster.get(c.name) ?? 0) + 1);
      let released = false;
      return () => {
        if (released) return;
        released = true;
        active.set(k, (active.get(k) ?? 1) - 1);
        perCluster.set(c.name, (perCluster.get(c.name) ?? 1) - 1);
      };
    },
  };
}

function originalDst(c: ClusterConfig, ctx: LbContext): Endpoint | undefined {
  const od = c.originalDst;
  if (od === undefined) return undefined;
  // Envoy tries metadata_key before the header (about 1.28+); a present-but-invalid metadata value stops there.
  if (od.metadataKey !== undefined) {
    const v = metadataString(ctx.metadata, od.metadataKey);
    if (v !== undefined) return ipPort(v);
  }
  if (od.httpHeaderName !== undefined) {
    const v = ctx.headers.get(od.httpHeaderName);
    if (v !== undefined) return ipPort(v);
  }
  return undefined;
}

/** `IP:port` only: Envoy's `parseInternetAddressAndPortNoThrow` does not resolve names. */
export function ipPort(text: string): Endpoint | undefined {
  const ep = parseHostPort(text.trim());
  return ep !== undefined && isIP(ep.address) !== 0 ? ep : undefined;
}

function metadataString(md: DynamicMetadata, key: MetadataKey): string | undefined {
  let node: Json | undefined = md.get(key.key);
  for (const seg of key.path) {
    if (node === null || typeof node !== 'object' || Array.isArray(node)) return undefined;
    node = node[seg];
  }
  return typeof node === 'string' ? node : undefined;
}
