/**
 * The sidecar's Prometheus metrics, on a registry the caller passes in (tests run many sidecars in one process).
 * Names are `kvgate_sidecar_*`; every label takes values from a closed set (roles, outcomes, error codes, failure
 * reasons), never request data.
 */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { registerBuildInfo } from '../build-info.js';
import { BODY_BINDING_FAILURE_REASONS } from '../contract/body-binding.js';
import { ATTESTATION_REFUSAL_REASONS } from './attestation-check.js';
import { CONTRACT_REFUSAL_REASONS } from './contract-check.js';

export interface SidecarMetrics {
  /** Requests by role and outcome (`served`, `recomputed`, `local`, `refused`, `failed`) and kvgate error code. */
  readonly requests: Counter<'role' | 'outcome' | 'code'>;
  readonly contractFailures: Counter<'reason'>;
  readonly attestationFailures: Counter<'reason'>;
  readonly prefillRetries: Counter<'status'>;
  /** Prefill legs run a second time, on another prefill endpoint of the group, by reason (prefill-rerun.ts). */
  readonly prefillReruns: Counter<'reason'>;
  /** Prefill KV a request left on its prefill worker unread, by why and how it was released (prefill-release.ts). */
  readonly prefillKvReleases: Counter<'reason' | 'via'>;
  readonly transferFailures: Counter<'action'>;
  readonly probes: Counter<'result'>;
  /** Workers found restarted in place between probes (another engine id or version), by role and what followed. */
  readonly restarts: Counter<'role' | 'result'>;
  /** Prefill legs the prefill side refused as incompatible, by what this decode sidecar did (fail, recompute). */
  readonly prefillRefusals: Counter<'action'>;
  /** The decode side's prefill leg, retries included, by how it ended (ok, failed). */
  readonly prefillLegSeconds: Histogram<'outcome'>;
  /** What the decode sidecar adds before its worker can start: arrival to the decode call, less the prefill leg. */
  readonly addedFirstTokenSeconds: Histogram<'path'>;
  /** Transfers the worker failed and silently recomputed (transfer-watch.ts): `refused`, `served`, `unattributed`, and
   * `unverified` (the counter unreadable after the transfer, or reset). */
  readonly silentRecomputes: Counter<'result'>;
  /** Contracts forgotten by the replay guard while still valid (replay-guard.ts): it was full of live contracts. */
  readonly replayEvictions: Counter;
  readonly verified: Gauge;
  /** One series (value 1) per loud opt-in this sidecar runs with (opt-ins.ts); none with the safe defaults. */
  readonly optIn: Gauge<'setting'>;
  readonly inFlight: Gauge;
  readonly draining: Gauge;
}

/** From 1 ms (a contract check) to a minute (a long prompt's prefill behind a queue). */
const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

/** Every reason `kvgate_sidecar_contract_failures_total` counts (server.ts: the headers, the endpoint, a replay, the body). */
const CONTRACT_METRIC_REASONS = [
  ...new Set([...CONTRACT_REFUSAL_REASONS, 'wrong_endpoint', 'replayed', ...BODY_BINDING_FAILURE_REASONS]),
] as const;

/**
 * A counter with a series at 0 for every reason it can count, so the first refusal after a start shows as an increase:
 * an alert on `increase(...) > 0` misses a series that first appears at 1 (deploy/kubernetes/monitoring.yaml).
 */
function startedAtZero<L extends string, C extends Counter<L>>(counter: C, label: L, values: readonly string[]): C {
  for (const v of values) counter.inc({ [label]: v } as Partial<Record<L, string>>, 0);
  return counter;
}

/** Register the sidecar's metrics on `registry` (one registry per sidecar, so tests can run many). */
export function createSidecarMetrics(registry: Registry): SidecarMetrics {
  const registers = [registry];
  registerBuildInfo(registry, 'sidecar');
  return {
    requests: new Counter({
      name: 'kvgate_sidecar_requests_total',
      help: 'Requests handled by the sidecar, by role, outcome (served, recomputed, local, refused, failed) and kvgate error code.',
      labelNames: ['role', 'outcome', 'code'] as const,
      registers,
    }),
    contractFailures: startedAtZero(
      new Counter({
        name: 'kvgate_sidecar_contract_failures_total',
        help: 'Transfer contracts refused before any worker call, by reason.',
        labelNames: ['reason'] as const,
        registers,
      }),
      'reason',
      CONTRACT_METRIC_REASONS,
    ),
    attestationFailures: startedAtZero(
      new Counter({
        name: 'kvgate_sidecar_attestation_failures_total',
        help: 'Prefill attestations refused before any KV was consumed, by reason.',
        labelNames: ['reason'] as const,
        registers,
      }),
      'reason',
      ATTESTATION_REFUSAL_REASONS,
    ),
    prefillRetries: new Counter({
      name: 'kvgate_sidecar_prefill_retries_total',
      help: 'Prefill legs retried inside the bound group, by the status that caused the retry (0 = connection failure).',
      labelNames: ['status'] as const,
      registers,
    }),
    prefillReruns: new Counter({
      name: 'kvgate_sidecar_prefill_reruns_total',
      help: "Prefill legs run a second time on another prefill endpoint of the bound group because the decode worker could not load the first leg's KV before any output, by reason (kv_load_failed, silent_recompute).",
      labelNames: ['reason'] as const,
      registers,
    }),
    prefillKvReleases: new Counter({
      name: 'kvgate_sidecar_prefill_kv_releases_total',
      help: "Requests that ended after a successful prefill leg without this decode worker reading the prefilled KV, by reason (client_gone: the client left or its deadline passed; refused: this sidecar refused after the leg) and how the prefill worker's blocks were released (rejected_request: a request this worker refuses before admission, which vLLM 0.21+ turns into a notification; handover: a one-token decode of the verified parameters; none: left to the prefill worker's lease or abort timeout).",
      labelNames: ['reason', 'via'] as const,
      registers,
    }),
    transferFailures: new Counter({
      name: 'kvgate_sidecar_transfer_failures_total',
      help: 'KV transfers the decode worker reported as failed, by what the sidecar did (recompute, fail, after_tokens).',
      labelNames: ['action'] as const,
      registers,
    }),
    // The results are silent-recompute.ts's.
    silentRecomputes: startedAtZero(
      new Counter({
        name: 'kvgate_sidecar_silent_recomputes_total',
        help: 'KV transfers the decode worker failed and recomputed on its own (vllm:nixl_num_failed_transfers rose), by what followed.',
        labelNames: ['result'] as const,
        registers,
      }),
      'result',
      ['refused', 'served', 'unattributed', 'unverified'],
    ),
    probes: new Counter({
      name: 'kvgate_sidecar_probes_total',
      help: 'Worker probes, by result (verified, unverified, down).',
      labelNames: ['result'] as const,
      registers,
    }),
    restarts: new Counter({
      name: 'kvgate_sidecar_worker_restarts_total',
      help: 'Workers found restarted in place since the last probe (a new NIXL engine id or vLLM version), by role and result (reverified: a fresh probe matched the declaration again; refused: it did not, or did not finish in time).',
      labelNames: ['role', 'result'] as const,
      registers,
    }),
    prefillRefusals: new Counter({
      name: 'kvgate_sidecar_prefill_refusals_total',
      help: 'Prefill legs refused by the prefill side as incompatible_transfer (its worker changed since it was verified), by action (fail, recompute).',
      labelNames: ['action'] as const,
      registers,
    }),
    replayEvictions: new Counter({
      name: 'kvgate_sidecar_replay_guard_evictions_total',
      help: 'Contracts the replay guard forgot while still valid because it held its maximum of live contracts (the soonest-expiring first); each one could be replayed once to this worker until it expires. Non-zero: more valid contracts reach this worker within one contract lifetime than it can start requests for, routed by the gate or sent past it (docs/operator-guide.md, KvgateReplayGuardEvictions).',
      registers,
    }),
    prefillLegSeconds: new Histogram({
      name: 'kvgate_sidecar_prefill_leg_seconds',
      help: "Duration of the decode sidecar's prefill leg (through Envoy's internal listener or direct), retries included, by outcome (ok, failed).",
      labelNames: ['outcome'] as const,
      buckets: LATENCY_BUCKETS,
      registers,
    }),
    addedFirstTokenSeconds: new Histogram({
      name: 'kvgate_sidecar_added_first_token_seconds',
      help: "Time the decode sidecar adds to time to first token: from the request's arrival to the call to the local decode worker, less the prefill leg itself, by path (transfer: KV from the prefill leg; local: prefilled on this worker).",
      labelNames: ['path'] as const,
      buckets: LATENCY_BUCKETS,
      registers,
    }),
    verified: new Gauge({
      name: 'kvgate_sidecar_verified',
      help: '1 while the last probe found the live worker matching its declared descriptor, else 0.',
      registers,
    }),
    optIn: new Gauge({
      name: 'kvgate_sidecar_opt_in',
      help: 'One series (value 1) per loud opt-in in use (keys.devSeed, trust: declared-only, compatMode: lenient, nixlSideChannel: unchecked, onTransferFailure: recompute, media.allowedOrigins); none with the safe defaults.',
      labelNames: ['setting'] as const,
      registers,
    }),
    inFlight: new Gauge({ name: 'kvgate_sidecar_in_flight', help: 'Requests in flight through this sidecar.', registers }),
    draining: new Gauge({ name: 'kvgate_sidecar_draining', help: '1 once drain has started.', registers }),
  };
}
