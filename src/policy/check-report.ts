/**
 * `kvgate policy check FILE`: the verdict a policy author (or CI) acts on. Every issue at once with its file, line,
 * path, what and fix; warnings never fail the check; a valid table also gets a one-screen summary of what it routes
 * (revisions, pools, the rollout as the gate applies it, the fallback chain). `checkPolicyFile` is the only
 * function with I/O (through `loadRouteTable`).
 */
import { chainText } from './diff-settings.js';
import type { CompiledRouteTable } from './compile.js';
import { formatIssue, type ConfigIssue } from '../config/issues.js';
import { loadRouteTable, type LoadOptions } from './load.js';
import { formatRolloutStatus, rolloutStatus } from './rollout-status.js';

export interface PolicySummary {
  readonly revisions: number;
  readonly pools: number;
  readonly models: number;
  readonly drainingPools: readonly string[];
  readonly rollout: readonly string[];
  readonly fallback: string;
}

export interface PolicyCheckReport {
  readonly file: string;
  readonly ok: boolean;
  readonly errors: readonly ConfigIssue[];
  readonly warnings: readonly ConfigIssue[];
  /** Present when the table is valid. */
  readonly summary?: PolicySummary;
}

export type CheckedTable =
  | { readonly ok: true; readonly table: CompiledRouteTable; readonly report: PolicyCheckReport }
  | { readonly ok: false; readonly report: PolicyCheckReport };

export interface CheckOptions extends LoadOptions {
  /**
   * Still compile a table that fails only the semantic checks (for `kvgate explain --allow-invalid`: see what the
   * decision core's own guards would do with a table the gate refuses to load). `report.ok` stays false.
   */
  readonly allowInvalid?: boolean;
}

/** Load, check and compile a route table file, as the gate would before serving it. */
export async function checkPolicyFile(file: string, options: CheckOptions = {}): Promise<CheckedTable> {
  const { allowInvalid, ...load } = options;
  const loaded = await loadRouteTable(file, load);
  if (!loaded.ok) {
    const errors = loaded.error.filter((i) => i.severity === 'error');
    const report = { file, ok: false, errors, warnings: loaded.error.filter((i) => i.severity === 'warning') };
    if (allowInvalid !== true) return { ok: false, report };
    const unchecked = await loadRouteTable(file, { ...load, semantic: false });
    return unchecked.ok ? { ok: true, table: unchecked.value, report } : { ok: false, report };
  }
  const table = loaded.value;
  return { ok: true, table, report: { file, ok: true, errors: [], warnings: loaded.value.warnings, summary: summaryOf(table) } };
}

/** What a valid table routes, in a few numbers and lines. */
export function summaryOf(t: CompiledRouteTable): PolicySummary {
  return {
    revisions: t.revisions.size,
    pools: t.pools.size,
    models: t.models.size,
    drainingPools: [...t.pools.values()].filter((p) => p.draining).map((p) => p.name),
    rollout: formatRolloutStatus(rolloutStatus(t)),
    fallback: chainText(t.fallback),
  };
}

/** The report for people: errors, then warnings, then (when valid) the summary. */
export function formatCheckReport(r: PolicyCheckReport): string {
  const lines = [...r.errors, ...r.warnings].map(formatIssue);
  if (!r.ok) {
    lines.push(
      `${r.file}: INVALID: ${count(r.errors.length, 'error')}${r.warnings.length > 0 ? `, ${count(r.warnings.length, 'warning')}` : ''}; the gate would keep the table it has`,
    );
    return `${lines.join('\n')}\n`;
  }
  const s = r.summary!;
  lines.push(
    `${r.file}: OK${r.warnings.length > 0 ? ` with ${count(r.warnings.length, 'warning')}` : ''}: ${count(s.revisions, 'revision')}, ${count(s.pools, 'pool')}, ${count(s.models, 'served model')}`,
    ...s.rollout.map((l) => `  rollout: ${l}`),
    ...(s.drainingPools.length > 0 ? [`  draining pools: ${s.drainingPools.join(', ')}`] : []),
    `  fallback: ${s.fallback}`,
  );
  return `${lines.join('\n')}\n`;
}

const count = (n: number, word: string): string => `${n} ${word}${n === 1 ? '' : 's'}`;
