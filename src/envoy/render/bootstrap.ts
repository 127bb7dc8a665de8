/**
 * The Envoy bootstrap: the public and internal listeners with the ext_proc filter, the gate cluster and one
 * ORIGINAL_DST cluster per route-table cluster. Every field is checked against Envoy's protos by
 * test/envoy-static; behaviour notes cite Envoy's source (envoyproxy/envoy, commit in each comment).
 */
import { extProcFilter } from './ext-proc-filter.js';
import { type Breakers, gateBreakers, poolBreakers, type RenderInput } from './input.js';
import { gateIsStatic, type RenderSettings, renderFlags } from './settings.js';
import { header, indent, scalar } from './text.js';

export const GATE_CLUSTER = 'kvgate_gate';
/** The internal listener's gate cluster, rendered when the internal listener has its own client certificate. */
export const GATE_INTERNAL_CLUSTER = 'kvgate_gate_internal';

/** The cluster the internal listener's ext_proc filter uses. */
function internalGateCluster(s: RenderSettings): string {
  return s.gateTls?.internalCertFile !== undefined ? GATE_INTERNAL_CLUSTER : GATE_CLUSTER;
}

/**
 * Requests per gate connection before Envoy opens a new one. Node's HTTP/2 server (nghttp2's rapid-reset guard:
 * a burst of 1,000 stream resets, refilled at 33/s) answers a reset flood with GOAWAY; Envoy then fails only the
 * streams it opened after the GOAWAY's last_stream_id and moves on to a new connection. Capping the requests per
 * connection below the burst keeps a connection from ever reaching that point, whatever closes its streams.
 */
export const GATE_MAX_REQUESTS_PER_CONNECTION = 900;

/** The bootstrap as YAML text. */
export function renderBootstrap(input: RenderInput, s: RenderSettings): string {
  const lines = [
    ...header(renderFlags('bootstrap', s), [
      'kvgate: the Envoy bootstrap for the full P/D topology (Envoy v3 API).',
      '',
      '  client ─► public ─ext_proc─► kvgate gate ─► route by x-kvgate-decode-cluster (+ -endpoint)',
      '                                             ─► decode sidecar ─► local vLLM decode',
      '  decode sidecar (prefill leg) ─► internal ─ext_proc─► gate checks the contract (hop)',
      '                                             ─► route by x-kvgate-prefill-cluster (+ -endpoint)',
      '                                             ─► prefill sidecar ─► local vLLM prefill',
      '',
      'Bind the internal listener to an address only the decode sidecars can reach. See docs/operator-guide.md.',
      '',
      'Security: the gate removes every client-sent x-kvgate-* header and always overwrites the routing headers it',
      'sets; with failure_mode_allow: false a gate that is down or slow fails the request closed (500 / 504) instead',
      'of letting a client-chosen route through.',
      ...(s.gateTls === undefined
        ? [
            '',
            'PLAINTEXT to the gate: rendered without --gate-tls-* flags, so Envoy speaks plaintext gRPC to the gate, and only',
            'a gate with insecure: true accepts it (any client reaching its port could then claim the internal role). For a',
            'local test only; render with --gate-tls-ca/-cert/-key and --gate-tls-internal-cert/-key for anything else.',
          ]
        : []),
    ]),
    'admin:',
    `  address: { socket_address: { address: 127.0.0.1, port_value: ${String(s.adminPort)} } }   # loopback: the admin API can stop Envoy`,
    '',
    ...runtime(s),
    '',
    'static_resources:',
    '  listeners:',
    ...indent(publicListener(input, s), 2),
    '',
    ...indent(internalListener(input, s), 2),
    '',
    '  clusters:',
    ...indent(gateCluster(input, s, 'public'), 2),
    ...(internalGateCluster(s) === GATE_INTERNAL_CLUSTER ? ['', ...indent(gateCluster(input, s, 'internal'), 2)] : []),
    '',
    '  # One cluster per route-table cluster. The gate picks the endpoint (only endpoints whose live fingerprint equals',
    "  # the group's), so the pools are ORIGINAL_DST clusters that connect to the IP:port the gate stamped. They have no",
    "  # host list for Envoy to health-check: endpoint health is the gate's live worker view (it polls each sidecar's",
    '  # /kvgate/v1/status; an unreachable, stale, unverified or draining endpoint takes no new requests).',
    ...input.clusters.flatMap((c) => indent(poolCluster(c.name, c.role, c.pools, c.capacity), 2)),
  ];
  return `${lines.join('\n')}\n`;
}

/**
 * The static runtime layer. `ext_proc_graceful_grpc_close` (a FALSE_RUNTIME_GUARD since Envoy 1.34,
 * source/common/runtime/runtime_features.cc at envoyproxy/envoy c9e9214) makes Envoy half-close a finished ext_proc
 * stream and wait for the gate's OK instead of resetting it (ext_proc.cc closeStreamMaybeGraceful at 2940127);
 * the gate ends a stream with OK when Envoy half-closes (src/gate/server.ts). Envoy 1.37 also closes the stream as
 * soon as nothing is left to process (`ext_proc_stream_close_optimization`, a RUNTIME_GUARD on by default; ext_proc.cc
 * closeGrpcStreamIfLastRespReceived): written out for 1.37 so the file says which stream lifetime the gate gets.
 * Keys Envoy does not know are skipped when the layer loads, never an error.
 */
function runtime(s: RenderSettings): string[] {
  const lines = [
    'layered_runtime:',
    '  layers:',
    '  - name: kvgate',
    '    static_layer:',
    '      envoy.reloadable_features.ext_proc_graceful_grpc_close: true   # half-close finished ext_proc streams, no reset',
  ];
  if (s.envoyVersion === '1.37') {
    lines.push(
      '      envoy.reloadable_features.ext_proc_stream_close_optimization: true   # 1.37 default: stream ends after the last answer',
    );
  }
  return lines;
}

/**
 * The public listener's HCM stream_idle_timeout (the internal listener leaves Envoy's default, also 5 minutes): above
 * max_message_timeout, so a request the gate queues is not reset while it waits. The Istio set patches the same value
 * in, because Istio sets 0 (disabled) on every HCM it builds (istio.ts).
 */
export const STREAM_IDLE_TIMEOUT_S = 300;

/**
 * How long a client may take to send its request, on both listeners (HCM `request_headers_timeout` and
 * `request_timeout`; both off by default in Envoy). The request timer runs until the router has sent the whole request
 * on (or the response starts), so it covers the body and the gate's queue, which max_message_timeout keeps under 30 s:
 * a minute leaves the body half. ConnectionManagerImpl::ActiveStream::onRequestTimeout answers 408.
 */
export const REQUEST_HEADERS_TIMEOUT_S = 10;
export const REQUEST_TIMEOUT_S = 60;

export function requestTimeouts(): string[] {
  return [
    `        request_headers_timeout: ${String(REQUEST_HEADERS_TIMEOUT_S)}s              # headers not in by then: 408`,
    `        request_timeout: ${String(REQUEST_TIMEOUT_S)}s                      # the whole request in and sent on within a minute, else 408`,
  ];
}

/**
 * The buffer filter before ext_proc (BUFFERED only): the gate's stream opens when the request is whole, so a client
 * that trickles its body holds no stream of the gate cluster (whose circuit breaker counts them). Envoy's ext_proc
 * opens its stream at the request headers; buffer_filter.cc stops iteration until end_stream, so the filters after
 * it see nothing before. Past max_request_bytes (= limits.maxBodyBytes) the HCM answers 413. FULL_DUPLEX_STREAMED
 * streams the body to the gate by design, and is left to request_timeout.
 */
function bufferFilter(input: RenderInput, s: RenderSettings, role: 'public' | 'internal'): string[] {
  // The internal listener's ext_proc is BUFFERED in every mode (ext-proc-filter.ts).
  if (role === 'public' && s.requestBodyMode === 'FULL_DUPLEX_STREAMED') return [];
  const [first, ...rest] = bufferFilterConfig(input.maxBodyBytes);
  return [
    '        # The whole request before ext_proc, whose gate stream opens at the headers: a client that trickles its body',
    '        # then holds no gate stream (the gate cluster breaker counts them).',
    ...indent([`- ${first!}`, ...indent(rest, 2)], 8),
  ];
}

/** The buffer filter's config (name and typed_config), for envoy.yaml and the Istio EnvoyFilter alike. */
export function bufferFilterConfig(maxBodyBytes: number): string[] {
  return [
    'name: envoy.filters.http.buffer',
    'typed_config:',
    '  "@type": type.googleapis.com/envoy.extensions.filters.http.buffer.v3.Buffer',
    `  max_request_bytes: ${String(maxBodyBytes)}              # = limits.maxBodyBytes: 413 past it`,
  ];
}

function publicListener(input: RenderInput, s: RenderSettings): string[] {
  return [
    '# ── public: every client request is bound to one compatibility group before anything else happens ──',
    '- name: public',
    `  address: { socket_address: { address: ${s.listenAddress}, port_value: ${String(s.publicPort)} } }`,
    s.requestBodyMode === 'FULL_DUPLEX_STREAMED'
      ? `  per_connection_buffer_limit_bytes: ${String(input.maxBodyBytes)}      # = limits.maxBodyBytes (the gate refuses bodies over it: 413)`
      : `  per_connection_buffer_limit_bytes: ${String(input.maxBodyBytes)}      # = limits.maxBodyBytes: BUFFERED bodies over it get 413`,
    '  filter_chains:',
    '  - filters:',
    '    - name: envoy.filters.network.http_connection_manager',
    '      typed_config:',
    '        "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager',
    '        stat_prefix: kvgate_public',
    `        stream_idle_timeout: ${String(STREAM_IDLE_TIMEOUT_S)}s                  # long generations stream; idle, not total, is bounded`,
    ...requestTimeouts(),
    ...(s.useRemoteAddress
      ? ['        use_remote_address: true                   # x-forwarded-for from the peer, not from the client']
      : []),
    '        route_config:',
    '          name: public',
    '          virtual_hosts:',
    '          - name: inference',
    '            domains: ["*"]',
    '            routes:',
    '            - match: { prefix: "/v1/" }',
    '              route:',
    '                cluster_header: x-kvgate-decode-cluster   # set by the gate; a missing/unknown one is a 503',
    '                cluster_not_found_response_code: SERVICE_UNAVAILABLE',
    '                timeout: 0s                                # no total timeout: responses stream',
    '        # Authentication goes HERE, before ext_proc (jwt_authn, ext_authz...): it must set the tenant header the',
    '        # route table trusts (tenancy.source) and remove any client-sent copy. See docs/security.md.',
    '        http_filters:',
    ...bufferFilter(input, s, 'public'),
    ...indent([`- ${extProcFilter('public', GATE_CLUSTER, s)[0]!}`, ...indent(extProcFilter('public', GATE_CLUSTER, s).slice(1), 2)], 8),
    '        - name: envoy.filters.http.router',
    '          typed_config:',
    '            "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router',
  ];
}

function internalListener(input: RenderInput, s: RenderSettings): string[] {
  const filter = extProcFilter('internal', internalGateCluster(s), s);
  return [
    '# ── internal: prefill legs sent by decode sidecars; the gate checks each against its signed contract ──',
    '- name: internal',
    `  address: { socket_address: { address: ${s.listenAddress}, port_value: ${String(s.internalPort)} } }`,
    `  per_connection_buffer_limit_bytes: ${String(input.maxBodyBytes)}`,
    '  filter_chains:',
    '  - filters:',
    '    - name: envoy.filters.network.http_connection_manager',
    '      typed_config:',
    '        "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager',
    '        stat_prefix: kvgate_internal',
    "        # The gate checks each prefill leg's contract against x-request-id: never let Envoy regenerate it here",
    '        # (it would for requests it classes as external when use_remote_address is set).',
    '        preserve_external_request_id: true',
    ...requestTimeouts(),
    '        route_config:',
    '          name: internal',
    '          virtual_hosts:',
    '          - name: prefill',
    '            domains: ["*"]',
    '            routes:',
    '            - match: { prefix: "/v1/" }',
    '              route:',
    '                cluster_header: x-kvgate-prefill-cluster',
    '                cluster_not_found_response_code: SERVICE_UNAVAILABLE',
    '                timeout: 120s                              # one prefill; bounded',
    '        http_filters:',
    ...bufferFilter(input, s, 'internal'),
    ...indent([`- ${filter[0]!}`, ...indent(filter.slice(1), 2)], 8),
    '        - name: envoy.filters.http.router',
    '          typed_config:',
    '            "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router',
  ];
}

function breakerLines(b: Partial<Breakers>): string[] {
  const fields = [
    b.maxConnections === undefined ? '' : `max_connections: ${String(b.maxConnections)}`,
    b.maxPendingRequests === undefined ? '' : `max_pending_requests: ${String(b.maxPendingRequests)}`,
    b.maxRequests === undefined ? '' : `max_requests: ${String(b.maxRequests)}`,
  ].filter((f) => f !== '');
  return ['circuit_breakers:', `  thresholds: [{ priority: DEFAULT, ${fields.join(', ')} }]`];
}

function gateCluster(input: RenderInput, s: RenderSettings, role: 'public' | 'internal'): string[] {
  const name = role === 'public' ? GATE_CLUSTER : GATE_INTERNAL_CLUSTER;
  const address = gateIsStatic(s)
    ? ['type: STATIC']
    : [
        'type: STRICT_DNS                 # every gate pod behind a headless Service: Envoy spreads streams and checks each',
        'dns_lookup_family: V4_ONLY',
        'dns_refresh_rate: 5s',
      ];
  return [
    '# The gate: gRPC needs HTTP/2. Health-checked over grpc.health.v1 so a draining gate stops getting streams.',
    "# max_requests_per_connection: Node's HTTP/2 server answers a burst of stream resets (nghttp2's rapid-reset",
    '# guard: 1,000, refilled at 33/s) with GOAWAY; Envoy then fails the ext_proc streams it opened after the',
    "# GOAWAY's last_stream_id (streams already open finish) and opens a new connection. Graceful close (runtime",
    '# above) avoids the resets; the cap keeps any connection below the burst whatever still resets a stream.',
    '# circuit_breakers: one stream per request in flight (Envoy 1.36 holds it until the request ends) plus the',
    "# queue, twice over; never below Envoy's default 1,024.",
    '# no_traffic_interval: until this Envoy has sent the gate a request it would check every 60 s (its default), so a',
    '# gate drained before the first request would still get it; 2 s, as under traffic.',
    ...(role === 'internal'
      ? ['# The same gate, for the internal listener: its own client certificate, so the gate gives its streams the internal role.']
      : []),
    `- name: ${name}`,
    ...indent(address, 2),
    '  connect_timeout: 1s',
    '  typed_extension_protocol_options:',
    '    envoy.extensions.upstreams.http.v3.HttpProtocolOptions:',
    '      "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions',
    '      explicit_http_config: { http2_protocol_options: {} }',
    `      common_http_protocol_options: { max_requests_per_connection: ${String(GATE_MAX_REQUESTS_PER_CONNECTION)} }`,
    ...indent(breakerLines(gateBreakers(input)), 2),
    ...indent(gateTransportSocket(s, role), 2),
    '  health_checks:',
    '  - timeout: 1s',
    '    interval: 2s',
    '    no_traffic_interval: 2s',
    '    unhealthy_threshold: 2',
    '    healthy_threshold: 1',
    '    grpc_health_check: { service_name: envoy.service.ext_proc.v3.ExternalProcessor }',
    '  load_assignment:',
    `    cluster_name: ${name}`,
    '    endpoints:',
    '    - lb_endpoints:',
    `      - endpoint: { address: { socket_address: { address: ${s.gateHost}, port_value: ${String(s.gatePort)} } } }`,
  ];
}

/** mTLS to the gate's port: Envoy presents its client certificate and checks the gate's against the CA and name. */
function gateTransportSocket(s: RenderSettings, role: 'public' | 'internal'): string[] {
  const tls = s.gateTls;
  if (tls === undefined) return [];
  const name = tls.serverName ?? s.gateHost;
  const certFile = role === 'internal' && tls.internalCertFile !== undefined ? tls.internalCertFile : tls.certFile;
  const keyFile = role === 'internal' && tls.internalKeyFile !== undefined ? tls.internalKeyFile : tls.keyFile;
  return [
    "transport_socket:                # mTLS to the gate port (the gate checks Envoy's client certificate)",
    '  name: envoy.transport_sockets.tls',
    '  typed_config:',
    '    "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext',
    `    sni: ${name}`,
    '    common_tls_context:',
    '      alpn_protocols: [h2]',
    `      tls_certificates: [{ certificate_chain: { filename: ${scalar(certFile)} }, private_key: { filename: ${scalar(keyFile)} } }]`,
    '      validation_context:',
    `        trusted_ca: { filename: ${scalar(tls.caFile)} }`,
    `        match_typed_subject_alt_names: [{ san_type: DNS, matcher: { exact: ${name} } }]`,
  ];
}

/**
 * Envoy's idle timeout for connections to the sidecars, below the sidecar's HTTP keep-alive timeout
 * (src/sidecar/config.ts `keepAliveTimeoutMs`, 75 s by default), so the sidecar never closes a connection Envoy may
 * pick at that moment. Envoy's own default is one hour (envoyproxy/envoy api/envoy/config/core/v3/protocol.proto,
 * HttpProtocolOptions.idle_timeout).
 */
export const POOL_IDLE_TIMEOUT_S = 60;

function poolCluster(name: string, role: 'prefill' | 'decode', pools: readonly string[], capacity: number): string[] {
  const headerName = role === 'prefill' ? 'x-kvgate-prefill-endpoint' : 'x-kvgate-decode-endpoint';
  return [
    `- name: ${name}                  # pools: ${pools.join(', ')}; the gate admits ${String(capacity)} at once`,
    '  type: ORIGINAL_DST',
    '  lb_policy: CLUSTER_PROVIDED',
    '  connect_timeout: 1s',
    `  original_dst_lb_config: { use_http_header: true, http_header_name: ${headerName} }`,
    '  # Envoy closes an idle upstream connection before the sidecar would (its keepAliveTimeoutMs, 75 s by default):',
    '  # reusing a connection the sidecar is closing resets the request (503 upstream_reset_before_response_started).',
    '  typed_extension_protocol_options:',
    '    envoy.extensions.upstreams.http.v3.HttpProtocolOptions:',
    '      "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions',
    '      explicit_http_config: { http_protocol_options: {} }',
    `      common_http_protocol_options: { idle_timeout: ${String(POOL_IDLE_TIMEOUT_S)}s }`,
    ...indent(breakerLines(poolBreakers(capacity)), 2),
  ];
}
