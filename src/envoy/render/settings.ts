/**
 * The deployment settings an Envoy config needs beyond the route table: where the gate is (and whether its port
 * speaks mTLS), where Envoy listens, which Envoy release runs it, GIE mode and the Kubernetes names. The CLI turns
 * flags into this (src/cli/envoy-command.ts) and writes the same flags back into each rendered file's header
 * (`renderFlags`), so a shipped file records exactly how to produce it again.
 */
/** Envoy releases whose ext_proc stream lifetime differs (see docs/operator-guide.md, "Envoy versions"). */
export const ENVOY_VERSIONS = ['1.36', '1.37'] as const;
export type EnvoyVersion = (typeof ENVOY_VERSIONS)[number];

/**
 * Request body modes the gate routes under that a rendered config may set: BUFFERED (Envoy holds the body; 413 over
 * the connection buffer) or FULL_DUPLEX_STREAMED (what GIE's gateways send; the gate collects the chunks).
 */
export const REQUEST_BODY_MODES = ['BUFFERED', 'FULL_DUPLEX_STREAMED'] as const;
export type RequestBodyMode = (typeof REQUEST_BODY_MODES)[number];

/** The public listener's body mode when none is given: GIE mode follows GIE's gateways (ext-proc-filter.ts). */
export function defaultRequestBodyMode(gie: boolean): RequestBodyMode {
  return gie ? 'FULL_DUPLEX_STREAMED' : 'BUFFERED';
}

export const RENDER_TARGETS = [
  'bootstrap',
  'configmap',
  'istio-ext-proc',
  'istio-routing',
  'istio-destination-rules',
  'istio-security',
  'envoy-gateway',
] as const;
export type RenderTarget = (typeof RENDER_TARGETS)[number];

/** Client certificate and trust for the gate's mTLS port; paths as Envoy will see them (mounted files). */
export interface GateTls {
  readonly caFile: string;
  readonly certFile: string;
  readonly keyFile: string;
  /**
   * The internal listener's own client certificate. The gate takes a stream's role (public or internal) from the
   * certificate that opened it (src/gate/transport.ts), so the two listeners must present different ones: with these
   * set, the internal listener gets its own gate cluster (`kvgate_gate_internal`) presenting them.
   */
  readonly internalCertFile?: string;
  readonly internalKeyFile?: string;
  /** SNI and the DNS subject alt name the gate's certificate must carry; default: the gate host. */
  readonly serverName?: string;
}

export interface RenderSettings {
  /** The route table path as given on the command line (recorded in the header, never read by the renderer). */
  readonly policy: string;
  readonly envoyVersion: EnvoyVersion;
  /** The gate's ext_proc address: an IPv4 literal (STATIC cluster) or a DNS name (STRICT_DNS, e.g. a headless Service). */
  readonly gateHost: string;
  readonly gatePort: number;
  readonly gateTls?: GateTls;
  readonly listenAddress: string;
  readonly publicPort: number;
  readonly internalPort: number;
  readonly adminPort: number;
  /** Gateway API Inference Extension / llm-d data planes: keep the gate's `envoy.lb` dynamic metadata. */
  readonly gie: boolean;
  /** How the public listener sends request bodies to the gate (default `defaultRequestBodyMode(gie)`). */
  readonly requestBodyMode: RequestBodyMode;
  /** Envoy is the edge: take x-forwarded-for from the peer (HCM `use_remote_address`). */
  readonly useRemoteAddress: boolean;
  /** Kubernetes namespace of the gate, the gateways and the pool Services. */
  readonly namespace: string;
  /** The gate's Kubernetes Service (Istio and Envoy Gateway address it by Service). */
  readonly gateService: string;
  /** A pool's Service name: `{pool}` is replaced with the route table's pool name. */
  readonly poolService: string;
  readonly poolPort: number;
}

export const DEFAULT_SETTINGS: Omit<RenderSettings, 'policy'> = {
  envoyVersion: '1.36',
  gateHost: '127.0.0.1',
  gatePort: 9002,
  listenAddress: '127.0.0.1',
  publicPort: 10000,
  internalPort: 10001,
  adminPort: 9901,
  gie: false,
  requestBodyMode: 'BUFFERED',
  useRemoteAddress: false,
  namespace: 'kvgate',
  gateService: 'kvgate-gate',
  poolService: 'vllm-{pool}',
  poolPort: 9090,
};

/** True when the gate host is an address Envoy can use in a STATIC cluster. */
export function gateIsStatic(s: RenderSettings): boolean {
  return /^(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)$/.test(s.gateHost);
}

/** The flags that reproduce `s` (only those that differ from the defaults), in a fixed order. */
export function renderFlags(target: RenderTarget, s: RenderSettings): string {
  const d = DEFAULT_SETTINGS;
  const out: string[] = [target, '--policy', s.policy];
  const add = (flag: string, value: string | number, def: string | number) => {
    if (value !== def) out.push(flag, String(value));
  };
  add('--envoy', s.envoyVersion, d.envoyVersion);
  add('--gate', `${s.gateHost}:${String(s.gatePort)}`, `${d.gateHost}:${String(d.gatePort)}`);
  if (s.gateTls) {
    out.push('--gate-tls-ca', s.gateTls.caFile, '--gate-tls-cert', s.gateTls.certFile, '--gate-tls-key', s.gateTls.keyFile);
    if (s.gateTls.internalCertFile !== undefined && s.gateTls.internalKeyFile !== undefined) {
      out.push('--gate-tls-internal-cert', s.gateTls.internalCertFile, '--gate-tls-internal-key', s.gateTls.internalKeyFile);
    }
    if (s.gateTls.serverName !== undefined) out.push('--gate-tls-server-name', s.gateTls.serverName);
  }
  add('--listen', s.listenAddress, d.listenAddress);
  add('--public-port', s.publicPort, d.publicPort);
  add('--internal-port', s.internalPort, d.internalPort);
  add('--admin-port', s.adminPort, d.adminPort);
  if (s.gie) out.push('--gie');
  if (s.requestBodyMode !== defaultRequestBodyMode(s.gie)) out.push('--request-body-mode', s.requestBodyMode);
  if (s.useRemoteAddress) out.push('--use-remote-address');
  add('--namespace', s.namespace, d.namespace);
  add('--gate-service', s.gateService, d.gateService);
  add('--pool-service', s.poolService, d.poolService);
  add('--pool-port', s.poolPort, d.poolPort);
  return out.join(' ');
}
