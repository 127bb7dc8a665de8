/**
 * `kvgate gate --config FILE`: the gate process's own settings (ports, where the route table and keys live,
 * drain timing). The route table itself is a separate file (src/policy) so it can be hot-reloaded on its own.
 * Validated once, strictly, before any port opens.
 */
import path from 'node:path';
import { z } from 'zod';
import { err, ok, type Result } from '../errors.js';
import { fromZodIssues } from '../config/from-zod.js';
import { issue, type ConfigIssue } from '../config/issues.js';
import { formatOf, parseStructuredText } from '../config/text.js';
import { readConfigText, readErrorReason } from '../config/read-text.js';
import { KeySourceSchema } from '../contract/key-source.js';
import { TracingConfigSchema } from '../tracing.js';
import { IDENTITY_PATTERN } from './peer-identity.js';

const IDENTITY_HINT = 'must be spiffe://..., uri:<URI>, dns:<name> or sha256:<64 hex digits>';

const hostPort = z.string().regex(/^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):\d{1,5}$/, 'must be host:port, e.g. 0.0.0.0:9002');

export const GateConfigSchema = z
  .object({
    /** ext_proc + grpc.health.v1, the address Envoy's ext_proc cluster points at. */
    listen: hostPort.default('0.0.0.0:9002'),
    /**
     * A plaintext gRPC port with only grpc.health.v1 (liveness, readiness, the ext_proc service; the main port's
     * statuses), for kubelet gRPC probes, which cannot present a client certificate to the mTLS port. Empty: off.
     */
    health: z
      .union([hostPort, z.literal('')])
      .describe("host:port, e.g. 0.0.0.0:9004; '' turns it off")
      .default(''),
    /** Plain HTTP: /metrics (Prometheus), /status (JSON), /healthz. Empty string disables it. */
    admin: z
      .union([hostPort, z.literal('')])
      .describe("host:port, e.g. 0.0.0.0:9003; '' turns it off")
      .default('0.0.0.0:9003'),
    /** The route table file (YAML or JSON), relative to this config file. */
    policy: z.string().min(1, 'name the route table file, e.g. policy: route-table.yaml'),
    keys: KeySourceSchema,
    /**
     * TLS with client-certificate verification on the gRPC port, and the listener role of each stream derived from
     * the verified peer (src/gate/transport.ts). Required unless `insecure: true`.
     */
    tls: z
      .object({
        /** The gate's certificate chain and key (PEM), relative to this file. */
        cert: z.string().min(1),
        key: z.string().min(1),
        /** CA bundle (PEM) client certificates must chain to. */
        clientCa: z.string().min(1),
        /** Identities allowed per role: `spiffe://...`, `uri:...`, `dns:NAME` or `sha256:HEX` (certificate fingerprint). */
        roles: z
          .object({
            public: z.array(z.string().regex(IDENTITY_PATTERN, IDENTITY_HINT)).default([]),
            internal: z.array(z.string().regex(IDENTITY_PATTERN, IDENTITY_HINT)).default([]),
          })
          .strict(),
      })
      .strict()
      .optional(),
    /** Plaintext gRPC with the role taken from caller-sent metadata: for a local test only; logged loudly. */
    insecure: z.boolean().default(false),
    workerView: z
      .object({
        /** `live` polls each endpoint's sidecar status URL (endpoints without one keep their declaration);
         * `static` believes the route table. */
        mode: z.enum(['live', 'static']).default('live'),
        intervalMs: z.number().int().min(100).default(2000),
        timeoutMs: z.number().int().min(50).default(1000),
        /** An observation older than this counts as unknown: the endpoint takes no new requests (fail closed). */
        staleAfterMs: z.number().int().min(200).default(10_000),
      })
      .strict()
      .default({ mode: 'live', intervalMs: 2000, timeoutMs: 1000, staleAfterMs: 10_000 }),
    /** Pools with `discovery.kubernetes` (src/discovery): how the gate reaches the Kubernetes API. */
    discovery: z
      .object({
        /** A kubeconfig file (relative to this file) for running outside a cluster; default: the in-cluster
         * service account (token and CA mounted at /var/run/secrets/kubernetes.io/serviceaccount). */
        kubeconfig: z.string().min(1).optional(),
        /** How long a broken watch's last known endpoints keep taking traffic (marked stale) before the pool
         * fails closed. */
        staleAfterMs: z.number().int().min(1000).default(30_000),
      })
      .strict()
      .default({ staleAfterMs: 30_000 }),
    envoy: z
      .object({
        /** Also write llm-d / GIE headers (x-gateway-destination-endpoint, x-prefiller-host-port) and envoy.lb metadata. */
        gieHeaders: z.boolean().default(false),
        /** With gieHeaders (kvgate as an InferencePool's endpoint picker): endpoints of the same group listed after
         * the pick in x-gateway-destination-endpoint, for a data plane that walks the list on retry. */
        gieFallbackEndpoints: z.number().int().min(0).max(4).default(2),
        /** The ext_proc filter's `max_message_timeout` (envoy.yaml: 30s). Queue waits stay below it; 0 disables the
         * fallback queue, because Envoy then ignores `override_message_timeout`. */
        maxMessageTimeoutMs: z.number().int().min(0).default(30_000),
      })
      .strict()
      .default({ gieHeaders: false, gieFallbackEndpoints: 2, maxMessageTimeoutMs: 30_000 }),
    drain: z
      .object({
        /** Keep answering, as NOT_SERVING, this long after SIGTERM so Envoy's health checks notice. */
        announceMs: z.number().int().min(0).default(5000),
        /** Streams in flight get this long to finish before they are cancelled. */
        graceMs: z.number().int().min(0).default(30_000),
      })
      .strict()
      .default({ announceMs: 5000, graceMs: 30_000 }),
    /** W3C trace context is always continued; spans are exported only when `tracing.otlpUrl` is set (src/tracing.ts). */
    tracing: TracingConfigSchema,
    log: z
      .object({
        level: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
        /** One info line per routed request and prefill hop (`"log":"decisions"`): request id, tenant, group,
         * revision, endpoints, fallback steps, decision time. Off by default: a busy gate writes one per request. */
        decisions: z.boolean().default(false),
      })
      .strict()
      .default({ level: 'info', decisions: false }),
  })
  .strict()
  .superRefine((c, ctx) => {
    const wv = c.workerView;
    // Polls start every intervalMs (setInterval, src/gate/worker-poller.ts) and answer within timeoutMs, so an
    // endpoint's last answer is up to intervalMs + timeoutMs old when the next one lands: a staleAfterMs at or below
    // that marks every endpoint stale between polls, and the gate refuses its traffic on and off.
    if (wv.mode === 'live' && wv.staleAfterMs <= wv.intervalMs + wv.timeoutMs) {
      ctx.addIssue({
        code: 'custom',
        path: ['workerView', 'staleAfterMs'],
        message: `staleAfterMs (${wv.staleAfterMs}) is not above intervalMs + timeoutMs (${wv.intervalMs} + ${wv.timeoutMs}): every endpoint's last answer would be stale before the next poll answers, so endpoints would drop out between polls and take no requests`,
        params: {
          fix: `raise staleAfterMs above ${wv.intervalMs + wv.timeoutMs} (a few poll rounds; the default is 10000 with intervalMs 2000 and timeoutMs 1000), or lower intervalMs`,
        },
      });
    }
    if (c.tls === undefined && !c.insecure) {
      ctx.addIssue({
        code: 'custom',
        path: ['tls'],
        message:
          "the gate's gRPC port needs TLS with client certificates: tls: { cert, key, clientCa, roles: { public: [...], internal: [...] } }; for a local test only, insecure: true",
      });
    }
    if (c.tls !== undefined && c.insecure) {
      ctx.addIssue({ code: 'custom', path: ['insecure'], message: 'tls and insecure: true exclude each other; remove insecure' });
    }
    if (c.tls !== undefined) {
      const both = c.tls.roles.public.filter((i) => c.tls!.roles.internal.includes(i));
      if (both.length > 0)
        ctx.addIssue({
          code: 'custom',
          path: ['tls', 'roles'],
          message: `${both.join(', ')} is listed for both roles; each Envoy listener needs its own identity`,
        });
      if (c.tls.roles.public.length + c.tls.roles.internal.length === 0) {
        ctx.addIssue({
          code: 'custom',
          path: ['tls', 'roles'],
          message: "no identity is allowed for either role, so no stream could open; list your Envoys' identities",
        });
      }
    }
  });

export type GateConfig = z.infer<typeof GateConfigSchema> & {
  /** Absolute path of the route table (resolved against the config file's folder). */
  readonly policyPath: string;
  readonly file: string;
};

export function parseGateConfig(text: string, file: string): Result<GateConfig, ConfigIssue[]> {
  const read = parseStructuredText(text, file, formatOf(file));
  if (!read.ok) return read;
  const raw = read.value.value;
  const parsed = GateConfigSchema.safeParse(raw ?? {});
  if (!parsed.success) {
    return err(fromZodIssues(parsed.error.issues, { file, root: GateConfigSchema, data: raw, locate: read.value.locate }));
  }
  const dir = path.dirname(path.resolve(file));
  const resolve = (p: string): string => (path.isAbsolute(p) ? p : path.join(dir, p));
  const keys = parsed.data.keys.file === undefined ? parsed.data.keys : { ...parsed.data.keys, file: resolve(parsed.data.keys.file) };
  const d = parsed.data.discovery;
  const discovery = d.kubeconfig === undefined ? d : { ...d, kubeconfig: resolve(d.kubeconfig) };
  const t = parsed.data.tls;
  const tls = t === undefined ? {} : { tls: { ...t, cert: resolve(t.cert), key: resolve(t.key), clientCa: resolve(t.clientCa) } };
  return ok(Object.freeze({ ...parsed.data, keys, discovery, ...tls, policyPath: resolve(parsed.data.policy), file }));
}

export async function loadGateConfig(file: string): Promise<Result<GateConfig, ConfigIssue[]>> {
  let text: string;
  try {
    text = await readConfigText(file);
  } catch (e) {
    return err([issue(file, [], `cannot read the file: ${readErrorReason(e)}`, 'check the path given to --config')]);
  }
  return parseGateConfig(text, file);
}
