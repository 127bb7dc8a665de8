import { describe, expect, it } from 'vitest';
import { createProgress } from './progress.js';
import { renderText, toJsonReport } from './report.js';
import type { VerifyReport } from './run.js';
import { toOutcome, verdictOf, type PromptOutcome, type Reply } from './verdict.js';

const reply = (ids: number[], text: string, finishReason = 'length', revision: string | null = 'llama-a'): Reply => ({
  ok: true,
  status: 200,
  generated: { ids, source: 'token_ids', text, finishReason },
  revision,
  group: revision === null ? null : 'g-123',
});

function report(outcomes: PromptOutcome[]): VerifyReport {
  return { via: 'http://via', baseline: 'http://base', model: 'llama-3-8b', outcomes, verdict: verdictOf(outcomes) };
}

describe('renderText', () => {
  it('says VERIFIED with the bound revision when every prompt matched', () => {
    const text = renderText(report([toOutcome('p1', 'completion', reply([1, 2], 'a b'), reply([1, 2], 'a b', 'length', null))]));
    expect(text).toMatch(/^id +kind +result +tokens via\/base +via revision +first divergence$/m);
    expect(text).toMatch(/^p1 +completion +equal +2\/2 +llama-a +-$/m);
    expect(text).toContain('summary: 1 prompts, 2 tokens compared, 1 matched, 0 divergent, 0 failed');
    expect(text).toContain('via bound: revision llama-a; group g-123');
    expect(text).toContain("VERIFIED: every prompt's token ids equal the baseline's (revision llama-a)");
  });

  it('shows the first divergent position, both ids, the text context, length mismatches and errors', () => {
    const text = renderText(
      report([
        toOutcome('p1', 'completion', reply([1, 50, 60], 'The sky is green'), reply([1, 40, 60], 'The sky is blue', 'length', null)),
        toOutcome('p2', 'chat', reply([7, 8], 'ok', 'stop'), reply([7, 8, 9], 'ok then', 'length', null)),
        toOutcome('p3', 'completion', reply([3, 4], 'same'), reply([3, 5], 'same', 'length', null)),
        toOutcome(
          'p4',
          'completion',
          { ok: false, status: 200, error: 'http://via/v1/completions: cannot verify from text alone: ...' },
          reply([1], 'x'),
        ),
      ]),
    );
    expect(text).toMatch(/^p1 +completion +DIVERGED at 1 +3\/3 +llama-a +via 50 != baseline 40 \(1 of 3 positions differ\)$/m);
    expect(text).toMatch(/^p2 +chat +LENGTH at 2 +2\/3 +llama-a +baseline continues with 9; the other stopped \(finish_reason stop\)$/m);
    expect(text).toMatch(/^p4 +completion +error +-\/1 +- +see errors below$/m);
    expect(text).toContain('p1: position 1: after "The sky is " via wrote "green", baseline wrote "blue"');
    expect(text).toContain('p3: position 1: the texts are identical; the ids differ');
    expect(text).toContain('p4: via error: http://via/v1/completions: cannot verify from text alone');
    expect(text).toContain('summary: 4 prompts, 7 tokens compared, 0 matched, 3 divergent, 1 failed');
    expect(text).toMatch(/NOT VERIFIED: 3 of 4 prompts diverged from the baseline; 1 of 4 prompts could not be compared/);
  });
});

describe('toJsonReport', () => {
  it('carries the verdict, the bound revisions and every prompt with its ids', () => {
    const j = toJsonReport(
      report([
        toOutcome('p1', 'completion', reply([1, 50], 'a'), reply([1, 40], 'b', 'length', null)),
        toOutcome('p2', 'completion', reply([1], 'a'), { ok: false, status: 500, error: 'boom' }),
      ]),
    );
    expect(j).toMatchObject({
      verified: false,
      exitCode: 1,
      model: 'llama-3-8b',
      bound: { revisions: ['llama-a'], groups: ['g-123'] },
      summary: { prompts: 2, divergent: 1, failed: 1 },
    });
    const [p1, p2] = j['prompts'] as any[];
    expect(p1).toMatchObject({
      id: 'p1',
      result: 'diverged',
      comparison: { position: 1, via: 50, baseline: 40 },
      via: { tokenIds: [1, 50], revision: 'llama-a' },
    });
    expect(p2).toMatchObject({ id: 'p2', result: 'error', baseline: { ok: false, status: 500, error: 'boom' } });
    expect(JSON.parse(JSON.stringify(j))).toEqual(j);
  });
});

describe('createProgress', () => {
  const outcome = toOutcome('p1', 'completion', reply([1], 'a'), reply([2], 'b'));

  it('writes one plain line per prompt when stderr is not a terminal', () => {
    const out: string[] = [];
    const p = createProgress({ write: (s: string) => out.push(s), isTTY: false });
    p.update(outcome, 1, 2);
    p.finish();
    expect(out).toEqual(['verify: 1/2 p1 DIVERGED\n']);
  });

  it('redraws a bar in place on a terminal and ends on a fresh line', () => {
    const out: string[] = [];
    const p = createProgress({ write: (s: string) => out.push(s), isTTY: true });
    p.update(outcome, 1, 4);
    p.update(outcome, 4, 4);
    p.finish();
    expect(out[0]).toMatch(/^\r\[#{6}\.{18}\] 1\/4 p1 DIVERGED/);
    expect(out[1]).toMatch(/^\r\[#{24}\] 4\/4/);
    expect(out[2]).toBe('\n');
  });
});
