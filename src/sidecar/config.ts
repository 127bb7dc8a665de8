/**
 * `kvgate sidecar --config FILE`: one sidecar's settings. Validated once, strictly (unknown keys are errors with a
 * "did you mean"), before any port opens; inner modules get the frozen result and never re-validate.
 *
 * The descriptor is the worker's declared identity (inline, or a file relative to the config). Everything else has a
 * default that fails closed: transfer failures fail instead of silently recomputing, unknown connector versions are
 * refused (`compatMode: strict`), and the prefill leg goes back through Envoy so the gate checks every hop.
 */
import { isIP } from 'node:net';
import path from 'node:path';
import { z } from 'zod';
import { TracingConfigSchema } from '../tracing.js';
import { CompatDescriptorSchema, deepFreeze, type CompatDescriptor } from '../compat/descriptor.js';
import { tryFingerprintOf } from '../compat/fingerprint.js';
import { cacheDtypeWarning } from '../compat/vllm-cache-dtypes.js';
import { EndpointAddressSchema, MediaSchema } from '../policy/schema.js';
import { fromZodIssues, type Locate } from '../config/from-zod.js';
import { issue, type ConfigIssue } from '../config/issues.js';
import { formatOf, parseStructuredText } from '../config/text.js';
import { readConfigText, readErrorReason } from '../config/read-text.js';
import { KeySourceSchema } from '../contract/key-source.js';
import { err, ok, type Result } from '../errors.js';
import { liveHashSupport } from './nixl-side-channel.js';
import { secretSourceIssues } from './secret-sources.js';
import { WorkerApiKeySchema } from './worker-auth.js';

/** The explicit opt-out from reading the live NIXL hash (`nixlSideChannel: unchecked`). */
export const NIXL_UNCHECKED = 'unchecked';

const hostPort = z.string().regex(/^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):\d{1,5}$/, 'must be host:port, e.g. 0.0.0.0:9090');

/**
 * A `HOST:PORT` flag value (`--advertise`, `--nixl-side-channel`) in the spelling the config takes. Kubernetes expands
 * `$(POD_IP)` in args, and `status.podIP` is `10.1.2.3` or `fd00::1`: `"$(POD_IP):9090"` would give `fd00::1:9090`,
 * where no reader can tell the port from the address. So the manifests write `"[$(POD_IP)]:9090"`, brackets always
 * (as Go's `net.SplitHostPort` reads them): `[10.1.2.3]:9090` is taken as `10.1.2.3:9090`, `[fd00::1]:9090` stays as
 * it is (how the gate names an IPv6 endpoint). An unbracketed value with more than one colon is refused; anything
 * else is passed on unchanged for the schema to check.
 */
export function hostPortFlag(flag: string, value: string): Result<string, ConfigIssue[]> {
  const fail = (message: string) =>
    err([
      issue(
        'command line',
        flag,
        `--${flag} ${JSON.stringify(value)}: ${message}`,
        `write HOST:PORT with an IP address in brackets, e.g. [10.1.2.3]:9090 or [fd00::1]:9090 (in a manifest "[$(POD_IP)]:9090", right for IPv4 and IPv6 pod IPs)`,
      ),
    ]);
  const bracketed = /^\[([^\]]*)\]:(\d{1,5})$/.exec(value);
  if (bracketed !== null) {
    const [, host = '', port = ''] = bracketed;
    if (Number(port) < 1 || Number(port) > 65535) return fail(`port ${port} is not 1-65535`);
    const family = isIP(host);
    if (family === 0) return fail(`${JSON.stringify(host)} in brackets is not an IP address`);
    return ok(family === 4 ? `${host}:${port}` : value);
  }
  if (value.startsWith('[')) return fail('a bracketed address must be followed by :PORT');
  if (value.split(':').length > 2) return fail('an IPv6 address must be in brackets, or its port cannot be told from the address');
  return ok(value);
}

/** A loopback host:port: reachable only from inside the pod (a preStop hook, an operator's kubectl exec). */
const loopbackHostPort = hostPort.refine((s) => /^(127\.\d{1,3}\.\d{1,3}\.\d{1,3}|localhost|\[::1\]):\d{1,5}$/.test(s), {
  message:
    'must be a loopback address (127.0.0.1:PORT or [::1]:PORT): drain and undrain take a worker in and out of service, so only the pod itself may call them',
});

/** A worker's base URL as the sidecar (and `kvgate fingerprint --worker`) takes it: http(s), no credentials, query or fragment. */
export function isWorkerBaseUrl(s: string): boolean {
  try {
    const u = new URL(s);
    return (u.protocol === 'http:' || u.protocol === 'https:') && u.username === '' && u.search === '' && u.hash === '';
  } catch {
    return false;
  }
}

const httpUrl = z.string().refine(isWorkerBaseUrl, {
  message: 'must be an http(s) URL without credentials or query, e.g. http://127.0.0.1:8000',
});

const PrefillViaSchema = z.union([
  z.literal('direct').describe("POST straight to the contract's prefill endpoint (tests, or meshes without an internal listener)"),
  z.object({ envoy: httpUrl.describe("Envoy's internal listener, e.g. http://127.0.0.1:10001") }).strict(),
]);

/** The gate's default worker-view poll (2 s) and its timeout (1 s), plus 1 s for a routed request on its way. */
export const DEFAULT_DRAIN_ANNOUNCE_MS = 4_000;

export const SidecarConfigSchema = z
  .object({
    role: z.enum(['prefill', 'decode']),
    /** The local vLLM worker this sidecar guards, e.g. http://127.0.0.1:8000. */
    worker: httpUrl,
    listen: hostPort.default('0.0.0.0:9090'),
    /** POST /kvgate/v1/drain and /kvgate/v1/undrain, on loopback only ('' disables; SIGTERM still drains). */
    admin: z
      .union([loopbackHostPort, z.literal('')])
      .describe("a loopback host:port, e.g. 127.0.0.1:9092; '' turns it off")
      .default('127.0.0.1:9092'),
    /** GET /metrics alone, for the monitoring namespace ('' disables; /metrics stays on `listen` as well). */
    metrics: z
      .union([hostPort, z.literal('')])
      .describe("host:port, e.g. 0.0.0.0:9091; '' turns it off")
      .default('0.0.0.0:9091'),
    /**
     * This sidecar's endpoint exactly as the gate names it (a listed `address`, or a discovered pod's
     * `podIP:targetPort`, IPv6 in brackets): a decode sidecar then serves only contracts whose decode endpoint (or GIE
     * alternate) it is, and a prefill sidecar names itself in `x-kvgate-served-by` so retries can exclude it. An IP
     * literal, as the route table's endpoints are: a host name would never equal the gate's name for it.
     */
    advertise: EndpointAddressSchema.optional(),
    descriptor: CompatDescriptorSchema.optional(),
    /** A YAML/JSON descriptor file, relative to this config file. */
    descriptorFile: z.string().min(1).optional(),
    /**
     * `recorded` (default): the worker is verified only against recorded canary digests in the descriptor (tokenizer,
     * chat template, generation); a descriptor without them leaves the worker unverified. `declared-only`: the loud
     * exception that accepts the declaration for what no probe can see; it is named on /status and every audit line.
     */
    trust: z.enum(['recorded', 'declared-only']).default('recorded'),
    /**
     * The worker's NIXL side channel (`VLLM_NIXL_SIDE_CHANNEL_HOST:PORT`, default port 5600): every probe reads the
     * live compatibility hash there and compares it with the revision's prediction (vLLM 0.13 and later). Required
     * when the declared vLLM has a hash kvgate can read (fail closed); `unchecked` is the loud opt-out, named on
     * /status and in a warning at start.
     */
    nixlSideChannel: z
      .union([hostPort, z.literal(NIXL_UNCHECKED).describe('skip the live handshake-hash check (loud: /status and logs say so)')])
      .optional(),
    /**
     * This pod's UID (the downward API's `metadata.uid`; usually `--pod-uid "$(POD_UID)"`), reported on /status: a gate
     * that found this pod by selector routes here only when the UID is the one its watch lists at this IP.
     */
    podUid: z.string().min(1).optional(),
    /**
     * How long an idle keep-alive connection to the request port stays open. Keep it above the idle timeout of the
     * proxy in front (the rendered Envoy configs use 60 s; Envoy's default is one hour, Istio's DestinationRule
     * `idleTimeout` likewise): a sidecar that closes first can race the proxy reusing the connection, which resets
     * that request.
     */
    keepAliveTimeoutMs: z.number().int().min(1_000).default(75_000),
    /** The worker's `--served-model-name`, when it differs from the model path. */
    servedModelName: z.string().min(1).optional(),
    keys: KeySourceSchema.optional(),
    /** The worker's `--api-key` (a file or an environment variable), sent as `Authorization: Bearer` on every worker call. */
    workerApiKey: WorkerApiKeySchema.optional(),
    /** Tenant prefix scopes this worker may serve (`tenant:acme`, `shared`...); `['*']` trusts the gate's choice. */
    tenantScopes: z.array(z.string().min(1)).min(1, "list at least one scope, or ['*']").default(['*']),
    /**
     * The origins whose media URLs this worker may fetch for a client; none by default (only inline `data:` media). The
     * sidecar's own list, not the gate's: it checks what its worker would fetch, whatever the route table says.
     */
    media: MediaSchema.default({ allowedOrigins: [] }),
    probe: z
      .object({
        intervalMs: z.number().int().min(100).default(15_000),
        timeoutMs: z.number().int().min(50).default(5_000),
        /** The greedy generation canary costs a short completion: run it when a digest is declared, always, or never. */
        generation: z.enum(['declared', 'always', 'never']).default('declared'),
      })
      .strict()
      .default({ intervalMs: 15_000, timeoutMs: 5_000, generation: 'declared' }),
    prefill: z
      .object({
        via: PrefillViaSchema.default({ envoy: 'http://127.0.0.1:10001' }),
        /** Attempts in all (1 = no retry); only 502/503/504 and connection failures are retried. */
        maxAttempts: z.number().int().min(1).max(10).default(3),
        backoffMs: z.number().int().min(0).default(50),
        maxBackoffMs: z.number().int().min(0).default(1_000),
        timeoutMs: z.number().int().min(100).default(120_000),
      })
      .strict()
      .default({ via: { envoy: 'http://127.0.0.1:10001' }, maxAttempts: 3, backoffMs: 50, maxBackoffMs: 1_000, timeoutMs: 120_000 }),
    /** What a decode worker does when the KV transfer fails before any token reached the client. */
    onTransferFailure: z.enum(['fail', 'recompute']).default('fail'),
    /** `strict` refuses transfers whose connector version kvgate has no rules for; `lenient` warns. */
    compatMode: z.enum(['strict', 'lenient']).default('strict'),
    /** Limit for one call to the local worker, a whole streamed completion included. */
    workerTimeoutMs: z.number().int().min(100).default(600_000),
    maxInFlight: z.number().int().positive().default(256),
    maxBodyBytes: z
      .number()
      .int()
      .positive()
      .default(8 * 1024 * 1024),
    /**
     * How long a request's body may take to arrive once its headers (and contract) were accepted; a slower one is
     * refused with 408. The gate has the whole body before it stamps the contract, so a routed body arrives at once;
     * this bounds how long one request can hold an admission slot without ever being served.
     */
    bodyTimeoutMs: z.number().int().min(100).default(10_000),
    attestationTtlMs: z.number().int().min(1_000).max(600_000).default(60_000),
    /** How long SIGTERM waits for in-flight requests before the command exits anyway. */
    drainGraceMs: z.number().int().min(0).default(30_000),
    /**
     * After a drain starts (SIGTERM or the admin port), how long requests that still arrive are admitted before new
     * ones are refused with `draining`. The status says `draining` at once; the gate stops routing here at its next
     * poll of this sidecar, so this must outlast the gate's `workerView.intervalMs` + `timeoutMs` (2 s + 1 s by
     * default) plus the time a routed request takes to arrive. Part of `drainGraceMs`, so at most that.
     */
    drainAnnounceMs: z.number().int().min(0).default(DEFAULT_DRAIN_ANNOUNCE_MS),
    /** W3C trace context is always passed on; spans are exported only when `tracing.otlpUrl` is set (src/tracing.ts). */
    tracing: TracingConfigSchema,
    log: z
      .object({ level: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info') })
      .strict()
      .default({ level: 'info' }),
  })
  .strict();

export type SidecarConfigInput = z.input<typeof SidecarConfigSchema>;
type Parsed = z.infer<typeof SidecarConfigSchema>;

/** A validated, frozen sidecar config: the descriptor resolved and its fingerprint computed once. */
export type SidecarConfig = Omit<Parsed, 'descriptor' | 'descriptorFile'> & {
  readonly descriptor: CompatDescriptor;
  readonly fingerprint: string;
};

/**
 * Validate a config object (parsed from a file, built from flags, or written in a test). `file` names the source in
 * messages; `loadedDescriptor` is the parsed content of `descriptorFile` (the file loaders supply it).
 */
export function parseSidecarConfig(
  raw: unknown,
  file: string,
  loadedDescriptor?: unknown,
  where: {
    readonly config?: Locate;
    readonly descriptor?: Locate;
    /** Why `descriptorFile` could not be read: reported with the rest, which is still checked. */
    readonly descriptorUnread?: readonly ConfigIssue[];
  } = {},
): Result<SidecarConfig, ConfigIssue[]> {
  const locate = where.config;
  const at = (key: string) => {
    const pos = locate?.([key], true);
    return pos ? { line: pos.line, column: pos.column } : {};
  };
  const given = raw !== null && typeof raw === 'object' ? (raw as Record<string, unknown>) : {};
  // Both given: say so first, before any issue of the inline descriptor the author may not mean to keep.
  if (given['descriptor'] !== undefined && given['descriptorFile'] !== undefined)
    return err([exactlyOneDescriptor(file, at('descriptor'))]);
  const unread = where.descriptorUnread ?? [];
  const parsed = SidecarConfigSchema.safeParse(raw ?? {});
  if (!parsed.success)
    return err([
      ...unread,
      ...fromZodIssues(parsed.error.issues, { file, root: SidecarConfigSchema, data: raw, ...(locate ? { locate } : {}) }),
    ]);
  const { descriptor: inline, descriptorFile, ...rest } = parsed.data;
  if ((inline === undefined) === (descriptorFile === undefined)) return err([exactlyOneDescriptor(file, {})]);
  // Every problem at once: an operator fixes them in one round, not one failed start each.
  const issues: ConfigIssue[] = [...unread];
  let descriptor = inline;
  if (descriptor === undefined && unread.length === 0) {
    const d = CompatDescriptorSchema.safeParse(loadedDescriptor);
    if (d.success) descriptor = d.data;
    else
      issues.push(
        ...fromZodIssues(d.error.issues, {
          file: `${file} -> ${descriptorFile}`,
          root: CompatDescriptorSchema,
          data: loadedDescriptor,
          ...(where.descriptor ? { locate: where.descriptor } : {}),
        }),
      );
  }
  const fp = descriptor === undefined ? undefined : tryFingerprintOf(descriptor);
  if (fp !== undefined && !fp.ok)
    issues.push(
      descriptorFile === undefined
        ? issue(file, 'descriptor', fp.error.reason, 'correct the descriptor as the message says', at('descriptor'))
        : issue(
            file,
            'descriptorFile',
            `${descriptorFile}: ${fp.error.reason}`,
            'correct the descriptor file as the message says',
            at('descriptorFile'),
          ),
    );
  if (descriptor !== undefined && rest.nixlSideChannel === undefined && liveHashSupport(descriptor).kind === 'read') {
    issues.push(
      issue(
        file,
        'nixlSideChannel',
        `the worker's vLLM ${descriptor.engine.version} (NIXL connector v${descriptor.connector.version}) has a NIXL compatibility hash, ` +
          'and without its side channel the sidecar would trust the declared runtime flags (HMA, cross-layer blocks, ...) unchecked',
        "set nixlSideChannel to the worker's VLLM_NIXL_SIDE_CHANNEL_HOST:PORT (default 127.0.0.1:5600), or nixlSideChannel: unchecked to opt out loudly",
        at('descriptorFile'),
      ),
    );
  }
  if (rest.trust === 'recorded' && rest.probe.generation === 'never') {
    // The generation canary is the one probe that tells two sets of weights (or adapters) with the same tokenizer and
    // template apart; without it a worker serving another revision's weights would pass as verified.
    issues.push(
      issue(
        file,
        'probe.generation',
        "probe.generation: never turns off the generation canary, the only probe that tells one revision's weights from another's, so trust: recorded cannot hold",
        'use generation: declared (the default) or always; or set trust: declared-only, the loud opt-in to take the declared weights on trust',
        at('probe'),
      ),
    );
  }
  if (rest.keys === undefined) {
    issues.push(
      issue(file, 'keys', 'no signing keys configured', 'set keys.file (a key file), keys.env or keys.devSeed (insecure, demo only)'),
    );
  }
  if (rest.drainAnnounceMs > rest.drainGraceMs) {
    issues.push(
      issue(
        file,
        'drainAnnounceMs',
        `drainAnnounceMs (${rest.drainAnnounceMs}) is longer than drainGraceMs (${rest.drainGraceMs}): SIGTERM would exit while requests are still being admitted`,
        'lower drainAnnounceMs or raise drainGraceMs (the announce window is part of the grace period)',
        at('drainAnnounceMs'),
      ),
    );
  }
  if (issues.length > 0 || descriptor === undefined || fp === undefined || !fp.ok) return err(issues);
  return ok(deepFreeze({ ...rest, descriptor, fingerprint: fp.value }));
}

/**
 * What a valid config may still get wrong without blocking a start, one line each (logged at start): a KV cache
 * dtype the descriptor's own vLLM version does not accept (`compat/vllm-cache-dtypes.ts`), so that worker would not
 * start as declared.
 */
export function sidecarConfigWarnings(config: SidecarConfig): string[] {
  const dtype = cacheDtypeWarning(config.descriptor);
  return dtype === undefined ? [] : [`descriptor: ${dtype}`];
}

function exactlyOneDescriptor(file: string, pos: { line?: number; column?: number }): ConfigIssue {
  return issue(
    file,
    'descriptor',
    'needs exactly one of descriptor (inline) or descriptorFile',
    'keep either descriptor: {...} or descriptorFile: <path>',
    pos,
  );
}

/**
 * Read and validate a YAML/JSON config file and every file it names (descriptorFile, keys.file, workerApiKey.file;
 * with `env`, the variables keys.env and workerApiKey.env name too). I/O failures are issues, not exceptions, and
 * every problem is reported at once: a descriptor file that cannot be read does not hide a bad key file or a typo
 * in the config. `overrides` (top-level keys, from flags allowed beside --config) replace the file's values before
 * validation.
 */
export async function loadSidecarConfig(
  file: string,
  overrides: Readonly<Record<string, unknown>> = {},
  env?: Readonly<Record<string, string | undefined>>,
): Promise<Result<SidecarConfig, ConfigIssue[]>> {
  const text = await readText(file, 'check the path given to --config');
  if (!text.ok) return text;
  const read = parseStructuredText(text.value, file, formatOf(file));
  if (!read.ok) return read;
  const parsed = read.value.value;
  const isObject = parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed);
  const raw = Object.keys(overrides).length > 0 && isObject ? { ...(parsed as Record<string, unknown>), ...overrides } : parsed;
  // Lines point into the file; a value a flag replaced is not in it.
  const config: Locate = (p, key) => (typeof p[0] === 'string' && p[0] in overrides ? undefined : read.value.locate(p, key));
  resolveRelativeKeyFile(raw, file);
  const secrets = await secretSourceIssues(raw, { file, locate: config, ...(env === undefined ? {} : { env }) });
  const descriptorFile = (raw as Record<string, unknown> | null)?.['descriptorFile'];
  let result: Result<SidecarConfig, ConfigIssue[]>;
  if (typeof descriptorFile !== 'string' || descriptorFile === '') result = parseSidecarConfig(raw, file, undefined, { config });
  else {
    const d = await readDescriptorFile(file, descriptorFile, config);
    result = d.ok
      ? parseSidecarConfig(raw, file, d.value.value, { config, descriptor: d.value.locate })
      : parseSidecarConfig(raw, file, undefined, { config, descriptorUnread: d.error });
  }
  if (secrets.length === 0) return result;
  return err([...(result.ok ? [] : result.error), ...secrets]);
}

/**
 * The descriptor file a config names, resolved against the config's folder. A file that cannot be read is one issue
 * of the config's `descriptorFile` line, naming the path read; a syntax error keeps its line in the descriptor file,
 * labelled `config -> descriptorFile` as its schema issues are.
 */
async function readDescriptorFile(
  file: string,
  descriptorFile: string,
  locate: Locate,
): Promise<Result<{ value: unknown; locate: Locate }, ConfigIssue[]>> {
  const resolved = path.isAbsolute(descriptorFile) ? descriptorFile : path.join(path.dirname(path.resolve(file)), descriptorFile);
  let text: string;
  try {
    text = await readConfigText(resolved);
  } catch (e) {
    const pos = locate(['descriptorFile'], true);
    return err([
      issue(
        file,
        'descriptorFile',
        `cannot read the descriptor file ${resolved}: ${readErrorReason(e)}`,
        `put the worker's descriptor there, or correct descriptorFile (relative to the config file's folder, ${path.dirname(path.resolve(file))})`,
        pos ? { line: pos.line, column: pos.column } : {},
      ),
    ]);
  }
  const read = parseStructuredText(text, `${file} -> ${descriptorFile}`, formatOf(resolved));
  return read;
}

/**
 * Relative `keys.file` and `workerApiKey.file` name files next to the config file, like `descriptorFile` (and like
 * the gate's `keys.file`): a sidecar started from another working directory reads the same files.
 */
function resolveRelativeKeyFile(raw: unknown, file: string): void {
  for (const key of ['keys', 'workerApiKey']) {
    const k = (raw as Record<string, unknown> | null)?.[key] as Record<string, unknown> | undefined;
    const f = k?.['file'];
    if (typeof f === 'string' && f !== '' && !path.isAbsolute(f)) k!['file'] = path.join(path.dirname(path.resolve(file)), f);
  }
}

/** Read and validate a descriptor file on its own (the `--descriptor FILE` flag). */
export async function loadDescriptorFile(file: string): Promise<Result<unknown, ConfigIssue[]>> {
  const text = await readText(file, 'check the path given to --descriptor');
  if (!text.ok) return text;
  return parseText(text.value, file);
}

async function readText(file: string, fix: string): Promise<Result<string, ConfigIssue[]>> {
  try {
    return ok(await readConfigText(file));
  } catch (e) {
    return err([issue(file, [], `cannot read the file: ${readErrorReason(e)}`, fix)]);
  }
}

function parseText(text: string, file: string): Result<unknown, ConfigIssue[]> {
  const read = parseStructuredText(text, file, formatOf(file));
  return read.ok ? ok(read.value.value) : read;
}
