/**
 * The gate's Prometheus metrics, registered on a registry the caller passes in (tests run in parallel, each with
 * its own registry). Names are `kvgate_*`; labels are bounded sets (codes, outcomes, revisions from the table).
 * The counters bumped on every request are counted through `PendingCounter` (pending-counts.ts): same metric, its
 * increments summed until a scrape reads it.
 */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { registerBuildInfo } from '../build-info.js';
import { ERROR_STATUS } from '../errors.js';
import { PendingCounter } from './pending-counts.js';

export interface GateMetrics {
  readonly decisions: Counter<'outcome' | 'code' | 'revision'>;
  /** `decisions` on the request path: `inc(outcome, code, revision)`. */
  readonly decisionCounts: PendingCounter<'outcome' | 'code' | 'revision'>;
  readonly decisionSeconds: Histogram<'outcome'>;
  readonly streamsActive: Gauge;
  readonly streamsTotal: Counter<'listener'>;
  /** `streamsTotal` on the request path: `inc(listener)`. */
  readonly streamCounts: PendingCounter<'listener'>;
  readonly messages: Counter<'type'>;
  /** `messages` on the request path: `inc(type)`. */
  readonly messageCounts: PendingCounter<'type'>;
  readonly forgedHeaders: Counter;
  readonly streamErrors: Counter<'reason'>;
  /** Streams refused before any message: the peer's certificate is in no role's allowlist. */
  readonly streamsRefused: Counter<'reason'>;
  /** 1 when the gRPC port runs with `insecure: true` (plaintext, caller-claimed roles). */
  readonly insecureTransport: Gauge;
  /** What came back for routed requests (routed-outcome.ts): served, refused behind the route, failed. */
  readonly routedResponses: Counter<'revision' | 'outcome' | 'code'>;
  /** `routedResponses` on the request path: `inc(revision, outcome, code)`. */
  readonly routedResponseCounts: PendingCounter<'revision' | 'outcome' | 'code'>;
}

/** The codes a sidecar behind a route can refuse with (routed-outcome.ts counts worker_error and internal as failed). */
const ROUTED_REFUSAL_CODES = Object.keys(ERROR_STATUS).filter((c) => c !== 'worker_error' && c !== 'internal');

/**
 * Start the routed-refusal series of every revision the table names at 0, so the first refusal behind a route after a
 * start (or after a reload added the revision) is an increase the alerts see (`increase()` misses a series that first
 * appears at 1). Call with each table in use: series of revisions a reload removed stay, as a counter's do.
 */
export function startRoutedRefusals(metrics: GateMetrics, revisions: Iterable<string>): void {
  for (const revision of revisions) {
    for (const code of ROUTED_REFUSAL_CODES) metrics.routedResponses.inc({ revision, outcome: 'refused', code }, 0);
  }
}

export function createGateMetrics(registry: Registry): GateMetrics {
  const registers = [registry];
  registerBuildInfo(registry, 'gate');
  const decisionCounts = new PendingCounter({
    name: 'kvgate_decisions_total',
    help: 'Routing decisions by outcome (route, hop, refuse, answer), refusal code and bound revision.',
    labelNames: ['outcome', 'code', 'revision'] as const,
    registers,
  });
  // A refusal series at 0 for every code (refusals carry no revision), so the first mixed_revision or
  // no_compatible_capacity after a start shows as an increase to the alerts (deploy/kubernetes/monitoring.yaml).
  for (const code of Object.keys(ERROR_STATUS)) decisionCounts.counter.inc({ outcome: 'refuse', code, revision: '' }, 0);
  const messageCounts = new PendingCounter({
    name: 'kvgate_ext_proc_messages_total',
    help: 'ext_proc ProcessingRequest messages received, by type.',
    labelNames: ['type'] as const,
    registers,
  });
  const routedResponseCounts = new PendingCounter({
    name: 'kvgate_routed_responses_total',
    help: 'Responses to routed requests, by bound revision and outcome: served (status < 400), refused (a sidecar refused; code = its x-kvgate-reject-reason), failed (code = worker_error / internal as a sidecar named it, else http_4xx / http_5xx).',
    labelNames: ['revision', 'outcome', 'code'] as const,
    registers,
  });
  const streamCounts = new PendingCounter({
    name: 'kvgate_ext_proc_streams_total',
    help: 'ext_proc streams opened, by Envoy listener (public or internal).',
    labelNames: ['listener'] as const,
    registers,
  });
  return {
    decisions: decisionCounts.counter,
    decisionCounts,
    decisionSeconds: new Histogram({
      name: 'kvgate_decision_duration_seconds',
      help: 'Time from the last ext_proc message needed for a decision to the decision, by outcome.',
      labelNames: ['outcome'] as const,
      buckets: [0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25, 1, 5, 30],
      registers,
    }),
    streamsActive: new Gauge({
      name: 'kvgate_ext_proc_streams_active',
      help: 'ext_proc streams currently open (one per HTTP request in flight through Envoy).',
      registers,
    }),
    streamsTotal: streamCounts.counter,
    streamCounts,
    messages: messageCounts.counter,
    messageCounts,
    forgedHeaders: new Counter({
      name: 'kvgate_forged_headers_total',
      help: 'Requests on the public listener that carried gate-owned headers (x-kvgate-*, routing aliases); removed.',
      registers,
    }),
    streamsRefused: new Counter({
      name: 'kvgate_ext_proc_streams_refused_total',
      help: 'ext_proc streams refused before any message because the peer is not an allowed identity, by reason.',
      labelNames: ['reason'] as const,
      registers,
    }),
    insecureTransport: new Gauge({
      name: 'kvgate_gate_insecure_transport',
      help: '1 when the gRPC port is plaintext with caller-claimed listener roles (insecure: true); 0 with mTLS.',
      registers,
    }),
    streamErrors: new Counter({
      name: 'kvgate_ext_proc_stream_errors_total',
      help: 'ext_proc streams that ended abnormally, by reason.',
      labelNames: ['reason'] as const,
      registers,
    }),
    routedResponses: routedResponseCounts.counter,
    routedResponseCounts,
  };
}
