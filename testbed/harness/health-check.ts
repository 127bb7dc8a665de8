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
 * - the load balancer's panic threshold (default 50 %): below it every host is used, healthy or not.
 *
 * Not modelled: jitter (`interval_jitter`, default 0), `no_traffic_interval` (the gate cluster carries traffic),
 * `unhealthy_interval` / edge intervals (default = `interval`), HTTP checks (recorded only).
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
      if (err === null && res?.status === 'SERVING') this.#success();
      else if (err !== null && (err.code === grpc.status.UNAVAILABLE || err.code === grpc.status.DEADLINE_EXCEEDED))
        this.#failure('network');
      else this.#failure('active');
      this.#answered();
      this.#timer = setTimeout(() => this.#check(), this.config.intervalMs);
      this.#timer.unref();
    });
  }

  #success(): void {
    this.#networkFailures = 0;
    if (this.health === 'unhealthy' && (this.#firstCheck || ++this.#healthy >= this.config.healthyThreshold)) this.#set('healthy');
    this.#firstCheck = false;
  }

  #failure(type: 'network' | 'active'): void {
    this.#healthy = 0;
    if (this.health === 'healthy' && (type === 'active' || ++this.#networkFailures >= this.config.unhealthyThreshold))
      this.#set('unhealthy');
    this.#firstCheck = false;
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
