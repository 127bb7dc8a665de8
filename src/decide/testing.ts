/**
 * Fakes for tests of the decision core and of anything built on it (the gate, `kvgate explain`): request facts
 * built from plain values, and a worker view whose endpoints a test can patch (live fingerprint, draining,
 * in-flight) without a sidecar.
 */
import { createDevKeyRing, type KeyRing } from '../contract/keys.js';
import type { CompiledRouteTable } from '../policy/compile.js';
import { parseOpenAiBody } from './request-facts.js';
import type { HopFacts, QueueView, RequestFacts } from './types.js';
import type { EndpointState, WorkerView } from './worker-view.js';
import { TEST_NOW_MS } from '../../test/support/clock.js';

/** A fixed instant for tests (2023-11-14T22:13:20Z). */

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
}

/**
 * A worker view over the table's declared endpoints (declared fingerprint, verified, idle), with `patches` applied
 * per address. `set` changes an endpoint later; `reverse` lists endpoints backwards, to prove picks ignore order.
 */
export function createTestWorkerView(
  compiled: CompiledRouteTable,
  patches: Readonly<Record<string, EndpointPatch>> = {},
  options: { reverse?: boolean } = {},
): TestWorkerView {
  const state = new Map<string, EndpointPatch>(Object.entries(patches));
  return {
    endpoints(pool) {
      const p = compiled.pools.get(pool);
      if (p === undefined) return [];
      const eps = p.endpoints.map((e) => ({
        address: e.address,
        fingerprint: e.fingerprint,
        verified: true,
        draining: false,
        inFlight: 0,
        observedAtMs: TEST_NOW_MS,
        ...(state.get(e.address) ?? {}),
      }));
      return options.reverse ? eps.reverse() : eps;
    },
    set(address, patch) {
      state.set(address, { ...(state.get(address) ?? {}), ...patch });
    },
  };
}

/** A queue view with fixed answers, for tests of the `queue` and `recompute` steps. */
export function createTestQueueView(depth: Readonly<Record<string, number>> = {}): QueueView {
  return { depth: (g) => depth[g] ?? 0 };
}
