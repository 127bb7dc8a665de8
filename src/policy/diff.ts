/**
 * `kvgate policy diff OLD NEW`: what a route-table change does to routing, in words a policy author reviews before
 * a reload: revisions added, removed or redeclared (and which fingerprinted fields changed), cohort moves, pools
 * drained, tenants, the fallback chain. Pure: two compiled tables in, lines out.
 */
import { canonicalJson } from '../compat/canonical-json.js';
import { describeFingerprintDiff } from '../compat/fingerprint.js';
import type { CompiledModel, CompiledPool, CompiledRevision, CompiledRouteTable } from './compile.js';
import { diffSettings, describeVerification, leafChanges, type DiffArea } from './diff-settings.js';
import { rolloutStatus } from './rollout-status.js';
import { sharedCanaries } from './semantic-trust.js';

export interface DiffLine {
  readonly area: DiffArea;
  readonly text: string;
}

const short = (fp: string): string => `${fp.slice(0, 12)}…`;

/** Every routing-relevant difference from `before` to `after`, grouped by area in a fixed order. */
export function diffRouteTables(before: CompiledRouteTable, after: CompiledRouteTable): DiffLine[] {
  const out: DiffLine[] = [];
  const add = (area: DiffArea) => (text: string) => out.push({ area, text });
  diffRevisions(before, after, add('revisions'));
  diffModels(before, after, add('models'));
  diffPools(before, after, add('pools'));
  diffSettings(before, after, add);
  return out;
}

/** The diff as text: one heading per area, `- ` per change, or a single line when nothing routes differently. */
export function formatRouteTableDiff(lines: readonly DiffLine[]): string {
  if (lines.length === 0) return 'no routing changes\n';
  const areas: DiffArea[] = ['revisions', 'models', 'pools', 'tenancy', 'fallback', 'settings'];
  return areas
    .filter((a) => lines.some((l) => l.area === a))
    .map(
      (a) =>
        `${a}:\n${lines
          .filter((l) => l.area === a)
          .map((l) => `  - ${l.text}`)
          .join('\n')}\n`,
    )
    .join('');
}

function diffRevisions(before: CompiledRouteTable, after: CompiledRouteTable, add: (t: string) => void): void {
  for (const [name, r] of after.revisions) {
    const old = before.revisions.get(name);
    if (old === undefined) {
      add(`revision ${name} added (fingerprint ${short(r.fingerprint)}${r.adapter === null ? '' : `, adapter ${r.adapter}`})`);
      continue;
    }
    redeclared(old, r, add);
    if (old.fingerprint !== r.fingerprint) {
      carriedOver(old, r, add);
      redeclaredUnderLivePools(before, after, name, add);
    }
    if (canonicalJson(old.verification) !== canonicalJson(r.verification)) {
      add(`revision ${name} verification: ${describeVerification(old.verification)} -> ${describeVerification(r.verification)}`);
    }
  }
  for (const name of before.revisions.keys()) {
    if (!after.revisions.has(name))
      add(`revision ${name} removed: bindings to it are no longer honoured; those sessions are bound afresh by cohort`);
  }
}

/**
 * A redeclaration that keeps what belonged to the old declaration: canary digests (a copied descriptor) let a worker
 * still running the old declaration pass its sidecar's check as the new one, and a verification record is evidence
 * about the old fingerprint. Neither is visible to `policy check`, which sees one table; the diff sees both.
 */
function carriedOver(old: CompiledRevision, r: CompiledRevision, add: (t: string) => void): void {
  const stale = sharedCanaries(old.descriptor, r.descriptor);
  if (stale.length > 0) {
    add(
      `revision ${r.name} keeps the old declaration's ${stale.map((c) => c.canary).join(', ')} canary digest${stale.length > 1 ? 's' : ''} ` +
        `although its ${stale.map((c) => c.what).join(', ')} changed: a worker still running the old declaration passes its sidecar's ` +
        'check as the new one; record the canaries from a worker of the new declaration (kvgate verify --record, or kvgate fingerprint --worker)',
    );
  }
  const v = r.verification;
  if (v.required && v.verified && canonicalJson(old.verification) === canonicalJson(v)) {
    add(
      `revision ${r.name} keeps the verification record of its old declaration (${describeVerification(v)}): that evidence is for ` +
        `fingerprint ${short(old.fingerprint)}, not the new one; run kvgate verify against the new declaration and record its evidence`,
    );
  }
}

/**
 * A revision redeclared while the same pools serve it: the gate compares each sidecar's reported fingerprint with the
 * table's, so every worker still running the old declaration stops taking this revision's traffic at the reload, and
 * a worker redeployed first is refused until the table follows. Either order empties the revision for a while; the
 * order that does not is a new revision with its own pools under the rollout weight. Said here because the line above
 * ("bindings... prefix caches start cold") reads like a cache effect, not an outage.
 */
function redeclaredUnderLivePools(before: CompiledRouteTable, after: CompiledRouteTable, name: string, add: (t: string) => void): void {
  const kept = [...after.pools.values()]
    .filter((p) => p.revision === name && before.pools.get(p.name)?.revision === name)
    .map((p) => p.name);
  if (kept.length === 0) return;
  const live = [...after.models.values()].filter((m) => m.stable === name || (m.candidate === name && m.weight > 0)).map((m) => m.name);
  add(
    `revision ${name} is redeclared in place under the same pools (${kept.join(', ')}): from this reload on, every endpoint whose ` +
      'worker and sidecar still run the old declaration is unverified for it and takes no traffic, until each is redeployed with ' +
      `the new one${live.length === 0 ? '' : `; ${live.join(', ')} route${live.length === 1 ? 's' : ''} new sessions to it, so that is an outage of this revision`}. ` +
      'To change workers without one, declare them as a new revision with their own pools and move the rollout weight (docs/operator-guide.md section 16)',
  );
}

/**
 * Pure: the lines of `diffRouteTables` that say a revision was redeclared in place under its pools (empty: none). The
 * gate logs them at warn level when it applies such a reload (src/gate/policy-store.ts).
 */
export function redeclaredInPlace(before: CompiledRouteTable, after: CompiledRouteTable): string[] {
  const out: string[] = [];
  for (const [name, r] of after.revisions) {
    const old = before.revisions.get(name);
    if (old !== undefined && old.fingerprint !== r.fingerprint) redeclaredUnderLivePools(before, after, name, (t) => out.push(t));
  }
  return out;
}

function redeclared(old: CompiledRevision, r: CompiledRevision, add: (t: string) => void): void {
  if (old.fingerprint !== r.fingerprint) {
    const fields = describeFingerprintDiff(old.descriptor, r.descriptor, { a: 'old', b: 'new' });
    add(
      `revision ${r.name} redeclared with another fingerprint (${short(old.fingerprint)} -> ${short(r.fingerprint)}): ${fields.join('; ')}. ` +
        'It is a new compatibility group: bindings to the old declaration are no longer honoured and its prefix caches start cold',
    );
    return;
  }
  const outside = leafChanges(old.descriptor, r.descriptor);
  if (outside.length > 0) add(`revision ${r.name} descriptor changed outside the fingerprint (same group): ${outside.join('; ')}`);
  if (old.transfer.allowed !== r.transfer.allowed) {
    add(
      `revision ${r.name} ${r.transfer.allowed ? 'may now be disaggregated' : `may no longer be disaggregated (${r.transfer.reasons.join('; ')})`}`,
    );
  }
}

function diffModels(before: CompiledRouteTable, after: CompiledRouteTable, add: (t: string) => void): void {
  const effective = (t: CompiledRouteTable, model: string): number =>
    rolloutStatus(t).find((s) => s.model === model && s.role === 'candidate')?.effectivePercent ?? 0;
  for (const [name, m] of after.models) {
    const old = before.models.get(name);
    if (old === undefined) {
      add(
        `model ${name} added: stable ${m.stable}${m.candidate === null ? '' : `, candidate ${m.candidate} at ${m.weight}%`}; tenants ${m.tenants.join(', ')}`,
      );
      continue;
    }
    tenantChanges(`model ${name}`, old.tenants, m.tenants, add);
    rolloutChanges(name, old, m, add);
    const [e0, e1] = [effective(before, name), effective(after, name)];
    if (old.candidate === m.candidate && old.weight === m.weight && e0 !== e1 && m.candidate !== null) {
      add(
        e1 > e0
          ? `${m.candidate} cohort now receives traffic (${e0}% -> ${e1}% effective, verification passed): about ${e1 - e0}% of new sessions move to ${m.candidate}; sessions holding a binding stay`
          : `${m.candidate} cohort stops receiving traffic (${e0}% -> ${e1}% effective, not verified): about ${e0 - e1}% of new sessions move back to ${m.stable}; bindings to ${m.candidate} are no longer honoured`,
      );
    }
  }
  for (const name of before.models.keys())
    if (!after.models.has(name)) add(`model ${name} removed: its requests are refused with 404 unknown_model`);
}

function rolloutChanges(name: string, old: CompiledModel, m: CompiledModel, add: (t: string) => void): void {
  if (old.stable !== m.stable) {
    const stays = m.candidate === old.stable;
    add(
      `model ${name} stable ${old.stable} -> ${m.stable}: new sessions outside the candidate cohort go to ${m.stable}; ` +
        (stays
          ? `sessions holding a binding to ${old.stable} stay (it is now the candidate)`
          : `bindings to ${old.stable} are no longer honoured (it left the rollout)`),
    );
  }
  if (old.candidate === m.candidate) {
    if (m.candidate !== null && old.weight !== m.weight) add(cohortMove(m.candidate, m.stable, old.weight, m.weight));
    return;
  }
  if (old.candidate !== null && m.candidate !== null) {
    add(
      `model ${name} candidate ${old.candidate} (${old.weight}%) -> ${m.candidate} (${m.weight}%): about ${m.weight}% of new sessions go to ${m.candidate}; bindings to ${old.candidate} are ${m.stable === old.candidate ? 'kept (it is now stable)' : 'no longer honoured'}`,
    );
  } else if (m.candidate !== null) {
    add(
      `model ${name} candidate ${m.candidate} added at ${m.weight}%: about ${m.weight}% of new sessions go to ${m.candidate}; sessions holding a binding stay`,
    );
  } else if (old.candidate !== null) {
    const promoted = m.stable === old.candidate;
    add(
      `model ${name} candidate ${old.candidate} removed (was ${old.weight}%)` +
        (promoted
          ? `: it is now stable and takes every new session`
          : `: its sessions move to ${m.stable}; bindings to ${old.candidate} are no longer honoured`),
    );
  }
}

/** "llama-b cohort 10% -> 25%: about 15% of new sessions move to llama-b; sessions holding a binding stay". */
export function cohortMove(candidate: string, stable: string, from: number, to: number): string {
  const delta = Math.abs(to - from);
  const where = to > from ? `move to ${candidate}` : `move back to ${stable}`;
  return `${candidate} cohort ${from}% -> ${to}%: about ${delta}% of new sessions ${where}; sessions holding a binding stay`;
}

/**
 * A model's tenants are who may use it at all: one removed is refused 403. A pool's are only who it serves: one
 * removed there may still be served by another pool or revision (a tenant kept off a candidate's pools stays on
 * stable), so the line says where to look rather than claim a refusal.
 */
export function tenantChanges(
  what: string,
  before: readonly string[],
  after: readonly string[],
  add: (t: string) => void,
  scope: 'model' | 'pool' = 'model',
): void {
  const added = after.filter((t) => !before.includes(t));
  const removed = before.filter((t) => !after.includes(t));
  if (added.length > 0) add(`${what}: tenants added: ${added.join(', ')}`);
  if (removed.length === 0) return;
  const then =
    scope === 'model'
      ? 'their requests are refused with 403'
      : `this pool takes none of their requests: another pool or revision that serves them does, else they are refused with 403; kvgate explain --tenant ${removed.find((t) => t !== '*') ?? 'T'} shows which`;
  add(`${what}: tenants removed: ${removed.join(', ')} (${then})`);
}

function diffPools(before: CompiledRouteTable, after: CompiledRouteTable, add: (t: string) => void): void {
  for (const [name, p] of after.pools) {
    const old = before.pools.get(name);
    if (old === undefined)
      add(
        `pool ${name} added: role ${p.role}, revision ${p.revision}, cluster ${p.cluster}, ${p.endpoints.length} endpoint(s)${p.draining ? ', draining' : ''}`,
      );
    else poolChanges(old, p, add);
  }
  for (const [name, p] of before.pools) {
    if (!after.pools.has(name))
      add(`pool ${name} removed (role ${p.role}, revision ${p.revision}): requests in flight there finish; no new ones go there`);
  }
}

function poolChanges(old: CompiledPool, p: CompiledPool, add: (t: string) => void): void {
  const n = `pool ${p.name}`;
  if (!old.draining && p.draining) add(`${n} now draining: it takes no new requests; requests in flight there finish`);
  if (old.draining && !p.draining) add(`${n} no longer draining: it takes new requests again`);
  if (old.revision !== p.revision) add(`${n} revision ${old.revision} -> ${p.revision}: it joins another compatibility group`);
  if (old.role !== p.role) add(`${n} role ${old.role} -> ${p.role}`);
  if (old.cluster !== p.cluster) add(`${n} Envoy cluster ${old.cluster} -> ${p.cluster}`);
  if (old.priorityScheduling !== p.priorityScheduling) {
    add(
      p.priorityScheduling === true
        ? `${n} schedulingPolicy fcfs -> priority: tenants' priorities now reach its workers (they must run vllm serve --scheduling-policy priority)`
        : `${n} schedulingPolicy priority -> fcfs: requests routed through it now run at priority 0`,
    );
  }
  if (old.maxInFlightPerEndpoint !== p.maxInFlightPerEndpoint)
    add(`${n} maxInFlightPerEndpoint ${old.maxInFlightPerEndpoint} -> ${p.maxInFlightPerEndpoint}`);
  const was = old.endpoints.map((e) => e.address);
  const now = p.endpoints.map((e) => e.address);
  const added = now.filter((a) => !was.includes(a));
  const removed = was.filter((a) => !now.includes(a));
  if (added.length > 0) add(`${n} endpoints added: ${added.join(', ')}`);
  if (removed.length > 0) add(`${n} endpoints removed: ${removed.join(', ')} (requests in flight there finish)`);
  tenantChanges(n, old.tenants, p.tenants, add, 'pool');
}
