import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { didYouMean, formatIssues, fromZodIssues, keysAtPath, pathOf } from './config-issues.js';

const Schema = z
  .object({
    listen: z.string(),
    pools: z.array(z.object({ name: z.string(), endpoints: z.array(z.string()).default([]) }).strict()),
    mode: z.enum(['strict', 'lenient']).optional(),
  })
  .strict();

describe('config issues', () => {
  it('names the file, the path, what is wrong and a fix, with typo suggestions', () => {
    const r = Schema.safeParse({ listen: 5, pools: [{ name: 'a', endpoinst: [] }], mode: 'lax' });
    expect(r.success).toBe(false);
    const issues = fromZodIssues('gate.yaml', r.error!.issues, (p) => keysAtPath(Schema, p));
    const text = formatIssues(issues);
    expect(text).toContain('gate.yaml: listen:');
    expect(text).toContain('gate.yaml: pools[0].endpoinst: unknown key "endpoinst" - fix: did you mean "endpoints"?');
    expect(text).toContain('gate.yaml: mode:');
    expect(text).toMatch(/mode: .* - fix: use one of: "strict", "lenient"/);
  });

  it('formats paths and suggests only close matches', () => {
    expect(pathOf(['pools', 2, 'revision'])).toBe('pools[2].revision');
    expect(didYouMean('revison', ['revision', 'role'])).toBe('revision');
    expect(didYouMean('zzzzzz', ['revision', 'role'])).toBeUndefined();
    expect(keysAtPath(Schema, ['pools', 0])).toEqual(['name', 'endpoints']);
  });
});
