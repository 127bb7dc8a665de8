/**
 * What a role handler needs from the running sidecar, as one explicit object: config, keys, injected clock, fetch,
 * logger and metrics, and the abort signal that fires when the sidecar closes. Handlers never reach for globals.
 */
import type { Context, Tracer } from '@opentelemetry/api';
import type { Logger } from 'pino';
import type { KeyRing } from '../contract/keys.js';
import type { SidecarConfig } from './config.js';
import type { FailedTransferReads } from './failed-transfer-reads.js';
import type { SharedRead } from './shared-read.js';
import type { KvgateError, Result } from '../errors.js';
import type { FetchFn } from './http-io.js';
import type { SidecarMetrics } from './metrics.js';
import type { SidecarStatus } from './status.js';
import type { TransferWatch } from './transfer-watch.js';
import type { WorkerAuth } from './worker-auth.js';

export interface SidecarContext {
  readonly config: SidecarConfig;
  /**
   * The key ring in use (src/key-store.ts; a `keys.file` source reloads). A request reads it once, on arrival, and
   * keeps that snapshot as `IncomingCall.keys`; handlers use the call's, never this, so one request never mixes rings.
   */
  readonly keys: () => KeyRing;
  readonly fetch: FetchFn;
  readonly now: () => number;
  readonly logger: Logger;
  readonly metrics: SidecarMetrics;
  /** Spans (src/sidecar/spans.ts); the API's no-op tracer unless the config's `tracing.otlpUrl` is set. */
  readonly tracer: Tracer;
  /** The worker's base URL without a trailing slash. */
  readonly workerUrl: string;
  /** `Authorization: Bearer <worker API key>` when `workerApiKey` is configured (worker-auth.ts), else empty. */
  readonly workerAuth: WorkerAuth;
  /** Transfers in flight on this (decode) worker, to pin a failed-transfer counter rise on one (transfer-watch.ts). */
  readonly transfers: TransferWatch;
  /** The worker's failed-transfer counter, read filtered and shared between concurrent requests. */
  readonly failedTransfers: FailedTransferReads;
  /** The worker's `GET /version` (launch-check.ts), shared between concurrent requests. */
  readonly workerVersion: SharedRead<Result<string, KvgateError>>;
  /** Fires when the sidecar closes: every upstream call listens to it. */
  readonly closed: AbortSignal;
  /** The sidecar's status now: the last verdict, the engine id and version it verified, drain and load. */
  status(): SidecarStatus;
  /**
   * Probe the worker again and wait at most `probe.timeoutMs`; undefined when that was not enough (the round still
   * finishes and is recorded). A round already under way is used only if `accept` takes its result (a prefill
   * sidecar's round reads the engine id first, so a round showing the engine a request saw checked that launch);
   * otherwise, and without `accept`, a round that starts after this call.
   */
  reverify(accept?: (status: SidecarStatus) => boolean): Promise<SidecarStatus | undefined>;
}

/** One request as the role handlers see it after the shared checks (body parsed, contract not yet verified). */
export interface IncomingCall {
  readonly endpoint: 'completions' | 'chat';
  readonly path: string;
  readonly body: Record<string, unknown>;
  readonly headers: Readonly<Record<string, string | string[] | undefined>>;
  /** `x-request-id`, when present. */
  readonly requestId: string | undefined;
  /** Aborted when the client goes away or the sidecar closes. */
  readonly signal: AbortSignal;
  readonly logger: Logger;
  /** `performance.now()` when the request arrived, for the latency histograms. */
  readonly receivedAt: number;
  /** The trace context of this request's span: calls made for it are its children. */
  readonly trace: Context;
  /** The key ring this request verifies and signs with, taken once when it arrived (`SidecarContext.keys`). */
  readonly keys: KeyRing;
}

/** A single-valued request header. */
export function headerValue(headers: IncomingCall['headers'], name: string): string | undefined {
  const v = headers[name];
  return Array.isArray(v) ? v[0] : v;
}

/**
 * Headers forwarded on the prefill leg: the request id, and the client's `authorization` (unchanged for deployments
 * that pass the client's own key through to vLLM). Never this sidecar's worker key: that stays on this pod.
 */
export function forwardHeaders(call: IncomingCall, requestId: string): Record<string, string> {
  const out: Record<string, string> = { 'x-request-id': requestId };
  const auth = headerValue(call.headers, 'authorization');
  if (auth !== undefined) out['authorization'] = auth;
  return out;
}

/** Headers for a call to this sidecar's own worker: the forwarded ones, with the configured worker key winning. */
export function workerHeaders(ctx: Pick<SidecarContext, 'workerAuth'>, forwarded: Record<string, string>): Record<string, string> {
  return { ...forwarded, ...ctx.workerAuth };
}
