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

  it('says a file is empty, never echoes more than 80 characters of a value, and reports a misspelt required key once', () => {
    const Required = z.object({ role: z.enum(['prefill', 'decode']), name: z.string(), nested: z.object({ a: z.string() }) }).strict();
    const msg = (data: unknown) => {
      const r = Required.safeParse(data);
      return formatIssues(fromZodIssues(r.error!.issues, { file: 'c.yaml', root: Required, data }));
    };
    expect(msg(null)).toBe(
      'c.yaml: error: (root): the file is empty (or holds only comments). Fix: write the configuration in it, a mapping at the top',
    );
    const binary = msg('\u0000'.repeat(2000));
    expect(binary).toMatch(/^c\.yaml: error: \(root\): expected mapping, got string ".*\.\.\.\.? Fix: write this value as a mapping$/);
    expect(binary.length).toBeLessThan(200);
    const missing = msg({ name: 'x', nested: { a: 'y' } });
    expect(missing).toContain('c.yaml: error: role: role is required. Fix: add role: one of prefill, decode');
    // "rol" is the misspelt "role": one issue, the unknown key with its "did you mean", not also "role is required".
    const typo = msg({ rol: 'decode', name: 'x', nested: { a: 'y' } }).split('\n');
    expect(typo).toEqual([
      'c.yaml: error: rol: unknown key "rol". Fix: did you mean "role"? Rename the key (keys accepted here: role, name, nested)',
    ]);
    expect(msg({ role: 'decode', name: 'x', nested: 5 })).toContain(
      'nested: expected mapping, got number 5. Fix: write nested as a mapping',
    );
  });

  it('says where a key written at the wrong level belongs, once, and lists the types a union takes', () => {
    const Nested = z
      .object({
        admin: z
          .union([z.string(), z.literal(false)])
          .describe('host:port, or false to turn it off')
          .default(''),
        view: z.object({ intervalMs: z.number(), mode: z.string().optional() }).strict(),
        pools: z.array(z.object({ name: z.string(), tenants: z.array(z.string()).optional() }).strict()),
      })
      .strict();
    const msg = (data: unknown) => {
      const r = Nested.safeParse(data);
      return formatIssues(fromZodIssues(r.error!.issues, { file: 'g.yaml', root: Nested, data }));
    };
    // intervalMs beside view instead of under it: where it goes, and not also "view.intervalMs is required".
    expect(msg({ intervalMs: 5, view: {}, pools: [] }).split('\n')).toEqual([
      'g.yaml: error: intervalMs: unknown key "intervalMs". Fix: intervalMs belongs under view (view.intervalMs), not at the top level: move it there (keys accepted here: admin, view, pools)',
    ]);
    expect(msg({ view: { intervalMs: 5, tenants: ['a'] }, pools: [] })).toContain(
      'g.yaml: error: view.tenants: unknown key "tenants". Fix: tenants belongs under pools[] (pools[].tenants), not under view: move it there',
    );
    // A key known nowhere is still only "remove it".
    expect(msg({ view: { intervalMs: 5, zzz: 1 }, pools: [] })).toContain('Fix: remove it; keys accepted here: intervalMs, mode');
    const Modes = z.object({ mode: z.union([z.enum(['on', 'off']), z.number()]) }).strict();
    const modes = Modes.safeParse({ mode: true });
    expect(formatIssues(fromZodIssues(modes.error!.issues, { file: 'm.yaml', root: Modes, data: { mode: true } }))).toBe(
      'm.yaml: error: mode: expected "on" or "off" or a number, got boolean true. Fix: write mode as "on" or "off" or a number',
    );
    expect(msg({ admin: 9003, view: { intervalMs: 5 }, pools: [] })).toBe(
      'g.yaml: error: admin: expected a string or false, got number 9003. Fix: write admin as a string or false (host:port, or false to turn it off)',
    );
  });
});
