/**
 * The route table's shape: pools (Envoy clusters) of declared revisions, served models with rollout cohorts,
 * tenancy, the fallback chain and limits.
 *
 * Every object is `.strict()`: an unknown key is a typo until proven otherwise, and a typo in a routing policy is an
 * outage or a cross-tenant leak. Messages name what is expected; `load.ts` adds the path, line and a fix.
 * Semantic rules that need more than one field (unknown revisions, cluster/group conflicts, connector rules) live in
 * `semantic.ts`.
 */
import { isIP } from 'node:net';
import { z } from 'zod';
import { CompatDescriptorSchema, type CompatDescriptor } from '../compat/descriptor.js';
import type { ConfigIssue } from '../config/issues.js';
import { mediaOriginProblem } from '../media-url.js';
import { MAX_PRIORITY } from '../contract/contract.js';

const nonEmpty = z.string().min(1, 'must not be empty');

const HEADER_TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/** An HTTP header name; stored lower-cased because Envoy hands headers to ext_proc lower-cased. */
export const HeaderNameSchema = z
  .string()
  .regex(HEADER_TOKEN, 'must be an HTTP header name (letters, digits, "-"), e.g. x-tenant-id')
  .transform((s) => s.toLowerCase());

/** `['*']` (any tenant, including anonymous ones) or an explicit list of tenant ids. */
export const TenantListSchema = z
  .array(nonEmpty)
  .min(1, "must list at least one tenant, or ['*'] for any tenant")
  .refine((l) => !l.includes('*') || l.length === 1, {
    message: "'*' means any tenant and must be the only entry",
    params: { fix: "use ['*'] alone, or list the tenants without '*'" },
  });

/** `ip:port` or `[ipv6]:port`: what Envoy's ORIGINAL_DST cluster connects to. Host names are not resolved. */
export const EndpointAddressSchema = z.string().refine(isIpPort, {
  message: "must be 'ip:port' (IPv4) or '[ipv6]:port', e.g. 10.0.0.12:9090",
  params: {
    fix: 'write an IP address and a port, e.g. 10.0.0.12:9090 or [fd00::12]:9090: host names are not resolved (Envoy connects to the address as written); a route table finds pods by label with discovery.kubernetes',
  },
});

/** `ip:port` (IPv4) or `[ipv6]:port` literals only: a host name could resolve anywhere. */
export function isIpPort(s: string): boolean {
  const m = /^(?:\[([0-9A-Fa-f:.]+)\]|(\d{1,3}(?:\.\d{1,3}){3})):(\d{1,5})$/.exec(s);
  if (!m) return false;
  const port = Number(m[3]);
  const host = m[1] ?? m[2]!;
  return port >= 1 && port <= 65535 && isIP(host) === (m[1] === undefined ? 4 : 6);
}

const StatusUrlSchema = z.string().refine(
  (s) => {
    try {
      const u = new URL(s);
      return (u.protocol === 'http:' || u.protocol === 'https:') && u.port !== '';
    } catch {
      return false;
    }
  },
  { message: "must be the sidecar's status URL with a port, e.g. http://10.0.0.12:9090" },
);

export const EndpointSchema = z
  .object({
    address: EndpointAddressSchema,
    status: StatusUrlSchema.optional(),
    /**
     * The explicit opt-in to route to an endpoint without a status URL, on the table's word alone: nothing checks that
     * its worker is verified. Without it, the live worker view never routes to such an endpoint.
     */
    unverified: z.literal(true).optional(),
    /** Optional per-endpoint declaration (e.g. a heterogeneous pool); must fingerprint like the pool's revision. */
    descriptor: CompatDescriptorSchema.optional(),
  })
  .strict()
  .superRefine((e, ctx) => {
    if (e.unverified === true && e.status !== undefined) {
      ctx.addIssue({
        code: 'custom',
        path: ['unverified'],
        message: 'contradicts status: an endpoint with a status URL is checked through it; remove unverified',
      });
    }
    // The status URL vouches for this endpoint: on another host, one worker's verified sidecar would make a different
    // (perhaps unverified) endpoint look verified, and the gate would route to it.
    // An invalid address has no host to compare with (EndpointAddressSchema reports it); comparing anyway named the
    // same host twice as a mismatch.
    if (e.status === undefined || !EndpointAddressSchema.safeParse(e.address).success) return;
    const host = e.address.slice(0, e.address.lastIndexOf(':')).replace(/^\[|\]$/g, '');
    let statusHost: string;
    try {
      statusHost = new URL(e.status).hostname.replace(/^\[|\]$/g, '');
    } catch {
      return; // StatusUrlSchema reports it
    }
    if (statusHost.toLowerCase() !== host.toLowerCase()) {
      ctx.addIssue({
        code: 'custom',
        path: ['status'],
        message: `is on host ${statusHost}, but the endpoint's address is ${e.address}; a status URL must be the sidecar of that endpoint (same host, e.g. http://${e.address.includes('[') ? `[${host}]` : host}:9090)`,
      });
    }
  });

export const POOL_ROLES = ['prefill', 'decode', 'both'] as const;
export type PoolRole = (typeof POOL_ROLES)[number];

const LABEL_KEY = /^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/;
const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$/;

/**
 * Endpoints found in Kubernetes instead of listed: Ready pods in `namespace` matching `matchLabels`, addressed by
 * pod IP and `targetPort` (what an InferencePool's `selector` and `targetPorts` say). `revisionLabel` names the pod
 * label that must equal the pool's revision; a pod without it, or with another value, is never an endpoint of the
 * pool. See src/discovery/README.md.
 */
export const PoolDiscoverySchema = z
  .object({
    kubernetes: z
      .object({
        namespace: z.string().regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/, 'must be a Kubernetes namespace name, e.g. kvgate'),
        matchLabels: z
          .record(
            z.string().regex(LABEL_KEY, 'must be a label key, e.g. app or kvgate.io/revision'),
            z.string().regex(LABEL_VALUE, 'must be a label value'),
          )
          .refine((m) => Object.keys(m).length > 0, { message: 'must name at least one label: an empty selector matches every pod' }),
        targetPort: z.number().int().min(1).max(65535),
        /** The sidecar's status port on the same pod; the live worker view polls http://<podIP>:<statusPort>. */
        statusPort: z.number().int().min(1).max(65535),
        revisionLabel: z.string().regex(LABEL_KEY, 'must be a label key').default('kvgate.io/revision'),
        /** How many pods the pool is sized for (Envoy's circuit breakers in `kvgate envoy render`): the replica
         * count, or the autoscaler's maximum. More Ready pods still take traffic. */
        expectedEndpoints: z.number().int().min(1).default(1),
      })
      .strict(),
  })
  .strict();

/**
 * vLLM's `--scheduling-policy` (`SchedulerConfig.policy`, `SchedulerPolicy = Literal["fcfs", "priority"]` with `fcfs`
 * the default in vllm-project/vllm `vllm/config/scheduler.py` @1f8758d5): `fcfs` or `priority`, under which the
 * waiting queue goes by each request's `priority`, lowest first, and a running request may be preempted for an earlier
 * one. Without `priority`, vLLM refuses every request whose priority is not 0 ("Got priority … but Priority scheduling
 * is not enabled", `CompletionRequest.priority` in vllm-project/vllm `vllm/entrypoints/openai/completion/protocol.py`
 * @002032ee). A pool declares it so the gate stamps a tenant's priority only where its workers honour it.
 */
export const SCHEDULING_POLICIES = ['fcfs', 'priority'] as const;

export const PoolSchema = z
  .object({
    name: nonEmpty,
    cluster: nonEmpty.describe('the Envoy cluster name'),
    role: z.enum(POOL_ROLES),
    revision: nonEmpty,
    endpoints: z.array(EndpointSchema).default([]),
    discovery: PoolDiscoverySchema.optional(),
    tenants: TenantListSchema.default(['*']),
    maxInFlightPerEndpoint: z.number().int().positive().default(64),
    draining: z.boolean().default(false),
    /** What its workers were started with (`vllm serve --scheduling-policy`); left out: vLLM's default, `fcfs`. */
    schedulingPolicy: z.enum(SCHEDULING_POLICIES).optional(),
  })
  .strict()
  .refine((p) => p.endpoints.length > 0 !== (p.discovery !== undefined), {
    message: 'needs either endpoints (a static list) or discovery (a Kubernetes selector), exactly one of them',
    params: {
      fix: 'write endpoints: [{ address: ip:port }] or discovery: { kubernetes: { namespace, matchLabels, targetPort, statusPort } }',
    },
  })
  // A selector pool's revision is a label value in its watch's selector (`revisionLabel=<revision>`); one that is not
  // a label value makes kube-apiserver refuse every list and watch with 400 BadRequest (apimachinery
  // labels/selector.go, v1.33: NewRequirement -> IsValidLabelValue), so the pool would never sync.
  .refine((p) => p.discovery === undefined || LABEL_VALUE.test(p.revision), {
    path: ['revision'],
    message:
      'must be a label value for a pool found by selector (at most 63 of A-Z a-z 0-9 - _ ., alphanumeric at both ends): pods carry it as their revision label',
    params: { fix: 'rename the revision, e.g. llama-a, and label the pods with it' },
  });

/**
 * A revision's verification state, written into the route table by the policy author after `kvgate verify` compared
 * its token ids against a non-disaggregated baseline. Kept in the table (not in a side file) so the one reviewed,
 * versioned, hot-reloaded document says which revisions may take cohort traffic. A revision with
 * `required: true, verified: false` receives no cohort traffic as a rollout candidate.
 */
export const VerificationSchema = z
  .object({
    /** Writing the block means verification is wanted; `required: false` keeps the record without gating. */
    required: z.boolean().default(true),
    verified: z.boolean().default(false),
    /** Where the proof is, e.g. the `kvgate verify` report id or a ticket; shown by `kvgate explain` and `/status`. */
    evidence: nonEmpty.optional(),
  })
  .strict();

/**
 * How much of a revision's declaration the sidecars can check. `recorded` (the default): the descriptor carries the
 * tokenizer, chat-template and generation canary digests of a known-good worker, so a worker serving other weights,
 * adapter, tokenizer or template is refused before any of its KV is used. `declared-only`: the loud exception that
 * routes on the declaration alone; `policy check`, `/status`, `kvgate_revision_trust` and every audit line say so.
 */
export const REVISION_TRUST = ['recorded', 'declared-only'] as const;
export type RevisionTrust = (typeof REVISION_TRUST)[number];

export const RevisionSchema = z
  .object({
    descriptor: CompatDescriptorSchema.optional(),
    descriptorFile: nonEmpty.describe('path relative to the route table').optional(),
    verification: VerificationSchema.optional(),
    trust: z.enum(REVISION_TRUST).default('recorded'),
  })
  .strict()
  .refine((r) => (r.descriptor === undefined) !== (r.descriptorFile === undefined), {
    message: 'needs exactly one of descriptor (inline) or descriptorFile (a path relative to the route table)',
    params: { fix: 'keep either descriptor: {...} or descriptorFile: <path>, not both and not neither' },
  });

export const RolloutSchema = z
  .object({
    stable: nonEmpty,
    candidate: nonEmpty.optional(),
    /** Percent of new sessions (the candidate cohort) sent to `candidate`. */
    weight: z.number().min(0, 'must be between 0 and 100').max(100, 'must be between 0 and 100').optional(),
  })
  .strict();

export const ModelSchema = z
  .object({
    tenants: TenantListSchema,
    rollout: RolloutSchema,
  })
  .strict();

const MetadataSourceSchema = z
  .object({
    namespace: nonEmpty.describe('Envoy dynamic metadata namespace, e.g. envoy.filters.http.jwt_authn'),
    path: z.array(nonEmpty).min(1, 'must name at least one key, e.g. [payload, tenant]'),
  })
  .strict();

export const TenantSourceSchema = z
  .object({ header: HeaderNameSchema.optional(), metadata: MetadataSourceSchema.optional() })
  .strict()
  .refine((s) => (s.header === undefined) !== (s.metadata === undefined), {
    message: 'needs exactly one of header or metadata',
    params: { fix: 'write source: { header: x-tenant-id } or source: { metadata: { namespace: ..., path: [...] } }' },
  });

export const PREFIX_SCOPES = ['tenant', 'tenant-user', 'shared'] as const;
export type PrefixScope = (typeof PREFIX_SCOPES)[number];

export const TenancySchema = z
  .object({
    source: TenantSourceSchema,
    required: z.boolean(),
    default: nonEmpty.optional(),
    prefixScope: z.enum(PREFIX_SCOPES).default('tenant'),
    userHeader: HeaderNameSchema.optional(),
  })
  .strict();

export const SessionSchema = z
  .object({
    header: HeaderNameSchema.default('x-session-id'),
    /** Lifetime of the `x-kvgate-binding` sticky token (kvgate extension; default one hour). */
    bindingTtlMs: z
      .number()
      .int()
      .positive()
      .max(86_400_000, 'must be at most 86400000 (24 hours): verifiers refuse longer-lived bindings')
      .default(3_600_000),
  })
  .strict();

export const ContractSchema = z
  .object({
    ttlMs: z.number().int().positive().max(600_000, 'must be at most 600000 (10 minutes): a contract is a replay window').default(30_000),
  })
  .strict();

const QueueStepSchema = z
  .object({
    deadlineMs: z.number().int().positive(),
    maxDepth: z.number().int().positive(),
    order: z.enum(['fifo', 'edf']).default('fifo'),
  })
  .strict();
const RouteViaStepSchema = z
  .object({
    revisions: z.array(nonEmpty).min(1, 'must name at least one revision'),
    eligible: z
      .object({ notPinned: z.boolean().default(true), noAdapter: z.boolean().default(true) })
      .strict()
      .default({ notPinned: true, noAdapter: true }),
  })
  .strict();
const RecomputeStepSchema = z.object({ prefillMsPerToken: z.number().positive(), maxPromptTokens: z.number().int().positive() }).strict();
const RefuseStepSchema = z.object({ retryAfterSeconds: z.number().int().min(0) }).strict();

const FALLBACK_KINDS = ['queue', 'routeVia', 'recompute', 'refuse'] as const;
/** One step of the fallback chain, written `{ queue: {...} }` etc. and read as a tagged union. */
export const FallbackStepSchema = z
  .object({
    queue: QueueStepSchema.optional(),
    routeVia: RouteViaStepSchema.optional(),
    recompute: RecomputeStepSchema.optional(),
    refuse: RefuseStepSchema.optional(),
  })
  .strict()
  .refine((s) => FALLBACK_KINDS.filter((k) => s[k] !== undefined).length === 1, {
    message: 'each fallback step has exactly one of queue, routeVia, recompute or refuse',
    params: { fix: 'split it into one list item per step, e.g. - refuse: { retryAfterSeconds: 5 }' },
  })
  .transform((s): FallbackStepValue => {
    if (s.queue) return { kind: 'queue', ...s.queue };
    if (s.routeVia) return { kind: 'routeVia', ...s.routeVia };
    if (s.recompute) return { kind: 'recompute', ...s.recompute };
    return { kind: 'refuse', ...s.refuse! };
  });

type FallbackStepValue =
  | ({ kind: 'queue' } & z.output<typeof QueueStepSchema>)
  | ({ kind: 'routeVia' } & z.output<typeof RouteViaStepSchema>)
  | ({ kind: 'recompute' } & z.output<typeof RecomputeStepSchema>)
  | ({ kind: 'refuse' } & z.output<typeof RefuseStepSchema>);

/** One fallback step, as the decision core reads it (`kind` tags the variant). */
export type FallbackStep = DeepReadonly<FallbackStepValue>;

/** The bound of a route table's priorities either way: what a contract may carry. */
const PRIORITY_BOUND = MAX_PRIORITY;
const PriorityValueSchema = z
  .number()
  .int('must be an integer (vLLM orders by it, lower first)')
  .min(-PRIORITY_BOUND, `must be between -${PRIORITY_BOUND} and ${PRIORITY_BOUND}`)
  .max(PRIORITY_BOUND, `must be between -${PRIORITY_BOUND} and ${PRIORITY_BOUND}`);

/**
 * Tenant priorities set by the operator, in vLLM's order: lower goes first (`-10` before `0`). The gate writes the
 * tenant's priority (else `default`) into the signed contract, and each sidecar into its worker's request body, only
 * where every pool the request is routed to declares `schedulingPolicy: priority`; elsewhere the request runs at 0.
 * A client's own `priority` is refused whatever this says. Left out: no priorities.
 */
export const PrioritiesSchema = z
  .object({
    tenants: z.record(nonEmpty, PriorityValueSchema).default({}),
    default: PriorityValueSchema.default(0),
  })
  .strict()
  .superRefine((p, ctx) => {
    if (Object.hasOwn(p.tenants, '*')) {
      ctx.addIssue({
        code: 'custom',
        path: ['tenants', '*'],
        message: "'*' is not a tenant here",
        params: { fix: 'write the priority of every tenant not listed as priorities.default' },
      });
    }
  });

export const DEFAULT_MAX_BODY_BYTES = 1024 * 1024;

/**
 * The origins whose media URLs a worker may fetch for a client (`media.allowedOrigins`; src/media-url.ts). Empty by
 * default: a media part must carry its bytes inline (`data:`), since the worker fetches any other URL from inside the
 * mesh. The route table's list is the gate's; each sidecar's config lists its own (docs/sidecar-config.md).
 */
export const MediaSchema = z
  .object({
    allowedOrigins: z
      .array(
        z.string().superRefine((entry, ctx) => {
          const problem = mediaOriginProblem(entry);
          if (problem !== undefined) {
            ctx.addIssue({
              code: 'custom',
              message: problem,
              params: {
                fix: 'write an origin such as https://media.example.com or https://media.example.com:8443 (a host name, never an IP address or localhost)',
              },
            });
          }
        }),
      )
      .default([]),
  })
  .strict();

export const RouteTableSchema = z
  .object({
    version: z.literal(1, 'must be 1 (the only route-table format this kvgate reads)'),
    revisions: z.record(nonEmpty, RevisionSchema),
    models: z.record(nonEmpty, ModelSchema),
    pools: z.array(PoolSchema).min(1, 'must declare at least one pool'),
    tenancy: TenancySchema,
    session: SessionSchema.default({ header: 'x-session-id', bindingTtlMs: 3_600_000 }),
    connectorMode: z.enum(['strict', 'lenient']).default('strict'),
    contract: ContractSchema.default({ ttlMs: 30_000 }),
    fallback: z
      .array(FallbackStepSchema)
      .min(1, 'must have at least one step; end with { refuse: { retryAfterSeconds: 5 } }')
      .default([{ kind: 'refuse', retryAfterSeconds: 5 }]),
    limits: z
      .object({ maxBodyBytes: z.number().int().positive().default(DEFAULT_MAX_BODY_BYTES) })
      .strict()
      .default({ maxBodyBytes: DEFAULT_MAX_BODY_BYTES }),
    media: MediaSchema.default({ allowedOrigins: [] }),
    priorities: PrioritiesSchema.optional(),
  })
  .strict();

/** Deeply read-only view of parsed configuration: inner modules get frozen slices and never re-validate. */
export type DeepReadonly<T> = T extends (...args: never[]) => unknown
  ? T
  : T extends readonly (infer U)[]
    ? readonly DeepReadonly<U>[]
    : T extends object
      ? { readonly [K in keyof T]: DeepReadonly<T[K]> }
      : T;

/** The table as written, after schema defaults (descriptor files not yet read). */
export type RouteTableDocument = DeepReadonly<z.output<typeof RouteTableSchema>>;
export type Pool = RouteTableDocument['pools'][number];
export type PoolDiscovery = NonNullable<Pool['discovery']>;
export type Tenancy = RouteTableDocument['tenancy'];
export type TenantList = readonly string[];
export type SessionConfig = RouteTableDocument['session'];
export type Limits = RouteTableDocument['limits'];
export type ConnectorMode = RouteTableDocument['connectorMode'];

/** A revision's verification record; `required: false` when the table says nothing. */
export interface RevisionVerification {
  readonly required: boolean;
  readonly verified: boolean;
  readonly evidence: string | null;
}

/** No verification block: nothing is required, so nothing gates the revision. */
export const NO_VERIFICATION: RevisionVerification = Object.freeze({ required: false, verified: false, evidence: null });

/** True when the revision may take cohort traffic: verification is not required, or it passed. */
export function isVerified(v: RevisionVerification): boolean {
  return !v.required || v.verified;
}

/** A revision with its descriptor in hand, wherever it was declared. */
export interface ResolvedRevision {
  readonly descriptor: CompatDescriptor;
  /** The file it was read from (as written in the table), or null when declared inline. */
  readonly descriptorFile: string | null;
  readonly verification: RevisionVerification;
  /** `recorded` unless the table opts this revision out of behavioural checks (`trust: declared-only`). */
  readonly trust?: RevisionTrust;
}

/** A loaded, frozen route table: the document with every revision's descriptor resolved. */
export type RouteTable = Omit<RouteTableDocument, 'revisions'> & {
  readonly revisions: Readonly<Record<string, ResolvedRevision>>;
  /** The file the table was read from (for issue messages). */
  readonly source: string;
  /** Non-blocking findings of the load (e.g. a connector version to recheck). */
  readonly warnings: readonly ConfigIssue[];
};

/** True when `tenant` may use something restricted to `list`; a null tenant only passes `['*']`. */
export function tenantAllowed(list: TenantList, tenant: string | null): boolean {
  return list.includes('*') || (tenant !== null && list.includes(tenant));
}
