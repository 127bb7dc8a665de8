/**
 * The typed, frozen subset of an Envoy v3 bootstrap that the harness implements. Field names follow Envoy's where
 * a reader would look them up in Envoy's docs; `ProcessingMode` keeps the proto's snake_case because the same shape
 * arrives on the wire as `ProcessingResponse.mode_override`.
 */

import type { UpstreamTlsConfig } from './transport-socket.js';
import type { CircuitBreakers } from './circuit-breakers.js';
import type { RuntimeConfig } from './runtime-config.js';

export type HeaderSendMode = 'DEFAULT' | 'SEND' | 'SKIP';
export type BodySendMode = 'NONE' | 'STREAMED' | 'BUFFERED' | 'BUFFERED_PARTIAL' | 'FULL_DUPLEX_STREAMED' | 'GRPC';

export const HEADER_SEND_MODES: readonly HeaderSendMode[] = ['DEFAULT', 'SEND', 'SKIP'];
export const BODY_SEND_MODES: readonly BodySendMode[] = [
  'NONE',
  'STREAMED',
  'BUFFERED',
  'BUFFERED_PARTIAL',
  'FULL_DUPLEX_STREAMED',
  'GRPC',
];
/** Body modes the harness implements; the rest are refused at load. */
export const SUPPORTED_BODY_MODES: readonly BodySendMode[] = ['NONE', 'BUFFERED', 'BUFFERED_PARTIAL', 'FULL_DUPLEX_STREAMED'];
/** Body modes a `mode_override` may switch to in the harness (an override into FULL_DUPLEX_STREAMED is not modelled). */
export const OVERRIDE_BODY_MODES: readonly BodySendMode[] = ['NONE', 'BUFFERED', 'BUFFERED_PARTIAL'];

export interface ProcessingMode {
  readonly request_header_mode: HeaderSendMode;
  readonly response_header_mode: HeaderSendMode;
  readonly request_body_mode: BodySendMode;
  readonly response_body_mode: BodySendMode;
  readonly request_trailer_mode: HeaderSendMode;
  readonly response_trailer_mode: HeaderSendMode;
}

/** `envoy.config.common.mutation_rules.v3.HeaderMutationRules`; regexes are kept as RE2 source text. */
export interface MutationRulesConfig {
  readonly allowAllRouting: boolean;
  readonly allowEnvoy: boolean;
  readonly disallowSystem: boolean;
  readonly disallowAll: boolean;
  readonly disallowIsError: boolean;
  readonly allowExpression: string | undefined;
  readonly disallowExpression: string | undefined;
}

export type RouteCacheAction = 'DEFAULT' | 'CLEAR' | 'RETAIN';

export interface ExtProcFilterConfig {
  readonly clusterName: string;
  /** gRPC `:authority`; Envoy uses the cluster name unless `envoy_grpc.authority` is set. */
  readonly authority: string;
  /** `grpc_service.initial_metadata`: sent with every stream (a gate can tell listeners apart by it). */
  readonly initialMetadata: readonly (readonly [string, string])[];
  /**
   * `grpc_service.timeout`, recorded only: Envoy starts ext_proc streams without a stream timeout
   * (filters/common/ext_proc/grpc_client_impl.h), so it bounds nothing; message_timeout does.
   */
  readonly grpcTimeoutMs: number | undefined;
  readonly failureModeAllow: boolean;
  readonly messageTimeoutMs: number;
  readonly maxMessageTimeoutMs: number;
  readonly processingMode: ProcessingMode;
  readonly mutationRules: MutationRulesConfig;
  readonly routeCacheAction: RouteCacheAction;
  readonly receivingNamespaces: readonly string[];
  readonly forwardingNamespaces: readonly string[];
  readonly requestAttributes: readonly string[];
  readonly allowModeOverride: boolean;
  readonly disableImmediateResponse: boolean;
  readonly statusOnError: number;
  readonly statPrefix: string;
}

export interface RouteAction {
  /** Exactly one of `cluster` / `clusterHeader` is set. */
  readonly cluster: string | undefined;
  readonly clusterHeader: string | undefined;
  readonly clusterNotFoundResponseCode: number;
  /** 0 = no timeout ("0s"); Envoy's default is 15 s. */
  readonly timeoutMs: number;
  /** Per-route stream idle timeout; `undefined` when not configured. */
  readonly idleTimeoutMs: number | undefined;
}

export type RouteMatch = { readonly prefix: string } | { readonly path: string };

export interface RouteEntry {
  readonly name: string | undefined;
  readonly match: RouteMatch;
  readonly action: RouteAction;
}

export interface VirtualHost {
  readonly name: string;
  readonly domains: readonly string[];
  readonly routes: readonly RouteEntry[];
}

export interface HcmConfig {
  readonly statPrefix: string;
  /** `stream_idle_timeout`, Envoy default 5 min; 0 disables. A route's `idle_timeout` overrides it. */
  readonly streamIdleTimeoutMs: number;
  readonly routeConfigName: string;
  readonly virtualHosts: readonly VirtualHost[];
  /**
   * `request_timeout` (Envoy default 0: off): the whole request must be received, and sent on by the router, within
   * it, or the stream gets a local 408 (504 once the request was all in). The response starting disarms it.
   */
  readonly requestTimeoutMs: number;
  /** `request_headers_timeout` (default 0: off): the headers must arrive within it (a local 408 otherwise). */
  readonly requestHeadersTimeoutMs: number;
  /** The buffer filter before the ext_proc filter, if the chain has one: its `max_request_bytes`. */
  readonly buffer: { readonly maxRequestBytes: number } | undefined;
  /** The ext_proc filter before the router, if the chain has one. */
  readonly extProc: ExtProcFilterConfig | undefined;
}

export interface ListenerConfig {
  readonly name: string;
  readonly address: string;
  readonly port: number;
  /** Envoy's request/response buffer limit for this listener's streams (default 1 MiB). */
  readonly perConnectionBufferLimitBytes: number;
  readonly hcm: HcmConfig;
}

export interface Endpoint {
  readonly address: string;
  readonly port: number;
}

export type ClusterType = 'STATIC' | 'STRICT_DNS' | 'ORIGINAL_DST';
export type LbPolicy = 'ROUND_ROBIN' | 'LEAST_REQUEST' | 'CLUSTER_PROVIDED';

/** `metadata_key` / `override_host` metadata source: namespace plus a path of struct keys. */
export interface MetadataKey {
  readonly key: string;
  readonly path: readonly string[];
}

export interface OriginalDstConfig {
  /** Header to read `IP:port` from; `undefined` when `use_http_header` is false. */
  readonly httpHeaderName: string | undefined;
  readonly metadataKey: MetadataKey | undefined;
}

export type OverrideHostSource = { readonly metadata: MetadataKey } | { readonly header: string };

export interface OverrideHostConfig {
  readonly sources: readonly OverrideHostSource[];
  readonly fallback: 'ROUND_ROBIN' | 'LEAST_REQUEST';
}

/** Recorded; run (gRPC checks only) with EnvoyHarnessOptions.activeHealthChecks (health-check.ts, README). */
export interface HealthCheckConfig {
  readonly timeoutMs: number;
  readonly intervalMs: number;
  /** `no_traffic_interval` (Envoy's default 60 s): the interval while the cluster has never carried traffic. */
  readonly noTrafficIntervalMs: number;
  /** `no_traffic_healthy_interval` (default: `no_traffic_interval`): the same, after a passing check. */
  readonly noTrafficHealthyIntervalMs: number;
  /** `interval_jitter` (default 0): a random 0..jitter ms added to every interval. */
  readonly intervalJitterMs: number;
  readonly unhealthyThreshold: number;
  readonly healthyThreshold: number;
  /** `http_health_check.path` or `grpc_health_check.service_name` */
  readonly check: { readonly http: string } | { readonly grpc: string };
}

export interface ClusterConfig {
  readonly name: string;
  readonly type: ClusterType;
  readonly lbPolicy: LbPolicy;
  readonly connectTimeoutMs: number;
  readonly endpoints: readonly Endpoint[];
  readonly http2: boolean;
  /** `common_http_protocol_options.max_requests_per_connection`: a new connection after this many streams. */
  readonly maxRequestsPerConnection: number | undefined;
  /**
   * `common_http_protocol_options.idle_timeout`: an upstream connection idle this long is closed by Envoy
   * (source/common/http/conn_pool_base.cc, the idle timer of an active client); undefined: Envoy's one hour.
   */
  readonly idleTimeoutMs?: number | undefined;
  readonly originalDst: OriginalDstConfig | undefined;
  readonly overrideHost: OverrideHostConfig | undefined;
  readonly healthChecks: readonly HealthCheckConfig[];
  /** STRICT_DNS: `dns_refresh_rate` (recorded; a test plays each DNS answer, EnvoyHarness.setClusterEndpoints). */
  readonly dnsRefreshMs?: number | undefined;
  /** STRICT_DNS: the DNS names (`name:port`) of its load assignment, which the harness cannot resolve itself. */
  readonly dnsNames?: readonly string[];
  /** `circuit_breakers` (Envoy's defaults when absent); see circuit-breakers.ts for what is enforced. */
  readonly circuitBreakers: CircuitBreakers;
  /** `transport_socket` (envoy.transport_sockets.tls): TLS with a client certificate to this cluster's hosts. */
  readonly tls?: UpstreamTlsConfig | undefined;
}

export interface EnvoyConfig {
  readonly listeners: readonly ListenerConfig[];
  readonly clusters: Readonly<Record<string, ClusterConfig>>;
  /** `layered_runtime` static layers: the ext_proc runtime guards (runtime-config.ts). */
  readonly runtime: RuntimeConfig;
}
