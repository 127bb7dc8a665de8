/**
 * The gate's real Decider: RawRequest -> request facts -> the pure decision core, under the route table and worker
 * view current at that moment, plus the in-flight accounting the least-loaded pick relies on.
 *
 * A request keeps the table and view it was decided with: a reload swaps what later requests see, never what a
 * request in flight already bound.
 */
import type { KeyRing } from '../contract/keys.js';
import { decideRequest, type RawRequestFacts } from '../decide/decide-request.js';
import type { InFlightTracker, WorkerView } from '../decide/worker-view.js';
import { H } from '../headers.js';
import type { CompiledRouteTable } from '../policy/compile.js';
import type { Decided, Decider, RawRequest } from './decider.js';

/** What the decider reads for each request; swapped atomically by reloads and worker-view updates. */
export interface RoutingState {
  readonly table: CompiledRouteTable;
  readonly view: WorkerView;
}

export interface RouteDeciderDeps {
  readonly state: () => RoutingState;
  readonly keys: KeyRing;
  readonly inFlight: InFlightTracker;
  readonly now: () => number;
}

export function createRouteDecider(deps: RouteDeciderDeps): Decider {
  return {
    decide(req: RawRequest): Decided {
      const { table, view } = deps.state();
      const outcome = decideRequest(toFacts(req), table, view, { nowMs: deps.now(), keys: deps.keys });
      const d = outcome.decision;
      // Count the request on the endpoint it occupies for its whole life: the decode endpoint for a route,
      // the prefill endpoint for a hop (the prefill leg is its own HTTP request).
      const busy = d.kind === 'route' ? d.decode.endpoint : d.kind === 'hop' ? d.prefill.endpoint : null;
      const release = busy === null ? undefined : deps.inFlight.acquire(busy);
      return {
        decision: d,
        ...(outcome.request === undefined ? {} : { body: outcome.request.json }),
        ...(release === undefined ? {} : { release }),
      };
    },
  };
}

/** Gate-owned headers become facts only where they are trusted: hops on the internal listener, bindings anywhere
 * (a binding is signed and only ever narrows the choice to a revision the table still serves). */
export function toFacts(req: RawRequest): RawRequestFacts {
  const g = req.gateOwned;
  const contract = req.listener === 'internal' ? g[H.contract] : undefined;
  const binding = req.bindingToken;
  return {
    requestId: req.requestId,
    method: req.method,
    path: req.path,
    headers: req.headers,
    metadata: req.metadata,
    bodyTruncated: req.bodyTruncated,
    ...(req.body === undefined ? {} : { body: req.body }),
    ...(binding === undefined ? {} : { binding }),
    ...(contract === undefined
      ? {}
      : {
          hop: {
            contract,
            ...(g[H.prefillCluster] === undefined ? {} : { prefillCluster: g[H.prefillCluster] }),
            ...(g[H.prefillEndpoint] === undefined ? {} : { prefillEndpoint: g[H.prefillEndpoint] }),
          },
        }),
  };
}
