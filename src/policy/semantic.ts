/**
 * Checks beyond the schema: rules that span fields (a pool naming a revision, a model's tenants reaching a pool,
 * a rollout that makes sense) and the compatibility-group rules in `semantic-groups.ts`. Each rule has its own
 * message and fix, so a policy author can act on every finding without reading kvgate's source.
 *
 * The check is the one place a table's revisions are fingerprinted: it hands those fingerprints on, and the loader
 * compiles the hot-path lookups from them (`compile.ts`), so nothing is computed twice and nothing unchecked is
 * ever compiled.
 */
import type { CompatVerdict } from '../compat/connector-rules.js';
import { isGateOwnedHeader } from '../headers.js';
import { closestMatch, issue, listOf, type PathSegment, type ConfigIssue } from '../config/issues.js';
import { tenantAllowed, type RouteTable } from './schema.js';
import {
  checkAddresses,
  checkCacheDtypes,
  checkClusters,
  checkDuplicateGroups,
  checkConnectorRules,
  checkEndpointDescriptors,
  checkGroupTransfers,
  fingerprintRevisions,
  type CheckContext,
} from './semantic-groups.js';
import { checkFallbackSteps, checkVerification } from './semantic-rollout.js';
import type { Locate } from '../config/from-zod.js';
import { checkRecordedBehaviour } from './semantic-trust.js';
import { checkNameText } from './semantic-names.js';
import { checkPriorities } from './semantic-priorities.js';

export interface CheckOptions {
  /** Source positions, so issues carry a line number. */
  readonly locate?: Locate;
  /**
   * Only what compiling needs (every descriptor fingerprints, every reference names a declared revision), for
   * `kvgate explain --allow-invalid` and tests of the decision core's own guards; the gate never loads such a table.
   */
  readonly referencesOnly?: boolean;
}

/** What a check found, and the fingerprint of every revision that has one (for compiling). */
export interface CheckResult {
  readonly issues: ConfigIssue[];
  readonly fingerprints: ReadonlyMap<string, string>;
  /** Connector rules' verdict per fingerprinted revision. */
  readonly connector: ReadonlyMap<string, CompatVerdict>;
}

/** Every semantic issue of a schema-valid table: errors block loading, warnings are reported alongside. */
export function checkRouteTable(table: RouteTable, options: CheckOptions = {}): CheckResult {
  const out: ConfigIssue[] = [];
  const { fingerprints, connector } = fingerprintRevisions(table, out);
  const ctx: CheckContext = {
    table,
    file: table.source,
    fingerprints,
    connector,
    add(path, message, fix, severity = 'error') {
      const pos = options.locate?.(path);
      out.push(issue(table.source, path, message, fix, { severity, ...(pos ?? {}) }));
    },
  };
  checkRevisionReferences(ctx);
  if (options.referencesOnly === true) return { issues: out, fingerprints, connector };
  checkPoolNames(ctx);
  checkRollouts(ctx);
  checkRoleCoverage(ctx);
  checkModelTenants(ctx);
  checkTenancy(ctx);
  checkLoudSettings(ctx);
  checkTenantNames(ctx);
  checkPriorities(ctx);
  checkNameText(ctx);
  checkFallback(ctx);
  checkUncheckedEndpoints(ctx);
  checkFallbackSteps(ctx);
  checkVerification(ctx);
  checkRecordedBehaviour(ctx);
  checkEndpointDescriptors(ctx);
  checkClusters(ctx);
  checkDuplicateGroups(ctx);
  checkAddresses(ctx);
  checkConnectorRules(ctx);
  checkCacheDtypes(ctx);
  checkGroupTransfers(ctx);
  return { issues: out, fingerprints, connector };
}

function checkPoolNames(ctx: CheckContext): void {
  const seen = new Set<string>();
  ctx.table.pools.forEach((pool, i) => {
    if (seen.has(pool.name)) {
      ctx.add(['pools', i, 'name'], `pool name "${pool.name}" is used twice`, 'give every pool a unique name');
    }
    seen.add(pool.name);
  });
}

function unknownRevision(ctx: CheckContext, path: readonly PathSegment[], what: string, name: string): void {
  const known = Object.keys(ctx.table.revisions);
  if (Object.hasOwn(ctx.table.revisions, name)) return;
  const guess = closestMatch(name, known);
  ctx.add(
    path,
    `${what} names revision "${name}", which is not declared under revisions`,
    guess ? `did you mean "${guess}"? Declared revisions: ${listOf(known)}` : `declare revisions.${name}, or use one of: ${listOf(known)}`,
  );
}

function checkRevisionReferences(ctx: CheckContext): void {
  const { table } = ctx;
  table.pools.forEach((pool, i) => {
    unknownRevision(ctx, ['pools', i, 'revision'], `pool "${pool.name}"`, pool.revision);
  });
  for (const [model, m] of Object.entries(table.models)) {
    unknownRevision(ctx, ['models', model, 'rollout', 'stable'], `model "${model}" (rollout.stable)`, m.rollout.stable);
    if (m.rollout.candidate !== undefined) {
      unknownRevision(ctx, ['models', model, 'rollout', 'candidate'], `model "${model}" (rollout.candidate)`, m.rollout.candidate);
    }
  }
  table.fallback.forEach((step, i) => {
    if (step.kind !== 'routeVia') return;
    step.revisions.forEach((r, j) => {
      unknownRevision(ctx, ['fallback', i, 'routeVia', 'revisions', j], `fallback step ${i + 1} (routeVia)`, r);
    });
  });
}

function checkRollouts(ctx: CheckContext): void {
  for (const [model, { rollout }] of Object.entries(ctx.table.models)) {
    const at = ['models', model, 'rollout'];
    if (rollout.candidate !== undefined && rollout.candidate === rollout.stable) {
      ctx.add(
        [...at, 'candidate'],
        `model "${model}": the rollout candidate is the stable revision "${rollout.stable}", so there is nothing to roll out`,
        'set candidate to the new revision, or remove candidate and weight when the rollout is finished',
      );
    }
    if (rollout.weight !== undefined && rollout.candidate === undefined) {
      ctx.add(
        [...at, 'weight'],
        `model "${model}": rollout.weight is ${rollout.weight} but there is no candidate revision to send that cohort to`,
        'add rollout.candidate: <revision>, or remove weight',
      );
    }
    // A weight is a percentage: 0.1 written for "10 %" sends one session in a thousand, and nothing says so.
    if (rollout.candidate !== undefined && rollout.weight !== undefined && rollout.weight > 0 && rollout.weight < 1) {
      ctx.add(
        [...at, 'weight'],
        `model "${model}": rollout.weight is ${rollout.weight}, a percentage: candidate "${rollout.candidate}" takes ${rollout.weight}% of new sessions (${Number((rollout.weight * 100).toFixed(4))}% written as a fraction?)`,
        `write the percentage, e.g. weight: ${Math.round(rollout.weight * 100)}, if ${Math.round(rollout.weight * 100)}% of new sessions was meant`,
        'warning',
      );
    }
    // The schema's default of 0 makes a forgotten weight a candidate that never takes a session, silently.
    if (rollout.candidate !== undefined && rollout.candidate !== rollout.stable && rollout.weight === undefined) {
      ctx.add(
        [...at, 'candidate'],
        `model "${model}": candidate "${rollout.candidate}" has no rollout.weight, so it takes no new sessions (the weight defaults to 0)`,
        'set rollout.weight to the percentage of new sessions it should take, or weight: 0 to say the rollout is paused',
        'warning',
      );
    }
  }
}

/** A revision a model serves, or one split into prefill/decode pools, needs a way to run both halves. */
function checkRoleCoverage(ctx: CheckContext): void {
  const { table } = ctx;
  const served = new Map<string, string>();
  for (const [model, m] of Object.entries(table.models)) {
    for (const r of [m.rollout.stable, m.rollout.candidate]) if (r !== undefined && !served.has(r)) served.set(r, model);
  }
  for (const name of Object.keys(table.revisions)) {
    const roles = new Set(table.pools.filter((p) => p.revision === name).map((p) => p.role));
    const at = ['revisions', name];
    if (roles.size === 0) {
      const model = served.get(name);
      if (model !== undefined) {
        ctx.add(
          at,
          `revision "${name}" is in model "${model}"'s rollout but has no pools`,
          `add pools with revision: ${name}, or take it out of the rollout`,
        );
      }
      continue;
    }
    const named = served.has(name) || table.fallback.some((f) => f.kind === 'routeVia' && f.revisions.includes(name));
    if (!named) {
      // A typo in a rollout, or a revision added before its rollout: pools that are polled and rendered but idle.
      const pools = table.pools.filter((p) => p.revision === name).map((p) => p.name);
      ctx.add(
        at,
        `revision "${name}" has pools (${pools.join(', ')}) but no model's rollout and no routeVia step names it, so they never take a request`,
        `name it as a model's stable or candidate (check the rollout's spelling), or remove its pools`,
        'warning',
      );
    }
    const canDecode = roles.has('decode') || roles.has('both');
    const canPrefill = roles.has('prefill') || roles.has('both');
    if (!canDecode) {
      ctx.add(
        at,
        `revision "${name}" has prefill pools but no decode or both pool, so its prefilled KV has nowhere to go`,
        `add a pool with role: decode (or both) and revision: ${name}`,
      );
    }
    if (!canPrefill) {
      ctx.add(
        at,
        `revision "${name}" has decode pools but no prefill or both pool to compute its KV`,
        `add a pool with role: prefill (or both) and revision: ${name}`,
      );
    }
  }
}

/** Tenants a model accepts must reach at least one revision that can serve them end to end. */
function checkModelTenants(ctx: CheckContext): void {
  const { table } = ctx;
  for (const [model, m] of Object.entries(table.models)) {
    const revisions = [m.rollout.stable, m.rollout.candidate].filter((r): r is string => r !== undefined);
    const pools = table.pools.filter((p) => revisions.includes(p.revision));
    if (pools.length === 0) continue; // reported by checkRoleCoverage
    const serves = (tenant: string | null): boolean => revisions.some((r) => revisionServes(table, r, tenant));
    const open = m.tenants.includes('*');
    const missing = open ? (serves(null) ? [] : ['*']) : m.tenants.filter((t) => !serves(t));
    if (missing.length === 0) continue;
    const poolTenants = listOf(new Set(pools.flatMap((p) => [...p.tenants])));
    ctx.add(
      ['models', model, 'tenants'],
      open
        ? `model "${model}" accepts any tenant ('*'), but no prefill/decode (or both) pool of ${listOf(revisions)} serves every tenant (its pools serve: ${poolTenants})`
        : `model "${model}" accepts tenant(s) ${listOf(missing)}, but no prefill/decode (or both) pool of ${listOf(revisions)} serves them (its pools serve: ${poolTenants})`,
      open
        ? `list the model's tenants explicitly, or set tenants: ['*'] on its pools`
        : `add ${listOf(missing)} to the tenants of the model's pools, or remove them from models.${model}.tenants`,
    );
  }
}

/** Whether `revision` has a prefill and a decode (or a both) pool open to `tenant` (null: any tenant, '*'). */
function revisionServes(table: CheckContext['table'], revision: string, tenant: string | null): boolean {
  const ok = table.pools.filter((p) => p.revision === revision && tenantAllowed(p.tenants, tenant));
  return ok.some((p) => p.role === 'both') || (ok.some((p) => p.role === 'decode') && ok.some((p) => p.role === 'prefill'));
}

/**
 * Tenant names that look like typos: a pool tenant no model of its revision accepts, a tenant a rollout's candidate
 * cannot serve (it silently never joins the rollout), a `tenancy.default` no model accepts (every anonymous request
 * would be refused 403).
 */
function checkTenantNames(ctx: CheckContext): void {
  const { table } = ctx;
  const models = Object.entries(table.models);
  table.pools.forEach((p, i) => {
    const accepting = models.filter(([, m]) => m.rollout.stable === p.revision || m.rollout.candidate === p.revision);
    if (accepting.length === 0 || accepting.some(([, m]) => m.tenants.includes('*'))) return;
    const known = new Set(accepting.flatMap(([, m]) => m.tenants));
    const unknown = p.tenants.filter((t) => t !== '*' && !known.has(t));
    if (unknown.length === 0) return;
    ctx.add(
      ['pools', i, 'tenants'],
      `pool ${p.name} serves tenant(s) ${listOf(unknown)}, which no model of revision ${p.revision} accepts (they accept: ${listOf([...known])}); a typo?`,
      `spell them as in models.<model>.tenants, or add them there`,
      'warning',
    );
  });
  // An undeclared revision is already an error of its own; what its pools would serve says nothing more.
  const declared = (r: string) => table.revisions[r] !== undefined;
  for (const [model, m] of models) {
    const { candidate, stable } = m.rollout;
    if (candidate === undefined || m.tenants.includes('*') || !declared(candidate) || !declared(stable)) continue;
    const byStable = new Set(m.tenants.filter((t) => revisionServes(table, stable, t)));
    const byCandidate = new Set(m.tenants.filter((t) => revisionServes(table, candidate, t)));
    const left = m.tenants.filter((t) => byStable.has(t) && !byCandidate.has(t));
    if (left.length > 0) {
      ctx.add(
        ['models', model, 'rollout', 'candidate'],
        `tenant(s) ${listOf(left)} of model "${model}" never join its rollout: no prefill/decode (or both) pool of the candidate ${candidate} serves them, so they always get ${stable}`,
        `add ${listOf(left)} to the tenants of ${candidate}'s pools (check their spelling), if they should join the rollout`,
        'warning',
      );
    }
    // The mirror image: a tenant the stable revision cannot serve is not on the rollout's weight at all. It gets
    // the candidate for every session (or, while the candidate is unverified, a refusal), whatever the weight says.
    const only = m.tenants.filter((t) => !byStable.has(t) && byCandidate.has(t));
    if (only.length > 0) {
      ctx.add(
        ['models', model, 'rollout', 'stable'],
        `tenant(s) ${listOf(only)} of model "${model}" are served by no prefill/decode (or both) pool of the stable ${stable}, so every session of theirs goes to the candidate ${candidate}, not the ${m.rollout.weight}% the weight says (and is refused while ${candidate} is not verified)`,
        `add ${listOf(only)} to the tenants of ${stable}'s pools (check their spelling), or take them off the model if they should not use it`,
        'warning',
      );
    }
  }
  const fallback = table.tenancy.default;
  if (fallback !== undefined && !table.tenancy.required && !models.some(([, m]) => tenantAllowed(m.tenants, fallback))) {
    ctx.add(
      ['tenancy', 'default'],
      `tenancy.default "${fallback}" is a tenant no model accepts, so every request without a tenant would be refused 403 tenant_scope_denied`,
      `add "${fallback}" to the tenants of the models anonymous requests may use, or fix its spelling`,
      'warning',
    );
  }
}

function checkTenancy(ctx: CheckContext): void {
  const { tenancy, session } = ctx.table;
  // Each fix names a header for that role: suggesting the tenant header for the user or session would make every
  // user, or every session, of a tenant one. The session key is the client's own; tenant and user come from auth.
  const headers: [PathSegment[], string | undefined, string, string][] = [
    [
      ['tenancy', 'source', 'header'],
      tenancy.source.header,
      'the tenant header',
      'use a header your authentication layer sets, e.g. x-tenant-id',
    ],
    [['tenancy', 'userHeader'], tenancy.userHeader, 'the user header', 'use a header your authentication layer sets, e.g. x-user-id'],
    [
      ['session', 'header'],
      session.header,
      'the session header',
      'use a header clients send to name their session, e.g. x-session-id (the default)',
    ],
  ];
  for (const [path, name, what, fix] of headers) {
    if (name === undefined || !isGateOwnedHeader(name)) continue;
    ctx.add(
      path,
      `${what} "${name}" is gate-owned: kvgate removes every client-sent x-kvgate-* (and GIE routing) header before reading any header`,
      fix,
    );
  }
  // One header in two roles: the tenant and user come from authentication, the session from the client. A session
  // header that is the tenant or user header puts every request of a tenant (or user) in one session, and a client
  // would have to set what only the authentication layer may set (or, as the user, choose its own prefix scope).
  const tenantHeader = tenancy.source.header;
  const same: [PathSegment[], string | undefined, string | undefined, string, string][] = [
    [['session', 'header'], session.header, tenantHeader, 'the session header', 'the tenant header (tenancy.source.header)'],
    [['session', 'header'], session.header, tenancy.userHeader, 'the session header', 'the user header (tenancy.userHeader)'],
    [['tenancy', 'userHeader'], tenancy.userHeader, tenantHeader, 'the user header', 'the tenant header (tenancy.source.header)'],
  ];
  for (const [path, a, b, what, other] of same) {
    if (a === undefined || b === undefined || a.toLowerCase() !== b.toLowerCase()) continue;
    ctx.add(
      path,
      `${what} "${a}" is also ${other}: one header cannot carry both (clients set the session; only your authentication layer sets the tenant and user)`,
      path[0] === 'session'
        ? 'use a header clients send to name their session, e.g. x-session-id (the default)'
        : 'use a header your authentication layer sets for the user, e.g. x-user-id, or remove userHeader',
    );
  }
  if (tenancy.required && tenancy.default !== undefined) {
    ctx.add(
      ['tenancy', 'default'],
      `tenancy.default "${tenancy.default}" is never used because tenancy.required is true (a request without a tenant is refused)`,
      'remove default, or set required: false to give unidentified requests that tenant',
      'warning',
    );
  }
  if (tenancy.prefixScope === 'tenant-user' && tenancy.userHeader === undefined) {
    ctx.add(
      ['tenancy', 'userHeader'],
      "prefixScope tenant-user without userHeader takes the user from the request body's `user` field, which the client controls",
      'set tenancy.userHeader to a header your authentication layer sets',
      'warning',
    );
  }
}

/**
 * Table-wide settings whose non-default value is a loud opt-in (test/safe-defaults.test.ts): a warning on every check,
 * so `policy check`, the gate's start and every reload say so, whatever else the table holds.
 */
function checkLoudSettings(ctx: CheckContext): void {
  const { tenancy, connectorMode, media } = ctx.table;
  // `shared` is the one scope that lets one tenant's requests read KV another tenant computed (a prompt's cached
  // prefix can then be timed, and a mistaken cache hit is served across tenants): a loud opt-in, reported on every
  // check, start and reload, and on /status with the other opt-ins.
  if (tenancy.prefixScope === 'shared') {
    ctx.add(
      ['tenancy', 'prefixScope'],
      'prefixScope: shared - every tenant shares one prefix cache: requests of one tenant reuse (and can time) KV computed for another tenant',
      "use prefixScope: tenant (the default) or tenant-user, unless every tenant may see every other tenant's prompts",
      'warning',
    );
  }
  // Lenient lets a connector version kvgate has no rules for be transferred; the per-revision warning appears only
  // when such a version is declared, so the setting itself is named too: the next table edit may declare one.
  if (connectorMode === 'lenient') {
    ctx.add(
      ['connectorMode'],
      'connectorMode: lenient - a revision whose connector version kvgate has no rules for is split into prefill and decode with a warning instead of refused',
      'use connectorMode: strict (the default); declare a connector version kvgate has rules for',
      'warning',
    );
  }
  // An allowed media origin lets workers fetch from it for any client, from inside the mesh, and the prefill and decode
  // workers each fetch it once: what it serves may change between the two fetches (src/media-url.ts, docs/security.md).
  if (media.allowedOrigins.length > 0) {
    ctx.add(
      ['media', 'allowedOrigins'],
      `media.allowedOrigins - workers fetch client media from ${media.allowedOrigins.join(', ')}: the prefill and the decode worker each fetch it, so only bytes that never change at one URL keep their KV consistent`,
      "list only origins that serve immutable (content-addressed) media, give every worker vLLM's --allowed-media-domains with the same hosts and VLLM_MEDIA_URL_ALLOW_REDIRECTS=0, and the sidecars the same media.allowedOrigins; or remove the list and send media inline as data: URLs",
      'warning',
    );
  }
}

/**
 * An endpoint without a status URL: the live worker view cannot see whether its worker is verified, so it never routes
 * to it unless the table opts in with `unverified: true`, which is then reported on every check.
 */
function checkUncheckedEndpoints(ctx: CheckContext): void {
  ctx.table.pools.forEach((p, i) => {
    const endpoints = p.endpoints ?? [];
    const optedIn = endpoints.flatMap((e, j) => (e.status === undefined && e.unverified === true ? [{ e, j }] : []));
    const missing = endpoints.flatMap((e, j) => (e.status === undefined && e.unverified !== true ? [{ e, j }] : []));
    // One warning per pool and kind (at its first endpoint), naming a few addresses: a pool of 1,000 is one line.
    const named = (list: typeof optedIn): string =>
      `${list.length === 1 ? 'endpoint' : `${list.length} endpoints`} ${listOf(list.slice(0, 3).map((x) => x.e.address))}${list.length > 3 ? ', ...' : ''}`;
    const host = (x: (typeof optedIn)[number]): string => x.e.address.slice(0, x.e.address.lastIndexOf(':'));
    if (optedIn.length > 0) {
      ctx.add(
        ['pools', i, 'endpoints', optedIn[0]!.j, 'unverified'],
        `pool ${p.name} routes to ${named(optedIn)} with NO check that the worker is verified (unverified: true): a worker of another revision there would be given this revision's requests`,
        `give each its sidecar's status URL (status: http://${host(optedIn[0]!)}:9090) and remove unverified`,
        'warning',
      );
    }
    if (missing.length > 0) {
      ctx.add(
        ['pools', i, 'endpoints', missing[0]!.j],
        `pool ${p.name}'s ${named(missing)} ${missing.length === 1 ? 'has' : 'have'} no status URL, so the gate's live worker view never routes to ${missing.length === 1 ? 'it' : 'them'} (only workerView: static, for tests and demos, does)`,
        `add each its sidecar's status URL (status: http://${host(missing[0]!)}:9090), or declare unverified: true to route there unchecked`,
        'warning',
      );
    }
  });
}

function checkFallback(ctx: CheckContext): void {
  const steps = ctx.table.fallback;
  steps.forEach((step, i) => {
    if (step.kind === 'refuse' && i < steps.length - 1) {
      ctx.add(
        ['fallback', i + 1],
        `fallback steps after step ${i + 1} (refuse) never run`,
        'move refuse to the end of the chain, or remove the steps after it',
        'warning',
      );
    }
  });
  if (steps[steps.length - 1]?.kind !== 'refuse') {
    ctx.add(
      ['fallback'],
      'the fallback chain does not end with refuse; a request that exhausts it is refused with a default retry-after',
      'end the chain with { refuse: { retryAfterSeconds: <seconds> } }',
      'warning',
    );
  }
}
