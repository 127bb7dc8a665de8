/**
 * The operator's own route table, read for the local topology (`npm run testbed -- demo --policy FILE`): checked with
 * the product's loader exactly as `kvgate policy check` and the gate check it (every issue with file, line, path and
 * fix), then turned into a plan of what to start: which revisions (with which descriptor), which pools, how many
 * simulated workers each. The user's file is only read; what runs is a runtime copy (table-topology.ts).
 *
 * One relaxation, said out loud: a revision whose descriptor has no recorded canaries would make the table invalid
 * (src/policy/semantic-trust.ts). Here its canaries are recorded from an honest simulator of that descriptor, as an
 * operator records them from a known-good worker, and the plan's notes say so; every other error stops the run.
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { parse as parseYaml } from 'yaml';
import type { ConfigIssue } from '../../src/config/issues.js';
import { formatIssue } from '../../src/config/issues.js';
import { checkPolicyFile, formatCheckReport } from '../../src/policy/check-report.js';
import type { CompiledRouteTable } from '../../src/policy/compile.js';
import { loadRouteTable } from '../../src/policy/load.js';
import type { PoolRole } from '../../src/policy/schema.js';
import { missingCanaries, recordCanariesFix } from '../../src/policy/semantic-trust.js';
import { simCanaryDigests } from '../sim/recorded-canaries.js';

/** Workers started per pool when the table lists more endpoints (or sizes a selector pool larger). */
export const DEFAULT_MAX_WORKERS_PER_POOL = 2;

export interface PlannedRevision {
  readonly name: string;
  /** The descriptor the sims and sidecars run (the table's, plus canaries when they were recorded here). */
  readonly descriptor: Record<string, unknown>;
  /** True when the table had no canaries for it and they were recorded from a simulator at start. */
  readonly canariesRecorded: boolean;
  /** The model name its workers serve (`--served-model-name`): the served model whose rollout names it. */
  readonly servedModelName: string;
}

export interface PlannedPool {
  readonly name: string;
  readonly cluster: string;
  readonly role: PoolRole;
  readonly revision: string;
  /** Simulated workers (each with its sidecar) to start for it. */
  readonly workers: number;
}

export interface TablePlan {
  /** The operator's file, absolute. Never written. */
  readonly file: string;
  /** The table as written (parsed, before schema defaults): the runtime copy starts from it. */
  readonly doc: Readonly<Record<string, unknown>>;
  readonly table: CompiledRouteTable;
  /** Only revisions that have pools: nothing else could take a request. */
  readonly revisions: readonly PlannedRevision[];
  readonly pools: readonly PlannedPool[];
  /** What the local run does differently from a deployment of this table, one line each. */
  readonly notes: readonly string[];
}

export type PlanResult = { readonly ok: true; readonly plan: TablePlan } | { readonly ok: false; readonly report: string };

export interface PlanOptions {
  readonly maxWorkersPerPool?: number;
}

/** Read, check and plan the operator's table. `report` is `kvgate policy check`'s text when it cannot be used. */
export async function planFromTable(file: string, options: PlanOptions = {}): Promise<PlanResult> {
  const abs = path.resolve(file);
  const checked = await checkPolicyFile(abs);
  let table: CompiledRouteTable;
  const notes: string[] = [];
  notes.push(...checked.report.warnings.map((w) => `policy check: ${formatIssue(w)}`));
  if (checked.ok) {
    table = checked.table;
  } else {
    // Only "no recorded canaries" errors may pass (they are recorded below); anything else is the operator's to fix.
    if (checked.report.errors.length === 0 || !checked.report.errors.every(isCanaryIssue)) {
      return { ok: false, report: formatCheckReport(checked.report) };
    }
    const unchecked = await loadRouteTable(abs, { semantic: false });
    if (!unchecked.ok) return { ok: false, report: formatCheckReport(checked.report) };
    table = unchecked.value;
  }
  const doc = parseYaml(await readFile(abs, 'utf8')) as Record<string, unknown>;
  const max = options.maxWorkersPerPool ?? DEFAULT_MAX_WORKERS_PER_POOL;
  const pools = [...table.pools.values()].map((p): PlannedPool => {
    const wanted = p.discovery === null ? p.endpoints.length : p.discovery.kubernetes.expectedEndpoints;
    const workers = Math.min(wanted, max);
    if (p.discovery !== null) {
      notes.push(
        `pool ${p.name}: found by Kubernetes selector in a deployment; here ${workers} simulated worker(s) listed as its endpoints`,
      );
    } else if (workers < wanted) {
      notes.push(`pool ${p.name}: ${wanted} endpoints in the table, ${workers} simulated here (--max-workers-per-pool)`);
    }
    return { name: p.name, cluster: p.cluster, role: p.role, revision: p.revision, workers };
  });
  const routed = new Set(pools.map((p) => p.revision));
  const revisions: PlannedRevision[] = [];
  for (const [name, rev] of table.revisions) {
    if (!routed.has(name)) continue;
    const servedModelName = servedModelOf(table, name);
    const declared = JSON.parse(JSON.stringify(rev.descriptor)) as Record<string, unknown>;
    const missing = missingCanaries(rev.descriptor.canaries);
    if (missing.length === 0 || rev.trust === 'declared-only') {
      revisions.push({ name, descriptor: declared, canariesRecorded: false, servedModelName });
      continue;
    }
    const { canaries: _none, ...rest } = declared;
    const canaries = await simCanaryDigests(rest as never, servedModelName);
    revisions.push({ name, descriptor: { ...rest, canaries }, canariesRecorded: true, servedModelName });
    notes.push(
      `revision ${name}: no recorded canaries (${missing.join(', ')}) in the table; recorded here from a simulator of its ` +
        'descriptor. In a deployment record them from a known-good worker (kvgate verify --record or kvgate fingerprint --worker)',
    );
  }
  const tenancy = table.tenancy.source;
  if (tenancy.metadata !== undefined) {
    notes.push(
      `tenancy.source.metadata (${tenancy.metadata.namespace}) is set by an Envoy filter before ext_proc, which the local ` +
        'harness does not run; the runtime copy reads the tenant from the header x-tenant-id instead',
    );
  }
  return { ok: true, plan: { file: abs, doc, table, revisions, pools, notes } };
}

/** The error `semantic-trust.ts` gives a revision with pools and no recorded canaries (identified by its own fix text). */
function isCanaryIssue(i: ConfigIssue): boolean {
  const m = /^revisions(?:\.([A-Za-z0-9_*-]+)|\["(.+?)"\])/.exec(i.path);
  const name = m?.[1] ?? m?.[2];
  return name !== undefined && i.fix === recordCanariesFix(name);
}

/**
 * The served model a revision's workers answer to: the model whose rollout names it (stable first), else one whose
 * fallback routes through it, else the first model. vLLM serves one name per worker here (the simulator's
 * `servedModelName`).
 */
function servedModelOf(table: CompiledRouteTable, revision: string): string {
  const models = [...table.models.values()];
  const byRollout = models.find((m) => m.stable === revision) ?? models.find((m) => m.candidate === revision);
  if (byRollout !== undefined) return byRollout.name;
  return models[0]?.name ?? revision;
}
