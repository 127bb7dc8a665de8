/**
 * Requests in flight per endpoint: what the least-loaded pick, `maxInFlightPerEndpoint` and the fallback queue
 * read. The ext_proc stream is not the request's lifetime: Envoy 1.37 closes it right after the `response_headers`
 * answer (`ext_proc_stream_close_optimization`, envoyproxy/envoy source/extensions/filters/http/ext_proc/ext_proc.cc
 * closeGrpcStreamIfLastRespReceived at 2940127), so a streamed generation would stop counting at its first token.
 * The endpoint's sidecar sees every request start and end, so its status is the source
 * (`requests.inFlight` and `requests.received`, request ids; src/sidecar/status.ts), and the gate's own count only
 * bridges the time until the sidecar has reported a request:
 *
 *   inFlight(endpoint) = the ids the sidecar last reported in flight + the bridge
 *
 * A bridge entry is a request this gate routed to the endpoint. It leaves the bridge when
 * - the sidecar lists its id (in flight or received): from then on the sidecar's list covers it;
 * - its ext_proc stream ended and an observation begun after that end does not list it: by the end of the stream the
 *   request had reached the sidecar (Envoy 1.37 closes it after the upstream's response headers) or was over
 *   (Envoy 1.36 keeps it until the request ends), so not being listed means it is over, or never reached the worker;
 * - it is older than `bridgeTtlMs` (the contract lifetime plus the view's staleness: a request can no longer be
 *   admitted by a sidecar after its contract expired).
 * Endpoints whose sidecar does not report request ids (no status URL, or an older sidecar) keep the gate's own count,
 * from the decision to the end of the ext_proc stream.
 *
 * An endpoint that leaves every pool (a pod deleted, NotReady or terminating, a table reload) is forgotten
 * (`retain`): its last report would otherwise stay counted forever (nothing polls it any more), and a pod that later
 * gets its IP would start with the old pod's requests. Requests still streaming there count by stream lifetime until
 * they end, and then nothing is kept.
 */
import type { InFlightTracker, RequestReport } from '../decide/worker-view.js';

export interface EndpointLoadOptions {
  readonly now: () => number;
  /** How long an unreported request is counted at most (ms); read on every count, so a reload can change it. */
  readonly bridgeTtlMs: () => number;
  /** The ext_proc stream of a request routed to `address` ended (a poll now shows whether the request did). */
  readonly onStreamEnd?: (address: string) => void;
}

/** A request routed to `address` and not yet reported by its sidecar; also the request's ticket (InFlightTicket). */
interface Bridged {
  readonly address: string;
  readonly id: string;
  readonly atMs: number;
  /** When its ext_proc stream ended (it was released); undefined while it lasts. */
  endedAtMs: number | undefined;
}

interface Reported {
  readonly inFlight: ReadonlySet<string>;
}

export interface EndpointLoad extends InFlightTracker {
  /**
   * The sidecar of `address` reported `requests` in an observation begun at `startedAtMs`; `undefined` when its
   * status carries no request ids (the gate then counts its own requests by stream lifetime).
   */
  observe(address: string, requests: RequestReport | undefined, startedAtMs: number): void;
  /** Bridged (not yet reported) requests per endpoint, for /status. */
  bridged(): ReadonlyMap<string, number>;
  /**
   * Forget every endpoint not in `addresses` (the endpoints of every pool now): its last report, and its requests
   * whose streams have ended; those still streaming count by stream lifetime and leave when they end.
   */
  retain(addresses: ReadonlySet<string>): void;
}

export function createEndpointLoad(opts: EndpointLoadOptions): EndpointLoad {
  const bridge = new Map<string, Bridged[]>();
  const reported = new Map<string, Reported>();
  /** Endpoints counted by stream lifetime only (no request ids from their sidecar). */
  const local = new Map<string, number>();

  const expire = (address: string): Bridged[] => {
    const list = bridge.get(address) ?? [];
    const cutoff = opts.now() - opts.bridgeTtlMs();
    const kept = list.filter((b) => b.atMs > cutoff);
    if (kept.length !== list.length) setBridge(address, kept);
    return kept;
  };
  const setBridge = (address: string, list: Bridged[]): void => {
    if (list.length === 0) bridge.delete(address);
    else bridge.set(address, list);
  };

  return {
    acquire(address, requestId) {
      const entry: Bridged = { address, id: requestId ?? '', atMs: opts.now(), endedAtMs: undefined };
      // Appended in place: copying the list made every request cost as much as the requests already in flight there.
      const list = bridge.get(address);
      if (list === undefined) bridge.set(address, [entry]);
      else list.push(entry);
      local.set(address, (local.get(address) ?? 0) + 1);
      return entry;
    },
    release(ticket) {
      const entry = ticket as Bridged;
      if (entry.endedAtMs !== undefined) return;
      const address = entry.address;
      entry.endedAtMs = opts.now();
      const n = (local.get(address) ?? 1) - 1;
      if (n <= 0) local.delete(address);
      else local.set(address, n);
      // Without request ids from the sidecar nothing else would ever clear the entry: the stream is all we know.
      if (!reported.has(address) || entry.id === '')
        setBridge(
          address,
          (bridge.get(address) ?? []).filter((b) => b !== entry),
        );
      else opts.onStreamEnd?.(address);
    },
    inFlight(address) {
      const r = reported.get(address);
      if (r === undefined) return local.get(address) ?? 0;
      return r.inFlight.size + expire(address).length;
    },
    observe(address, requests, startedAtMs) {
      if (requests === undefined) {
        reported.delete(address);
        return;
      }
      const inFlight = new Set(requests.inFlight);
      const seen = new Set([...requests.inFlight, ...requests.received]);
      reported.set(address, { inFlight });
      const kept = expire(address).filter((b) => !seen.has(b.id) && !(b.endedAtMs !== undefined && b.endedAtMs <= startedAtMs));
      setBridge(address, kept);
    },
    snapshot() {
      const out = new Map<string, number>();
      for (const address of new Set([...bridge.keys(), ...reported.keys(), ...local.keys()])) {
        const n = this.inFlight(address);
        if (n > 0) out.set(address, n);
      }
      return out;
    },
    bridged() {
      return new Map([...bridge].filter(([a]) => reported.has(a)).map(([a, l]) => [a, l.length]));
    },
    retain(addresses) {
      for (const address of [...reported.keys()]) if (!addresses.has(address)) reported.delete(address);
      for (const [address, list] of [...bridge]) {
        if (addresses.has(address)) continue;
        // Without a report for the address, release() drops an entry when its stream ends: keep only open streams.
        setBridge(
          address,
          list.filter((b) => b.endedAtMs === undefined),
        );
      }
    },
  };
}
