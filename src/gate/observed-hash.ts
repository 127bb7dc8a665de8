/**
 * The gate's own check of the hash each worker really serves: a sidecar reports the live NIXL compatibility hash it
 * read from its worker's side channel (`nixlHash.live` in src/sidecar/status.ts). The gate routes an endpoint only
 * when that observed hash equals the prediction for the endpoint's revision (or its own descriptor); since a P/D
 * pair is only ever picked from endpoints that pass, P's and D's observed hashes then agree with each other and with
 * the prediction. A disagreement names both hashes and, where one declared runtime flag explains it, the factor with
 * both values (`explainNixlHash`). This does not trust the sidecar's own verdict: a sidecar declaring another
 * `model.path` than the revision (same fingerprint, another hash) is caught here.
 *
 * Also the sidecar's `mismatch` block (the lying worker named), read for the gate's /status and `kvgate status`.
 */
import type { CompatDescriptor } from '../compat/descriptor.js';
import { explainNixlHash } from '../compat/nixl-hash.js';

/** What the sidecar said about its worker's live hash. */
export interface LiveHash {
  readonly state: string;
  readonly observed: string | null;
  readonly note: string | null;
}

/** The worker a sidecar named as not matching its declaration, and how. */
export interface NamedMismatch {
  readonly worker: { readonly address: string; readonly endpoint: string | null; readonly engineId: string | null };
  readonly fields: ReadonlyArray<{ readonly field: string; readonly declared: unknown; readonly observed: unknown }>;
}

const HASH = /^[0-9a-f]{64}$/;

/** `nixlHash.live` of a sidecar status, when well-formed. */
export function liveHashOf(v: unknown): LiveHash | undefined {
  const live = (v as { live?: Record<string, unknown> } | null | undefined)?.live;
  if (live === null || typeof live !== 'object' || typeof live['state'] !== 'string') return undefined;
  const observed = typeof live['observed'] === 'string' && HASH.test(live['observed']) ? live['observed'] : null;
  return { state: live['state'], observed, note: typeof live['note'] === 'string' ? live['note'] : null };
}

/** The sidecar's `mismatch` block, when well-formed. */
export function namedMismatchOf(v: unknown): NamedMismatch | undefined {
  const m = v as { worker?: Record<string, unknown>; fields?: unknown } | null | undefined;
  if (m === null || typeof m !== 'object' || m.worker === undefined || !Array.isArray(m.fields)) return undefined;
  const str = (x: unknown): string | null => (typeof x === 'string' ? x : null);
  const address = str(m.worker['address']);
  if (address === null) return undefined;
  const fields = m.fields
    .filter((f): f is Record<string, unknown> => f !== null && typeof f === 'object' && typeof f['field'] === 'string')
    .map((f) => ({ field: f['field'] as string, declared: f['declared'], observed: f['observed'] }));
  return { worker: { address, endpoint: str(m.worker['endpoint']), engineId: str(m.worker['engineId']) }, fields };
}

/** One line naming the worker, each field and both values (the gate's /status, `kvgate status`). */
export function describeNamedMismatch(m: NamedMismatch): string {
  const fields = m.fields.map((f) => `${f.field} declared ${JSON.stringify(f.declared)}, observed ${JSON.stringify(f.observed)}`);
  return `worker ${m.worker.address}, engine id ${m.worker.engineId ?? 'not measured'}: ${fields.join('; ')}`;
}

/**
 * Why the observed hash disqualifies the endpoint, or null when it agrees (or no hash was observed: vLLM before 0.13,
 * a connector version whose request is not read, or the sidecar's explicit `unchecked` opt-out, all named on its
 * status; a sidecar configured for a hashed vLLM without a side channel does not start).
 */
export function observedHashProblem(
  live: LiveHash | undefined,
  expected: string,
  revision: { readonly name: string; readonly descriptor: CompatDescriptor },
  address: string,
): string | null {
  if (live?.observed == null || live.observed === expected) return null;
  const why = explainNixlHash(revision.descriptor, live.observed);
  return (
    `NIXL compatibility hash: the worker behind ${address} serves ${live.observed}, revision ${revision.name} predicts ${expected}` +
    (why.length > 0
      ? ` (${why.join('; ')})`
      : ' (no single declared runtime flag explains it: compare vLLM version, model string, dtypes)') +
    '; a P/D pair with it would fail the handshake or mix KV, so it is not routed'
  );
}
