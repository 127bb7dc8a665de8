/**
 * The sticky binding token (`x-kvgate-binding` response header). A client echoes it on later requests of the
 * same session so that, during a rollout, the session stays on the revision (and so the prefix cache) it started
 * on instead of being re-rolled into the new cohort mid-conversation. It is signed so a client cannot pin itself
 * to a revision, fingerprint or tenant scope it was never given.
 */
import { z } from 'zod';
import type { KeyRing } from './keys.js';
import { epochMs, hasValidWindow, nonEmpty, WINDOW_MESSAGE } from './payload-schemas.js';
import { epoch, failFor, object, onlyKeys, text, textOrNull, window } from './mint-payload.js';
import { openToken, signToken, type EnvelopeFailureReason } from './token.js';
import { BoundedCache } from '../bounded-cache.js';
import { err, ok, type Result } from '../errors.js';

export interface Binding {
  kind: 'binding';
  model: string;
  revision: string;
  fingerprint: string;
  tenantScope: string;
  session: string | null;
  issuedAtMs: number;
  expiresAtMs: number;
}

export type BindingFailure = {
  reason: EnvelopeFailureReason | 'model_mismatch' | 'tenant_mismatch' | 'session_mismatch';
  message: string;
};

/** What the gate knows about the current request; each given field must equal the binding's. */
export interface BindingExpectations {
  model?: string | undefined;
  tenantScope?: string | undefined;
  session?: string | null;
}

export const BindingSchema = z
  .object({
    kind: z.literal('binding'),
    model: nonEmpty,
    revision: nonEmpty,
    fingerprint: nonEmpty,
    tenantScope: nonEmpty,
    session: nonEmpty.nullable(),
    issuedAtMs: epochMs,
    expiresAtMs: epochMs,
  })
  .strict()
  .refine(hasValidWindow, WINDOW_MESSAGE);

/** Sign a binding with the ring's current key. Throws on invalid fields (a caller bug). */
export function mintBinding(fields: Omit<Binding, 'kind'>, keys: KeyRing): string {
  // The schema's checks, by hand (mint-payload.ts): this runs on every routed request.
  return signToken(bindingPayload(fields), keys);
}

/**
 * A binding checked now and signed when first asked for. The gate stamps the binding on the response, which may
 * come seconds or minutes after the decision; an open stream holding this (the payload's fields are the bound
 * group's own strings) instead of the ~0.4 KB token costs less memory per stream. The token is the one
 * `mintBinding` returns for the same fields and ring (the ring's current key is fixed for the ring's life, keys.ts;
 * `issuedAtMs` is the decision's clock, not the signing time), or one the ring signed for the same session, scope and
 * revision less than `reuseWindowMs` earlier (see `token`).
 */
export class PendingBinding {
  // The checked payload's fields kept flat (one object per stream, not two), the window as a start and a length
  // (a small integer, where the end would be a second boxed number).
  readonly #model: string;
  readonly #revision: string;
  readonly #fingerprint: string;
  readonly #tenantScope: string;
  readonly #session: string | null;
  readonly #issuedAtMs: number;
  readonly #lifetimeMs: number;
  readonly #keys: KeyRing;
  #token: string | undefined;

  /** Throws on invalid fields (a caller bug), as `mintBinding` does, at once rather than when signed. */
  constructor(fields: Omit<Binding, 'kind'>, keys: KeyRing) {
    const p = bindingPayload(fields);
    this.#model = p.model;
    this.#revision = p.revision;
    this.#fingerprint = p.fingerprint;
    this.#tenantScope = p.tenantScope;
    this.#session = p.session;
    this.#issuedAtMs = p.issuedAtMs;
    this.#lifetimeMs = p.expiresAtMs - p.issuedAtMs;
    this.#keys = keys;
  }

  /**
   * The signed token (signed on the first call, the same string after). A binding for the same session, scope and
   * revision that this ring signed at most `reuseWindowMs` before this one's issue time is handed out again instead
   * of a fresh signature (`recentBindings`): its expiry is then up to that much earlier, never later.
   */
  token(): string {
    if (this.#token !== undefined) return this.#token;
    const recent = recentBindings(this.#keys);
    const key = this.#reuseKey();
    const seen = recent.peek(key);
    const age = seen === undefined ? -1 : this.#issuedAtMs - seen.issuedAtMs;
    if (seen !== undefined && age >= 0 && age <= reuseWindowMs(this.#lifetimeMs)) {
      this.#token = seen.token;
      return seen.token;
    }
    // The payload `bindingPayload` returned, rebuilt in its key order: the same JSON, so the same token.
    const payload: Binding = {
      kind: 'binding',
      model: this.#model,
      revision: this.#revision,
      fingerprint: this.#fingerprint,
      tenantScope: this.#tenantScope,
      session: this.#session,
      issuedAtMs: this.#issuedAtMs,
      expiresAtMs: this.#issuedAtMs + this.#lifetimeMs,
    };
    this.#token = signToken(payload, this.#keys);
    recent.set(key, { token: this.#token, issuedAtMs: this.#issuedAtMs });
    return this.#token;
  }

  /** Every payload field but the window's start, unambiguously joined (each client-chosen part is length-prefixed). */
  #reuseKey(): string {
    const s = this.#session;
    return [
      this.#lifetimeMs,
      this.#fingerprint,
      `${this.#model.length}:${this.#model}`,
      `${this.#revision.length}:${this.#revision}`,
      `${this.#tenantScope.length}:${this.#tenantScope}`,
      s === null ? '-' : `${s.length}:${s}`,
    ].join('|');
  }
}

/**
 * How long after it was signed a binding is handed out again to the same session, scope and revision: a tenth of its
 * lifetime, at most a minute. So every binding a client receives has at least 90 % of its lifetime left, and a
 * session whose requests arrive close together (an agent's tool calls, a burst of turns) costs one signature per
 * window instead of one per request.
 */
export function reuseWindowMs(lifetimeMs: number): number {
  return Math.min(Math.floor(lifetimeMs / 10), BINDING_REUSE_MAX_MS);
}
const BINDING_REUSE_MAX_MS = 60_000;

/**
 * The bindings a ring signed lately, by everything they carry but their window. Per ring (a ring's current key is
 * fixed for its life; a key reload makes a new ring, src/key-store.ts, so a binding signed with an id the reload
 * removed or replaced as current is never handed out again), bounded: 2,048 entries of about 0.7 KB at most, and a miss only costs the signature.
 */
const recentByRing = new WeakMap<KeyRing, BoundedCache<{ readonly token: string; readonly issuedAtMs: number }>>();
function recentBindings(keys: KeyRing): BoundedCache<{ readonly token: string; readonly issuedAtMs: number }> {
  let c = recentByRing.get(keys);
  if (c === undefined) {
    c = new BoundedCache(2048);
    recentByRing.set(keys, c);
  }
  return c;
}

const BINDING_KEYS: ReadonlySet<string> = new Set([
  'model',
  'revision',
  'fingerprint',
  'tenantScope',
  'session',
  'issuedAtMs',
  'expiresAtMs',
]);

/** The binding payload for `fields`, in `BindingSchema`'s key order; throws what the schema would refuse. */
export function bindingPayload(fields: Omit<Binding, 'kind'>): Binding {
  const fail = failFor('binding');
  const f = object(fields, '(root)', fail);
  onlyKeys(f, BINDING_KEYS, '', fail);
  const payload: Binding = {
    kind: 'binding',
    model: text(f['model'], 'model', fail),
    revision: text(f['revision'], 'revision', fail),
    fingerprint: text(f['fingerprint'], 'fingerprint', fail),
    tenantScope: text(f['tenantScope'], 'tenantScope', fail),
    session: textOrNull(f['session'], 'session', fail),
    issuedAtMs: epoch(f['issuedAtMs'], 'issuedAtMs', fail),
    expiresAtMs: epoch(f['expiresAtMs'], 'expiresAtMs', fail),
  };
  window(payload.issuedAtMs, payload.expiresAtMs, fail);
  return payload;
}

/**
 * Verify a binding a client presented. A failure is not necessarily a refusal: the gate may ignore a stale or
 * foreign binding and route afresh; that choice belongs to the decision core. Never throws.
 */
export function verifyBinding(token: string, keys: KeyRing, nowMs: number, expect?: BindingExpectations): Result<Binding, BindingFailure> {
  const opened = openToken(token, keys, nowMs, 'binding', BindingSchema);
  if (!opened.ok) return opened;
  const b = opened.value;
  const e = expect ?? {};
  if (e.tenantScope !== undefined && e.tenantScope !== b.tenantScope) {
    return err({
      reason: 'tenant_mismatch',
      message: `the binding belongs to tenant scope ${b.tenantScope}, not ${e.tenantScope}; drop the x-kvgate-binding header`,
    });
  }
  if (e.model !== undefined && e.model !== b.model) {
    return err({
      reason: 'model_mismatch',
      message: `the binding is for model ${b.model}, this request asks for ${e.model}; drop the x-kvgate-binding header or use one per model`,
    });
  }
  if (e.session !== undefined && e.session !== b.session) {
    return err({
      reason: 'session_mismatch',
      message: 'the binding was issued to another session; send the binding returned for this session',
    });
  }
  return ok(b);
}
