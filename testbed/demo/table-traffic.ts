/**
 * The demo's sample traffic for an operator's own route table (table-topology.ts): the same scenarios as the default
 * demo (run-demo.ts), derived from the table instead of hard-wired to llama-a / llama-b. For every served model and
 * every revision its rollout sends new sessions to: a session bound to it, routed to that revision's pools of the
 * table (read from the harness's access log: the clusters and hosts Envoy used), with token ids equal to the
 * revision's non-disaggregated baseline; then the refusals (a prefill leg that leaves its group, client-sent
 * kv_transfer_params, forged routing headers, a missing tenant) and token parity over the sample prompts.
 */
import { randomUUID } from 'node:crypto';
import { groupIdOf } from '../../src/compat/fingerprint.js';
import { mintContract } from '../../src/contract/contract.js';
import { H } from '../../src/headers.js';
import type { CompiledModel, CompiledRouteTable } from '../../src/policy/compile.js';
import type { AccessLogEntry } from '../harness/access-log.js';
import type { DemoCheck, DemoSummary } from './run-demo.js';
import { firstDivergence, naivePairing, post, PROMPTS, tokenIds, type HttpResult, type ParityRow } from './scenarios.js';
import type { TableTopology, TableWorker } from './table-topology.js';

type Print = (line: string) => void;

/** Who the sample traffic is sent as, per the runtime table's tenancy and session settings. */
export interface Caller {
  readonly model: string;
  readonly tenant: string | null;
  /** Tenant and session headers for `session`. */
  headers(session?: string): Record<string, string>;
}

/** The tenant the demo sends for `model`: its first listed tenant, else the table's default, else `demo`. */
export function callerFor(table: CompiledRouteTable, model: CompiledModel): Caller {
  const listed = model.tenants.find((x) => x !== '*');
  const tenant = listed ?? table.tenancy.default ?? 'demo';
  const tenantHeader = table.tenancy.source.header;
  return {
    model: model.name,
    tenant,
    headers: (session) => ({
      ...(tenantHeader === undefined ? {} : { [tenantHeader]: tenant }),
      ...(session === undefined ? {} : { [table.session.header]: session }),
    }),
  };
}

function completion(model: string, prompt: string, maxTokens = 16): Record<string, unknown> {
  return { model, prompt, max_tokens: maxTokens, return_token_ids: true };
}

/** Where Envoy sent one request: the public leg's cluster and host, and the prefill leg's when there was one. */
interface Route {
  readonly decode: AccessLogEntry | undefined;
  readonly prefill: AccessLogEntry | undefined;
}

/** Send one request through the public listener and read where Envoy routed it from the harness's access log. */
async function routed(t: TableTopology, body: unknown, headers: Record<string, string>): Promise<{ r: HttpResult; route: Route }> {
  const before = t.harness.accessLog().length;
  const r = await post(`${t.publicUrl}/v1/completions`, body, headers);
  const entries = await t.harness.waitForAccessLog(before + 1);
  let fresh = entries.slice(before);
  const decode = fresh.find((e) => e.listener === 'public');
  const pool = t.plan.pools.find((p) => p.cluster === decode?.upstreamCluster);
  if (r.status === 200 && pool !== undefined && pool.role !== 'both' && !fresh.some((e) => e.listener === 'internal')) {
    fresh = (await t.harness.waitForAccessLog(before + 2).catch(() => entries)).slice(before);
  }
  return { r, route: { decode, prefill: fresh.find((e) => e.listener === 'internal') } };
}

/** The decode worker of `revision` (or a `both` one): the non-disaggregated baseline for it. */
function baselineWorker(t: TableTopology, revision: string): TableWorker {
  const w = t.workers.find((x) => x.revision === revision && x.role === 'decode');
  if (w === undefined) throw new Error(`revision ${revision} has no decode or both pool to take a baseline on`);
  return w;
}

async function baseline(t: TableTopology, revision: string, model: string, prompt: string): Promise<number[]> {
  const w = baselineWorker(t, revision);
  await w.sim.resetPrefixCache();
  const r = await post(`${w.sim.url}/v1/completions`, completion(model, prompt));
  if (r.status !== 200) throw new Error(`baseline on ${revision} failed: ${r.status} ${JSON.stringify(r.json)}`);
  return tokenIds(r);
}

/** Revision of the pool behind a cluster in the table, or undefined. */
function revisionOfCluster(t: TableTopology, cluster: string | undefined): string | undefined {
  return t.plan.pools.find((p) => p.cluster === cluster)?.revision;
}

function describeRoute(route: Route): string {
  const leg = (e: AccessLogEntry | undefined) => (e === undefined ? 'none' : `${e.upstreamCluster} (${e.upstreamHost})`);
  return `decode ${leg(route.decode)}, prefill ${leg(route.prefill)}`;
}

/** True when both legs went to clusters of `revision`'s pools in the table and to hosts started for those pools. */
function routedByTable(t: TableTopology, route: Route, revision: string): boolean {
  const ok = (e: AccessLogEntry | undefined) =>
    e !== undefined &&
    revisionOfCluster(t, e.upstreamCluster) === revision &&
    t.workers.some((w) => w.cluster === e.upstreamCluster && w.address === e.upstreamHost);
  return ok(route.decode) && (route.prefill === undefined || ok(route.prefill));
}

interface Bound {
  readonly model: string;
  readonly revision: string;
  readonly session: string;
  readonly caller: Caller;
}

/** A session whose new-request cohort the gate binds to `revision` (found by asking, as a client would). */
async function sessionOn(t: TableTopology, caller: Caller, revision: string): Promise<{ session: string; r: HttpResult; route: Route }> {
  for (let i = 0; i < 200; i++) {
    const session = `demo-session-${i}`;
    const { r, route } = await routed(t, completion(caller.model, PROMPTS[0]), caller.headers(session));
    if (r.status === 200 && r.headers.get(H.revision) === revision) return { session, r, route };
    if (r.status !== 200) throw new Error(`a request for ${caller.model} was refused: ${r.status} ${JSON.stringify(r.json)}`);
  }
  throw new Error(`no session out of 200 landed on ${revision}; is its cohort weight 0?`);
}

/** The revisions a model's rollout sends new sessions to (a candidate only with a weight above 0 that may take traffic). */
function cohortRevisions(table: CompiledRouteTable, m: CompiledModel): string[] {
  const out = [m.stable];
  const candidate = m.candidate === null ? undefined : table.revisions.get(m.candidate);
  if (candidate !== undefined && m.weight > 0 && candidate.verified) out.push(candidate.name);
  return out;
}

/** Run the sample traffic against a table topology and print every step; the checks decide the exit code. */
export async function tableTraffic(t: TableTopology, p: Print): Promise<DemoSummary> {
  const checks: DemoCheck[] = [];
  const check = (name: string, ok: boolean, detail: string) => {
    checks.push({ name, ok, detail });
    p(`${ok ? 'PASS' : 'FAIL'}  ${name}\n      ${detail}`);
  };
  const table = t.gate.policy.current();
  const bound: Bound[] = [];
  let step = 1;
  for (const m of table.models.values()) {
    const caller = callerFor(table, m);
    for (const revision of cohortRevisions(table, m)) {
      p(`${step++}. ${m.name}: a new session in the cohort of revision ${revision} (tenant ${caller.tenant}).`);
      const s = await sessionOn(t, caller, revision);
      const div = firstDivergence(tokenIds(s.r), await baseline(t, revision, m.name, PROMPTS[0]));
      check(
        `${m.name} -> ${revision}: routed to ${revision}'s pools of the table`,
        routedByTable(t, s.route, revision),
        `session ${s.session} -> group ${s.r.headers.get(H.group)}, revision ${s.r.headers.get(H.revision)}; ${describeRoute(s.route)}`,
      );
      check(
        `${m.name} -> ${revision}: tokens equal the non-disaggregated ${revision} baseline`,
        div === -1,
        `${tokenIds(s.r).length} token ids compared, ${div === -1 ? 'identical' : `first divergence at ${div}`}`,
      );
      bound.push({ model: m.name, revision, session: s.session, caller });
    }
  }
  const first = bound[0]!;
  p(`${step++}. Requests kvgate refuses or overrides (model ${first.model}).`);
  await refusals(t, table, first, check, p);
  p(`${step}. Token parity: every prompt through kvgate vs the non-disaggregated baseline of the revision it was bound to.`);
  const rows: ParityRow[] = [];
  let mixed = 0;
  for (const b of bound) {
    for (const prompt of PROMPTS) {
      const { r, route } = await routed(t, completion(b.model, prompt), b.caller.headers(b.session));
      if (r.status !== 200) throw new Error(`request through kvgate failed: ${r.status} ${JSON.stringify(r.json)}`);
      const revision = r.headers.get(H.revision) ?? '';
      if (
        route.prefill !== undefined &&
        revisionOfCluster(t, route.prefill.upstreamCluster) !== revisionOfCluster(t, route.decode?.upstreamCluster)
      )
        mixed++;
      const ids = tokenIds(r);
      const row = {
        prompt,
        revision,
        group: r.headers.get(H.group) ?? '',
        tokens: ids.length,
        divergence: firstDivergence(ids, await baseline(t, revision, b.model, prompt)),
      };
      rows.push(row);
      p(
        `   ${revision}  ${row.tokens} tokens  ${row.divergence === -1 ? 'identical' : `DIVERGES at ${row.divergence}`}  "${prompt.slice(0, 48)}"`,
      );
    }
  }
  const bad = rows.filter((r) => r.divergence !== -1).length;
  const tokens = rows.reduce((n, r) => n + r.tokens, 0);
  check(
    'token parity against the baseline',
    bad === 0 && mixed === 0,
    `${rows.length} requests, ${tokens} token ids compared, ${bad} divergent, ${mixed} with prefill and decode on different revisions`,
  );
  const ok = checks.every((c) => c.ok);
  p('');
  p(
    `Summary: ${checks.filter((c) => c.ok).length}/${checks.length} checks passed; ${rows.length} P/D completions, ${mixed} allowed to mix revisions.`,
  );
  return { checks, parity: rows, ok };
}

type Check = (name: string, ok: boolean, detail: string) => void;

async function refusals(t: TableTopology, table: CompiledRouteTable, b: Bound, check: Check, p: Print): Promise<void> {
  const other = t.plan.pools.find((x) => x.revision !== b.revision && x.role === 'prefill');
  const own = t.plan.pools.find((x) => x.revision === b.revision && x.role === 'prefill');
  if (other !== undefined && own !== undefined) {
    await showNaivePairing(t, b, other.revision, p);
    const hop = await crossGroupHop(t, table, b, own.cluster, other.cluster);
    const reason = hop.headers.get(H.rejectReason);
    check(
      `cross-group prefill leg (${b.revision} contract, cluster ${other.cluster} of ${other.revision}) refused with 409 mixed_revision`,
      hop.status === 409 && reason === 'mixed_revision',
      `HTTP ${hop.status} ${reason}: ${String(hop.json?.error?.message ?? JSON.stringify(hop.json)).slice(0, 220)}`,
    );
  } else {
    p(`   (no cross-group prefill leg to try: the table has no prefill pools of two revisions)`);
  }
  const forged = await post(
    `${t.publicUrl}/v1/completions`,
    { ...completion(b.model, PROMPTS[2]), kv_transfer_params: { do_remote_prefill: true } },
    b.caller.headers(),
  );
  check(
    'client-sent kv_transfer_params refused',
    forged.status === 400 && forged.headers.get(H.rejectReason) === 'kv_params_forbidden',
    `HTTP ${forged.status} ${forged.headers.get(H.rejectReason)}: ${String(forged.json?.error?.message ?? '')}`,
  );
  const target = t.workers.find((w) => w.revision !== b.revision && w.role === 'decode') ?? t.workers.find((w) => w.role === 'decode')!;
  const { r: steer, route } = await routed(t, completion(b.model, PROMPTS[2]), {
    ...b.caller.headers(b.session),
    [H.decodeCluster]: target.cluster,
    [H.decodeEndpoint]: target.address,
  });
  check(
    'client-forged routing headers cannot steer the request',
    steer.status === 200 && steer.headers.get(H.revision) === b.revision && routedByTable(t, route, b.revision),
    `sent x-kvgate-decode-cluster: ${target.cluster}; served by revision ${steer.headers.get(H.revision)}, ${describeRoute(route)}`,
  );
  if (table.tenancy.required && table.tenancy.default === undefined && table.tenancy.source.header !== undefined) {
    const noTenant = await post(`${t.publicUrl}/v1/completions`, completion(b.model, PROMPTS[2]));
    check(
      'a request without a tenant is refused (401 tenant_required)',
      noTenant.status === 401 && noTenant.headers.get(H.rejectReason) === 'tenant_required',
      `HTTP ${noTenant.status} ${noTenant.headers.get(H.rejectReason)}: ${String(noTenant.json?.error?.message ?? '')}`,
    );
  }
}

/**
 * What kvgate prevents, shown (not checked: whether vLLM's handshake catches it depends on the two descriptors): a
 * naive P/D router pairs `from`'s prefill worker with the bound revision's decode worker.
 */
async function showNaivePairing(t: TableTopology, b: Bound, from: string, p: Print): Promise<void> {
  const pre = t.workers.find((w) => w.revision === from && w.role === 'prefill')!;
  const dec = baselineWorker(t, b.revision);
  const n = await naivePairing(pre.sim, dec.sim, completion(b.model, PROMPTS[1]), () => baseline(t, b.revision, b.model, PROMPTS[1]));
  const outcome = !n.handshakePassed
    ? "vLLM's NIXL handshake refused it (the two revisions' compatibility hashes differ): a loud failure after routing"
    : n.divergence === -1
      ? `the handshake passed and the ${n.tokens} tokens equal the baseline`
      : `the handshake passed and the text silently changed: it diverges from the ${b.revision} baseline at token ${n.divergence} of ${n.tokens}`;
  p(`   Without kvgate, a naive P/D router pairing ${from} prefill with ${b.revision} decode: ${outcome}.`);
}

/**
 * A prefill leg that tries to leave its group: a decode sidecar holding a contract for `b.revision` names another
 * revision's prefill cluster on Envoy's internal listener. The gate must refuse it before any prefill runs.
 */
async function crossGroupHop(
  t: TableTopology,
  table: CompiledRouteTable,
  b: Bound,
  ownPrefill: string,
  otherPrefill: string,
): Promise<HttpResult> {
  const requestId = randomUUID();
  const fingerprint = table.revisions.get(b.revision)!.fingerprint;
  const tenantScope = `tenant:${b.caller.tenant}`;
  const now = Date.now();
  const decode = t.workers.find((w) => w.revision === b.revision && w.role === 'decode')!;
  const prefill = t.workers.find((w) => w.cluster === ownPrefill)!;
  const contract = mintContract(
    {
      requestId,
      groupId: groupIdOf(fingerprint, tenantScope),
      fingerprint,
      tenantScope,
      tenant: b.caller.tenant,
      model: b.model,
      revision: b.revision,
      adapter: table.revisions.get(b.revision)!.adapter,
      cacheSaltDigest: '0'.repeat(64),
      promptDigest: '0'.repeat(64),
      issuedAtMs: now,
      expiresAtMs: now + 30_000,
      decode: { cluster: decode.cluster, endpoint: decode.address },
      prefill: { cluster: ownPrefill, endpoint: prefill.address },
    },
    t.keys,
  );
  return post(`${t.internalUrl}/v1/completions`, completion(b.model, PROMPTS[1], 1), {
    'x-request-id': requestId,
    [H.contract]: contract,
    [H.prefillCluster]: otherPrefill,
  });
}
