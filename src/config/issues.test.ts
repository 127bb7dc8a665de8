import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { fromZodIssues } from './from-zod.js';
import { closestMatch, formatIssues, formatPath, hasErrors, issue } from './issues.js';

const Schema = z
  .object({
    listen: z.string(),
    pools: z.array(z.object({ name: z.string(), endpoints: z.array(z.string()).default([]) }).strict()),
    mode: z.enum(['strict', 'lenient']).optional(),
  })
  .strict();

describe('config issues (one type for every file kvgate reads)', () => {
  it('names the file, the path, what is wrong and a fix, with typo suggestions', () => {
    const data = { listen: 5, pools: [{ name: 'a', endpoinst: [] }], mode: 'lax' };
    const r = Schema.safeParse(data);
    expect(r.success).toBe(false);
    const text = formatIssues(fromZodIssues(r.error!.issues, { file: 'gate.yaml', root: Schema, data }));
    expect(text).toContain('gate.yaml: error: listen: expected string, got number 5');
    expect(text).toContain('gate.yaml: error: pools[0].endpoinst: unknown key "endpoinst". Fix: did you mean "endpoints"?');
    expect(text).toMatch(/gate\.yaml: error: mode: .*Fix: use one of: strict, lenient/);
  });

  it('formats paths, lists errors before warnings and suggests only close matches', () => {
    expect(formatPath(['pools', 2, 'revision'])).toBe('pools[2].revision');
    expect(formatPath([])).toBe('(root)');
    expect(closestMatch('revison', ['revision', 'role'])).toBe('revision');
    expect(closestMatch('zzzzzz', ['revision', 'role'])).toBeUndefined();
    const warning = issue('f', ['a'], 'looks odd', 'check it', { severity: 'warning' });
    const error = issue('f', ['b'], 'is wrong', 'fix it');
    expect(formatIssues([warning, error]).split('\n')).toEqual([
      'f: error: b: is wrong. Fix: fix it',
      'f: warning: a: looks odd. Fix: check it',
    ]);
    expect(hasErrors([warning])).toBe(false);
    expect(hasErrors([warning, error])).toBe(true);
  });
});
