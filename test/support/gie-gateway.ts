/**
 * A GIE data plane in the Envoy-faithful harness (testbed/harness): ext_proc to the endpoint picker with the
 * `envoy.lb.subset_hint` / `envoy.lb` metadata namespaces, FailClose, and one InferencePool cluster behind the
 * override_host load-balancing policy (the first listed `x-gateway-destination-endpoint` member wins). Protocol:
 * kubernetes-sigs/gateway-api-inference-extension @84436a96, docs/proposals/004-endpoint-picker-protocol/README.md.
 * Test support for test/e2e/gie-endpoint-picker.test.ts and test/e2e/gie-rolling-update.test.ts.
 */
import { stringify as toYaml } from 'yaml';
import {
  type EnvoyHarness,
  type EnvoyVersion,
  GIE_OVERRIDE_HOST_POLICY,
  mustLoadEnvoyConfig,
  startEnvoyHarness,
} from '../../testbed/harness/index.js';

/** BUFFERED request bodies, response headers: what a plain gateway sends the picker. */
export const BUFFERED_MODE = { request_body_mode: 'BUFFERED', response_header_mode: 'SEND' };

/** A GIE-style gateway: ext_proc with the envoy.lb namespaces, one pool cluster with the override_host policy. */
export function gieGatewayYaml(gatePort: number, members: readonly string[], mode: Record<string, string> = BUFFERED_MODE): string {
  const ep = (a: string) => {
    const [address, port] = [a.slice(0, a.lastIndexOf(':')), Number(a.slice(a.lastIndexOf(':') + 1))];
    return { endpoint: { address: { socket_address: { address, port_value: port } } } };
  };
  return toYaml({
    static_resources: {
      listeners: [
        {
          name: 'http',
          address: { socket_address: { address: '127.0.0.1', port_value: 0 } },
          filter_chains: [
            {
              filters: [
                {
                  name: 'envoy.filters.network.http_connection_manager',
                  typed_config: {
                    '@type': 'type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager',
                    stat_prefix: 'ingress',
                    route_config: {
                      virtual_hosts: [
                        { name: 'all', domains: ['*'], routes: [{ match: { prefix: '/' }, route: { cluster: 'pool', timeout: '0s' } }] },
                      ],
                    },
                    http_filters: [
                      {
                        name: 'envoy.filters.http.ext_proc',
                        typed_config: {
                          '@type': 'type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor',
                          grpc_service: { envoy_grpc: { cluster_name: 'epp' } },
                          failure_mode_allow: false, // FailClose
                          message_timeout: mode === BUFFERED_MODE ? '5s' : '1000s',
                          processing_mode: mode,
                          metadata_options: {
                            forwarding_namespaces: { untyped: ['envoy.lb.subset_hint', 'envoy.lb'] },
                            receiving_namespaces: { untyped: ['envoy.lb'] },
                          },
                        },
                      },
                      {
                        name: 'envoy.filters.http.router',
                        typed_config: { '@type': 'type.googleapis.com/envoy.extensions.filters.http.router.v3.Router' },
                      },
                    ],
                  },
                },
              ],
            },
          ],
        },
      ],
      clusters: [
        {
          name: 'epp',
          type: 'STATIC',
          typed_extension_protocol_options: {
            'envoy.extensions.upstreams.http.v3.HttpProtocolOptions': {
              '@type': 'type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions',
              explicit_http_config: { http2_protocol_options: {} },
            },
          },
          load_assignment: { cluster_name: 'epp', endpoints: [{ lb_endpoints: [ep(`127.0.0.1:${gatePort}`)] }] },
        },
        {
          name: 'pool',
          type: 'STATIC',
          load_assignment: { cluster_name: 'pool', endpoints: [{ lb_endpoints: members.map(ep) }] },
          load_balancing_policy: GIE_OVERRIDE_HOST_POLICY,
        },
      ],
    },
  });
}

/** A GIE gateway whose InferencePool endpoints (the `pool` cluster, the subset hint it sends) the caller sets. */
export interface GieGateway {
  readonly harness: EnvoyHarness;
  /** The gateway's endpoint list now (`ip:port`): what its EDS for the InferencePool holds. */
  members(): readonly string[];
  /** Replace the list (an EDS update): the cluster's hosts and the subset hint of every request from now on. */
  setMembers(addresses: readonly string[]): void;
}

/**
 * The gateway the way a GIE data plane runs one InferencePool: the cluster's hosts are the pool's endpoints as the
 * gateway last received them, and every request carries exactly that list as its subset hint
 * (`envoy.lb.subset_hint` `x-gateway-destination-endpoint-subset`). With `endpoints`, the list is read from it as
 * each request arrives (the caller's model of the gateway's EDS, exact to the request). `onRequest` sees each request's
 * headers and the list sent with it. The served endpoint is reported back (`x-gateway-destination-endpoint-served`).
 */
export async function startGieGateway(
  gatePort: number,
  opts: {
    readonly mode?: Record<string, string>;
    readonly envoyVersion?: EnvoyVersion;
    readonly endpoints?: () => readonly string[];
    readonly onRequest?: (headers: Readonly<Record<string, string | string[] | undefined>>, subset: readonly string[]) => void;
  } = {},
): Promise<GieGateway> {
  // The harness needs one host to load a STATIC cluster; the caller's first setMembers replaces it.
  const config = mustLoadEnvoyConfig(gieGatewayYaml(gatePort, ['127.0.0.1:1'], opts.mode), { listenerPorts: { http: 0 } });
  let members: readonly string[] = [];
  const harness = await startEnvoyHarness(config, {
    ...(opts.envoyVersion === undefined ? {} : { envoyVersion: opts.envoyVersion }),
    reportServedEndpoint: true,
    requestMetadata: (h) => {
      if (opts.endpoints !== undefined) setMembers(opts.endpoints());
      const subset = [...members];
      opts.onRequest?.(h, subset);
      return { 'envoy.lb.subset_hint': { 'x-gateway-destination-endpoint-subset': subset } };
    },
  });
  function setMembers(addresses: readonly string[]): void {
    if (addresses.join() === members.join()) return;
    members = [...addresses];
    harness.setClusterEndpoints('pool', members);
  }
  harness.setClusterEndpoints('pool', []);
  return { harness, members: () => members, setMembers };
}

/**
 * What `startDiscoveringGate` (test/support/e2e-gate.ts) needs for a gate serving as the endpoint picker behind a
 * `startGieGateway` gateway: plaintext (these gateways speak ext_proc without TLS), GIE headers with
 * `fallbackEndpoints` alternates, and the gateway as its harness; `gateway()` is that gateway once started.
 */
export function behindGieGateway(fallbackEndpoints: number, opts: Parameters<typeof startGieGateway>[1] = {}) {
  let gateway: GieGateway | undefined;
  return {
    extra: { insecure: true, tls: undefined, envoy: { gieHeaders: true, gieFallbackEndpoints: fallbackEndpoints } },
    harness: async (gate: { readonly grpcPort: number }): Promise<EnvoyHarness> => {
      gateway = await startGieGateway(gate.grpcPort, opts);
      return gateway.harness;
    },
    gateway(): GieGateway {
      if (gateway === undefined) throw new Error('the GIE gateway has not started (startDiscoveringGate starts it)');
      return gateway;
    },
  };
}
