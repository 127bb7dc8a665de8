/**
 * How a verify run reads: a table per prompt with the first divergent position and the two token ids there, a few
 * characters of text around it, and a summary that says VERIFIED only when the ids prove it. `toJsonReport` is the
 * same content for machines. Pure.
 */
import type { Comparison } from './compare.js';
import type { VerifyReport } from './run.js';
import { label, type PromptOutcome, type Reply } from './verdict.js';

/** The human-readable report (stdout). */
export function renderText(r: VerifyReport): string {
  const v = r.verdict;
  const lines = [
    'kvgate verify: token ids through the disaggregated path vs a non-disaggregated baseline',
    `  via       ${r.via}`,
    `  baseline  ${r.baseline}`,
    `  model     ${r.model}`,
    '',
    ...table(r.outcomes),
  ];
  const details = r.outcomes.flatMap(detailLines);
  if (details.length > 0) lines.push('', ...details);
  const s = v.summary;
  lines.push(
    '',
    `summary: ${s.prompts} prompts, ${s.tokensCompared} tokens compared, ${s.matched} matched, ${s.divergent} divergent, ${s.failed} failed`,
    `via bound: revision ${v.revisions.map(label).join(', ') || '(no response)'}; group ${v.groups.map(label).join(', ') || '(no response)'}`,
  );
  if (v.verified) lines.push(`VERIFIED: every prompt's token ids equal the baseline's (revision ${v.revisions.map(label).join(', ')})`);
  else lines.push(`NOT VERIFIED: ${v.reasons.join('; ')}`);
  return `${lines.join('\n')}\n`;
}

function table(outcomes: readonly PromptOutcome[]): string[] {
  const rows = outcomes.map((o) => [
    o.id,
    o.kind,
    resultCell(o.comparison),
    tokensCell(o),
    o.via.ok ? label(o.via.revision) : '-',
    divergenceCell(o),
  ]);
  const head = ['id', 'kind', 'result', 'tokens via/base', 'via revision', 'first divergence'];
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i]!.length)));
  const fmt = (row: string[]) =>
    row
      .map((c, i) => (i === row.length - 1 ? c : c.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [fmt(head), ...rows.map(fmt)];
}

function resultCell(c: Comparison | undefined): string {
  if (c === undefined) return 'error';
  return c.kind === 'equal' ? 'equal' : `${c.kind === 'diverged' ? 'DIVERGED' : 'LENGTH'} at ${c.position}`;
}

function tokensCell(o: PromptOutcome): string {
  const n = (r: Reply) => (r.ok ? String(r.generated.ids.length) : '-');
  return `${n(o.via)}/${n(o.baseline)}`;
}

function divergenceCell(o: PromptOutcome): string {
  const c = o.comparison;
  if (c === undefined) return 'see errors below';
  switch (c.kind) {
    case 'equal':
      return '-';
    case 'diverged':
      return `via ${c.via} != baseline ${c.baseline} (${c.differing} of ${Math.min(c.viaLength, c.baselineLength)} positions differ)`;
    case 'length_mismatch':
      return `${c.longer} continues with ${c.next}; the other stopped (${finishOf(o, c.longer === 'via' ? 'baseline' : 'via')})`;
  }
}

function finishOf(o: PromptOutcome, side: 'via' | 'baseline'): string {
  const r = o[side];
  return r.ok ? `finish_reason ${r.generated.finishReason ?? 'null'}` : 'no reply';
}

function detailLines(o: PromptOutcome): string[] {
  const out: string[] = [];
  for (const side of ['via', 'baseline'] as const) {
    const r = o[side];
    if (!r.ok) out.push(`${o.id}: ${side} error: ${r.error}`);
  }
  const c = o.comparison;
  const ctx = o.context;
  if (c === undefined || c.kind === 'equal' || ctx === undefined) return out;
  if (ctx.sameText) {
    out.push(`${o.id}: position ${c.position}: the texts are identical; the ids differ (an EOS, special token or another segmentation)`);
  } else {
    out.push(
      `${o.id}: position ${c.position}: after ${JSON.stringify(ctx.common)} via wrote ${JSON.stringify(ctx.via)}, baseline wrote ${JSON.stringify(ctx.baseline)}`,
    );
  }
  return out;
}

/** The machine-readable report (`--json`). */
export function toJsonReport(r: VerifyReport): Record<string, unknown> {
  const v = r.verdict;
  return {
    verified: v.verified,
    exitCode: v.exitCode,
    via: r.via,
    baseline: r.baseline,
    model: r.model,
    summary: v.summary,
    bound: { revisions: v.revisions, groups: v.groups },
    reasons: v.reasons,
    prompts: r.outcomes.map((o) => ({
      id: o.id,
      kind: o.kind,
      result: o.comparison?.kind ?? 'error',
      ...(o.comparison === undefined ? {} : { comparison: o.comparison }),
      ...(o.context === undefined ? {} : { context: o.context }),
      via: replyJson(o.via),
      baseline: replyJson(o.baseline),
    })),
  };
}

function replyJson(r: Reply): Record<string, unknown> {
  if (!r.ok) return { ok: false, status: r.status, error: r.error };
  const g = r.generated;
  return {
    ok: true,
    status: r.status,
    revision: r.revision,
    group: r.group,
    source: g.source,
    finishReason: g.finishReason,
    tokenIds: g.ids,
  };
}
