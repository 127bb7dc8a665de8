/**
 * The gate's live worker view: polls each endpoint's sidecar status (`GET <status>/kvgate/v1/status`) and tells the
 * decision core, per endpoint, the fingerprint the worker runs now, whether its sidecar verified the live worker
 * against that declaration, and whether it drains.
 *
 * Each answer also carries the request ids the sidecar serves and received (`requests`); they go to the in-flight
 * tracker (`observe`, src/gate/endpoint-load.ts), which counts a request from the gate's decision until its sidecar
 * says it is over, whatever the ext_proc stream's lifetime. `refresh(address)` polls one endpoint now: the gate
 * calls it when a request's ext_proc stream ends, so the end of a request shows within a round trip where the
 * stream lives as long as the request (Envoy 1.36), and at the next poll otherwise.
 *
 * Every poll carries a fresh nonce, and an answer counts only when a holder of the key ring signed it for that nonce
 * and those exact bytes (src/contract/status-signature.ts): it is checked before a byte of the JSON is parsed. An
 * unsigned, malformed, unknown-key, replayed or altered answer makes the endpoint unverified at once (whatever it
 * said before), with the reason on `/status`, a `kvgate_worker_status_polls_total` result and one warning per change.
 *
 * Fail closed: an endpoint whose sidecar was never reached, or whose last answer is older than `staleAfterMs`,
 * counts as unverified and takes no new requests. An endpoint with no status URL in the route table keeps its
 * declared fingerprint (the static view's behaviour), and `/status` says so.
 */
import type { Logger } from 'pino';
import { Counter, Gauge, type Registry } from 'prom-client';
import {
  indexRoutable,
  routableOf,
  type EndpointLoad,
  type EndpointState,
  type InFlightTracker,
  type RequestReport,
  type RoutableIndex,
  type WorkerView,
} from '../decide/worker-view.js';
import type { CompiledEndpoint, CompiledPool, CompiledRouteTable } from '../policy/compile.js';
import type { KeyRing } from '../contract/keys.js';
import {
  newStatusNonce,
  verifyStatus,
  type StatusSignatureFailure,
  type StatusSignatureFailureReason,
} from '../contract/status-signature.js';
import { boundedBytes } from '../bounded-body.js';
import { H } from '../headers.js';
import {
  describeNamedMismatch,
  liveHashOf,
  namedMismatchOf,
  observedHashProblem,
  type LiveHash,
  type NamedMismatch,
} from './observed-hash.js';
import { sidecarChecksOf, sidecarTrustProblem, type SidecarChecks } from './sidecar-trust.js';
import { canonicalJson } from '../compat/canonical-json.js';

/** The states `kvgate_worker_endpoints` and `/status` name; a pool's endpoints are in exactly one each. */
export const ENDPOINT_STATES = ['routable', 'unverified', 'draining', 'stale', 'unreached'] as const;
export type EndpointStateName = (typeof ENDPOINT_STATES)[number];

/** One pool as `/status` shows it: the state of each endpoint (the same states as `kvgate_worker_endpoints`). */
export interface PoolState {
  readonly pool: string;
  readonly revision: string;
  readonly role: string;
  readonly cluster: string;
  readonly endpoints: ReadonlyArray<{
    readonly address: string;
    readonly status: string | null;
    readonly state: EndpointStateName;
    readonly reasons: readonly string[];
    /** The worker its sidecar named as not matching its declaration (address, engine id, fields, both values). */
    readonly named: string | null;
  }>;
}

export interface WorkerPollerOptions {
  readonly intervalMs: number;
  readonly timeoutMs: number;
  readonly staleAfterMs: number;
}

export interface Observation {
  readonly fingerprint: string | null;
  readonly verified: boolean;
  readonly draining: boolean;
  readonly reasons: readonly string[];
  readonly observedAtMs: number;
  /** vLLM's load gauges as the sidecar read them, when it reports them. */
  readonly load?: EndpointLoad;
  /** Why the last poll failed, when it did (the previous good observation is kept until it goes stale). */
  readonly error?: string;
  /** The live NIXL hash the sidecar read from its worker (observed-hash.ts compares it with the prediction). */
  readonly nixlHash?: LiveHash;
  /** The worker the sidecar named as not matching its declaration. */
  readonly mismatch?: NamedMismatch;
  /** The role the sidecar serves (its status `role`): a pool routes only to sidecars of its own role. */
  readonly role?: 'prefill' | 'decode';
  /** How the sidecar checks its worker (trust and canaries): sidecar-trust.ts compares them with the table's. */
  readonly checks?: SidecarChecks;
  /** The key id the last answer was signed with (it verified). */
  readonly signedBy?: string;
  /** Why the last answer's signature did not verify: the endpoint is unverified until one does. */
  readonly signatureProblem?: StatusSignatureFailureReason;
}

export interface WorkerPoller {
  /** A view over the given table (rebuilt by the gate on every reload; observations are shared). */
  viewFor(table: CompiledRouteTable): WorkerView;
  /** Poll every status URL of the table now (also what the timer does). */
  pollOnce(): Promise<void>;
  /** Poll one endpoint now (coalesced with a poll of it already under way: that one is followed by one more). */
  refresh(address: string): void;
  /** Per endpoint address, what was last seen: for the gate's /status. */
  snapshot(): Record<string, Observation & { status: string }>;
  /** Every pool of the table in use with each endpoint's state and why (the gate's /status, `kvgate status`). */
  poolStates(): PoolState[];
  start(): void;
  stop(): void;
}

interface Deps {
  /** The in-flight counts the view reports; `observe` (when present) receives each sidecar's request ids. */
  readonly inFlight: InFlightTracker & {
    observe?(address: string, requests: RequestReport | undefined, startedAtMs: number): void;
    /** Forget the endpoints not in `addresses` (every pool's now): called on every poll round. */
    retain?(addresses: ReadonlySet<string>): void;
  };
  /** Called after every completed poll round or refresh (capacity may have freed: wake the queue). */
  readonly onPolled?: () => void;
  readonly logger: Logger;
  readonly registry: Registry;
  /** The gate's key ring in use (src/key-store.ts `current`): a status answer must be signed under one of its ids. */
  readonly keys: () => KeyRing;
  readonly table: () => CompiledRouteTable;
  readonly now?: () => number;
  readonly fetch?: typeof fetch;
  /** A pool's endpoints now: its static list by default, discovered pods for a selector pool (src/discovery). */
  readonly endpointsOf?: (pool: CompiledPool) => readonly CompiledEndpoint[];
  /**
   * A selector pool's pods that are terminating but still serve (src/discovery `terminating`): still polled, so a
   * prefill leg its contract planned there before the deletion can go there (`WorkerView.terminating`).
   */
  readonly terminatingOf?: (pool: CompiledPool) => readonly CompiledEndpoint[];
}

/**
 * For an endpoint found by selector: whether the sidecar that answered at its address is the pod the watch named.
 * A pod IP can be reused by a new pod before the old pod's deletion reaches the gate; the sidecar reports its own pod
 * UID (the downward API's `metadata.uid`, `--pod-uid`), and any other answer, or none, leaves the endpoint
 * unverified. Null when it matches, or when the endpoint is a static address (no pod UID to compare).
 */
function podUidProblem(expected: string | undefined, address: string, reported: unknown): string | null {
  if (expected === undefined || reported === expected) return null;
  if (typeof reported !== 'string' || reported === '')
    return `the sidecar at ${address} does not report its pod UID, so it cannot be told apart from a pod that reused the IP; start it with --pod-uid "$(POD_UID)" (env POD_UID from fieldRef metadata.uid)`;
  return `the sidecar at ${address} is pod ${reported}, but discovery lists pod ${expected} there (the pod IP was reused); not routed until the watch catches up`;
}

/**
 * Observations are kept per (address, pod UID): a pod IP reused by a new pod is a new endpoint, and nothing its
 * predecessor's sidecar said carries over.
 */
function keyOf(e: CompiledEndpoint): string {
  return e.podUid === undefined ? e.address : `${e.address}|${e.podUid}`;
}

export function createWorkerPoller(opts: WorkerPollerOptions, deps: Deps): WorkerPoller {
  const now = deps.now ?? Date.now;
  const doFetch = deps.fetch ?? fetch;
  const endpointsOf = deps.endpointsOf ?? ((p: CompiledPool) => p.endpoints);
  const terminatingOf = deps.terminatingOf ?? (() => []);
  const seen = new ObservationMap(() => now(), opts.staleAfterMs);
  const polls = new Counter({
    name: 'kvgate_worker_status_polls_total',
    help: 'Polls of sidecar status endpoints by result: ok, error (no answer), or an answer refused unread because its signature is missing (unsigned), malformed (malformed_signature), under a key id the gate lacks (unknown_key) or does not verify for this poll (bad_signature: replayed, altered or forged).',
    labelNames: ['result'] as const,
    registers: [deps.registry],
  });
  for (const result of POLL_RESULTS) polls.inc({ result }, 0);
  const age = new Gauge({
    name: 'kvgate_worker_view_age_seconds',
    help: 'Age of the oldest sidecar observation behind the live worker view.',
    registers: [deps.registry],
    collect() {
      this.set(oldestAgeMs() / 1000);
    },
  });
  void age;
  const routable = new Gauge({
    name: 'kvgate_worker_endpoints',
    help: 'Endpoints of each pool by state (routable, unverified, draining, stale, unreached); every state is exported, 0 included, so "no routable endpoint" can be alerted on.',
    labelNames: ['pool', 'revision', 'role', 'state'] as const,
    registers: [deps.registry],
    collect() {
      this.reset();
      for (const p of deps.table().pools.values()) {
        const base = { pool: p.name, revision: p.revision, role: p.role };
        for (const state of ENDPOINT_STATES) this.set({ ...base, state }, 0);
        for (const e of endpointsOf(p)) this.inc({ ...base, state: endpointState(p, e, seen.get(keyOf(e))) });
      }
    },
  });
  void routable;

  /**
   * An endpoint without a status URL is routable only when the table declares it `unverified: true` (the loud opt-in);
   * otherwise nothing vouches for its worker and it is never routed. A drained pool routes none.
   */
  function endpointState(p: CompiledPool, e: CompiledEndpoint, o: Observation | undefined): EndpointStateName {
    if (p.draining) return 'draining';
    if (e.status === null) return e.unverified === true ? 'routable' : 'unverified';
    if (o === undefined) return 'unreached';
    const state = stateOf(o);
    // A worker upgraded in place reports another fingerprint: verified as itself, but not as this pool's group.
    // A worker whose live NIXL hash is not the revision's prediction is not routed either (observed-hash.ts).
    if (state !== 'routable') return state;
    return o.fingerprint !== e.fingerprint || poolProblem(deps.table(), p, e, o) !== null ? 'unverified' : state;
  }

  /**
   * Why this pool must not use what its endpoint's sidecar reported, when it must not: a live NIXL hash that is not the
   * revision's prediction (observed-hash.ts), or a sidecar of the other role (a decode sidecar found by a prefill pool's
   * selector would take prefill legs as whole requests). One observation serves every pool that lists the endpoint,
   * so this is judged per pool.
   */
  function poolProblem(table: CompiledRouteTable, p: CompiledPool, e: CompiledEndpoint, o: Observation | undefined): string | null {
    const rev = table.revisions.get(p.revision);
    if (o === undefined || rev === undefined) return null;
    if (o.role !== undefined && p.role !== 'both' && o.role !== p.role) {
      return `the sidecar at ${e.address} serves the ${o.role} role, and pool ${p.name} is a ${p.role} pool`;
    }
    // An endpoint with its own descriptor has its own predicted hash (compile.ts): its canaries are its own too.
    const checks = sidecarTrustProblem(o.checks, rev, e.address, e.nixlHash !== undefined);
    if (checks !== null) return checks;
    return observedHashProblem(o.nixlHash, e.nixlHash ?? rev.nixlHash, rev, e.address);
  }

  /**
   * A sidecar that verifies its worker as another declaration than the one this pool's revision has in the table: the
   * worker (and its sidecar config) was upgraded in place, or the table redeclared the revision before the workers
   * changed. The sidecar itself reports no reason (it matches what it was told), so without this line `/status` and
   * `kvgate status` showed an unverified endpoint with a verified sidecar and no why.
   */
  function foreignFingerprint(p: CompiledPool, e: CompiledEndpoint, o: Observation | undefined): string[] {
    if (o === undefined || o.fingerprint === null || o.fingerprint === e.fingerprint) return [];
    return [
      `the sidecar verifies its worker as fingerprint ${o.fingerprint.slice(0, 12)}…, but the route table declares revision ${p.revision} ` +
        `as ${e.fingerprint.slice(0, 12)}…: the worker runs another declaration (upgraded in place, or the revision redeclared ` +
        'in the table first); it takes no traffic for this pool until both agree. Declare a changed worker as a new revision ' +
        '(docs/operator-guide.md, upgrades)',
    ];
  }

  function stateOf(o: Observation): EndpointStateName {
    if (o.observedAtMs === 0) return 'unreached';
    if (now() - o.observedAtMs > opts.staleAfterMs) return 'stale';
    if (o.draining) return 'draining';
    return o.verified ? 'routable' : 'unverified';
  }

  /**
   * The oldest answer's age; an endpoint that never answered counts as just stale (staleAfterMs), never as less, and
   * never hides an older answer elsewhere (it used to pin the whole age at staleAfterMs, so one listed pod that never
   * came up kept KvgateWorkerViewStale from seeing any other sidecar go stale).
   */
  function oldestAgeMs(): number {
    let oldest = 0;
    let neverAnswered = false;
    for (const o of seen.values()) {
      if (o.observedAtMs === 0) neverAnswered = true;
      else oldest = Math.max(oldest, now() - o.observedAtMs);
    }
    return neverAnswered ? Math.max(oldest, opts.staleAfterMs) : oldest;
  }

  /** Poll one endpoint's sidecar; `e` has a status URL. */
  async function pollEndpoint(e: CompiledEndpoint & { readonly status: string }): Promise<void> {
    const { address, status } = e;
    const key = keyOf(e);
    const prev = seen.get(key);
    const startedAtMs = now();
    let signedBy: string;
    let body: Record<string, unknown>;
    try {
      const nonce = newStatusNonce();
      const { bytes, signature } = await askSidecarStatus(doFetch, status, opts.timeoutMs, nonce);
      // The signature first: nothing of an answer no key holder signed for this poll is parsed, let alone trusted.
      const signed = verifyStatus(deps.keys(), nonce, bytes, signature);
      if (!signed.ok) return refuseUnsigned(e, signed.error);
      signedBy = signed.value.keyId;
      body = JSON.parse(bytes.toString('utf8')) as Record<string, unknown>;
    } catch (err) {
      return pollFailed(e, prev, err as Error);
    }
    if (prev?.signatureProblem !== undefined) {
      deps.logger.info(
        { endpoint: address, status, keyId: signedBy },
        'worker status answer is signed again; the endpoint is judged on it',
      );
    }
    try {
      const fingerprint = typeof body['fingerprint'] === 'string' ? body['fingerprint'] : null;
      const wrongPod = podUidProblem(e.podUid, address, body['podUid']);
      const reasons = Array.isArray(body['reasons']) ? (body['reasons'] as unknown[]).map(String) : [];
      seen.set(key, {
        status,
        fingerprint,
        verified: body['verified'] === true && wrongPod === null,
        draining: body['draining'] === true,
        reasons: wrongPod === null ? reasons : [wrongPod, ...reasons],
        observedAtMs: now(),
        ...loadOf(body['load']),
        ...optional('role', roleOf(body['role'])),
        ...optional('nixlHash', liveHashOf(body['nixlHash'])),
        ...optional('mismatch', namedMismatchOf(body['mismatch'])),
        ...optional('checks', sidecarChecksOf(body)),
        signedBy,
      });
      deps.inFlight.observe?.(address, requestReportOf(body['requests']), startedAtMs);
      polls.inc({ result: 'ok' });
    } catch (err) {
      pollFailed(e, prev, err as Error);
    }
  }

  /** No usable answer (unreachable, an HTTP error, too large, not JSON): the last good observation stands until stale. */
  function pollFailed(e: CompiledEndpoint & { readonly status: string }, prev: Observation | undefined, cause: Error): void {
    const { address, status } = e;
    polls.inc({ result: 'error' });
    const error = `sidecar status ${status} unreachable: ${cause.message}`;
    seen.set(
      keyOf(e),
      prev
        ? { ...prev, status, error }
        : { status, fingerprint: null, verified: false, draining: false, reasons: [error], observedAtMs: 0, error },
    );
    if (!prev?.error) deps.logger.warn({ endpoint: address, error }, 'worker status poll failed');
  }

  /**
   * An answer no key holder signed for this poll: whatever answers for the pod IP is not (or not only) its sidecar, or
   * the sidecar cannot sign for this gate. Unverified at once, whatever was seen before (unlike an unreachable
   * sidecar, this is an answer that must not be believed); warned once per endpoint and reason, not per poll.
   */
  function refuseUnsigned(e: CompiledEndpoint & { readonly status: string }, failure: StatusSignatureFailure): void {
    const { address, status } = e;
    const key = keyOf(e);
    const prev = seen.get(key);
    polls.inc({ result: POLL_RESULT_OF[failure.reason] });
    const why = `sidecar status ${status}: ${failure.message}; not routed until an answer verifies`;
    seen.set(key, {
      status,
      fingerprint: null,
      verified: false,
      draining: false,
      reasons: [why],
      observedAtMs: now(),
      signatureProblem: failure.reason,
    });
    if (prev?.signatureProblem !== failure.reason) {
      deps.logger.warn(
        { endpoint: address, status, reason: failure.reason, error: failure.message },
        'worker status answer refused: signature',
      );
    }
  }

  /** What the decision core sees of one endpoint now: fail closed when its sidecar's answer is missing or stale. */
  function stateOfEndpoint(table: CompiledRouteTable, p: CompiledPool, e: CompiledEndpoint): EndpointState {
    const inFlight = deps.inFlight.inFlight(e.address);
    if (e.status === null) {
      const declared = e.unverified === true;
      return {
        address: e.address,
        fingerprint: declared ? e.fingerprint : null,
        verified: declared,
        draining: false,
        inFlight,
        observedAtMs: 0,
      };
    }
    const o = seen.get(keyOf(e));
    const fresh = o !== undefined && o.observedAtMs > 0 && now() - o.observedAtMs <= opts.staleAfterMs;
    return {
      address: e.address,
      fingerprint: fresh ? o.fingerprint : null,
      verified: fresh && o.verified && poolProblem(table, p, e, o) === null,
      draining: o?.draining ?? false,
      inFlight,
      observedAtMs: o?.observedAtMs ?? 0,
      ...(fresh && o.load !== undefined ? { load: o.load } : {}),
    };
  }

  let timer: NodeJS.Timeout | undefined;
  let running: Promise<void> | undefined;
  let next: Promise<void> | undefined;
  const refreshing = new Map<string, { again: boolean }>();
  // refresh() runs at the end of every ext_proc stream: find the endpoint by address without scanning every pool's
  // endpoints each time. Rebuilt when the table or a pool's endpoint list (discovery) changes: O(pools) per call.
  let byAddress: { table: CompiledRouteTable; lists: (readonly CompiledEndpoint[])[]; map: Map<string, CompiledEndpoint> } | undefined;
  function polledEndpointAt(address: string): (CompiledEndpoint & { readonly status: string }) | undefined {
    const table = deps.table();
    const lists = [...table.pools.values()].map((p) => endpointsOf(p));
    if (byAddress === undefined || byAddress.table !== table || lists.some((l, i) => l !== byAddress!.lists[i])) {
      const map = new Map<string, CompiledEndpoint>();
      for (const list of lists) for (const e of list) if (e.status !== null && !map.has(e.address)) map.set(e.address, e);
      byAddress = { table, lists, map };
    }
    const e = byAddress.map.get(address);
    return e === undefined || e.status === null ? undefined : { ...e, status: e.status };
  }

  function refresh(address: string): void {
    const r = refreshing.get(address);
    if (r !== undefined) {
      r.again = true;
      return;
    }
    const e = polledEndpointAt(address);
    if (e === undefined) return;
    const state = { again: false };
    refreshing.set(address, state);
    void pollEndpoint(e).finally(() => {
      refreshing.delete(address);
      deps.onPolled?.();
      if (state.again) refresh(address);
    });
  }
  const poller: WorkerPoller = {
    viewFor(table) {
      // Per pool, the routable index (src/decide/pick.ts samples large groups from it), rebuilt when an observation
      // that changes routing lands or the pool's endpoint list changes; never trusted alone (the picker re-checks).
      const indexes = new Map<string, PoolIndex>();
      const indexOf = (pool: string): PoolIndex | undefined => {
        const p = table.pools.get(pool);
        if (p === undefined) return undefined;
        const list = endpointsOf(p);
        const hit = indexes.get(pool);
        if (hit !== undefined && hit.version === seen.version && hit.list === list) return hit;
        const built: PoolIndex = {
          version: seen.version,
          list,
          byAddress: new Map(list.map((e) => [e.address, e])),
          routable: indexRoutable(list.map((e) => stateOfEndpoint(table, p, e))),
        };
        indexes.set(pool, built);
        return built;
      };
      return {
        endpoints(pool: string): readonly EndpointState[] {
          const p = table.pools.get(pool);
          return p === undefined ? [] : endpointsOf(p).map((e) => stateOfEndpoint(table, p, e));
        },
        routable(pool: string, fingerprint: string) {
          return routableOf(indexOf(pool)?.routable ?? new Map(), fingerprint);
        },
        endpoint(pool: string, address: string) {
          const p = table.pools.get(pool);
          const e = indexOf(pool)?.byAddress.get(address);
          return e === undefined || p === undefined ? undefined : stateOfEndpoint(table, p, e);
        },
        terminating(pool: string): readonly EndpointState[] {
          const p = table.pools.get(pool);
          return p === undefined ? [] : terminatingOf(p).map((e) => stateOfEndpoint(table, p, e));
        },
        get ageMs() {
          return oldestAgeMs();
        },
      };
    },
    pollOnce() {
      if (running !== undefined) {
        // A round under way may have read a sidecar before the change this caller wants seen (a pod replaced, a drain):
        // one more round after it, shared by every caller meanwhile, rather than joining it.
        next ??= running.then(() => {
          next = undefined;
          return poller.pollOnce();
        });
        return next;
      }
      running = (async () => {
        const targets = new Map<string, CompiledEndpoint & { readonly status: string }>();
        const addresses = new Set<string>();
        for (const p of deps.table().pools.values()) {
          // A terminating pod is still polled (and its in-flight count kept) until it is gone: legs planned there may come.
          for (const e of [...endpointsOf(p), ...terminatingOf(p)]) {
            addresses.add(e.address);
            if (e.status !== null) targets.set(keyOf(e), { ...e, status: e.status });
          }
        }
        for (const key of [...seen.keys()]) if (!targets.has(key)) seen.delete(key);
        // An endpoint gone from every pool (pod deleted, NotReady, a reload) is polled no more: forget its counts.
        deps.inFlight.retain?.(addresses);
        await Promise.all([...targets.values()].map(pollEndpoint));
      })().finally(() => {
        running = undefined;
        deps.onPolled?.();
      });
      return running;
    },
    refresh,
    snapshot: () => Object.fromEntries(seen),
    poolStates: () =>
      [...deps.table().pools.values()].map((p) => ({
        pool: p.name,
        revision: p.revision,
        role: p.role,
        cluster: p.cluster,
        // The pool's endpoints now (discovered pods for a selector pool), each with what its own sidecar said.
        endpoints: endpointsOf(p).map((e) => {
          const o = seen.get(keyOf(e));
          const state = endpointState(p, e, o);
          const hash = p.draining || e.status === null ? null : poolProblem(deps.table(), p, e, o);
          const why = p.draining
            ? ['the route table drains this pool']
            : e.status === null
              ? [
                  e.unverified === true
                    ? 'no status URL: routed UNCHECKED (the table declares unverified: true)'
                    : "no status URL: never routed (add the sidecar's status URL, or declare unverified: true)",
                ]
              : [
                  ...(hash === null ? [] : [hash]),
                  ...(state === 'unverified' ? foreignFingerprint(p, e, o) : []),
                  ...(o?.reasons ?? ['not polled yet']),
                ];
          return {
            address: e.address,
            status: e.status,
            state,
            reasons: state === 'stale' ? [`last answer older than ${opts.staleAfterMs} ms`, ...why] : why,
            named: o?.mismatch === undefined ? null : describeNamedMismatch(o.mismatch),
          };
        }),
      })),
    start() {
      if (timer) return;
      timer = setInterval(() => void poller.pollOnce(), opts.intervalMs);
      timer.unref();
    },
    stop() {
      clearInterval(timer);
      timer = undefined;
    },
  };
  return poller;
}

/** `kvgate_worker_status_polls_total` results; each signature failure has its own. */
const POLL_RESULT_OF: Readonly<Record<StatusSignatureFailureReason, string>> = {
  missing: 'unsigned',
  malformed: 'malformed_signature',
  unknown_key: 'unknown_key',
  bad_signature: 'bad_signature',
};
const POLL_RESULTS = ['ok', 'error', ...Object.values(POLL_RESULT_OF)];

/**
 * The most a status answer may be. A sidecar's is tens of KiB (its 1,024 most recent request ids, those in flight,
 * the descriptor); whatever answers at a pod IP is not necessarily one (an IP reused by any pod of the cluster, a
 * broken sidecar), and buffering its answer whole would let it fill the gate's memory on every poll round.
 */
const MAX_STATUS_BYTES = 4 * 1024 * 1024;

/**
 * Ask a sidecar for its status as the gate does: `GET <status>/kvgate/v1/status` with the poll's nonce (none: an
 * unsigned answer), the answer read up to MAX_STATUS_BYTES; with the signature header it came with, for `verifyStatus`
 * over those exact bytes before anything parses them. `kvgate status` asks the same way.
 */
export async function askSidecarStatus(
  doFetch: typeof fetch,
  status: string,
  timeoutMs: number,
  nonce: string | undefined,
): Promise<{ bytes: Buffer; signature: string | null }> {
  const res = await doFetch(`${status.replace(/\/+$/, '')}/kvgate/v1/status`, {
    signal: AbortSignal.timeout(timeoutMs),
    ...(nonce === undefined ? {} : { headers: { [H.statusNonce]: nonce } }),
  });
  if (!res.ok) throw new Error(`HTTP ${res.status}`);
  return { bytes: await readStatusBytes(res), signature: res.headers.get(H.statusSignature) };
}

/** The answer's bytes, read up to MAX_STATUS_BYTES; a longer answer is cancelled there and refused. */
async function readStatusBytes(res: Response): Promise<Buffer> {
  const tooLarge = (): Error =>
    new Error(`the answer is larger than ${MAX_STATUS_BYTES} bytes, so it is not a kvgate sidecar status; not read further`);
  if (Number(res.headers.get('content-length') ?? 0) > MAX_STATUS_BYTES) {
    await res.body?.cancel();
    throw tooLarge();
  }
  if (res.body === null) throw new Error('an empty answer');
  const bytes = await boundedBytes(res, MAX_STATUS_BYTES);
  if (bytes === undefined) throw tooLarge();
  return bytes;
}

function roleOf(v: unknown): 'prefill' | 'decode' | undefined {
  return v === 'prefill' || v === 'decode' ? v : undefined;
}

function optional<K extends string, V>(key: K, v: V | undefined): Partial<Record<K, V>> {
  return v === undefined ? {} : ({ [key]: v } as Record<K, V>);
}

/** The sidecar's `load` block, when it is well-formed (numbers, KV use in 0..1). */
function loadOf(v: unknown): { load?: EndpointLoad } {
  const o = v as Record<string, unknown> | null | undefined;
  const n = (x: unknown): number | null => (typeof x === 'number' && Number.isFinite(x) && x >= 0 ? x : null);
  const running = n(o?.['running']);
  const waiting = n(o?.['waiting']);
  const kv = n(o?.['kvCacheUsage']);
  if (running === null || waiting === null || kv === null) return {};
  return { load: { running, waiting, kvCacheUsage: Math.min(1, kv) } };
}

/** The sidecar's `requests` member, or undefined when absent or malformed (an older sidecar: count by stream). */
function requestReportOf(v: unknown): RequestReport | undefined {
  if (typeof v !== 'object' || v === null) return undefined;
  const o = v as Record<string, unknown>;
  const ids = (x: unknown): string[] | undefined => (Array.isArray(x) && x.every((i) => typeof i === 'string') ? x : undefined);
  const inFlight = ids(o['inFlight']);
  const received = ids(o['received']);
  return inFlight === undefined || received === undefined ? undefined : { inFlight, received };
}

interface PoolIndex {
  readonly version: number;
  readonly list: readonly CompiledEndpoint[];
  readonly byAddress: ReadonlyMap<string, CompiledEndpoint>;
  readonly routable: ReadonlyMap<string, RoutableIndex>;
}

/**
 * The observations by endpoint key, with a version that moves whenever one lands that can change what is routable
 * (fingerprint, verified, draining, the observed NIXL hash, the sidecar's trust and canaries, or an answer after none or after a stale one), so the routable index is rebuilt
 * only then and not on every poll of an unchanged worker.
 */
class ObservationMap extends Map<string, Observation & { status: string }> {
  version = 0;
  constructor(
    private readonly now: () => number,
    private readonly staleAfterMs: number,
  ) {
    super();
  }
  override set(key: string, o: Observation & { status: string }): this {
    const prev = this.get(key);
    if (
      prev === undefined ||
      prev.fingerprint !== o.fingerprint ||
      prev.verified !== o.verified ||
      prev.draining !== o.draining ||
      prev.nixlHash?.observed !== o.nixlHash?.observed ||
      canonicalJson(prev.checks ?? null) !== canonicalJson(o.checks ?? null) ||
      prev.observedAtMs === 0 ||
      this.now() - prev.observedAtMs > this.staleAfterMs
    ) {
      this.version++;
    }
    return super.set(key, o);
  }
  override delete(key: string): boolean {
    this.version++;
    return super.delete(key);
  }
}
