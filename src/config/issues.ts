/**
 * Configuration problems as values a person can act on: where (file, path, line), what is wrong, how to fix it.
 * One type for every file kvgate reads (route table, gate and sidecar configs, descriptors, prompt sets, the
 * simulator's config): every stage of loading (syntax, schema, file references, semantic checks) reports
 * `ConfigIssue`s, so an author sees all of them at once, one line each, instead of fixing one error per run.
 */

/** One problem in a configuration file. `severity: 'warning'` never blocks a load; `'error'` always does. */
export interface ConfigIssue {
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
): ConfigIssue {
  const base = { file, path: typeof path === 'string' ? path : formatPath(path), message, fix };
  return Object.freeze({
    ...base,
    severity: extra.severity ?? 'error',
    ...(extra.line === undefined ? {} : { line: extra.line }),
    ...(extra.column === undefined ? {} : { column: extra.column }),
  });
}

/** One line per issue: `file:line:col: error: path: message. Fix: fix`. */
export function formatIssue(i: ConfigIssue): string {
  const where = i.line === undefined ? i.file : `${i.file}:${i.line}${i.column === undefined ? '' : `:${i.column}`}`;
  const msg = i.message.replace(/\.$/, '');
  return `${where}: ${i.severity}: ${i.path}: ${msg}. Fix: ${i.fix}`;
}

/** All issues, one line each, errors first (stable within a severity). */
export function formatIssues(issues: readonly ConfigIssue[]): string {
  const errors = issues.filter((i) => i.severity === 'error');
  const warnings = issues.filter((i) => i.severity === 'warning');
  return [...errors, ...warnings].map(formatIssue).join('\n');
}

/** Whether a load must be rejected (warnings never block it). */
export function hasErrors(issues: readonly ConfigIssue[]): boolean {
  return issues.some((i) => i.severity === 'error');
}

/** Levenshtein distance (case-insensitive), for "did you mean" suggestions. */
export function editDistance(a: string, b: string): number {
  const prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    let diag = prev[0]!;
    prev[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const up = prev[j]!;
      const cost = a[i - 1]!.toLowerCase() === b[j - 1]!.toLowerCase() ? 0 : 1;
      prev[j] = Math.min(up + 1, prev[j - 1]! + 1, diag + cost);
      diag = up;
    }
  }
  return prev[b.length]!;
}

/** The closest known word, if it is close enough to be a plausible typo (`endpoinst` -> `endpoints`). */
export function closestMatch(word: string, known: Iterable<string>): string | undefined {
  let best: string | undefined;
  let bestDistance = Infinity;
  for (const k of known) {
    const d = editDistance(word, k);
    if (d < bestDistance) {
      best = k;
      bestDistance = d;
    }
  }
  const limit = Math.max(1, Math.min(3, Math.floor(word.length / 3)));
  return bestDistance <= limit ? best : undefined;
}

/** `one of: a, b, c` for fixes; long lists are cut so messages stay one line. */
export function listOf(names: Iterable<string>, max = 8): string {
  const all = [...names];
  if (all.length === 0) return '(none declared)';
  const shown = all.slice(0, max).join(', ');
  return all.length > max ? `${shown}, ... (${all.length - max} more)` : shown;
}
