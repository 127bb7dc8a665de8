/**
 * The outcome of one prompt, and the run's verdict over all of them. Pure.
 *
 * "Verified" is deliberately hard to earn: every prompt must have returned token ids on both sides, every pair must
 * be equal, and every via response must have been bound to the same revision. A run whose responses were bound to
 * two revisions proves nothing about either, even if each one matched.
 */
import { compareTokens, positionsCompared, textContext, type Comparison, type TextContext } from './compare.js';
import type { Generated } from './token-ids.js';

/** One endpoint's answer to one prompt. */
export type Reply =
  | {
      readonly ok: true;
      readonly status: number;
      readonly generated: Generated;
      /** `x-kvgate-revision` / `x-kvgate-group` on the response, null when absent. */
      readonly revision: string | null;
      readonly group: string | null;
    }
  | { readonly ok: false; readonly status: number | null; readonly error: string };

export interface PromptOutcome {
  readonly id: string;
  readonly kind: 'completion' | 'chat';
  readonly via: Reply;
  readonly baseline: Reply;
  /** Present when both replies carried ids. */
  readonly comparison?: Comparison;
  /** Present when the ids differ: where the texts part. */
  readonly context?: TextContext;
}

/** Pair two replies into an outcome, comparing ids when both sides have them. */
export function toOutcome(id: string, kind: PromptOutcome['kind'], via: Reply, baseline: Reply): PromptOutcome {
  if (!via.ok || !baseline.ok) return { id, kind, via, baseline };
  const comparison = compareTokens(via.generated.ids, baseline.generated.ids);
  if (comparison.kind === 'equal') return { id, kind, via, baseline, comparison };
  return { id, kind, via, baseline, comparison, context: textContext(via.generated.text, baseline.generated.text) };
}

export interface Summary {
  readonly prompts: number;
  readonly matched: number;
  readonly divergent: number;
  /** Prompts where at least one side failed or returned no ids. */
  readonly failed: number;
  readonly tokensCompared: number;
}

export interface Verdict {
  readonly verified: boolean;
  /** 0 every prompt matched; 1 divergence, mixed or unexpected revisions; 3 an endpoint failed (and nothing diverged). */
  readonly exitCode: 0 | 1 | 3;
  readonly summary: Summary;
  /** Distinct revisions / groups the via path bound (null = a response without the header). */
  readonly revisions: readonly (string | null)[];
  readonly groups: readonly (string | null)[];
  /** Why the run is not verified, one sentence each. */
  readonly reasons: readonly string[];
}

/**
 * The run's verdict. A divergence outranks an endpoint failure: it is proof, not absence of proof. With
 * `expectRevision`, a via response bound to any other revision (or to none) fails the run: the baseline is a worker
 * of one revision, and a match against a path that served another proves nothing about the rollout under test.
 */
export function verdictOf(outcomes: readonly PromptOutcome[], opts: { readonly expectRevision?: string } = {}): Verdict {
  const summary = summarize(outcomes);
  const bound = outcomes.flatMap((o) => (o.via.ok ? [o.via] : []));
  const revisions = distinct(bound.map((r) => r.revision));
  const groups = distinct(bound.map((r) => r.group));
  const reasons: string[] = [];
  if (summary.divergent > 0) reasons.push(`${summary.divergent} of ${summary.prompts} prompts diverged from the baseline`);
  const mixed = revisions.length > 1;
  if (mixed)
    reasons.push(`via responses were bound to different revisions (${revisions.map(label).join(', ')}): one run must verify one revision`);
  const want = opts.expectRevision;
  const wrong = want === undefined ? [] : revisions.filter((r) => r !== want);
  if (wrong.length > 0) reasons.push(`via responses were bound to ${wrong.map(label).join(', ')}, not the expected revision ${want}`);
  if (summary.failed > 0) reasons.push(`${summary.failed} of ${summary.prompts} prompts could not be compared (see errors)`);
  const exitCode = summary.divergent > 0 || mixed || wrong.length > 0 ? 1 : summary.failed > 0 ? 3 : 0;
  return { verified: exitCode === 0, exitCode, summary, revisions, groups, reasons };
}

function summarize(outcomes: readonly PromptOutcome[]): Summary {
  let matched = 0;
  let divergent = 0;
  let tokensCompared = 0;
  for (const o of outcomes) {
    if (o.comparison === undefined) continue;
    tokensCompared += positionsCompared(o.comparison);
    if (o.comparison.kind === 'equal') matched++;
    else divergent++;
  }
  return { prompts: outcomes.length, matched, divergent, failed: outcomes.length - matched - divergent, tokensCompared };
}

function distinct<T>(xs: readonly T[]): T[] {
  return [...new Set(xs)];
}

/** A revision or group for display: `(none)` for a response that carried no header. */
export function label(v: string | null): string {
  return v ?? '(none)';
}
