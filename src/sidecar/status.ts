/**
 * The sidecar's status document (`GET /kvgate/v1/status`): what the gate discovers about this worker (role,
 * declared descriptor and fingerprint, whether the live worker matched it and why not, draining, load) and what an
 * operator needs to see why a worker is refused. Pure: built from a snapshot of the sidecar's state.
 */
import { checkDescriptor, type CompatVerdict } from '../compat/connector-rules.js';
import type { CompatDescriptor } from '../compat/descriptor.js';
import { predictNixlHash } from '../compat/nixl-hash.js';
import type { SidecarConfig } from './config.js';
import type { FieldMismatch, ProbeVerdict } from './compare.js';
import { NIXL_UNCHECKED } from './config.js';
import { liveHashSupport } from './nixl-side-channel.js';
import { sidecarOptIns } from './opt-ins.js';

export interface SidecarStatus {
  readonly role: 'prefill' | 'decode';
  /** `declared-only` when this sidecar verifies its worker without recorded canaries (named loudly). */
  readonly trust: 'recorded' | 'declared-only';
  readonly descriptor: CompatDescriptor;
  readonly fingerprint: string;
  readonly verified: boolean;
  /** The last probe found the worker not answering at all (down or unreachable), as opposed to answering as something else. */
  readonly workerDown: boolean;
  readonly reasons: readonly string[];
  readonly measured: Readonly<Record<string, unknown>>;
  /** Descriptor fields taken from the declaration because no endpoint exposes them (not verified). */
  readonly declaredOnly: readonly string[];
  /** True from the moment a drain starts: the gate routes nothing new here once it has seen it. */
  readonly draining: boolean;
  /**
   * While draining, until when (ms since the epoch) requests that arrive anyway are still admitted, so a request the
   * gate routed before it saw the drain is served, not refused (`drainAnnounceMs`); null once new ones are refused.
   */
  readonly drainAdmitsUntilMs: number | null;
  readonly inFlight: number;
  readonly capacity: { readonly maxInFlight: number; readonly available: number };
  /** vLLM's NIXL handshake hash as predicted from the descriptor, with how sure the prediction is. */
  readonly nixlHash: {
    readonly hash: string;
    readonly status: 'known' | 'interpolated' | 'recheck';
    readonly reason?: string;
    /**
     * What the worker's side channel serves: `match`/`mismatch` with the observed hash (what the gate compares with
     * the revision's prediction), `none` before vLLM 0.13, `unchecked` for the explicit opt-out, or why it is unread.
     */
    readonly live: {
      readonly state: 'match' | 'mismatch' | 'unread' | 'none' | 'unchecked';
      readonly observed: string | null;
      readonly note: string | null;
    };
  };
  /**
   * When the live worker does not match its declaration: the worker named (its URL, the endpoint the route table
   * lists, its NIXL engine id when known) and every differing field with both values. Null when verified or when
   * nothing was measured to differ (e.g. the worker is down).
   */
  readonly mismatch: {
    readonly worker: { readonly address: string; readonly endpoint: string | null; readonly engineId: string | null };
    readonly fields: readonly FieldMismatch[];
  } | null;
  /** Whether this revision can be disaggregated with its connector at all. */
  readonly connector: CompatVerdict;
  /**
   * The NIXL engine id of the launch the last probe checked (prefill role: read by the engine canary), null when not
   * measured. A prefill answer naming another engine is not attested until a fresh probe verifies that launch.
   */
  readonly engineId: string | null;
  readonly tenantScopes: readonly string[];
  /**
   * The loud opt-ins this sidecar runs with (src/sidecar/opt-ins.ts), e.g. `compatMode: lenient`; empty with the safe
   * defaults. The same ones are warnings at start.
   */
  readonly optIns: readonly string[];
  /** This pod's UID (`podUid`), so a gate can tell this sidecar from a pod that reused its IP; null when not set. */
  readonly podUid: string | null;
  /** When the last probe finished (ms since the epoch); null before the first. */
  readonly checkedAtMs: number | null;
  /**
   * The request ids (x-request-id) in flight here now, and the ids received most recently (admitted or refused,
   * oldest first): the gate counts a request against this endpoint from its decision until this list says it is over.
   */
  readonly requests: { readonly inFlight: readonly string[]; readonly received: readonly string[] };
}

export interface StatusSnapshot {
  readonly verdict: ProbeVerdict | null;
  /** The last probe round found the worker down (`recordProbe`'s `workerDown`). */
  readonly workerDown?: boolean;
  readonly checkedAtMs: number | null;
  readonly draining: boolean;
  readonly drainAdmitsUntilMs?: number | null;
  readonly inFlight: number;
  readonly engineId: string | null;
  readonly requests?: SidecarStatus['requests'];
}

/** Facts about the declaration that never change while the sidecar runs; computed once. */
export interface StaticStatus {
  readonly nixlHash: Omit<SidecarStatus['nixlHash'], 'live'>;
  readonly connector: CompatVerdict;
}

/** Computed once at start: the declaration does not change while the sidecar runs. */
export function staticStatusOf(config: SidecarConfig): StaticStatus {
  const p = predictNixlHash(config.descriptor);
  return {
    nixlHash: { hash: p.hash, status: p.status, ...(p.reason === undefined ? {} : { reason: p.reason }) },
    connector: checkDescriptor(config.descriptor, config.compatMode),
  };
}

/** The status document from the config, the fixed facts and a snapshot of the mutable state. */
export function toStatus(config: SidecarConfig, fixed: StaticStatus, s: StatusSnapshot): SidecarStatus {
  const verdict = s.verdict ?? { verified: false, reasons: ['the worker has not been probed yet'], measured: {}, declaredOnly: [] };
  return {
    role: config.role,
    trust: config.trust,
    descriptor: config.descriptor,
    fingerprint: config.fingerprint,
    verified: verdict.verified,
    workerDown: s.workerDown ?? false,
    reasons: verdict.reasons,
    measured: verdict.measured,
    declaredOnly: verdict.declaredOnly,
    draining: s.draining,
    drainAdmitsUntilMs: s.draining ? (s.drainAdmitsUntilMs ?? null) : null,
    inFlight: s.inFlight,
    capacity: { maxInFlight: config.maxInFlight, available: Math.max(0, config.maxInFlight - s.inFlight) },
    nixlHash: { ...fixed.nixlHash, live: liveHashOf(config, fixed.nixlHash.hash, verdict.measured['nixlHash'], verdict.reasons) },
    mismatch: mismatchOf(config, verdict, s.engineId),
    connector: fixed.connector,
    engineId: s.engineId,
    tenantScopes: config.tenantScopes,
    optIns: sidecarOptIns(config).map((o) => o.setting),
    podUid: config.podUid ?? null,
    checkedAtMs: s.checkedAtMs,
    requests: s.requests ?? { inFlight: [], received: [] },
  };
}

function mismatchOf(config: SidecarConfig, verdict: ProbeVerdict, engineId: string | null): SidecarStatus['mismatch'] {
  const fields = verdict.mismatches ?? [];
  if (verdict.verified || fields.length === 0) return null;
  const fromSideChannel = verdict.measured['sideChannelEngineId'];
  return {
    worker: {
      address: config.worker,
      endpoint: config.advertise ?? null,
      engineId: engineId ?? (typeof fromSideChannel === 'string' ? fromSideChannel : null),
    },
    fields,
  };
}

function liveHashOf(
  config: SidecarConfig,
  predicted: string,
  measured: unknown,
  reasons: readonly string[],
): SidecarStatus['nixlHash']['live'] {
  const support = liveHashSupport(config.descriptor);
  if (support.kind === 'none') return { state: 'none', observed: null, note: support.reason };
  if (config.nixlSideChannel === NIXL_UNCHECKED)
    return {
      state: 'unchecked',
      observed: null,
      note: 'nixlSideChannel: unchecked - the live handshake hash is not read (explicit opt-out); declared runtime flags are taken on trust',
    };
  if (support.kind === 'unread-format') return { state: 'unread', observed: null, note: support.reason };
  if (config.nixlSideChannel === undefined)
    return {
      state: 'unread',
      observed: null,
      note: "no nixlSideChannel configured: set it to the worker's VLLM_NIXL_SIDE_CHANNEL_HOST:PORT",
    };
  if (typeof measured !== 'string') {
    // It may have answered, for another engine (compare.ts refuses a hash the side channel cannot tie to this worker):
    // say that, not that it is silent.
    const refused = reasons.find((r) => r.startsWith(`NIXL compatibility hash: the side channel ${config.nixlSideChannel} `));
    return { state: 'unread', observed: null, note: refused ?? `the side channel ${config.nixlSideChannel} has not answered yet` };
  }
  return { state: measured === predicted ? 'match' : 'mismatch', observed: measured, note: null };
}

/**
 * Why this sidecar takes no new work right now, or undefined when it does. Ordered: draining, unverified, full. A
 * drain inside its announce window still admits (the gate may not have seen it yet); the other checks still apply.
 */
export function admissionRefusal(
  status: SidecarStatus,
): { code: 'draining' | 'worker_unverified' | 'queue_full'; message: string } | undefined {
  if (status.draining && status.drainAdmitsUntilMs === null)
    return { code: 'draining', message: 'this worker is draining and takes no new requests; the gate will route elsewhere' };
  if (!status.verified) {
    const m = status.mismatch;
    const named =
      m === null
        ? 'this worker does not match its declared descriptor'
        : `worker ${m.worker.address}${m.worker.endpoint === null ? '' : ` (endpoint ${m.worker.endpoint})`}, engine id ` +
          `${m.worker.engineId ?? 'not measured'}, does not match its declared descriptor: ` +
          m.fields.map((f) => `${f.field} declared ${JSON.stringify(f.declared)}, observed ${JSON.stringify(f.observed)}`).join('; ');
    return {
      code: 'worker_unverified',
      message: `${named}; it serves nothing until a probe agrees: ${status.reasons.join('; ')}`,
    };
  }
  if (status.capacity.available === 0)
    return { code: 'queue_full', message: `this worker has ${status.inFlight} requests in flight, its limit; retry shortly` };
  return undefined;
}
