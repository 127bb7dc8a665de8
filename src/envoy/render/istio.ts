/**
 * The Istio set (envoy/istio/): EnvoyFilters putting the ext_proc filter on two dedicated gateways, routing by the
 * stamped pool header (Gateways + VirtualServices), and DestinationRules sizing the gate's and the pools' connection
 * pools and capping requests per gate connection. DestinationRule field names follow istio/api
 * networking/v1alpha3/destination_rule.proto (commit 02462985): connectionPool.tcp.maxConnections,
 * connectionPool.http.{http1MaxPendingRequests,http2MaxRequests,maxRequestsPerConnection,idleTimeout}, tls
 * (ClientTLSSettings). A pool's idleTimeout stays below the sidecar's keep-alive timeout (bootstrap.ts POOL_IDLE_TIMEOUT_S).
 */
import {
  bufferFilterConfig,
  GATE_MAX_REQUESTS_PER_CONNECTION,
  POOL_IDLE_TIMEOUT_S,
  requestTimeouts,
  STREAM_IDLE_TIMEOUT_S,
} from './bootstrap.js';
import { extProcFilter } from './ext-proc-filter.js';
import { gateBreakers, poolBreakers, type RenderCluster, type RenderInput } from './input.js';
import { poolServiceDocs, poolServiceOf } from './pool-services.js';
import { type RenderSettings, renderFlags } from './settings.js';
import { header, indent, scalar } from './text.js';

export { renderIstioSecurity } from './istio-security.js';

/** A Service's in-cluster host name. */
export function serviceHost(name: string, s: RenderSettings): string {
  return `${name}.${s.namespace}.svc.cluster.local`;
}

/**
 * The key under which Istio's jwt_authn filter writes every verified JWT payload in the `envoy.filters.http.jwt_authn`
 * metadata namespace: a fixed "payload", not the issuer (istio/istio pilot/pkg/security/authn/policy_applier.go
 * @46d59cea `convertToEnvoyJwtConfig`: `PayloadInMetadata: filters.EnvoyJwtFilterPayload`; pilot/pkg/xds/filters/
 * filters.go @4f361429: `EnvoyJwtFilterPayload = "payload"`). A route table reading the tenant from that metadata on
 * Istio uses `path: [payload, <claim>]`.
 */
export const ISTIO_JWT_PAYLOAD_KEY = 'payload';

/** Istio's name for the gate's outbound cluster. */
export function istioGateCluster(s: RenderSettings): string {
  return `outbound|${String(s.gatePort)}||${serviceHost(s.gateService, s)}`;
}

export function renderIstioExtProc(input: RenderInput, s: RenderSettings): string {
  const gateHost = serviceHost(s.gateService, s);
  const lines = [
    ...header(renderFlags('istio-ext-proc', s), [
      'kvgate on Istio: the ext_proc filter on two dedicated Istio gateways, with the semantics of envoy/envoy.yaml.',
      'Read envoy/istio/README.md first (what maps to what, and the one thing that differs: endpoint picking).',
      '',
      `  kvgate-public    (helm install kvgate-public istio/gateway -n ${s.namespace})        = envoy.yaml's \`public\` listener`,
      `  kvgate-internal  (helm install kvgate-internal istio/gateway -n ${s.namespace} \\`,
      "                      --set service.type=ClusterIP)                            = envoy.yaml's `internal` listener",
      '',
      'The istio/gateway chart labels its pods `istio: <release name>` (an `istio-` prefix is dropped); the',
      `workloadSelectors below rely on that. The gate is the Service ${s.gateService} in namespace ${s.namespace}, so Istio`,
      `names its cluster \`${istioGateCluster(s)}\`; the Service's appProtocol grpc makes that cluster`,
      'HTTP/2, as gRPC needs. Connection limits for that cluster are in destination-rules.yaml.',
      '',
      "Every patch value below is checked against Envoy's protos by `npx vitest run test/envoy-static`.",
    ]),
    ...gatewayFilter('public', input, s, gateHost),
    '---',
    ...gatewayFilter('internal', input, s, gateHost),
  ];
  return `${lines.join('\n')}\n`;
}

function gatewayFilter(listener: 'public' | 'internal', input: RenderInput, s: RenderSettings, gateHost: string): string[] {
  const filter = extProcFilter(listener, istioGateCluster(s), s);
  const pub = listener === 'public';
  const lines = pub
    ? []
    : [
        '# The internal gateway: prefill legs sent by decode sidecars (their `prefill.via.envoy` is',
        `# http://kvgate-internal.${s.namespace}.svc.cluster.local). \`x-kvgate-listener: internal\` is what makes the gate treat a`,
        '# stream as a hop and trust the contract it carries, so this gateway must be reachable by decode workers only',
        '# (envoy/istio/security.yaml, deploy/kubernetes/network-policies.yaml) and never exposed outside the cluster.',
      ];
  lines.push(
    'apiVersion: networking.istio.io/v1alpha3',
    'kind: EnvoyFilter',
    'metadata:',
    `  name: kvgate-${listener}`,
    `  namespace: ${s.namespace}`,
    'spec:',
    '  workloadSelector:',
    `    labels: { istio: kvgate-${listener} }`,
    '  configPatches:',
    ...(pub && s.requestBodyMode === 'FULL_DUPLEX_STREAMED'
      ? []
      : [
          "  # The whole request first (Envoy's buffer filter, as envoy.yaml): ext_proc opens the gate's stream at the",
          '  # request headers, so without it a client that trickles its body holds a gate stream all along. Inserted',
          '  # before the router ahead of ext_proc, so the chain ends buffer, ext_proc, router.',
          ...insertBeforeRouter(bufferFilterConfig(input.maxBodyBytes)),
        ]),
    ...(pub
      ? [
          '  # ext_proc right before the router, on every HTTP connection manager of this gateway. Authentication filters',
          '  # Istio adds (RequestAuthentication -> jwt_authn) run earlier in the chain, so the tenant is known by then.',
          `  # Istio's jwt_authn writes each verified payload under the key \`${ISTIO_JWT_PAYLOAD_KEY}\` (for every issuer): to read the`,
          '  # tenant from metadata, forward envoy.filters.http.jwt_authn (metadata_options.forwarding_namespaces) and set',
          `  # tenancy.source.metadata: { namespace: envoy.filters.http.jwt_authn, path: [${ISTIO_JWT_PAYLOAD_KEY}, <claim>] }.`,
        ]
      : []),
    ...insertBeforeRouter(filter),
  );
  lines.push(...connectionManagerMerge(pub));
  lines.push(
    `  # BUFFERED bodies must fit the connection buffer: the route table's limits.maxBodyBytes, as envoy.yaml.`,
    '  - applyTo: LISTENER',
    '    match: { context: GATEWAY }',
    '    patch:',
    '      operation: MERGE',
    '      value:',
    `        per_connection_buffer_limit_bytes: ${String(input.maxBodyBytes)}`,
    '  # Health-check every gate pod over grpc.health.v1, as envoy.yaml does: a draining gate answers NOT_SERVING, which',
    '  # ejects it at once (unhealthy_threshold counts only checks that time out or cannot connect), so it stops getting',
    "  # new streams within interval + timeout (3 s, inside the gate's drain.announceMs 5 s). no_traffic_interval: a",
    '  # gateway that has not sent the gate a request yet would otherwise check only every 60 s (Envoy default).',
    '  - applyTo: CLUSTER',
    '    match:',
    '      context: GATEWAY',
    `      cluster: { service: ${gateHost}, portNumber: ${String(s.gatePort)} }`,
    '    patch:',
    '      operation: MERGE',
    '      value:',
    '        health_checks:',
    '        - timeout: 1s',
    '          interval: 2s',
    '          no_traffic_interval: 2s',
    '          unhealthy_threshold: 2',
    '          healthy_threshold: 1',
    '          grpc_health_check: { service_name: envoy.service.ext_proc.v3.ExternalProcessor }',
  );
  return lines;
}

/** An HTTP_FILTER patch inserting `filter` (name and typed_config) right before the router of every HCM. */
function insertBeforeRouter(filter: readonly string[]): string[] {
  return [
    '  - applyTo: HTTP_FILTER',
    '    match:',
    '      context: GATEWAY',
    '      listener:',
    '        filterChain:',
    '          filter:',
    '            name: envoy.filters.network.http_connection_manager',
    '            subFilter: { name: envoy.filters.http.router }',
    '    patch:',
    '      operation: INSERT_BEFORE',
    '      value:',
    ...indent(filter, 8),
  ];
}

/**
 * The HTTP connection manager settings envoy.yaml has and Istio's do not. Istio builds every HCM with
 * `StreamIdleTimeout = 0s` (disabled: istio/istio pilot/pkg/networking/core/listener_builder.go @7fd2c08f
 * `buildHTTPConnectionManager`), so both gateways get envoy.yaml's 300 s back: without it a stream that goes idle (a
 * stalled generation, or a FULL_DUPLEX_STREAMED body the gate never answers, where Envoy arms no message_timeout) is
 * never reset. The internal gateway also keeps the decode sidecar's x-request-id.
 */
function connectionManagerMerge(pub: boolean): string[] {
  const why = [
    "  # Istio builds every HTTP connection manager with stream_idle_timeout 0s (disabled); envoy.yaml's listeners reset",
    `  # a stream idle for ${String(STREAM_IDLE_TIMEOUT_S)} s (a stalled generation, or a FULL_DUPLEX_STREAMED body the gate never answers:`,
    '  # Envoy arms no message_timeout there). The same here, with its request_headers_timeout and request_timeout.',
  ];
  return [
    ...(pub
      ? why
      : [
          ...why,
          "  # The hop's contract names the request it was minted for, and the gate compares it with x-request-id. Istio",
          '  # gateways set use_remote_address, so Envoy regenerates x-request-id for any request it classes as external,',
          '  # and newer Envoy releases class no address as internal unless internal_address_config says so. Keep the id',
          '  # the decode sidecar sends, or every prefill leg is refused (403 contract_invalid, request_mismatch).',
        ]),
    '  - applyTo: NETWORK_FILTER',
    '    match:',
    '      context: GATEWAY',
    '      listener:',
    '        filterChain:',
    '          filter: { name: envoy.filters.network.http_connection_manager }',
    '    patch:',
    '      operation: MERGE',
    '      value:',
    '        name: envoy.filters.network.http_connection_manager',
    '        typed_config:',
    '          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager',
    `          stream_idle_timeout: ${String(STREAM_IDLE_TIMEOUT_S)}s`,
    ...indent(requestTimeouts(), 2),
    ...(pub ? [] : ['          preserve_external_request_id: true']),
  ];
}

export function renderIstioRouting(input: RenderInput, s: RenderSettings): string {
  const decode = input.clusters.filter((c) => c.role === 'decode');
  const prefill = input.clusters.filter((c) => c.role === 'prefill');
  const lines = [
    ...header(renderFlags('istio-routing', s), [
      "kvgate on Istio: routing by the headers the gate stamps (envoy.yaml's `cluster_header` routes).",
      '',
      "Istio has no `cluster_header`, so each route-table cluster goes to its pool's Kubernetes Service",
      `(\`${s.poolService}\`, rendered at the end of this file from the pool's discovery selector) through a VirtualService`,
      "header match. A pool the gate stamps but no route matches ends in the 503 catch-all, as envoy.yaml's",
      'cluster_not_found_response_code does.',
      '',
      "Within a pool Istio picks the pod (its load balancer, among READY pods: the sidecar's /healthz is 503 while the",
      'worker is unverified or draining). See README.md "Endpoint picking" for what that changes and what it does not.',
      '',
      "No route sets `retries`, so Istio's default policy applies (istio/istio pilot/pkg/networking/core/route/retry/",
      'retry.go @7adf6095 `ConvertPolicy`): up to 2 retries on another pod of the same pool, on',
      'connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes with no status codes listed, so a',
      "sidecar's 503 refusal reaches the client, while a request that never reached its pod is retried. envoy.yaml's",
      'ORIGINAL_DST routes retry nothing (a connect failure is a 503). Add `retries: { attempts: 0 }` for the same.',
      '',
      'These kinds have no Envoy proto; the static check lists them as not checked.',
    ]),
    ...gateway(
      'kvgate-public',
      s,
      '    hosts: ["*"]              # narrow to your inference host names; add an HTTPS server with your certificate',
    ),
    '---',
    ...gateway('kvgate-internal', s, '    hosts: ["*"]'),
    '---',
    "# Public: the decode pool. Before ext_proc runs the request matches the catch-all; the gate's mutation carries",
    '# clear_route_cache, the route is resolved again with x-kvgate-decode-cluster set, and one of these matches.',
    '# A client-sent x-kvgate-* header never survives to that point: the gate removes or overwrites every one.',
    ...virtualService('kvgate-public', 'x-kvgate-decode-cluster', decode, s, null, 'decode'),
    '---',
    '# Internal: prefill legs, routed by x-kvgate-prefill-cluster (which the gate overwrites after checking the hop).',
    ...virtualService('kvgate-internal', 'x-kvgate-prefill-cluster', prefill, s, '120s', 'prefill'),
    ...poolServiceDocs(input.clusters, s).docs.flatMap((d) => ['---', ...d]),
  ];
  return `${lines.join('\n')}\n`;
}

function gateway(name: string, s: RenderSettings, hosts: string): string[] {
  return [
    'apiVersion: networking.istio.io/v1',
    'kind: Gateway',
    'metadata:',
    `  name: ${name}`,
    `  namespace: ${s.namespace}`,
    'spec:',
    `  selector: { istio: ${name} }`,
    '  servers:',
    '  - port: { number: 80, name: http, protocol: HTTP }',
    hosts,
  ];
}

function virtualService(
  name: string,
  headerName: string,
  clusters: readonly RenderCluster[],
  s: RenderSettings,
  timeout: string | null,
  role: string,
): string[] {
  const lines = [
    'apiVersion: networking.istio.io/v1',
    'kind: VirtualService',
    'metadata:',
    `  name: ${name}`,
    `  namespace: ${s.namespace}`,
    'spec:',
    '  hosts: ["*"]',
    `  gateways: [${s.namespace}/${name}]`,
    '  http:',
  ];
  for (const c of clusters) {
    lines.push(
      `  - name: ${c.name.replaceAll('_', '-')}`,
      '    match:',
      '    - uri: { prefix: /v1/ }',
      `      headers: { ${headerName}: { exact: ${scalar(c.name)} } }`,
      '    route:',
      `    - destination: { host: ${serviceHost(poolServiceOf(c, s), s)}, port: { number: ${String(s.poolPort)} } }`,
      timeout === null
        ? "    # no timeout: responses stream (Istio sets no route timeout unless asked; envoy.yaml's `timeout: 0s`)"
        : `    timeout: ${timeout}             # one prefill; bounded (envoy.yaml: ${timeout})`,
    );
  }
  lines.push(
    "  - name: no-pool            # plain text, like Envoy's own 503 for an unknown cluster: this is not a gate refusal",
    '    directResponse:',
    '      status: 503',
    '      body:',
    `        string: "no route for the ${role} pool kvgate chose: the Istio routing and the route table disagree\\n"`,
  );
  return lines;
}

export function renderIstioDestinationRules(input: RenderInput, s: RenderSettings): string {
  const gate = gateBreakers(input);
  const lines = [
    ...header(renderFlags('istio-destination-rules', s), [
      "kvgate on Istio: connection pools for the gate and the pools (envoy.yaml's circuit_breakers and the gate",
      "cluster's max_requests_per_connection). Istio translates connectionPool into the cluster's circuit breakers.",
      '',
      'Not an Envoy proto: the static check lists these as not checked; field names follow istio/api',
      'networking/v1alpha3/destination_rule.proto.',
    ]),
    '# The gate: one ext_proc stream per request in flight (Envoy 1.36 keeps it until the request ends) plus the',
    `# queue, twice over. maxRequestsPerConnection ${String(GATE_MAX_REQUESTS_PER_CONNECTION)}: Node's HTTP/2 server answers a burst of stream resets`,
    "# with GOAWAY (nghttp2's rapid-reset guard), which fails the streams Envoy opened after its last_stream_id; the",
    "# cap keeps every connection below that burst. Istio gateways do not set Envoy's ext_proc_graceful_grpc_close",
    "# runtime flag (envoy.yaml does); set it through the gateway's bootstrap override to avoid the resets altogether.",
    'apiVersion: networking.istio.io/v1',
    'kind: DestinationRule',
    'metadata:',
    `  name: ${s.gateService}`,
    `  namespace: ${s.namespace}`,
    'spec:',
    `  host: ${serviceHost(s.gateService, s)}`,
    '  trafficPolicy:',
    '    connectionPool:',
    '      http:',
    `        http1MaxPendingRequests: ${String(gate.maxPendingRequests)}`,
    `        http2MaxRequests: ${String(gate.maxRequests)}`,
    `        maxRequestsPerConnection: ${String(GATE_MAX_REQUESTS_PER_CONNECTION)}`,
    ...indent(istioGateTls(s), 4),
  ];
  for (const c of input.clusters) {
    const b = poolBreakers(c.capacity);
    lines.push(
      '---',
      `# ${c.name} (pools ${c.pools.join(', ')}): the gate admits ${String(c.capacity)} at once; twice that before Istio refuses.`,
      'apiVersion: networking.istio.io/v1',
      'kind: DestinationRule',
      'metadata:',
      `  name: ${poolServiceOf(c, s)}`,
      `  namespace: ${s.namespace}`,
      'spec:',
      `  host: ${serviceHost(poolServiceOf(c, s), s)}`,
      '  trafficPolicy:',
      '    connectionPool:',
      `      tcp: { maxConnections: ${String(b.maxConnections)} }`,
      `      http: { http1MaxPendingRequests: ${String(b.maxPendingRequests)}, http2MaxRequests: ${String(b.maxRequests)}, idleTimeout: ${String(POOL_IDLE_TIMEOUT_S)}s }`,
    );
  }
  return `${lines.join('\n')}\n`;
}

/**
 * The gate's own mTLS port behind Istio: the gateway originates TLS with the given files (mode MUTUAL replaces
 * Istio's mesh mTLS for this host, so the gate pod's sidecar must not intercept the port: exclude it with
 * traffic.sidecar.istio.io/excludeInboundPorts). Without gate TLS, Istio's mesh mTLS protects the hop.
 */
function istioGateTls(s: RenderSettings): string[] {
  const tls = s.gateTls;
  if (tls === undefined) return [];
  const name = tls.serverName ?? serviceHost(s.gateService, s);
  return [
    "tls:                           # the gate's own mTLS port (exclude it from the gate pod's Istio sidecar)",
    '  mode: MUTUAL',
    `  clientCertificate: ${scalar(tls.certFile)}`,
    `  privateKey: ${scalar(tls.keyFile)}`,
    `  caCertificates: ${scalar(tls.caFile)}`,
    `  sni: ${name}`,
    `  subjectAltNames: [${name}]`,
  ];
}
