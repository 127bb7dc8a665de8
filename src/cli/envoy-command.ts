/**
 * `kvgate envoy render TARGET --policy FILE [settings]`: writes an Envoy config generated from the route table
 * (src/envoy/render/). Exit 0 on success, 1 when the route table cannot be used, 2 on usage errors.
 */
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { parseArgs } from 'node:util';
import {
  DEFAULT_SETTINGS,
  ENVOY_VERSIONS,
  RENDER_TARGETS,
  type RenderSettings,
  type RenderTarget,
  renderEnvoyConfig,
  renderInputOf,
  renderWarnings,
} from '../envoy/render/index.js';
import { defaultRequestBodyMode, type EnvoyVersion, REQUEST_BODY_MODES, type RequestBodyMode } from '../envoy/render/settings.js';
import { checkPolicyFile, formatCheckReport } from '../policy/check-report.js';
import type { CommandIo } from './explain-command.js';

const HELP = `usage: kvgate envoy render TARGET --policy FILE [options]

Generates an Envoy config from the route table (clusters, capacity, body limit, queue) and these settings.
TARGET: ${RENDER_TARGETS.join(', ')}
  --policy FILE              the route table (required)
  --envoy VERSION            Envoy release: ${ENVOY_VERSIONS.join(' or ')} (default ${DEFAULT_SETTINGS.envoyVersion}); 1.37 closes ext_proc streams early
  --gate HOST:PORT           the gate's ext_proc address (default ${DEFAULT_SETTINGS.gateHost}:${String(DEFAULT_SETTINGS.gatePort)}); a DNS name gives a STRICT_DNS cluster
  --gate-tls-ca FILE --gate-tls-cert FILE --gate-tls-key FILE   mTLS to the gate port (all three, as Envoy sees them)
  --gate-tls-server-name N   SNI and the DNS name the gate's certificate must carry (default: the gate host)
  --gate-tls-internal-cert FILE --gate-tls-internal-key FILE   the internal listener's own client certificate: the
                             gate derives a stream's role from the certificate, so give each listener its own
  --listen ADDR              listener address (default ${DEFAULT_SETTINGS.listenAddress})
  --public-port N --internal-port N --admin-port N   (defaults ${String(DEFAULT_SETTINGS.publicPort)}, ${String(DEFAULT_SETTINGS.internalPort)}, ${String(DEFAULT_SETTINGS.adminPort)})
  --gie                      GIE / llm-d data plane: keep the gate's envoy.lb metadata (gate: envoy.gieHeaders true)
                             and send public request bodies FULL_DUPLEX_STREAMED, as GIE's gateways do
  --request-body-mode MODE   ${REQUEST_BODY_MODES.join(' or ')}: how the public listener sends request bodies
                             (default FULL_DUPLEX_STREAMED with --gie, else BUFFERED)
  --use-remote-address       Envoy is the edge: x-forwarded-for from the peer
  --namespace NS             Kubernetes namespace (default ${DEFAULT_SETTINGS.namespace})
  --gate-service NAME        the gate's Service for Istio / Envoy Gateway (default ${DEFAULT_SETTINGS.gateService})
  --pool-service PATTERN     a pool's Service, {pool} = the pool name (default ${DEFAULT_SETTINGS.poolService})
  --pool-port N              the pool Services' port (default ${String(DEFAULT_SETTINGS.poolPort)})
  --out FILE                 write here instead of standard output
`;

const OPTIONS = {
  policy: { type: 'string' },
  envoy: { type: 'string' },
  gate: { type: 'string' },
  'gate-tls-ca': { type: 'string' },
  'gate-tls-cert': { type: 'string' },
  'gate-tls-key': { type: 'string' },
  'gate-tls-server-name': { type: 'string' },
  'gate-tls-internal-cert': { type: 'string' },
  'gate-tls-internal-key': { type: 'string' },
  listen: { type: 'string' },
  'public-port': { type: 'string' },
  'internal-port': { type: 'string' },
  'admin-port': { type: 'string' },
  gie: { type: 'boolean' },
  'request-body-mode': { type: 'string' },
  'use-remote-address': { type: 'boolean' },
  namespace: { type: 'string' },
  'gate-service': { type: 'string' },
  'pool-service': { type: 'string' },
  'pool-port': { type: 'string' },
  out: { type: 'string' },
  help: { type: 'boolean' },
} as const;

type Values = ReturnType<typeof parseArgs<{ options: typeof OPTIONS; allowPositionals: true }>>['values'];

export interface RenderRequest {
  readonly target: RenderTarget;
  readonly settings: RenderSettings;
  readonly out?: string;
}

/** Parse `render TARGET --flags...` (the words after `kvgate envoy`). A string is a usage error. */
export function parseRenderArgs(argv: readonly string[]): RenderRequest | string | 'help' {
  let parsed: { values: Values; positionals: string[] };
  try {
    parsed = parseArgs({
      args: [...argv],
      options: OPTIONS,
      strict: true,
      allowPositionals: true,
    });
  } catch (e) {
    return (e as Error).message;
  }
  const { values: v, positionals } = parsed;
  if (v.help === true) return 'help';
  const [verb, target, ...extra] = positionals;
  if (verb !== 'render') return `unknown subcommand ${JSON.stringify(verb ?? '')}: the one subcommand is render`;
  if (!RENDER_TARGETS.includes(target as RenderTarget))
    return `TARGET must be one of ${RENDER_TARGETS.join(', ')}, got ${JSON.stringify(target ?? '')}`;
  if (extra.length > 0) return `unexpected ${JSON.stringify(extra[0])}: one TARGET only`;
  if (v.policy === undefined) return '--policy FILE is required';
  const settings = settingsOf(v);
  if (typeof settings === 'string') return settings;
  if (target === 'bootstrap' && settings.gateTls !== undefined && settings.gateTls.internalCertFile === undefined) {
    // The gate tells the two listeners apart by their client certificates and refuses one identity for both roles
    // (src/gate/transport.ts), so this bootstrap could never serve a prefill leg.
    return "gate mTLS in the bootstrap needs the internal listener's own client certificate too: add --gate-tls-internal-cert and --gate-tls-internal-key (the gate tells the public and internal listeners apart by their certificates and refuses one identity for both)";
  }
  return {
    target: target as RenderTarget,
    settings,
    ...(v.out === undefined ? {} : { out: v.out }),
  };
}

function settingsOf(v: Values): RenderSettings | string {
  const d = DEFAULT_SETTINGS;
  if (v.envoy !== undefined && !ENVOY_VERSIONS.includes(v.envoy as EnvoyVersion))
    return `--envoy must be ${ENVOY_VERSIONS.join(' or ')}, got ${JSON.stringify(v.envoy)}`;
  const ports: Record<string, number> = {};
  for (const flag of ['public-port', 'internal-port', 'admin-port', 'pool-port'] as const) {
    const raw = v[flag];
    if (raw === undefined) continue;
    if (!/^\d+$/.test(raw) || Number(raw) < 1 || Number(raw) > 65535)
      return `--${flag} must be a port (1-65535), got ${JSON.stringify(raw)}`;
    ports[flag] = Number(raw);
  }
  let gateHost = d.gateHost;
  let gatePort = d.gatePort;
  if (v.gate !== undefined) {
    const m = /^([A-Za-z0-9.-]+):(\d{1,5})$/.exec(v.gate);
    if (!m || Number(m[2]) < 1 || Number(m[2]) > 65535)
      return `--gate must be HOST:PORT (an IPv4 address or DNS name), got ${JSON.stringify(v.gate)}`;
    gateHost = m[1]!;
    gatePort = Number(m[2]);
  }
  const tlsFlags = [v['gate-tls-ca'], v['gate-tls-cert'], v['gate-tls-key']];
  const tlsGiven = tlsFlags.filter((f) => f !== undefined).length;
  if (tlsGiven !== 0 && tlsGiven !== 3) return 'gate mTLS needs all three of --gate-tls-ca, --gate-tls-cert and --gate-tls-key';
  if (tlsGiven === 0 && v['gate-tls-server-name'] !== undefined) return '--gate-tls-server-name needs the --gate-tls-* files';
  const internalGiven = [v['gate-tls-internal-cert'], v['gate-tls-internal-key']].filter((f) => f !== undefined).length;
  if (internalGiven === 1) return 'the internal listener certificate needs both --gate-tls-internal-cert and --gate-tls-internal-key';
  if (internalGiven === 2 && tlsGiven !== 3)
    return '--gate-tls-internal-cert/-key need the --gate-tls-ca, --gate-tls-cert and --gate-tls-key files';
  const bodyMode = v['request-body-mode'];
  if (bodyMode !== undefined && !REQUEST_BODY_MODES.includes(bodyMode as RequestBodyMode))
    return `--request-body-mode must be ${REQUEST_BODY_MODES.join(' or ')}, got ${JSON.stringify(bodyMode)}`;
  if (v['pool-service'] !== undefined && !v['pool-service'].includes('{pool}'))
    return '--pool-service must contain {pool} (replaced by each pool name)';
  return {
    policy: v.policy!,
    envoyVersion: (v.envoy as EnvoyVersion | undefined) ?? d.envoyVersion,
    gateHost,
    gatePort,
    ...(tlsGiven === 3
      ? {
          gateTls: {
            caFile: v['gate-tls-ca']!,
            certFile: v['gate-tls-cert']!,
            keyFile: v['gate-tls-key']!,
            ...(internalGiven === 2
              ? { internalCertFile: v['gate-tls-internal-cert']!, internalKeyFile: v['gate-tls-internal-key']! }
              : {}),
            ...(v['gate-tls-server-name'] === undefined ? {} : { serverName: v['gate-tls-server-name'] }),
          },
        }
      : {}),
    listenAddress: v.listen ?? d.listenAddress,
    publicPort: ports['public-port'] ?? d.publicPort,
    internalPort: ports['internal-port'] ?? d.internalPort,
    adminPort: ports['admin-port'] ?? d.adminPort,
    gie: v.gie === true,
    requestBodyMode: (bodyMode as RequestBodyMode | undefined) ?? defaultRequestBodyMode(v.gie === true),
    useRemoteAddress: v['use-remote-address'] === true,
    namespace: v.namespace ?? d.namespace,
    gateService: v['gate-service'] ?? d.gateService,
    poolService: v['pool-service'] ?? d.poolService,
    poolPort: ports['pool-port'] ?? d.poolPort,
  };
}

/**
 * Render one request's config: the text, or a reason the route table cannot be used. The policy path is read
 * relative to `baseDir` (the working directory), and recorded in the header as given.
 */
export async function renderRequest(
  req: RenderRequest,
  baseDir = process.cwd(),
): Promise<{ ok: true; text: string; warnings: string[] } | { ok: false; error: string }> {
  const loaded = await checkPolicyFile(path.resolve(baseDir, req.settings.policy));
  if (!loaded.ok || !loaded.report.ok)
    return {
      ok: false,
      error: `the route table cannot be used:\n${formatCheckReport(loaded.report)}`,
    };
  const input = renderInputOf(loaded.table);
  return {
    ok: true,
    text: renderEnvoyConfig(req.target, input, req.settings),
    warnings: renderWarnings(req.target, input, req.settings),
  };
}

/** Run `kvgate envoy`; returns the exit code. */
export async function envoyCommand(argv: readonly string[], io: CommandIo = defaultIo()): Promise<number> {
  const req = parseRenderArgs(argv);
  if (req === 'help') {
    io.out(HELP);
    return 0;
  }
  if (typeof req === 'string') {
    io.err(`kvgate envoy: ${req}\n\n${HELP}`);
    return 2;
  }
  if (req.target === 'bootstrap' && req.settings.gateTls === undefined) {
    io.err(
      'kvgate envoy render: WARNING: no --gate-tls-* flags, so this bootstrap speaks PLAINTEXT gRPC to the gate, which only a gate with insecure: true accepts; for a local test only (the file says so in its header)\n',
    );
  }
  const rendered = await renderRequest(req);
  if (!rendered.ok) {
    io.err(`kvgate envoy render: ${rendered.error}`);
    return 1;
  }
  for (const w of rendered.warnings) io.err(`kvgate envoy render: WARNING: ${w}\n`);
  if (req.out === undefined) io.out(rendered.text);
  else await writeFile(req.out, rendered.text);
  return 0;
}

function defaultIo(): CommandIo {
  return {
    out: (t) => process.stdout.write(t),
    err: (t) => process.stderr.write(t),
  };
}
