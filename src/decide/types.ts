/**
 * The decision core's vocabulary: what it is told about a request, and what it answers.
 * Pure data: nothing here knows Envoy, gRPC or HTTP. `src/envoy/` translates both ways.
 */
import type { KeyRing } from '../contract/keys.js';
import type { ErrorCode } from '../errors.js';

/** An OpenAI `/v1/completions` or `/v1/chat/completions` body, as far as routing needs it. */
export interface OpenAiRequest {
  readonly endpoint: 'completions' | 'chat';
  readonly model: string;
  readonly stream: boolean;
  /** The OpenAI `user` field, if any. */
  readonly user?: string;
  /** A client-supplied `cache_salt`; folded into the derived salt, never used alone. */
  readonly cacheSalt?: string;
  /** The whole parsed body (kept so the adapter can rewrite `cache_salt` without re-parsing). */
  readonly json: Readonly<Record<string, unknown>>;
}

/** Everything the decision core is told about one HTTP request. */
export interface RequestFacts {
  readonly requestId: string;
  readonly method: string;
  readonly path: string;
  /** Lower-cased request headers as received, gate-owned headers already removed. */
  readonly headers: Readonly<Record<string, string>>;
  /** Names of headers whose value is not valid UTF-8 (`headers` holds a lossy decoding): never an identity. */
  readonly invalidHeaders?: readonly string[];
  /**
   * Names of headers Envoy sent in `value` with `send_header_raw_value` off that hold a `!`, which Envoy also writes
   * for each byte that is not UTF-8 (src/envoy/headers.ts): never an identity either.
   */
  readonly sanitizedHeaders?: readonly string[];
  /** Envoy dynamic metadata forwarded to ext_proc (namespace -> plain JSON object), e.g. jwt_authn payloads. */
  readonly metadata: Readonly<Record<string, Readonly<Record<string, unknown>>>>;
  /** Absent for requests without a body (GET). */
  readonly body?: OpenAiRequest;
  /**
   * An internal hop: a sidecar's prefill leg coming back through Envoy's internal listener. Gate-owned headers are
   * stripped from `headers`, so the adapter fills this from the raw `x-kvgate-contract`, `x-kvgate-prefill-cluster`
   * and `x-kvgate-prefill-endpoint` values, and only for streams of the internal listener (a client on the public
   * listener can never present a hop).
   */
  readonly hop?: HopFacts;
  /** A sticky binding token presented by the client (`x-kvgate-binding` echoed back). */
  readonly binding?: string;
}

/** What a sidecar's prefill leg presents to the gate. */
export interface HopFacts {
  /** The signed transfer contract the gate minted for this request. */
  readonly contract: string;
  /** The Envoy cluster the sidecar wants the prefill leg routed to (a retry may pick another of the same group). */
  readonly prefillCluster?: string;
  /** The `ip:port` inside that cluster, when the sidecar names one. */
  readonly prefillEndpoint?: string;
  /**
   * Prefill endpoints that already failed this request (`x-kvgate-retry-exclude` from the decode sidecar): a retry
   * gets another endpoint of the same group, or a refusal - never an endpoint of another group.
   */
  readonly retryExclude?: readonly string[];
}

/** The group a request is bound to. Immutable for the life of the request. */
export interface BoundGroup {
  /** `fingerprint` + tenant prefix scope, hashed: the value of `x-kvgate-group`. */
  readonly id: string;
  readonly fingerprint: string;
  /** The tenant prefix scope string (e.g. `tenant:acme`, `tenant-user:acme/u1`, `shared`). */
  readonly tenantScope: string;
  readonly tenant: string | null;
  readonly model: string;
  readonly revision: string;
  readonly adapter: string | null;
}

/** A place to send a leg: an Envoy cluster, and the endpoint inside it when the gate picks one. */
export interface Target {
  readonly pool: string;
  readonly cluster: string;
  /** `ip:port`, for ORIGINAL_DST / override_host routing; null when Envoy load-balances inside the cluster. */
  readonly endpoint: string | null;
  /**
   * Decode only: further endpoints of the same cluster and group, best first: the ordered fallback list of the
   * GIE endpoint-picker protocol (a data plane that walks it on retry never leaves the group).
   */
  readonly alternates?: readonly string[];
}

export interface RouteDecision {
  readonly kind: 'route';
  readonly requestId: string;
  readonly group: BoundGroup;
  readonly decode: Target;
  /** Null when the request is served without disaggregation (a `both` pool, or local recompute). */
  readonly prefill: Target | null;
  /** The derived `cache_salt` to write into the body. */
  readonly cacheSalt: string;
  /** The signed transfer contract (`x-kvgate-contract`). */
  readonly contract: string;
  /** A signed sticky token for the response (`x-kvgate-binding`); signed on first read (`pendingBinding`). */
  readonly binding: string;
  /** The same binding unsigned: what a stream keeps until its response headers, where `binding` is stamped. */
  readonly pendingBinding: { token(): string };
  /** Human-readable steps that led here, for `kvgate explain` and debug logs. */
  readonly trace: readonly string[];
  /** Fallback steps walked before this route (routeVia, recompute), for `kvgate_fallback_total`; absent when none ran. */
  readonly fallback?: readonly FallbackRecord[];
  /** Set when the bound revision is routed on its declaration alone (`trust: declared-only`): every log line says so. */
  readonly trust?: 'declared-only';
}

/** An internal hop (prefill leg) that presented a valid contract and a prefill target inside its group. */
export interface HopDecision {
  readonly kind: 'hop';
  readonly requestId: string;
  readonly group: BoundGroup;
  readonly prefill: Target;
  readonly contract: string;
  readonly trace: readonly string[];
}

export interface Refusal {
  readonly kind: 'refuse';
  readonly requestId: string;
  readonly code: ErrorCode;
  /** What was wrong and what to do, for the client. Never contains secrets or prompt text. */
  readonly message: string;
  readonly retryAfterSeconds?: number;
  readonly tenant?: string | null;
  readonly trace: readonly string[];
  /** Fallback steps walked before this refusal, for `kvgate_fallback_total`; absent when the chain did not run. */
  readonly fallback?: readonly FallbackRecord[];
  /** The revision the request was bound to, when the refusal came after binding (for the audit line). */
  readonly revision?: string;
  /** That revision's trust; `declared-only` is named on every audit line of the revision. */
  readonly trust?: 'recorded' | 'declared-only';
}

/**
 * A request the gateway answers itself, without any worker: `GET /v1/models` (the caller's tenant's models, in
 * OpenAI's list shape) and `GET /health`.
 */
export interface AnswerDecision {
  readonly kind: 'answer';
  readonly requestId: string;
  readonly status: number;
  /** The JSON body; absent for an empty body. */
  readonly json?: unknown;
  readonly tenant?: string | null;
  readonly trace: readonly string[];
}

/** A final answer for Envoy: route, hop, refusal, or the gateway's own answer. The only kinds the session sees. */
export type Decision = RouteDecision | HopDecision | Refusal | AnswerDecision;

/**
 * The bound group has no capacity and the fallback chain's `queue` step took the request: the caller (the gate) must
 * hold it in the group's queue and decide again, inside this group only, when capacity may have freed, until
 * `deadlineAtMs`. Only returned when the caller passed a `QueueView` (it can hold requests).
 */
export interface WaitDecision {
  readonly kind: 'wait';
  readonly requestId: string;
  readonly group: BoundGroup;
  /** Which leg lacks capacity. */
  readonly missing: 'decode' | 'prefill';
  /** True when a client binding chose the revision (kept across re-decisions). */
  readonly pinned: boolean;
  readonly order: QueueOrder;
  readonly maxDepth: number;
  /** When the request joined the queue (ms since epoch). */
  readonly enqueuedAtMs: number;
  /** enqueued + min(the step's deadlineMs, the client's x-request-deadline-ms, the caller's wait cap). */
  readonly deadlineAtMs: number;
  /** 1-based position of the queue step in the chain (for traces). */
  readonly step: number;
  readonly trace: readonly string[];
  readonly fallback: readonly FallbackRecord[];
}

/** What the pure core answers: a final Decision, or a WaitDecision when the caller can hold requests. */
export type CoreDecision = Decision | WaitDecision;

export type QueueOrder = 'fifo' | 'edf';

/** The two halves of a disaggregated request; a queue waits for one of them. */
export type Leg = 'decode' | 'prefill';

/** One fallback step as walked: which kind, and what it did with the request. */
export interface FallbackRecord {
  readonly step: 'queue' | 'routeVia' | 'recompute' | 'refuse' | 'end';
  readonly outcome: FallbackStepOutcome;
  /** A `queue` step that passed: why it could not hold the request (the refusal, the audit line and a metric say so). */
  readonly skipped?: { readonly reason: QueueSkipReason; readonly why: string };
}

/**
 * Why a `queue` step passed: `cannot_hold` (the caller cannot hold requests: an internal hop, or Envoy's
 * max_message_timeout is 0), `nothing_to_wait_for` (no endpoint of the missing leg is merely at its in-flight limit:
 * they are down, unverified or draining, and a release frees nothing), `no_time_left` (the client's deadline or
 * Envoy's limit leaves less than 1 ms).
 */
export type QueueSkipReason = 'cannot_hold' | 'nothing_to_wait_for' | 'no_time_left';

/**
 * `passed`: the step did not apply and the walk went on; `waiting`: queued; `queue_full`: refused 429;
 * `deadline_exceeded`: refused 504; `routed`: served via another revision; `recomputed`: served without
 * disaggregation; `refused`: refused 503.
 */
export type FallbackStepOutcome = 'passed' | 'waiting' | 'queue_full' | 'deadline_exceeded' | 'routed' | 'recomputed' | 'refused';

/**
 * What the pure core may know about the gate's queues. Read-only and synchronous: the gate answers from memory, and
 * `kvgate explain` answers from its flags.
 */
export interface QueueView {
  /**
   * Requests waiting in this group's queue now. The queue step reads nothing else from the queue: whether a request
   * waits depends on the worker view, this depth and the deadlines, never on traffic history, so `kvgate explain`
   * given the same states decides as the live gate does.
   */
  depth(groupId: string): number;
}

/** A queued request being decided again: it stays in `group` (or is refused), whatever the table says now. */
export interface QueuedRequest {
  readonly group: BoundGroup;
  readonly pinned: boolean;
  readonly enqueuedAtMs: number;
  readonly deadlineAtMs: number;
}

/** What the caller lends one decision: the time, the keys, and its queue when it can hold requests. */
/**
 * The decision's steps, one line each, for `kvgate explain` and tests; undefined when the caller reads none (the gate:
 * nothing on its request path reads them, and building them is a tenth of what a routed decision allocates). Lines
 * are added with `trace?.push(...)`, whose argument is not even built when there is no trace.
 */
export type Trace = string[] | undefined;

/** The steps of a decision made without a trace. */
export const NO_TRACE: readonly string[] = Object.freeze([]);

/** A decision's frozen copy of its trace. */
export const frozenTrace = (trace: Trace | readonly string[]): readonly string[] =>
  trace === undefined ? NO_TRACE : Object.freeze([...trace]);

export interface DecideContext {
  /** Milliseconds since the epoch (floored); contracts and bindings are issued at this time. */
  readonly nowMs: number;
  /** Record the decision's steps (`trace` on every decision). Default on; the gate turns it off. */
  readonly trace?: boolean;
  /**
   * How many decode alternates after the pick the data plane is given (the GIE fallback list in
   * `x-gateway-destination-endpoint`): the contract authorises exactly those, so a decode sidecar accepts the request
   * on no endpoint the gateway was not offered. Default: every alternate ranked (`MAX_ALTERNATES`).
   */
  readonly alternates?: number;
  readonly keys: KeyRing;
  /** The caller's queues. Without it `queue` steps pass, so `decide` never answers `wait`. */
  readonly queue?: QueueView;
  /** The longest the caller can hold a request, in ms (see `waitCapMs`). */
  readonly maxWaitMs?: number;
  /** A queued request decided again: it stays in its group (or is refused), whatever the cohort says now. */
  readonly bound?: QueuedRequest;
}
