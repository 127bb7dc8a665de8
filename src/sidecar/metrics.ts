/**
 * The sidecar's Prometheus metrics, on a registry the caller passes in (tests run many sidecars in one process).
 * Names are `kvgate_sidecar_*`; every label takes values from a closed set (roles, outcomes, error codes, failure
 * reasons), never request data.
 */
import { Counter, Gauge, type Registry } from 'prom-client';

export interface SidecarMetrics {
  /** Requests by role and outcome (`served`, `recomputed`, `local`, `refused`, `failed`) and kvgate error code. */
  readonly requests: Counter<'role' | 'outcome' | 'code'>;
  readonly contractFailures: Counter<'reason'>;
  readonly attestationFailures: Counter<'reason'>;
  readonly prefillRetries: Counter<'status'>;
  readonly transferFailures: Counter<'action'>;
  readonly probes: Counter<'result'>;
  /** Workers found restarted in place between probes (another engine id or version), by role and what followed. */
  readonly restarts: Counter<'role' | 'result'>;
  /** Prefill legs the prefill side refused as incompatible, by what this decode sidecar did (fail, recompute). */
  readonly prefillRefusals: Counter<'action'>;
  readonly verified: Gauge;
  readonly inFlight: Gauge;
  readonly draining: Gauge;
}

/** Register the sidecar's metrics on `registry` (one registry per sidecar, so tests can run many). */
export function createSidecarMetrics(registry: Registry): SidecarMetrics {
  const registers = [registry];
  return {
    requests: new Counter({
      name: 'kvgate_sidecar_requests_total',
      help: 'Requests handled by the sidecar, by role, outcome (served, recomputed, local, refused, failed) and kvgate error code.',
      labelNames: ['role', 'outcome', 'code'] as const,
      registers,
    }),
    contractFailures: new Counter({
      name: 'kvgate_sidecar_contract_failures_total',
      help: 'Transfer contracts refused before any worker call, by reason.',
      labelNames: ['reason'] as const,
      registers,
    }),
    attestationFailures: new Counter({
      name: 'kvgate_sidecar_attestation_failures_total',
      help: 'Prefill attestations refused before any KV was consumed, by reason.',
      labelNames: ['reason'] as const,
      registers,
    }),
    prefillRetries: new Counter({
      name: 'kvgate_sidecar_prefill_retries_total',
      help: 'Prefill legs retried inside the bound group, by the status that caused the retry (0 = connection failure).',
      labelNames: ['status'] as const,
      registers,
    }),
    transferFailures: new Counter({
      name: 'kvgate_sidecar_transfer_failures_total',
      help: 'KV transfers the decode worker reported as failed, by what the sidecar did (recompute, fail, after_tokens).',
      labelNames: ['action'] as const,
      registers,
    }),
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
    verified: new Gauge({
      name: 'kvgate_sidecar_verified',
      help: '1 while the last probe found the live worker matching its declared descriptor, else 0.',
      registers,
    }),
    inFlight: new Gauge({ name: 'kvgate_sidecar_in_flight', help: 'Requests in flight through this sidecar.', registers }),
    draining: new Gauge({ name: 'kvgate_sidecar_draining', help: '1 once drain has started.', registers }),
  };
}
