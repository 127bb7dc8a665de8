import { describe, expect, it } from 'vitest';
import { formatIssues } from './issues.js';
import { parseStructuredText } from './text.js';

/** The issues of text that must not load, one formatted line each. */
function refused(text: string, file = 'f.yaml'): string {
  const r = parseStructuredText(text, file, file.endsWith('.json') ? 'json' : 'yaml');
  if (r.ok) throw new Error(`expected issues, read ${JSON.stringify(r.value.value)}`);
  return formatIssues(r.error);
}

function value(text: string, file = 'f.yaml'): unknown {
  const r = parseStructuredText(text, file, file.endsWith('.json') ? 'json' : 'yaml');
  if (!r.ok) throw new Error(formatIssues(r.error));
  return r.value.value;
}

describe('parseStructuredText: hostile and mistaken files', () => {
  it('refuses a duplicated key in JSON too (JSON.parse alone lets the last one win)', () => {
    const out = refused('{\n  "connectorMode": "strict",\n  "connectorMode": "lenient"\n}', 't.json');
    expect(out).toMatch(/^t\.json:3:3: error: \(syntax\): JSON syntax error: .*Fix: remove or rename one of the duplicated keys/);
    expect(out).toContain('JSON syntax error: the key "connectorMode" is written twice in one mapping.');
  });

  it('names a key written twice in YAML: a model or revision declared twice', () => {
    const out = refused('models:\n  llama-3-8b:\n    tenants: [acme]\n  "llama-3-8b":\n    tenants: [globex]\n', 't.yaml');
    expect(out).toBe(
      't.yaml:4:3: error: (syntax): YAML syntax error: the key "llama-3-8b" is written twice in one mapping. Fix: remove or rename one of the duplicated keys (the second would silently win)',
    );
  });

  it('skips a byte order mark in JSON as in YAML', () => {
    expect(value('\uFEFF{"a": 1}', 't.json')).toEqual({ a: 1 });
    expect(value('\uFEFFa: 1\r\nb: 2\r\n')).toEqual({ a: 1, b: 2 });
  });

  it('reads YAML 1.2 core whatever a %YAML 1.1 directive says', () => {
    expect(value('%YAML 1.1\n---\na: no\nb: off\nc: 010\nd: [y, n]\n')).toEqual({ a: 'no', b: 'off', c: 10, d: ['y', 'n'] });
  });

  it('refuses a mapping key that YAML reads as something other than the string written', () => {
    const out = refused('models:\n  1.10: x\n  true: y\n  ~: z\n');
    expect(out).toContain(
      'f.yaml:2:3: error: (syntax): mapping key 1.10 is not a string (YAML reads it as the number 1.1). Fix: quote the key, e.g. "1.10":',
    );
    expect(out).toContain('f.yaml:3:3: error: (syntax): mapping key true is not a string (YAML reads it as the boolean true)');
    expect(out).toContain('(YAML reads it as null)');
    expect(value('models:\n  "1.10": x\n')).toEqual({ models: { '1.10': 'x' } });
  });

  it('refuses merge keys and tags that build values other than plain data', () => {
    expect(refused('base: &b {x: 1}\nm:\n  <<: *b\n  y: 2\n')).toMatch(
      /^f\.yaml:3:3: error: \(syntax\): YAML merge keys \(<<\) are not read/,
    );
    for (const tagged of ['a: !!binary aGVsbG8=', 'a: !!timestamp 2001-12-14', 'a: !!set {x}', 'a: !!omap [b: 1]', 'a: !custom x']) {
      expect(refused(tagged)).toMatch(/error: \(syntax\): YAML tag \S+ is not read here.*Fix: remove the tag/);
    }
    expect(value('a: !!str 5\nb: &n 3\nc: *n\n')).toEqual({ a: '5', b: 3, c: 3 });
  });

  it('refuses an alias bomb and a runaway nesting with one line each', () => {
    const levels = ['a: &a [x, x, x, x, x, x, x, x, x]'];
    for (const n of 'bcdefg')
      levels.push(
        `${n}: &${n} [${Array(9)
          .fill(`*${String.fromCharCode(n.charCodeAt(0) - 1)}`)
          .join(', ')}]`,
      );
    expect(refused(levels.join('\n'))).toMatch(/YAML cannot be resolved: Excessive alias count/);
    const deep = refused(`a: ${'['.repeat(20_000)}${']'.repeat(20_000)}`);
    expect(deep.split('\n')).toHaveLength(1);
    expect(deep).toMatch(/Fix: the nesting is far deeper than any kvgate file needs/);
  });

  it('reports tabs used as indentation', () => {
    expect(refused('a:\n\tb: 1\n')).toMatch(/f\.yaml:2:\d+: error: \(syntax\): YAML syntax error: .*Fix: .*spaces, not tabs/);
  });
});
