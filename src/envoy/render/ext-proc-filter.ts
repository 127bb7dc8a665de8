/**
 * The ext_proc HTTP filter, as both listeners (and Istio's HTTP_FILTER patch) carry it. Field names follow
 * envoy/extensions/filters/http/ext_proc/v3/ext_proc.proto (protos/envoy-api, checked by test/envoy-static).
 */
import type { RenderSettings } from './settings.js';

/**
 * FULL_DUPLEX_STREAMED is the default in GIE mode (`--request-body-mode`), as GIE's gateways send it
 * (kubernetes-sigs/gateway-api-inference-extension config/manifests/gateway/patch_policy.yaml at 5d859d91; Istio's
 * InferencePool filter, istio/istio pilot/pkg/xds/filters/filters.go `BuildInferencePoolExtProcFilter`), so a
 * kvgate-rendered GIE data plane runs the mode kvgate meets behind those gateways. Envoy requires
 * `request_trailer_mode: SEND` with it (source/extensions/filters/http/ext_proc/config.cc `verifyProcessingModeConfig`).
 * The gate collects the body and decides at its end (src/gate/session.ts); Envoy buffers nothing, so
 * `limits.maxBodyBytes` is enforced by the gate's 413. Responses stay NONE: tokens stream straight through, and a gate
 * drain cannot cut one.
 */
function requestBodyLines(duplex: boolean): string[] {
  return duplex
    ? [
        '    request_body_mode: FULL_DUPLEX_STREAMED      # chunks stream to the gate, which decides at the end of the body',
        '    request_trailer_mode: SEND                   # Envoy requires it with FULL_DUPLEX_STREAMED (where the body ends)',
      ]
    : [
        '    request_body_mode: BUFFERED                  # the gate routes on the JSON body (model, tenant scope)',
        '    request_trailer_mode: SKIP',
      ];
}

/** The filter for the public (client) or internal (prefill leg) listener, unindented, `name:` first. */
export function extProcFilter(listener: 'public' | 'internal', clusterName: string, s: RenderSettings): string[] {
  const pub = listener === 'public';
  const lines = [
    'name: envoy.filters.http.ext_proc',
    'typed_config:',
    '  "@type": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor',
    '  grpc_service:',
    `    envoy_grpc: { cluster_name: ${clusterName.includes('|') ? JSON.stringify(clusterName) : clusterName} }`,
    '    timeout: 35s',
    '    initial_metadata:',
    pub
      ? '    - { key: x-kvgate-listener, value: public }'
      : '    - { key: x-kvgate-listener, value: internal }   # the only way a stream is treated as a hop',
    '  failure_mode_allow: false                      # fail closed: gate down -> 500, slow -> 504',
    pub && s.requestBodyMode === 'FULL_DUPLEX_STREAMED'
      ? '  message_timeout: 2s                            # response headers; Envoy arms no timer on FULL_DUPLEX_STREAMED bodies'
      : '  message_timeout: 2s                            # a decision normally takes well under 1 ms',
  ];
  if (pub) lines.push('  max_message_timeout: 30s                       # the gate extends it while a request waits in its queue');
  lines.push(
    '  processing_mode:',
    '    request_header_mode: SEND',
    ...requestBodyLines(pub && s.requestBodyMode === 'FULL_DUPLEX_STREAMED'),
    pub
      ? '    response_header_mode: SEND                   # so x-kvgate-group/-revision/-binding reach the client'
      : '    response_header_mode: SKIP',
    '    response_body_mode: NONE                     # tokens stream straight through',
    '    response_trailer_mode: SKIP',
    '  route_cache_action: DEFAULT                    # the gate sends clear_route_cache with its mutation',
    '  mutation_rules:',
    '    disallow_is_error: true                      # a mutation Envoy refuses is a bug: fail, do not ignore',
  );
  if (pub && s.gie) {
    lines.push(
      // Envoy keeps dynamic metadata from the processor only for the namespaces listed here (ext_proc.cc,
      // setDynamicMetadata: untyped_receiving_namespaces_), so without it the gate's envoy.lb metadata is dropped.
      "  metadata_options:                              # GIE: keep the gate's envoy.lb endpoint metadata",
      '    receiving_namespaces: { untyped: [envoy.lb] }',
    );
  }
  return lines;
}
