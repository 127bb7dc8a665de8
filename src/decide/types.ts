/**
 * The decision core's vocabulary: what it is told about a request, and what it answers.
 * Pure data: nothing here knows Envoy, gRPC or HTTP. `src/envoy/` translates both ways.
 */
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
  /** Envoy dynamic metadata forwarded to ext_proc (namespace -> plain JSON object), e.g. jwt_authn payloads. */
  readonly metadata: Readonly<Record<string, Readonly<Record<string, unknown>>>>;
  /** Absent for requests without a body (GET). */
  readonly body?: OpenAiRequest;
  /**
   * A transfer contract presented on an internal hop (a sidecar's prefill leg). Kept for compatibility: prefer
   * `hop`, which also carries the requested prefill target. When only this is set it is read as `{ contract }`.
   */
  readonly contract?: string;
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
  /** A signed sticky token for the response (`x-kvgate-binding`). */
  readonly binding: string;
  /** Human-readable steps that led here, for `kvgate explain` and debug logs. */
  readonly trace: readonly string[];
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
}

export type Decision = RouteDecision | HopDecision | Refusal;
