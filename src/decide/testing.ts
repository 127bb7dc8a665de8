/**
 * Fakes for tests of the decision core and of anything built on it (the gate, `kvgate explain`): request facts
 * built from plain values, and a worker view whose endpoints a test can patch (live fingerprint, draining,
 * in-flight) without a sidecar.
 */
import { createDevKeyRing, type KeyRing } from '../contract/keys.js';
import type { CompiledRouteTable } from '../policy/compile.js';
import { parseOpenAiBody } from './request-facts.js';
import type { HopFacts, QueueView, RequestFacts } from './types.js';
import { indexRoutable, routableOf, type EndpointState, type RoutableIndex, type WorkerView } from './worker-view.js';
import { TEST_NOW_MS } from '../../test/support/clock.js';

/** The dev key ring tests share; INSECURE by design. */
export function testKeys(seed = 'kvgate-test'): KeyRing {
  return createDevKeyRing(seed);
}

export interface TestFactsInput {
  readonly requestId?: string;
  readonly model?: string;
  readonly tenant?: string;
  readonly session?: string;
  readonly user?: string;
  readonly binding?: string;
  readonly cacheSalt?: string;
  readonly headers?: Readonly<Record<string, string>>;
  readonly metadata?: Readonly<Record<string, Readonly<Record<string, unknown>>>>;
  readonly hop?: HopFacts;
  /** The user message's text (default "Say hello."). */
  readonly content?: string;
}

/** Facts for a chat completion, tenant in `x-tenant-id` and session in `x-session-id` (the sample table's config). */
export function testFacts(input: TestFactsInput = {}): RequestFacts {
  const headers: Record<string, string> = { ...(input.headers ?? {}) };
  if (input.tenant !== undefined) headers['x-tenant-id'] = input.tenant;
  if (input.session !== undefined) headers['x-session-id'] = input.session;
  const json = {
    model: input.model ?? 'llama-3-8b',
    messages: [{ role: 'user', content: input.content ?? 'Say hello.' }],
    ...(input.user === undefined ? {} : { user: input.user }),
    ...(input.cacheSalt === undefined ? {} : { cache_salt: input.cacheSalt }),
  };
  const body = parseOpenAiBody('/v1/chat/completions', new TextEncoder().encode(JSON.stringify(json)), { maxBodyBytes: 1 << 24 });
  if (!body.ok) throw body.error;
  return {
    requestId: input.requestId ?? 'req-1',
    method: 'POST',
    path: '/v1/chat/completions',
    headers,
    metadata: input.metadata ?? {},
    body: body.value,
    ...(input.binding === undefined ? {} : { binding: input.binding }),
    ...(input.hop === undefined ? {} : { hop: input.hop }),
  };
}

/** Per-endpoint overrides for `createTestWorkerView`, keyed by address. */
export type EndpointPatch = Partial<Omit<EndpointState, 'address'>>;

/** A worker view whose endpoints a test can change after creating it. */
export interface TestWorkerView extends WorkerView {
  set(address: string, patch: EndpointPatch): void;
  /** With `indexed`: rebuild the routable index from the endpoints as they are now (until then it keeps the old one). */
  reindex(): void;
}

/**
 * A worker view over the table's declared endpoints (declared fingerprint, verified, idle), with `patches` applied
 * per address. `set` changes an endpoint later; `reverse` lists endpoints backwards, to prove picks ignore order.
 */
export function createTestWorkerView(
  compiled: CompiledRouteTable,
  patches: Readonly<Record<string, EndpointPatch>> = {},
  options: { reverse?: boolean; indexed?: boolean } = {},
): TestWorkerView {
  const state = new Map<string, EndpointPatch>(Object.entries(patches));
  const stateOf = (address: string, fingerprint: string): EndpointState => ({
    address,
    fingerprint,
    verified: true,
    draining: false,
    inFlight: 0,
    observedAtMs: TEST_NOW_MS,
    ...(state.get(address) ?? {}),
  });
  let indexes = new Map<string, ReadonlyMap<string, RoutableIndex>>();
  const view: TestWorkerView = {
    endpoints(pool) {
      const p = compiled.pools.get(pool);
      if (p === undefined) return [];
      const eps = p.endpoints.map((e) => stateOf(e.address, e.fingerprint));
      return options.reverse ? eps.reverse() : eps;
    },
    set(address, patch) {
      state.set(address, { ...(state.get(address) ?? {}), ...patch });
    },
    reindex() {
      indexes = new Map([...compiled.pools.keys()].map((pool) => [pool, indexRoutable(view.endpoints(pool))]));
    },
  };
  if (options.indexed !== true) return view;
  view.reindex();
  const byAddress = new Map([...compiled.pools].map(([name, p]) => [name, new Map(p.endpoints.map((e) => [e.address, e.fingerprint]))]));
  return Object.assign(view, {
    routable: (pool: string, fingerprint: string) => routableOf(indexes.get(pool) ?? new Map(), fingerprint),
    endpoint: (pool: string, address: string) => {
      const fingerprint = byAddress.get(pool)?.get(address);
      return fingerprint === undefined ? undefined : stateOf(address, fingerprint);
    },
  });
}

/** A queue view with fixed answers, for tests of the `queue` and `recompute` steps. */
export function createTestQueueView(depth: Readonly<Record<string, number>> = {}): QueueView {
  return { depth: (g) => depth[g] ?? 0 };
}
