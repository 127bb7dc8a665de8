/**
 * Active gRPC health checking of one cluster's hosts, as Envoy runs it (opt-in: `activeHealthChecks` in
 * EnvoyHarnessOptions). What is modelled, from envoyproxy/envoy `source/common/upstream/health_checker_impl.cc` /
 * `source/extensions/health_checkers/grpc/health_checker_impl.cc` and `source/common/upstream/upstream_impl.cc`:
 *
 * - one session per host on its own connection: the first check at once, the next `interval` after each answer or
 *   timeout (`handleSuccess` / `handleFailure` re-arm the interval timer), a check unanswered after `timeout` failing
 *   as a network failure;
 * - `GrpcActiveHealthCheckSession::onRpcComplete`: only status OK with `SERVING` passes; anything else (NOT_SERVING,
 *   UNIMPLEMENTED, ...) is an ACTIVE failure, and `setUnhealthy` ejects on an ACTIVE failure AT ONCE: only network
 *   failures (connect refused, reset, timeout) wait for `unhealthy_threshold` consecutive ones;
 * - `handleSuccess`: the first answer a host ever gives makes it healthy at once, later ones need `healthy_threshold`;
 * - every host starts unhealthy (`FAILED_ACTIVE_HC`: "If we are depending on a health checker, we initialize to
 *   unhealthy", `updateDynamicHostList`), the initial ones and those a DNS answer adds alike;
 * - a host a DNS answer drops is kept while it passes its checks and removed once it fails (`updateDynamicHostList`,
 *   without `ignore_health_on_host_removal`);
 * - the load balancer's panic threshold (default 50 %): below it every host is used, healthy or not;
 * - `HealthCheckerImplBase::interval` (`source/extensions/health_checkers/common/health_checker_base_impl.cc`,
 *   envoyproxy/envoy @045a5b1a): until the cluster has ever carried traffic (`upstream_cx_total` used; health-check
 *   connections do not count) the next check comes `no_traffic_interval` later (default 60 s), or
 *   `no_traffic_healthy_interval` after a passing check that changed nothing pending; once it has, `interval`. The
 *   interval is chosen when a check completes, so a timer armed before the first request still runs its long wait.
 *   `interval_jitter` adds a random 0..jitter ms.
 *
 * Not modelled: `interval_jitter_percent`, `initial_jitter`, `unhealthy_interval` / edge intervals (default =
 * `interval`), HTTP checks (recorded only).
 */
import * as grpc from '@grpc/grpc-js';
import { service as healthService } from 'grpc-health-check';
import type { Endpoint, HealthCheckConfig } from './envoy-config-types.js';

export type HostHealth = 'healthy' | 'unhealthy';

/** One host's health-check session. */
export class HealthCheckSession {
  health: HostHealth = 'unhealthy';
  #firstCheck = true;
  #healthy = 0;
  #networkFailures = 0;
  #timer: NodeJS.Timeout | undefined;
  #closed = false;
  readonly #client: grpc.Client;
  readonly #firstAnswer: Promise<void>;
  #answered!: () => void;

  constructor(
    readonly endpoint: Endpoint,
    private readonly config: HealthCheckConfig & { readonly check: { readonly grpc: string } },
    target: string,
    credentials: grpc.ChannelCredentials,
    channelOptions: grpc.ChannelOptions,
    private readonly onChange: () => void,
    /** Whether the cluster has ever carried traffic (a stream opened on it). */
    private readonly hadTraffic: () => boolean,
  ) {
    const Ctor = grpc.makeGenericClientConstructor(healthService, 'Health');
    this.#client = new Ctor(target, credentials, { ...channelOptions, 'grpc.use_local_subchannel_pool': 1 });
    this.#firstAnswer = new Promise((r) => {
      this.#answered = r;
    });
    this.#check();
  }

  /** Resolves once the first check has an outcome (Envoy's cluster initialisation waits for it). */
  firstAnswer(): Promise<void> {
    return this.#firstAnswer;
  }

  #check(): void {
    if (this.#closed) return;
    const deadline = new Date(Date.now() + this.config.timeoutMs);
    (
      this.#client as unknown as {
        Check: (req: { service: string }, o: grpc.CallOptions, cb: grpc.requestCallback<{ status?: string }>) => void;
      }
    ).Check({ service: this.config.check.grpc }, { deadline }, (err, res) => {
      if (this.#closed) return;
      let next: number;
      if (err === null && res?.status === 'SERVING') next = this.#interval('healthy', this.#success());
      else if (err !== null && (err.code === grpc.status.UNAVAILABLE || err.code === grpc.status.DEADLINE_EXCEEDED))
        next = this.#interval('unhealthy', this.#failure('network'));
      else next = this.#interval('unhealthy', this.#failure('active'));
      this.#answered();
      this.#timer = setTimeout(() => this.#check(), next);
      this.#timer.unref();
    });
  }

  /** `HealthCheckerImplBase::interval`: the wait before the next check, given this check's result. */
  #interval(result: HostHealth, pending: boolean): number {
    const c = this.config;
    const base = this.hadTraffic()
      ? c.intervalMs // unhealthy_interval and the edge intervals default to it
      : result === 'healthy' && !pending
        ? c.noTrafficHealthyIntervalMs
        : c.noTrafficIntervalMs;
    return base + (c.intervalJitterMs > 0 ? Math.floor(Math.random() * c.intervalJitterMs) : 0);
  }

  /** A passing check; true while a change to healthy is pending (Envoy's `HealthTransition::ChangePending`). */
  #success(): boolean {
    this.#networkFailures = 0;
    let pending = false;
    if (this.health === 'unhealthy') {
      if (this.#firstCheck || ++this.#healthy >= this.config.healthyThreshold) this.#set('healthy');
      else pending = true;
    }
    this.#firstCheck = false;
    return pending;
  }

  /** A failed check; true while a change to unhealthy is pending (network failures below the threshold). */
  #failure(type: 'network' | 'active'): boolean {
    this.#healthy = 0;
    let pending = false;
    if (this.health === 'healthy') {
      if (type === 'active' || ++this.#networkFailures >= this.config.unhealthyThreshold) this.#set('unhealthy');
      else pending = true;
    }
    this.#firstCheck = false;
    return pending;
  }

  #set(h: HostHealth): void {
    this.health = h;
    this.#networkFailures = 0;
    this.#healthy = 0;
    this.onChange();
  }

  close(): void {
    this.#closed = true;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#client.close();
    this.#answered();
  }
}

/** The grpc health check of a cluster, if it has one the harness runs (the first; Envoy runs each). */
export function grpcHealthCheck(
  checks: readonly HealthCheckConfig[],
): (HealthCheckConfig & { readonly check: { readonly grpc: string } }) | undefined {
  const c = checks.find((h) => 'grpc' in h.check);
  return c as (HealthCheckConfig & { readonly check: { readonly grpc: string } }) | undefined;
}

/** Envoy's default `healthy_panic_threshold`: below 50 % healthy hosts the load balancer uses all of them. */
export const PANIC_THRESHOLD_PERCENT = 50;
