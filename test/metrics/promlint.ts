/**
 * `promtool check metrics`, applied to Prometheus text exposition in-process (no promtool binary can be installed
 * here, and none ships in an npm package). The rules and their messages follow the linter promtool runs:
 * prometheus/client_golang prometheus/testutil/promlint/validations/ @c39535eb (validation.go lists the defaults:
 * help, metric units, counter, histogram/summary reserved, type in name, reserved chars, camelCase, unit
 * abbreviations; units.go @61d20416 the unit tables).
 *
 * Families come from the `# TYPE` lines; a sample belongs to the family it names, or for histograms and summaries
 * to the family its `_bucket`/`_sum`/`_count` suffix extends.
 */

export interface Family {
  readonly name: string;
  readonly type: string;
  readonly help: string | undefined;
  readonly labelNames: ReadonlySet<string>;
}

export interface Problem {
  readonly metric: string;
  readonly text: string;
}

/** The families in an exposition, with the label names their samples use. */
export function parseExposition(text: string): Family[] {
  const families = new Map<string, Mutable>();
  const helps = new Map<string, string>();
  const family = (name: string) => {
    let f = families.get(name);
    if (f === undefined) families.set(name, (f = { name, type: 'untyped', help: helps.get(name), labelNames: new Set() }));
    return f;
  };
  for (const line of text.split('\n')) {
    const help = /^# HELP (\S+) ?(.*)$/.exec(line);
    if (help) {
      helps.set(help[1]!, help[2]!);
      if (families.has(help[1]!)) families.get(help[1]!)!.help = help[2]!;
      continue;
    }
    const type = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (type) {
      family(type[1]!).type = type[2]!;
      continue;
    }
    if (line.startsWith('#') || line.trim() === '') continue;
    const sample = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s/.exec(line);
    if (!sample) throw new Error(`not a sample line: ${line}`);
    const f = familyOf(families, sample[1]!) ?? family(sample[1]!);
    for (const m of (sample[3] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="/g)) f.labelNames.add(m[1]!);
  }
  return [...families.values()];
}

type Mutable = { name: string; type: string; help: string | undefined; labelNames: Set<string> };

function familyOf(families: ReadonlyMap<string, Mutable>, sample: string): Mutable | undefined {
  const exact = families.get(sample);
  if (exact) return exact;
  for (const suffix of ['_bucket', '_sum', '_count']) {
    const f = sample.endsWith(suffix) ? families.get(sample.slice(0, -suffix.length)) : undefined;
    if (f && (f.type === 'histogram' || f.type === 'summary')) return f;
  }
  return undefined;
}

const UNITS: Readonly<Record<string, string>> = {
  amperes: 'amperes',
  bytes: 'bytes',
  celsius: 'celsius',
  grams: 'grams',
  joules: 'joules',
  kelvin: 'kelvin',
  meters: 'meters',
  metres: 'metres',
  seconds: 'seconds',
  volts: 'volts',
  minutes: 'seconds',
  hours: 'seconds',
  days: 'seconds',
  weeks: 'seconds',
  kelvins: 'kelvin',
  fahrenheit: 'celsius',
  rankine: 'celsius',
  inches: 'meters',
  yards: 'meters',
  miles: 'meters',
  bits: 'bytes',
  calories: 'joules',
  pounds: 'grams',
  ounces: 'grams',
};
const PREFIXES = [
  'pico',
  'nano',
  'micro',
  'milli',
  'centi',
  'deci',
  'deca',
  'hecto',
  'kilo',
  'kibi',
  'mega',
  'mibi',
  'giga',
  'gibi',
  'tera',
  'tebi',
  'peta',
  'pebi',
];
const ABBREVIATIONS = ['s', 'ms', 'us', 'ns', 'sec', 'b', 'kb', 'mb', 'gb', 'tb', 'pb', 'm', 'h', 'd'];
const TYPES = ['counter', 'gauge', 'summary', 'histogram', 'gauge_histogram'];
const CAMEL = /[a-z][A-Z]/;

function metricUnit(name: string): { unit: string; base: string } | undefined {
  for (const part of name.split('_')) {
    if (UNITS[part] !== undefined) return { unit: part, base: UNITS[part] };
    for (const p of PREFIXES)
      if (part.startsWith(p) && UNITS[part.slice(p.length)] !== undefined) return { unit: part, base: UNITS[part.slice(p.length)]! };
  }
  return undefined;
}

const hasPart = (name: string, part: string) => name.includes(`_${part}_`) || name.endsWith(`_${part}`);

/** Every problem promtool's linter reports for one family. */
export function lintFamily(f: Family): Problem[] {
  const out: string[] = [];
  const n = f.name;
  const lower = n.toLowerCase();
  if (f.help === undefined) out.push('no help text');
  const unit = metricUnit(n);
  if (unit && unit.unit !== unit.base) out.push(`use base unit "${unit.base}" instead of "${unit.unit}"`);
  const counter = f.type === 'counter';
  const untyped = f.type === 'untyped';
  if (counter && !n.endsWith('_total')) out.push('counter metrics should have "_total" suffix');
  if (!untyped && !counter && n.endsWith('_total')) out.push('non-counter metrics should not have "_total" suffix');
  if (!untyped) {
    const hist = f.type === 'histogram';
    const summary = f.type === 'summary';
    if (!hist && n.endsWith('_bucket')) out.push('non-histogram metrics should not have "_bucket" suffix');
    if (!hist && !summary && n.endsWith('_count')) out.push('non-histogram and non-summary metrics should not have "_count" suffix');
    if (!hist && !summary && n.endsWith('_sum')) out.push('non-histogram and non-summary metrics should not have "_sum" suffix');
    if (!hist && f.labelNames.has('le')) out.push('non-histogram metrics should not have "le" label');
    if (!summary && f.labelNames.has('quantile')) out.push('non-summary metrics should not have "quantile" label');
  }
  for (const t of TYPES) if (hasPart(lower, t)) out.push(`metric name should not include type '${t}'`);
  if (n.includes(':')) out.push("metric names should not contain ':'");
  if (CAMEL.test(n)) out.push("metric names should be written in 'snake_case' not 'camelCase'");
  for (const l of f.labelNames) if (CAMEL.test(l)) out.push("label names should be written in 'snake_case' not 'camelCase'");
  for (const a of ABBREVIATIONS) if (hasPart(lower, a)) out.push('metric names should not contain abbreviated units');
  return out.map((text) => ({ metric: n, text }));
}

/** `promtool check metrics` over a whole exposition: an empty list means it passes. */
export function lintExposition(text: string): Problem[] {
  return parseExposition(text).flatMap(lintFamily);
}
