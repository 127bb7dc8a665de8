/**
 * The decision core: request facts + compiled route table + worker view -> one Decision. Pure (no I/O, no clock
 * or randomness of its own); the same facts, table, view and time always give the same decision on every replica.
 *
 * Order: internal hop -> tenant -> model -> revision -> group -> connector rules -> decode and prefill targets ->
 * fallback -> contract, binding and cache salt. The group is fixed before any target is chosen, and every target is
 * drawn from endpoints that run exactly the group's fingerprint; the only branch that changes the group is the
 * `routeVia` fallback, which binds a whole other group before any prefill (never a queued request).
 */
import { BoundedCache } from '../bounded-cache.js';
import { deriveCacheSalt } from '../contract/cache-salt.js';
import { PendingBinding } from '../contract/binding.js';
import { cacheSaltDigestOf, promptDigestOf } from '../contract/body-binding.js';
import { mintContract } from '../contract/contract.js';
import { NO_PRIORITY, stampedPriority } from './priority.js';
import type { KeyRing } from '../contract/keys.js';
import { groupIdOf } from '../compat/fingerprint.js';
import type { CompiledModel, CompiledRevision, CompiledRouteTable } from '../policy/compile.js';
import { tenantAllowed } from '../policy/schema.js';
import { finalRetryAfter, walkFallback, type FallbackResult } from './fallback.js';
import { decideHop } from './hop.js';
import type { Candidate } from './pick.js';
import { refuse } from './refusal.js';
import { SANITIZED, sessionOf, tenantOf, tenantScopeOf, userOf } from './request-facts.js';
import { chooseRevision, keepQueuedRevision, servingRevisions, type NoRevision, type RevisionChoice } from './revision.js';
import { pickTargets } from './targets.js';
import {
  type BoundGroup,
  type CoreDecision,
  type DecideContext,
  type FallbackRecord,
  type OpenAiRequest,
  type QueuedRequest,
  type Refusal,
  type RequestFacts,
  type RouteDecision,
  type Target,
  type Trace,
  frozenTrace,
} from './types.js';
import type { WorkerView } from './worker-view.js';

/**
 * Decide one request: a hop check for a sidecar's prefill leg, else a route bound to one group, else a refusal
 * with a reason a person can act on, or (only with `ctx.queue`) a wait in the group's queue. Never throws for bad
 * input; a throw is a kvgate bug.
 */
export function decide(facts: RequestFacts, table: CompiledRouteTable, view: WorkerView, ctx: DecideContext): CoreDecision {
  const hop = facts.hop;
  if (hop !== undefined) return decideHop(facts, hop, table, view, ctx);
  return decideRoute(facts, table, view, ctx);
}

interface Identity {
  readonly body: OpenAiRequest;
  readonly tenant: string | null;
  readonly model: CompiledModel;
  readonly serving: readonly CompiledRevision[];
  readonly tenantScope: string;
  readonly session: string | null;
}

/** The bound revision and its trust, for a refusal's audit line. */
const boundRevision = (rev: CompiledRevision): { revision: string; trust: CompiledRevision['trust'] } => ({
  revision: rev.name,
  trust: rev.trust,
});

const isRefusal = (x: unknown): x is Refusal => (x as { kind?: unknown }).kind === 'refuse';

function decideRoute(facts: RequestFacts, table: CompiledRouteTable, view: WorkerView, ctx: DecideContext): CoreDecision {
  const id = facts.requestId;
  const now = Math.floor(ctx.nowMs);
  const trace: Trace = ctx.trace === false ? undefined : [`request ${id}: ${facts.method} ${facts.path}`];
  const who = identify(facts, table, trace);
  if (isRefusal(who)) return who;
  const choice = pickRevision(facts, table, who, ctx, now, trace);
  if ('refuse' in choice)
    return refuse(id, 'no_compatible_capacity', choice.refuse, trace, { tenant: who.tenant, retryAfterSeconds: finalRetryAfter(table) });
  const rev = choice.revision;
  const group = groupFor(rev, who);
  trace?.push(`group: ${group.id} (fingerprint ${rev.fingerprint.slice(0, 12)}…, scope ${group.tenantScope})`);
  if (ctx.bound !== undefined && ctx.bound.group.id !== group.id) {
    return refuse(
      id,
      'no_compatible_capacity',
      requeueMessage(id, ctx.bound, `the tenant prefix scope is now ${group.tenantScope}`),
      trace,
      { tenant: who.tenant, retryAfterSeconds: finalRetryAfter(table), ...boundRevision(rev) },
    );
  }
  if (!rev.transfer.allowed) {
    if (rev.pools.both.length === 0) {
      return refuse(
        id,
        'incompatible_transfer',
        `model ${group.model} (revision ${rev.name}) cannot be served with disaggregated prefill/decode: ${rev.transfer.reasons.join('; ')}. It needs a role: both pool; ask the operator to add one`,
        trace,
        { tenant: who.tenant, ...boundRevision(rev) },
      );
    }
    trace?.push(
      `connector rules: revision ${rev.name} is not transferable (${rev.transfer.reasons.join('; ')}); only role: both pools may serve it`,
    );
  } else {
    trace?.push(`connector rules: revision ${rev.name} may be disaggregated`);
  }
  const targets = pickTargets(rev, group, view, id, trace, {
    affinity: affinityKey(group.id, who.body.json),
    ...(ctx.alternates === undefined ? {} : { alternates: ctx.alternates }),
  });
  if (targets.ok) return bindRoute(facts, table, ctx.keys, now, who, group, targets, trace);
  const input = { table, view, facts, body: who.body, nowMs: now, revision: rev, group, pinned: choice.pinned, shortage: targets.shortage };
  const walked = walkFallback(
    {
      ...input,
      ...(ctx.queue ? { queue: ctx.queue } : {}),
      ...(ctx.maxWaitMs === undefined ? {} : { maxWaitMs: ctx.maxWaitMs }),
      ...(ctx.bound ? { bound: ctx.bound } : {}),
    },
    trace,
  );
  return fromFallback(facts, table, ctx.keys, now, who, { group, pinned: choice.pinned, missing: targets.shortage.missing }, walked, trace);
}

/** A queued request keeps its bound revision; any other request gets its binding's, or its cohort's. */
function pickRevision(
  facts: RequestFacts,
  table: CompiledRouteTable,
  who: Identity,
  ctx: DecideContext,
  now: number,
  trace: Trace,
): RevisionChoice | NoRevision {
  const bound = ctx.bound;
  if (bound !== undefined) {
    const kept = keepQueuedRevision(bound, who.serving);
    if ('refuse' in kept) return { refuse: requeueMessage(facts.requestId, bound, kept.refuse) };
    trace?.push(`revision: ${kept.name} (kept: the request waits in the queue of group ${bound.group.id})`);
    return { revision: kept, pinned: bound.pinned };
  }
  return chooseRevision(
    {
      table,
      model: who.model,
      serving: who.serving,
      tenantScope: who.tenantScope,
      session: who.session,
      requestId: facts.requestId,
      keys: ctx.keys,
      nowMs: now,
      ...(facts.binding === undefined ? {} : { binding: facts.binding }),
    },
    trace,
  );
}

function requeueMessage(id: string, bound: QueuedRequest, why: string): string {
  const g = bound.group;
  return (
    `request ${id} waited in the queue of group ${g.id} (model ${g.model}, revision ${g.revision}) and the route table changed: ${why}. ` +
    'A queued request is never moved to another group; retry, and the new request is bound afresh'
  );
}

function groupFor(rev: CompiledRevision, who: Identity): BoundGroup {
  return Object.freeze({
    id: groupIdOf(rev.fingerprint, who.tenantScope),
    fingerprint: rev.fingerprint,
    tenantScope: who.tenantScope,
    tenant: who.tenant,
    model: who.model.name,
    revision: rev.name,
    adapter: rev.adapter,
  });
}

/** Turn the chain's outcome into a decision: wait, a route (another group, or recompute), or a refusal. */
function fromFallback(
  facts: RequestFacts,
  table: CompiledRouteTable,
  keys: KeyRing,
  now: number,
  who: Identity,
  bound: { group: BoundGroup; pinned: boolean; missing: 'decode' | 'prefill' },
  walked: FallbackResult,
  trace: Trace,
): CoreDecision {
  const o = walked.outcome;
  const records = Object.freeze([...walked.records]);
  switch (o.kind) {
    case 'wait': {
      const { kind: _k, ...w } = o;
      return Object.freeze({
        kind: 'wait' as const,
        requestId: facts.requestId,
        group: bound.group,
        missing: bound.missing,
        pinned: bound.pinned,
        ...w,
        trace: frozenTrace(trace),
        fallback: records,
      });
    }
    case 'routeVia':
      return bindRoute(facts, table, keys, now, who, o.group, { decode: o.decode, prefill: o.prefill }, trace, records);
    case 'recompute':
      trace?.push('prefill: none (recomputed on the decode endpoint; the contract carries no prefill leg)');
      return bindRoute(facts, table, keys, now, who, bound.group, { decode: o.decode, prefill: null }, trace, records);
    case 'refuse':
      return refuse(facts.requestId, o.code, o.message, trace, {
        tenant: who.tenant,
        ...(o.retryAfterSeconds === undefined ? {} : { retryAfterSeconds: o.retryAfterSeconds }),
        fallback: records,
        revision: bound.group.revision,
        ...(table.revisions.get(bound.group.revision) === undefined ? {} : { trust: table.revisions.get(bound.group.revision)!.trust }),
      });
  }
}

/** Tenant, model and prefix scope, or the refusal that stops the request before any revision is chosen. */
function identify(facts: RequestFacts, table: CompiledRouteTable, trace: Trace): Identity | Refusal {
  const id = facts.requestId;
  const body = facts.body;
  if (body === undefined) {
    return refuse(
      id,
      'bad_request',
      'kvgate routes POST /v1/completions and /v1/chat/completions with a JSON body; this request has none',
      trace,
    );
  }
  const tenancy = table.tenancy;
  // Identity headers are read only from valid UTF-8: a lossy decoding maps different byte strings to one value.
  const undecodable = [tenancy.source.header, tenancy.userHeader, table.session.header].find(
    (h) => h !== undefined && facts.invalidHeaders?.includes(h) === true,
  );
  if (undecodable !== undefined) {
    return refuse(
      id,
      'bad_request',
      `header ${undecodable} is not valid UTF-8; identity headers must be UTF-8 text, fix the client or the layer that sets it`,
      trace,
    );
  }
  // Nor from a value Envoy sanitised, where a '!' may stand for a byte that was not UTF-8 (request-facts.ts).
  const sanitized = [tenancy.source.header, tenancy.userHeader, table.session.header].find(
    (h) => h !== undefined && facts.sanitizedHeaders?.includes(h) === true,
  );
  if (sanitized !== undefined) return refuse(id, 'bad_request', `header ${sanitized} ${SANITIZED}`, trace);
  const found = tenantOf(facts, tenancy);
  let tenant: string | null;
  if (found.kind === 'invalid') {
    return refuse(id, 'bad_request', `the tenant identity (${found.from}) ${found.why}`, trace);
  } else if (found.kind === 'found') {
    const long = overlong([['the tenant identity', found.tenant]]);
    if (long !== undefined) return refuse(id, 'bad_request', overlongMessage(`${long.what} (${found.from})`, long.bytes), trace);
    // One string per tenant: the request's own copy would otherwise live as long as its stream (group, audit fields).
    tenant = tenantNames.get(found.tenant, sameName);
    trace?.push(`tenant: ${tenant} (from ${found.from})`);
  } else if (found.kind === 'ambiguous') {
    return refuse(
      id,
      'tenant_required',
      `the tenant identity (${found.from}) is unusable: ${found.detail}; exactly one tenant id is required`,
      trace,
    );
  } else if (tenancy.required) {
    return refuse(
      id,
      'tenant_required',
      `this gateway requires a tenant identity (${found.from}) and the request has none; authenticate through the gateway so it is set`,
      trace,
    );
  } else {
    tenant = tenancy.default ?? null;
    trace?.push(tenant === null ? `tenant: none (${found.from} absent; anonymous)` : `tenant: ${tenant} (default; ${found.from} absent)`);
  }
  const model = table.models.get(body.model);
  if (model === undefined) return refuse(id, 'unknown_model', unknownModelMessage(body.model, table, tenant), trace, { tenant });
  if (!tenantAllowed(model.tenants, tenant)) {
    return tenant === null
      ? refuse(
          id,
          'tenant_required',
          `model ${model.name} is restricted to named tenants and the request has no tenant identity; authenticate through the gateway`,
          trace,
          { tenant },
        )
      : refuse(id, 'tenant_scope_denied', `tenant ${tenant} may not use model ${model.name}; ask the gateway operator for access`, trace, {
          tenant,
        });
  }
  const serving = servingRevisions(table, model, tenant);
  if (serving.length === 0) {
    return refuse(
      id,
      'tenant_scope_denied',
      `no pool serving model ${model.name} is open to ${tenant === null ? 'anonymous requests' : `tenant ${tenant}`}; ask the gateway operator for access`,
      trace,
      { tenant },
    );
  }
  const user = userOf(facts, tenancy);
  // As for the tenant header: two values mean a client copy survived next to the authentication layer's, and the user
  // picks the prefix-cache scope under tenant-user; refused, never joined into a user of the client's making.
  if (tenancy.prefixScope === 'tenant-user' && tenancy.userHeader !== undefined && user?.includes(',') === true) {
    return refuse(
      id,
      'tenant_required',
      `the user identity (header ${tenancy.userHeader}) is unusable: it carries more than one value; exactly one user id is required`,
      trace,
      { tenant },
    );
  }
  const session = sessionOf(facts, table.session);
  // Every identity travels in the signed contract and binding, which a verifier accepts up to MAX_TOKEN_CHARS: a
  // 20 KB `user` would be routed with a contract no sidecar can read, and held in every open stream's binding.
  const long = overlong([
    [tenancy.userHeader === undefined ? 'the body field user' : `header ${tenancy.userHeader}`, user],
    [`header ${table.session.header}`, session],
  ]);
  if (long !== undefined) return refuse(id, 'bad_request', overlongMessage(long.what, long.bytes), trace, { tenant });
  // The body's JSON may spell a lone surrogate (`"\ud800"`), which no UTF-8 text holds: the scope cannot carry it (its
  // URI encoding throws) and a lossy encoding would merge users. Headers are decoded strictly and never hold one.
  if (tenancy.prefixScope === 'tenant-user' && user !== null && LONE_SURROGATE.test(user)) {
    const what = tenancy.userHeader === undefined ? 'the body field user' : `header ${tenancy.userHeader}`;
    return refuse(
      id,
      'bad_request',
      `${what} is not valid Unicode text (it holds a lone surrogate, e.g. an unpaired \\ud800 escape); send the id as valid UTF-8`,
      trace,
      { tenant },
    );
  }
  const tenantScope = tenantScopeOf(tenancy.prefixScope, tenant, user);
  trace?.push(
    `model: ${model.name} (rollout: stable ${model.stable}${model.candidate === null ? '' : `, candidate ${model.candidate} at ${model.weight}%`})`,
  );
  return { body, tenant, model, serving, tenantScope, session };
}

/** A UTF-16 surrogate without its pair (with the `u` flag a well-formed pair is one code point and never matches). */
const LONE_SURROGATE = /[\uD800-\uDFFF]/u;

/** The longest tenant, user or session id a request may carry, in UTF-8 bytes (all three ride in signed tokens). */
export const MAX_IDENTITY_BYTES = 256;

function overlong(ids: readonly (readonly [string, string | null])[]): { what: string; bytes: number } | undefined {
  for (const [what, v] of ids) {
    // Cheap first: a string of n UTF-16 units is at most 3n bytes.
    if (v === null || v.length * 3 <= MAX_IDENTITY_BYTES) continue;
    const bytes = Buffer.byteLength(v, 'utf8');
    if (bytes > MAX_IDENTITY_BYTES) return { what, bytes };
  }
  return undefined;
}

function overlongMessage(what: string, bytes: number): string {
  return `${what} is ${bytes} bytes long; identities are at most ${MAX_IDENTITY_BYTES} bytes of UTF-8, send a shorter id (or a hash of it)`;
}

function unknownModelMessage(name: string, table: CompiledRouteTable, tenant: string | null): string {
  const shown = JSON.stringify(name.slice(0, 128));
  if (table.tenantRestricted) {
    return `model ${shown} is not served by this gateway. Check the name; models are not listed here because access is per tenant: ask the gateway operator which models ${tenant === null ? 'you' : `tenant ${tenant}`} may use`;
  }
  const all = table.servedModels;
  const list = all.length > 20 ? `${all.slice(0, 20).join(', ')}, ...` : all.join(', ');
  return `model ${shown} is not served by this gateway; served models: ${list}`;
}

const tenantNames = new BoundedCache<string>(4096);
const sameName = (name: string): string => name;

/**
 * Digests of derived cache salts (no client part): one per group and tenant scope, so they repeat as the salts do
 * (cache-salt.ts keeps the salts the same way). A client's own salt is digested afresh: the client picks it.
 */
const derivedSaltDigests = new BoundedCache<string>(4096);

const targetOf = (c: Candidate): Target => Object.freeze({ pool: c.pool.name, cluster: c.pool.cluster, endpoint: c.endpoint.address });

function bindRoute(
  facts: RequestFacts,
  table: CompiledRouteTable,
  keys: KeyRing,
  now: number,
  who: Identity,
  group: BoundGroup,
  targets: { decode: Candidate; prefill: Candidate | null; alternates?: readonly Candidate[] },
  trace: Trace,
  fallback?: readonly FallbackRecord[],
): RouteDecision {
  const alternates = (targets.alternates ?? []).filter(
    (c) => c.endpoint.fingerprint === group.fingerprint && c.pool.fingerprint === group.fingerprint,
  );
  const decode: Target =
    alternates.length === 0
      ? targetOf(targets.decode)
      : Object.freeze({ ...targetOf(targets.decode), alternates: Object.freeze(alternates.map((c) => c.endpoint.address)) });
  const prefill = targets.prefill === null ? null : targetOf(targets.prefill);
  for (const c of [targets.decode, targets.prefill]) {
    // The invariant every branch above maintains; a violation is a bug, never a route.
    if (c !== null && (c.endpoint.fingerprint !== group.fingerprint || c.pool.fingerprint !== group.fingerprint)) {
      throw new Error(`kvgate bug: endpoint ${c.endpoint.address} is outside group ${group.id}`);
    }
  }
  const cacheSalt = deriveCacheSalt(keys, group.id, group.tenantScope, who.body.cacheSalt);
  // The pools are gathered only when the table sets priorities: most tables do not, and this runs on every route.
  const priority =
    table.priorities === null
      ? NO_PRIORITY
      : stampedPriority(
          table.priorities,
          group.tenant,
          [targets.decode, ...(targets.prefill === null ? [] : [targets.prefill]), ...alternates].map((c) => c.pool),
        );
  if (priority.wanted !== 0) {
    trace?.push(
      priority.priority !== 0
        ? `priority ${priority.priority} (the route table's for this tenant; every pool of the route schedules by priority)`
        : `priority ${priority.wanted} not stamped (runs at 0): pool(s) ${priority.without.join(', ')} do not declare schedulingPolicy: priority`,
    );
  }
  const contract = mintContract(
    {
      requestId: facts.requestId,
      groupId: group.id,
      fingerprint: group.fingerprint,
      tenantScope: group.tenantScope,
      tenant: group.tenant,
      model: group.model,
      revision: group.revision,
      adapter: group.adapter,
      // The contract binds the body the gate forwards: this tenant's salt and this prompt, nothing else.
      cacheSaltDigest:
        who.body.cacheSalt === undefined ? derivedSaltDigests.get(cacheSalt, cacheSaltDigestOf) : cacheSaltDigestOf(cacheSalt),
      promptDigest: promptDigestOf(who.body.json),
      issuedAtMs: now,
      expiresAtMs: now + table.contractTtlMs,
      decode: {
        cluster: decode.cluster,
        endpoint: decode.endpoint,
        ...(decode.alternates === undefined ? {} : { alternates: [...decode.alternates] }),
      },
      prefill: prefill === null ? null : { cluster: prefill.cluster, endpoint: prefill.endpoint },
      // Left out at 0: the contract of a tenant without a priority is as it was before priorities existed.
      ...(priority.priority === 0 ? {} : { priority: priority.priority }),
    },
    keys,
  );
  // Checked now, signed when first read: the gate reads it when the response headers come back (PendingBinding).
  const binding = new PendingBinding(
    {
      model: group.model,
      revision: group.revision,
      fingerprint: group.fingerprint,
      tenantScope: group.tenantScope,
      session: who.session,
      issuedAtMs: now,
      expiresAtMs: now + table.session.bindingTtlMs,
    },
    keys,
  );
  trace?.push(
    `contract minted (expires in ${table.contractTtlMs} ms); cache_salt derived${who.body.cacheSalt === undefined ? '' : " (client's salt folded in)"}`,
  );
  const decision = {
    kind: 'route' as const,
    requestId: facts.requestId,
    group,
    decode,
    prefill,
    cacheSalt,
    contract,
    get binding(): string {
      return binding.token();
    },
    trace: frozenTrace(trace),
    ...(fallback === undefined ? {} : { fallback }),
    // Named on every log line of the request (decision, refusal behind the route): this revision is not checked.
    ...(table.revisions.get(group.revision)?.trust === 'declared-only' ? { trust: 'declared-only' as const } : {}),
  };
  // Not enumerable: a decision printed or compared (`kvgate explain --json`, tests) shows `binding`, as before.
  return Object.freeze(Object.defineProperty(decision, 'pendingBinding', { value: binding, enumerable: false }) as RouteDecision);
}

/**
 * The prefix-affinity key: the group's id (which carries the tenant's prefix scope, so two tenants never share a
 * key) and the start of the prompt, where shared prefixes (system prompts, few-shot examples) live.
 */
function affinityKey(groupId: string, body: Readonly<Record<string, unknown>>): string | null {
  const prompt = body['messages'] ?? body['prompt'];
  if (prompt === undefined) return null;
  // A long string prompt: only its start is encoded. JSON escapes each character on its own, so the first
  // AFFINITY_PREFIX_CHARS characters of the two encodings agree (a surrogate pair the cut splits lands past them).
  const text = JSON.stringify(
    typeof prompt === 'string' && prompt.length > AFFINITY_PREFIX_CHARS ? prompt.slice(0, AFFINITY_PREFIX_CHARS) : prompt,
  );
  // A short prompt fills few KV blocks: a cache hit saves little, and keeping it on one endpoint would cost balance.
  if (text.length < AFFINITY_MIN_CHARS) return null;
  return `${groupId}\n${text.slice(0, AFFINITY_PREFIX_CHARS)}`;
}

/** How much of the prompt (as JSON text) the affinity key covers, and the least worth keeping together. */
const AFFINITY_PREFIX_CHARS = 512;
const AFFINITY_MIN_CHARS = 256;
