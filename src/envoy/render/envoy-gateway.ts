/**
 * The Envoy Gateway alternative (envoy/istio/envoy-gateway.yaml). Field names follow Envoy Gateway's v1alpha1 API
 * (envoyproxy/gateway api/v1alpha1/ext_proc_types.go at c78106a: ExtProc with the inline BackendCluster
 * `backendRefs`/`backendSettings`, `messageTimeout`, `failOpen`, `processingMode`, `metadata.writableNamespaces`;
 * ClusterSettings.circuitBreaker: maxConnections, maxPendingRequests, maxParallelRequests, maxRequestsPerConnection;
 * ClusterSettings.healthCheck.active of type GRPC (`grpc.service`; internal/gatewayapi/clustersettings.go
 * `buildActiveHealthCheck` translates it to Envoy's grpc_health_check): without it the proxies drop a draining gate
 * only when its readiness probe has failed and the EndpointSlice change reached them, after drain.announceMs;
 * the body mode `FullDuplexStreamed`, which also sends trailers and requires failOpen false).
 * No Envoy Gateway ran against it; the header says so.
 *
 * Route timeouts: internal/xds/translator/route.go `buildXdsRoute` sets the Envoy route timeout only from a request
 * timeout (HTTPRoute `timeouts.request`, or a BackendTrafficPolicy); otherwise Envoy's default of 15 s applies
 * (route_components.proto RouteAction.timeout). The pool rules set `timeouts.request: 0s`, which Gateway API defines as
 * disabled, as envoy.yaml's `timeout: 0s`; route.go `idleTimeout` then also sets the route idle_timeout to 0.
 *
 * FullDuplexStreamed: the CRD enum has it since PR #5349, but until PR #6323 the translator left
 * request_trailer_mode SKIP and Envoy refused the listener ("If the ext_proc filter has the request_body_mode set to
 * FULL_DUPLEX_STREAMED, then the request_trailer_mode has to be set to SEND", envoyproxy/gateway issue #6270 on
 * v1.4.1); internal/xds/translator/extproc.go `buildProcessingMode` now sets SEND. The GIE header names that floor.
 */
import { GATE_MAX_REQUESTS_PER_CONNECTION, REQUEST_TIMEOUT_S } from './bootstrap.js';
import { gateBreakers, poolBreakers, type RenderCluster, type RenderInput } from './input.js';
import { poolServiceDocs, poolServiceOf, renderedService } from './pool-services.js';
import { type RenderSettings, renderFlags } from './settings.js';
import { header, scalar } from './text.js';

export function renderEnvoyGateway(input: RenderInput, s: RenderSettings): string {
  const gate = gateBreakers(input);
  const decode = input.clusters.filter((c) => c.role === 'decode');
  const lines = [
    ...header(renderFlags('envoy-gateway', s), [
      'ALTERNATIVE, not Istio: kvgate behind Envoy Gateway (gateway.envoyproxy.io, Kubernetes Gateway API).',
      'NOT VALIDATED: these kinds have no Envoy proto, so the static check in test/envoy-static skips them, and no',
      "Envoy Gateway ran against this file. Field names follow Envoy Gateway's v1alpha1 API; check them against the",
      'release you run (backendSettings needs v1.2 or newer).',
      ...(s.requestBodyMode === 'FULL_DUPLEX_STREAMED'
        ? [
            'FullDuplexStreamed needs a release with envoyproxy/gateway PR #6323 (request_trailer_mode SEND, which Envoy',
            'requires with that mode): v1.4.1 accepts the policy but Envoy rejects the listener (issue #6270).',
          ]
        : []),
      '',
      s.requestBodyMode === 'FULL_DUPLEX_STREAMED'
        ? 'What it keeps from envoy/envoy.yaml: FULL_DUPLEX request bodies, response headers to the gate, fail closed, a 2 s'
        : 'What it keeps from envoy/envoy.yaml: BUFFERED request bodies, response headers to the gate, fail closed, a 2 s',
      'message timeout, circuit breakers sized for the pools and the gate, the gate connection cap, and routing by',
      'the stamped pool (HTTPRoute header matches, like the Istio VirtualService).',
      'What Envoy Gateway does not let you say, and what that means:',
      "  - no max_message_timeout: the gate's override_message_timeout is ignored, so a request the fallback queue holds",
      "    longer than messageTimeout gets Envoy's 504. Use no `queue` step, or one with deadlineMs well under 2 s.",
      '  - no grpc initial_metadata: every stream looks like the public listener, so there is no internal hop through',
      '    Envoy Gateway. Decode sidecars must use `prefill: { via: direct }`, which calls only the prefill endpoint the',
      '    signed contract names (the prefill sidecar still checks the contract, the decode sidecar the attestation;',
      "    what is lost is the gate's own check of the hop and its re-pick of a prefill endpoint on retry).",
      '  - no ORIGINAL_DST: as with Istio, the gate picks the pool and Envoy Gateway balances within it.',
      '  - no runtime flags: ext_proc_graceful_grpc_close stays off, so the connection cap is what bounds resets.',
      '  - no stream idle bound: the pool rules need timeouts.request 0s (Envoy Gateway sets no route timeout otherwise,',
      "    and Envoy's default of 15 s would cut generations), and with it Envoy Gateway sets the route idle_timeout to 0",
      "    (internal/xds/translator/route.go `idleTimeout`), so envoy.yaml's 300 s stream idle timeout is not kept: a",
      '    generation that stalls is held until the client gives up.',
      ...(s.gateTls
        ? [
            "  - the gate's mTLS port: add a BackendTLSPolicy for the gate Service and the client certificate in",
            '    your EnvoyProxy resource (backendTLS.clientCertificateRef); not rendered here.',
          ]
        : []),
    ]),
    'apiVersion: gateway.networking.k8s.io/v1',
    'kind: Gateway',
    'metadata:',
    '  name: kvgate',
    `  namespace: ${s.namespace}`,
    'spec:',
    '  gatewayClassName: eg',
    '  listeners:',
    '  - { name: http, protocol: HTTP, port: 80 }',
    '---',
    'apiVersion: gateway.envoyproxy.io/v1alpha1',
    'kind: EnvoyExtensionPolicy',
    'metadata:',
    '  name: kvgate',
    `  namespace: ${s.namespace}`,
    'spec:',
    '  targetRefs:',
    '  - { group: gateway.networking.k8s.io, kind: Gateway, name: kvgate }',
    '  extProc:',
    '  - backendRefs:',
    `    - { name: ${s.gateService}, port: ${String(s.gatePort)} }      # Service ${s.gateService} (appProtocol grpc)`,
    '    backendSettings:',
    '      circuitBreaker:',
    `        maxPendingRequests: ${String(gate.maxPendingRequests)}`,
    `        maxParallelRequests: ${String(gate.maxRequests)}`,
    `        maxRequestsPerConnection: ${String(GATE_MAX_REQUESTS_PER_CONNECTION)}`,
    '      healthCheck:                           # as envoy.yaml: a draining gate answers NOT_SERVING and is ejected at once,',
    '        active:                              # so it stops getting streams within interval + timeout (3 s, inside drain.announceMs)',
    '          type: GRPC',
    '          grpc: { service: envoy.service.ext_proc.v3.ExternalProcessor }',
    '          interval: 2s',
    '          timeout: 1s',
    '          unhealthyThreshold: 2',
    '          healthyThreshold: 1',
    '    messageTimeout: 2s',
    '    failOpen: false',
    '    processingMode:',
    s.requestBodyMode === 'FULL_DUPLEX_STREAMED'
      ? '      request: { body: FullDuplexStreamed }  # chunks stream to the gate (trailers too), decided at the end'
      : '      request: { body: Buffered }            # request headers and the whole body',
    '      response: {}                           # response headers (so x-kvgate-group/-revision/-binding reach clients), no body',
    ...(s.gie ? ['    metadata:', "      writableNamespaces: [envoy.lb]         # GIE: keep the gate's envoy.lb endpoint metadata"] : []),
    '---',
    'apiVersion: gateway.envoyproxy.io/v1alpha1',
    'kind: ClientTrafficPolicy',
    'metadata:',
    '  name: kvgate',
    `  namespace: ${s.namespace}`,
    'spec:',
    '  targetRefs:',
    '  - { group: gateway.networking.k8s.io, kind: Gateway, name: kvgate }',
    '  connection:',
    `    bufferLimit: ${String(input.maxBodyBytes)}                   # = the route table's limits.maxBodyBytes (default buffer: 32 KiB)`,
    '  # request_headers_timeout has no field here. Envoy Gateway cannot put a buffer filter before ext_proc either, so',
    "  # a client that trickles its body holds a gate stream until this timeout (envoy.yaml's buffer filter holds none).",
    '  timeout:',
    `    http: { requestReceivedTimeout: ${String(REQUEST_TIMEOUT_S)}s }       # HCM request_timeout, as envoy.yaml: the whole request in time, else 408`,
    '---',
    '# Circuit breakers for the pools: the gate admits endpoints x maxInFlightPerEndpoint; twice that before Envoy refuses.',
    'apiVersion: gateway.envoyproxy.io/v1alpha1',
    'kind: BackendTrafficPolicy',
    'metadata:',
    '  name: kvgate',
    `  namespace: ${s.namespace}`,
    'spec:',
    '  targetRefs:',
    '  - { group: gateway.networking.k8s.io, kind: HTTPRoute, name: kvgate }',
    '  circuitBreaker:',
    ...breakersFor(input),
    '---',
    '# One rule per decode pool, by the header the gate stamps; the last rule catches requests before ext_proc has run',
    '# (the policy applies to every route of the Gateway, so the first match must exist) and anything the gate did not',
    '# stamp: it points at no backend, which Envoy Gateway answers with a 500 - fail closed.',
    'apiVersion: gateway.networking.k8s.io/v1',
    'kind: HTTPRoute',
    'metadata:',
    '  name: kvgate',
    `  namespace: ${s.namespace}`,
    'spec:',
    '  parentRefs: [{ name: kvgate }]',
    '  rules:',
    ...decode.flatMap((c) => [
      '  - matches:',
      '    - path: { type: PathPrefix, value: /v1/ }',
      `      headers: [{ name: x-kvgate-decode-cluster, value: ${scalar(c.name)} }]`,
      `    backendRefs: [{ name: ${poolServiceOf(c, s)}, port: ${String(s.poolPort)} }]`,
      '    timeouts: { request: 0s }               # no route timeout: responses stream (Envoy default: 15 s)',
    ]),
    '  - matches:',
    '    - path: { type: PathPrefix, value: /v1/ }',
    `    backendRefs: [{ name: kvgate-no-such-pool, port: ${String(s.poolPort)} }]`,
    ...poolServiceDocs(decode, s).docs.flatMap((d) => ['---', ...d]),
    ...networkPolicies(input.clusters, s).flatMap((d) => ['---', ...d]),
  ];
  return `${lines.join('\n')}\n`;
}

/**
 * Envoy Gateway's proxies dial the gate (ext_proc) and the decode pools' pods; deploy/kubernetes/network-policies.yaml
 * admits only kvgate's own Envoy to either, so without these every request fails closed. Envoy Gateway runs the proxy
 * pods in its controller's namespace (envoy-gateway-system by default), labelled with the owning Gateway's name and
 * namespace (envoyproxy/gateway internal/infrastructure/kubernetes/proxy/resource_provider.go @00ec57c2, as
 * deploy/gie/envoy-gateway/gateway.yaml cites). The gate's pod label is deploy/kubernetes's, as in istio-security.ts.
 */
function networkPolicies(clusters: readonly RenderCluster[], s: RenderSettings): string[][] {
  const decode = clusters.filter((c) => c.role === 'decode');
  // The pods of each cluster whose Service this set renders; one it does not render is the operator's (pool-services.ts).
  const rendered = (c: RenderCluster) => {
    const svc = renderedService(c, s);
    return 'missing' in svc ? undefined : svc;
  };
  const from = [
    '  - from:',
    '    - namespaceSelector: { matchLabels: { kubernetes.io/metadata.name: envoy-gateway-system } }   # both in ONE peer',
    '      podSelector:',
    '        matchLabels:',
    '          gateway.envoyproxy.io/owning-gateway-name: kvgate',
    `          gateway.envoyproxy.io/owning-gateway-namespace: ${s.namespace}`,
  ];
  const docs: string[][] = [
    [
      "# Envoy Gateway's proxies may reach the gate's ext_proc port and the decode pools' sidecar port: deploy/kubernetes/",
      "# network-policies.yaml admits only kvgate's own Envoy there. Envoy Gateway runs them in ITS OWN namespace",
      '# (envoy-gateway-system by default; edit the namespace if yours differs), labelled with the owning Gateway',
      '# (envoyproxy/gateway internal/infrastructure/kubernetes/proxy/resource_provider.go @00ec57c2).',
      ...ingressPolicy('kvgate-gate-from-envoy-gateway', s, 'app.kubernetes.io/name: kvgate-gate', from, s.gatePort),
    ],
  ];
  for (const c of decode) {
    const svc = rendered(c);
    if (svc !== undefined) docs.push(ingressPolicy(`${poolServiceOf(c, s)}-from-envoy-gateway`, s, svc.selector, from, svc.targetPort));
  }
  // `prefill.via: direct` (the header says why): each decode sidecar dials the prefill endpoint its contract names,
  // a prefill pool's pod on the pool's port (src/sidecar/prefill-leg.ts), which deploy/kubernetes admits from
  // kvgate's Envoy and gate only.
  const decodePeers = decode.flatMap((c) => rendered(c)?.selector ?? []);
  let first = true;
  for (const c of clusters.filter((x) => x.role === 'prefill')) {
    const svc = rendered(c);
    if (svc === undefined || decodePeers.length === 0) continue;
    docs.push([
      ...(first
        ? [
            "# Decode sidecars (prefill.via: direct) may reach the prefill pools' sidecar port: deploy/kubernetes admits only",
            "# kvgate's Envoy and gate there.",
          ]
        : []),
      ...ingressPolicy(
        `${poolServiceOf(c, s)}-from-decode-workers`,
        s,
        svc.selector,
        ['  - from:', ...decodePeers.map((p) => `    - podSelector: { matchLabels: { ${p} } }`)],
        svc.targetPort,
      ),
    ]);
    first = false;
  }
  return docs;
}

/** An ingress NetworkPolicy: pods matching `selector` (rendered matchLabels) admit the `from` peers on `port`. */
function ingressPolicy(name: string, s: RenderSettings, selector: string, from: readonly string[], port: number): string[] {
  return [
    'apiVersion: networking.k8s.io/v1',
    'kind: NetworkPolicy',
    'metadata:',
    `  name: ${name}`,
    `  namespace: ${s.namespace}`,
    'spec:',
    '  podSelector:',
    `    matchLabels: { ${selector} }`,
    '  policyTypes: [Ingress]',
    '  ingress:',
    ...from,
    `    ports: [{ port: ${String(port)} }]`,
  ];
}

/** One policy covers the HTTPRoute, so its breakers are sized for the largest decode cluster it routes to. */
function breakersFor(input: RenderInput): string[] {
  const largest = Math.max(0, ...input.clusters.filter((c) => c.role === 'decode').map((c) => c.capacity));
  const b = poolBreakers(largest);
  return [
    `    maxConnections: ${String(b.maxConnections)}`,
    `    maxPendingRequests: ${String(b.maxPendingRequests)}`,
    `    maxParallelRequests: ${String(b.maxRequests)}`,
  ];
}
