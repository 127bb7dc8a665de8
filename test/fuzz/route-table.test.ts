/**
 * Property-based fuzzing of the route-table loader (`parseRouteTable`, src/policy/load.ts): whatever a policy author
 * or a half-written file hands it, it returns issues a person can act on (each with a path or a line, a message and
 * a fix) and never throws, because a throw on hot reload is an unhandled rejection in the gate, not a rejected table.
 * Inputs: arbitrary text, and random text-level and value-level mutations of examples/route-tables/two-revisions.yaml.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml, stringify as toYaml } from 'yaml';
import type { ConfigIssue } from '../../src/config/issues.js';
import { parseRouteTable, routeTableFromValue } from '../../src/policy/load.js';
import { readFixture } from '../../src/policy/testing.js';

const FIXTURE = readFixture('two-revisions.yaml');
const FIXTURE_VALUE = parseYaml(FIXTURE) as Record<string, unknown>;
const FILE = 'fuzzed-route-table.yaml';

/** The loader's contract for any input: a frozen table that compiles, or actionable issues, and no throw. */
function expectActionable(text: string, format: 'yaml' | 'json' = 'yaml'): void {
  let r: ReturnType<typeof parseRouteTable>;
  try {
    r = parseRouteTable(text, { file: format === 'json' ? 'fuzzed.json' : FILE });
  } catch (e) {
    throw new Error(`parseRouteTable threw ${(e as Error).message} on:\n${text.slice(0, 600)}`);
  }
  if (r.ok) {
    expect(Object.isFrozen(r.value)).toBe(true);
    expect(() => (r.ok ? r.value : (undefined as never))).not.toThrow();
    return;
  }
  expect(r.error.length).toBeGreaterThan(0);
  expect(r.error.some((i) => i.severity === 'error')).toBe(true);
  const lines = text.split('\n').length;
  for (const i of r.error) expectIssue(i, lines);
}

function expectIssue(i: ConfigIssue, lines: number): void {
  expect((typeof i.path === 'string' && i.path.length > 0) || i.line !== undefined, JSON.stringify(i)).toBe(true);
  expect(i.message.trim().length, JSON.stringify(i)).toBeGreaterThan(0);
  expect(i.fix.trim().length, JSON.stringify(i)).toBeGreaterThan(0);
  if (i.line !== undefined) {
    expect(i.line).toBeGreaterThanOrEqual(1);
    expect(i.line).toBeLessThanOrEqual(lines + 1);
  }
}

/** Fragments that break YAML in the ways people do: indentation, flow brackets, anchors, aliases, tags, documents. */
const SNIPPETS = [
  ': ',
  '- ',
  '{',
  '}',
  '[',
  ']',
  '\t',
  '  ',
  '#',
  '"',
  "'",
  '\n',
  '---\n',
  '&anchor ',
  '*anchor',
  '<<: *anchor\n',
  '!!binary ',
  '!!str ',
  '? ',
  '|\n',
  '%YAML 1.1\n',
  'null',
  '~',
  '0x1F',
  '1e400',
  '@',
];

type TextMutation = (lines: string[]) => string[];
const lineIndex = fc.nat({ max: 200 });
const textMutation: fc.Arbitrary<TextMutation> = fc.oneof(
  lineIndex.map((i) => (ls: string[]) => ls.filter((_, j) => j !== i % ls.length)),
  lineIndex.map((i) => (ls: string[]) => [...ls.slice(0, (i % ls.length) + 1), ls[i % ls.length]!, ...ls.slice((i % ls.length) + 1)]),
  fc.tuple(lineIndex, lineIndex).map(([a, b]) => (ls: string[]) => {
    const out = [...ls];
    [out[a % ls.length], out[b % ls.length]] = [out[b % ls.length]!, out[a % ls.length]!];
    return out;
  }),
  fc
    .tuple(lineIndex, fc.nat({ max: 120 }), fc.oneof(fc.constantFrom(...SNIPPETS), fc.string({ maxLength: 6 })))
    .map(([i, col, s]) => (ls: string[]) => {
      const out = [...ls];
      const line = out[i % ls.length]!;
      out[i % ls.length] = line.slice(0, col % (line.length + 1)) + s + line.slice(col % (line.length + 1));
      return out;
    }),
  fc.tuple(lineIndex, fc.nat({ max: 120 })).map(([i, col]) => (ls: string[]) => {
    const out = [...ls];
    const line = out[i % ls.length]!;
    out[i % ls.length] = line.slice(0, col % (line.length + 1)) + line.slice((col % (line.length + 1)) + 1);
    return out;
  }),
  lineIndex.map((i) => (ls: string[]) => ls.slice(0, (i % ls.length) + 1)),
  // A value replaced by an anchor or an alias, as authors who share blocks between pools write them.
  fc.tuple(lineIndex, fc.constantFrom('&shared ', '*shared', '*tenants', '<<: *shared')).map(([i, s]) => (ls: string[]) => {
    const out = [...ls];
    const line = out[i % ls.length]!;
    const colon = line.indexOf(': ');
    out[i % ls.length] =
      colon < 0
        ? `${line} ${s}`
        : s.startsWith('&')
          ? `${line.slice(0, colon + 2)}${s}${line.slice(colon + 2)}`
          : `${line.slice(0, colon + 2)}${s}`;
    return out;
  }),
);

/** Every path to a value inside a plain value (keys and indices). */
function pathsOf(v: unknown, prefix: Array<string | number> = []): Array<Array<string | number>> {
  if (v === null || typeof v !== 'object') return [prefix];
  const entries: Array<[string | number, unknown]> = Array.isArray(v) ? v.map((x, i) => [i, x]) : Object.entries(v);
  return [prefix, ...entries.flatMap(([k, x]) => pathsOf(x, [...prefix, k]))];
}
const FIXTURE_PATHS = pathsOf(FIXTURE_VALUE).filter((p) => p.length > 0);

type ValueMutation =
  | { path: Array<string | number>; op: 'delete' }
  | { path: Array<string | number>; op: 'set'; value: unknown }
  | { path: Array<string | number>; op: 'rename'; key: string };
const valueMutation: fc.Arbitrary<ValueMutation> = fc.oneof(
  fc.constantFrom(...FIXTURE_PATHS).map((path) => ({ path, op: 'delete' as const })),
  fc
    .tuple(
      fc.constantFrom(...FIXTURE_PATHS),
      fc.oneof(fc.jsonValue({ maxDepth: 2 }), fc.constantFrom(-1, 0, 101, 1e9, '', '*', 'llama-c', [], {})),
    )
    .map(([path, value]) => ({ path, op: 'set' as const, value })),
  fc
    .tuple(fc.constantFrom(...FIXTURE_PATHS.filter((p) => typeof p.at(-1) === 'string')), fc.string({ minLength: 1, maxLength: 10 }))
    .map(([path, key]) => ({ path, op: 'rename' as const, key })),
);

function applyValueMutation(root: unknown, m: ValueMutation): void {
  const parent = m.path.slice(0, -1).reduce<any>((v, k) => v?.[k], root);
  const last = m.path.at(-1)!;
  if (parent === null || typeof parent !== 'object') return;
  if (m.op === 'set') parent[last] = m.value;
  else if (Array.isArray(parent)) parent.splice(Number(last), 1);
  else {
    const v = parent[last];
    delete parent[last];
    if (m.op === 'rename') Object.defineProperty(parent, m.key, { value: v, enumerable: true, writable: true, configurable: true });
  }
}

describe('parseRouteTable on arbitrary input', () => {
  it('never throws on arbitrary text, as YAML or as JSON; every issue has a path or a line, a message and a fix', () => {
    fc.assert(
      fc.property(
        fc.oneof(fc.string({ maxLength: 300 }), fc.string({ unit: 'binary', maxLength: 200 })),
        fc.constantFrom('yaml' as const, 'json' as const),
        (text, format) => {
          expectActionable(text, format);
        },
      ),
      { numRuns: 300 },
    );
  });

  it('never throws on random text mutations of two-revisions.yaml', () => {
    fc.assert(
      fc.property(fc.array(textMutation, { minLength: 1, maxLength: 3 }), (mutations) => {
        const lines = mutations.reduce((ls, m) => (ls.length === 0 ? ls : m(ls)), FIXTURE.split('\n'));
        expectActionable(lines.join('\n'));
      }),
      { numRuns: 250 },
    );
  });

  it('never throws on random value mutations of two-revisions.yaml, written as YAML or JSON', () => {
    fc.assert(
      fc.property(fc.array(valueMutation, { minLength: 1, maxLength: 3 }), fc.boolean(), (mutations, asJson) => {
        const value = structuredClone(FIXTURE_VALUE);
        for (const m of mutations) applyValueMutation(value, m);
        expectActionable(asJson ? JSON.stringify(value) : toYaml(value), asJson ? 'json' : 'yaml');
        // The same value handed over already parsed (kvgate explain, tests) obeys the same contract.
        const r = routeTableFromValue(value, { file: FILE });
        if (!r.ok) for (const i of r.error) expectIssue(i, Number.MAX_SAFE_INTEGER);
      }),
      { numRuns: 250 },
    );
  });
});

describe('YAML anchors and aliases (found by the fuzzing above)', () => {
  it('an alias to an anchor that does not exist is an issue with its line, not an exception', () => {
    expectActionable(FIXTURE.replace('tenants: [acme, globex]', 'tenants: *tenant-list'));
  });

  it('an alias bomb (exponential expansion) is an issue, not an exception', () => {
    const bomb = ['version: 1', 'a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x"]'];
    for (let i = 1; i < 9; i++)
      bomb.push(
        `${String.fromCharCode(97 + i)}: &${String.fromCharCode(97 + i)} [${Array(9)
          .fill(`*${String.fromCharCode(96 + i)}`)
          .join(', ')}]`,
      );
    expectActionable(bomb.join('\n'));
  });
});
