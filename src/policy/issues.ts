/**
 * Route-table problems as values a person can act on: where (file, path, line), what is wrong, how to fix it.
 *
 * Every stage of loading (syntax, schema, file references, semantic checks) reports `PolicyIssue`s, so a policy
 * author sees all of them at once, one line each, instead of fixing one error per run.
 */

/** One problem in a route table. `severity: 'warning'` never blocks a load; `'error'` always does. */
export interface PolicyIssue {
  readonly file: string;
  /** Where in the table, e.g. `pools[2].revision` or `models.llama-3-8b.rollout.weight`; `(root)` for the document. */
  readonly path: string;
  /** What is wrong, in plain words. */
  readonly message: string;
  /** How to fix it. */
  readonly fix: string;
  readonly severity: 'error' | 'warning';
  /** 1-based position in the source text, when known. */
  readonly line?: number;
  readonly column?: number;
}

export type PathSegment = string | number;

const PLAIN_KEY = /^[A-Za-z0-9_*-]+$/;

/** Render a path the way a policy author reads it: `pools[2].revision`, `revisions["a.b"].descriptor`. */
export function formatPath(path: readonly PathSegment[]): string {
  if (path.length === 0) return '(root)';
  let out = '';
  for (const seg of path) {
    if (typeof seg === 'number') out += `[${seg}]`;
    else if (PLAIN_KEY.test(seg)) out += out === '' ? seg : `.${seg}`;
    else out += `[${JSON.stringify(seg)}]`;
  }
  return out;
}

/** Build an issue; `severity` defaults to `error`. */
export function issue(
  file: string,
  path: readonly PathSegment[] | string,
  message: string,
  fix: string,
  extra: { severity?: 'error' | 'warning'; line?: number; column?: number } = {},
): PolicyIssue {
  const base = { file, path: typeof path === 'string' ? path : formatPath(path), message, fix };
  return Object.freeze({
    ...base,
    severity: extra.severity ?? 'error',
    ...(extra.line === undefined ? {} : { line: extra.line }),
    ...(extra.column === undefined ? {} : { column: extra.column }),
  });
}

/** One line per issue: `file:line:col: error: path: message. Fix: fix`. */
export function formatPolicyIssue(i: PolicyIssue): string {
  const where = i.line === undefined ? i.file : `${i.file}:${i.line}${i.column === undefined ? '' : `:${i.column}`}`;
  const msg = i.message.replace(/\.$/, '');
  return `${where}: ${i.severity}: ${i.path}: ${msg}. Fix: ${i.fix}`;
}

/** All issues, one line each, errors first (stable within a severity). */
export function formatPolicyIssues(issues: readonly PolicyIssue[]): string {
  const errors = issues.filter((i) => i.severity === 'error');
  const warnings = issues.filter((i) => i.severity === 'warning');
  return [...errors, ...warnings].map(formatPolicyIssue).join('\n');
}

/** Whether a load must be rejected (warnings never block it). */
export function hasErrors(issues: readonly PolicyIssue[]): boolean {
  return issues.some((i) => i.severity === 'error');
}

/** "Did you mean" helpers are shared with every other config kvgate reads. */
export { didYouMean as closestMatch, editDistance } from '../config-issues.js';

/** `one of: a, b, c` for fixes; long lists are cut so messages stay one line. */
export function listOf(names: Iterable<string>, max = 8): string {
  const all = [...names];
  if (all.length === 0) return '(none declared)';
  const shown = all.slice(0, max).join(', ');
  return all.length > max ? `${shown}, ... (${all.length - max} more)` : shown;
}
