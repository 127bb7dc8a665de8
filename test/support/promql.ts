/**
 * PromQL for the alert tests (test/deploy/alerts.test.ts), on the Prometheus project's own grammar
 * (`@prometheus-io/lezer-promql`, the parser of Prometheus's web UI, prometheus/prometheus web/ui/module/lezer-promql).
 *
 * `readPromql` parses an expression and lists what it selects, so a test can check every name, label and value
 * against what the gate and sidecars export. `evaluateInstant` evaluates the small subset the alert rules use against
 * scraped `/metrics` text: selectors, `increase`/`rate` over two scrapes, `vector`, `sum`/`count`/`max`/`min` by or
 * without labels, arithmetic and comparisons (without `bool`) between numbers and vectors, vector matching with
 * `on`/`ignoring` and `group_left`/`group_right` (no extra labels copied), `and`/`or`/`unless`. No PromQL evaluator
 * on npm is kept by the Prometheus project, so this is test support only. It is exact for gauges; for counters it
 * takes the difference of two scrapes where Prometheus extrapolates over the range, which keeps whether an
 * `increase(...) > 0` fires. Anything else throws rather than guess.
 */
import { parser } from '@prometheus-io/lezer-promql';

type Node = ReturnType<typeof parser.parse>['topNode'];

export interface Matcher {
  readonly label: string;
  readonly op: '=' | '!=' | '=~' | '!~';
  readonly value: string;
}

export interface Selector {
  readonly metric: string;
  readonly matchers: readonly Matcher[];
}

export interface ReadPromql {
  /** Where the grammar found no valid parse: empty for a valid expression. */
  readonly errors: readonly string[];
  readonly selectors: readonly Selector[];
  /** Labels named by `by`, `without`, `on` and `ignoring` (all grouping labels of the expression). */
  readonly groupingLabels: readonly string[];
}

const text = (expr: string, n: { from: number; to: number }) => expr.slice(n.from, n.to);

/** A PromQL string literal's value (double, single or back quotes; Go escapes for the first two). */
function stringValue(literal: string): string {
  if (literal.startsWith('`')) return literal.slice(1, -1);
  return literal.slice(1, -1).replace(/\\(.)/g, (_m, c: string) => ({ n: '\n', t: '\t', '\\': '\\', '"': '"', "'": "'" })[c] ?? `\\${c}`);
}

export function readPromql(expr: string): ReadPromql {
  const tree = parser.parse(expr);
  const errors: string[] = [];
  const selectors: Selector[] = [];
  const groupingLabels: string[] = [];
  tree.iterate({
    enter(ref) {
      if (ref.type.isError)
        errors.push(`no valid PromQL at offset ${ref.from}: ${JSON.stringify(expr.slice(Math.max(0, ref.from - 20), ref.to + 20))}`);
      if (ref.name === 'GroupingLabels') for (const l of ref.node.getChildren('LabelName')) groupingLabels.push(text(expr, l));
      if (ref.name !== 'VectorSelector') return;
      const id = ref.node.getChild('Identifier');
      const matchers = (ref.node.getChild('LabelMatchers')?.getChildren('UnquotedLabelMatcher') ?? []).map((m) => ({
        label: text(expr, m.getChild('LabelName')!),
        op: text(expr, m.getChild('MatchOp')!) as Matcher['op'],
        value: stringValue(text(expr, m.getChild('StringLiteral')!)),
      }));
      if (id === null) errors.push(`a selector without a metric name: ${text(expr, ref)}`);
      else selectors.push({ metric: text(expr, id), matchers });
    },
  });
  return { errors, selectors, groupingLabels };
}

/** One sample of a scrape: its metric name and labels (target labels included) and its value. */
export interface Sample {
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

/** The samples of a Prometheus text exposition, each with `target` labels added as a scrape would add them. */
export function samplesOf(exposition: string, target: Readonly<Record<string, string>> = {}): Sample[] {
  const out: Sample[] = [];
  for (const line of exposition.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: \d+)?$/.exec(line);
    if (m === null) throw new Error(`not a sample line: ${line}`);
    const labels: Record<string, string> = { ...target, __name__: m[1]! };
    for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g))
      labels[l[1]!] = l[2]!.replace(/\\(.)/g, (_x, c: string) => (c === 'n' ? '\n' : c));
    out.push({ labels, value: Number(m[3]!.replace(/^\+?Inf$/, 'Infinity').replace(/^-Inf$/, '-Infinity')) });
  }
  return out;
}

export interface Scrapes {
  /** The samples at evaluation time. */
  readonly now: readonly Sample[];
  /** The same targets scraped earlier, inside every range the expression uses (for `increase` and `rate`). */
  readonly before?: readonly Sample[];
}

type Value = { kind: 'scalar'; value: number } | { kind: 'vector'; samples: Sample[] };

const key = (labels: Readonly<Record<string, string>>, only?: readonly string[], without: readonly string[] = []) =>
  JSON.stringify(
    Object.entries(labels)
      .filter(([k]) => (only === undefined ? !without.includes(k) && k !== '__name__' : only.includes(k)))
      .sort(([a], [b]) => (a < b ? -1 : 1)),
  );
const dropName = ({ __name__: _n, ...rest }: Readonly<Record<string, string>>) => rest;

function matches(s: Sample, sel: Selector): boolean {
  if (s.labels['__name__'] !== sel.metric) return false;
  return sel.matchers.every((m) => {
    const v = s.labels[m.label] ?? '';
    if (m.op === '=') return v === m.value;
    if (m.op === '!=') return v !== m.value;
    const re = new RegExp(`^(?:${m.value})$`);
    return m.op === '=~' ? re.test(v) : !re.test(v);
  });
}

const COMPARE: Record<string, (a: number, b: number) => boolean> = {
  '==': (a, b) => a === b,
  '!=': (a, b) => a !== b,
  '>': (a, b) => a > b,
  '<': (a, b) => a < b,
  '>=': (a, b) => a >= b,
  '<=': (a, b) => a <= b,
};
const ARITH: Record<string, (a: number, b: number) => number> = {
  '+': (a, b) => a + b,
  '-': (a, b) => a - b,
  '*': (a, b) => a * b,
  '/': (a, b) => a / b,
};

/** Evaluate `expr` (the subset in the module comment) and return the series it yields: an alert fires for each. */
export function evaluateInstant(expr: string, scrapes: Scrapes): Sample[] {
  const read = readPromql(expr);
  if (read.errors.length > 0) throw new Error(read.errors.join('; '));
  const unsupported = (n: Node): never => {
    throw new Error(`not supported by this test helper: ${n.name} ${JSON.stringify(text(expr, n))}`);
  };
  const selectorOf = (n: Node): Selector => {
    const one = readPromql(text(expr, n)).selectors;
    if (one.length !== 1) unsupported(n);
    return one[0]!;
  };
  const vector = (v: Value, n: Node): Sample[] => (v.kind === 'vector' ? v.samples : unsupported(n));
  const evalNode = (n: Node): Value => {
    switch (n.name) {
      case 'PromQL':
      case 'ParenExpr':
        return evalNode(n.firstChild!);
      case 'NumberDurationLiteral':
        return { kind: 'scalar', value: Number(text(expr, n)) };
      case 'VectorSelector': {
        const sel = selectorOf(n);
        return { kind: 'vector', samples: scrapes.now.filter((s) => matches(s, sel)) };
      }
      case 'FunctionCall':
        return evalCall(n);
      case 'AggregateExpr':
        return evalAggregate(n);
      case 'BinaryExpr':
        return evalBinary(n);
      default:
        return unsupported(n);
    }
  };
  const evalCall = (n: Node): Value => {
    const fn = text(expr, n.getChild('FunctionIdentifier')!);
    const args = n.getChild('FunctionCallBody')!;
    const arg = args.firstChild!;
    if (fn === 'vector') {
      const v = evalNode(arg);
      return { kind: 'vector', samples: [{ labels: {}, value: v.kind === 'scalar' ? v.value : unsupported(arg) }] };
    }
    if ((fn !== 'increase' && fn !== 'rate') || arg.name !== 'MatrixSelector') return unsupported(n);
    if (scrapes.before === undefined) throw new Error(`${fn}() needs an earlier scrape (before)`);
    const sel = selectorOf(arg.getChild('VectorSelector')!);
    const range = /^(\d+)([smh])$/.exec(text(expr, arg.getChild('DurationExpr')!));
    if (range === null) return unsupported(arg);
    const seconds = Number(range[1]) * { s: 1, m: 60, h: 3600 }[range[2] as 's' | 'm' | 'h'];
    const earlier = new Map(scrapes.before.filter((s) => matches(s, sel)).map((s) => [key(s.labels), s.value]));
    const samples: Sample[] = [];
    for (const s of scrapes.now.filter((x) => matches(x, sel))) {
      const first = earlier.get(key(s.labels));
      if (first === undefined) continue; // one sample in the range: Prometheus returns nothing either
      const increase = s.value >= first ? s.value - first : s.value; // a lower value is a counter reset
      samples.push({ labels: dropName(s.labels), value: fn === 'rate' ? increase / seconds : increase });
    }
    return { kind: 'vector', samples };
  };
  const evalAggregate = (n: Node): Value => {
    const op = text(expr, n.getChild('AggregateOp')!);
    const modifier = n.getChild('AggregateModifier');
    const labels =
      modifier === null
        ? []
        : modifier
            .getChild('GroupingLabels')!
            .getChildren('LabelName')
            .map((l) => text(expr, l));
    const by = modifier === null || modifier.getChild('By') !== null; // no modifier: one group of everything
    const input = vector(evalNode(n.getChild('FunctionCallBody')!.firstChild!), n);
    const groups = new Map<string, { labels: Record<string, string>; values: number[] }>();
    for (const s of input) {
      const k = by ? key(s.labels, labels) : key(s.labels, undefined, labels);
      const kept = Object.fromEntries(JSON.parse(k) as [string, string][]);
      const g = groups.get(k) ?? groups.set(k, { labels: kept, values: [] }).get(k)!;
      g.values.push(s.value);
    }
    const reduce: Record<string, (v: number[]) => number> = {
      sum: (v) => v.reduce((a, b) => a + b, 0),
      count: (v) => v.length,
      max: (v) => Math.max(...v),
      min: (v) => Math.min(...v),
    };
    if (reduce[op] === undefined) return unsupported(n);
    return { kind: 'vector', samples: [...groups.values()].map((g) => ({ labels: g.labels, value: reduce[op]!(g.values) })) };
  };
  /** Two vectors: `and`/`or`/`unless`, or arithmetic and comparisons one-to-one or with `group_left`/`group_right`. */
  const vectorMatch = (op: string, l: Sample[], r: Sample[], modifier: Node | undefined, n: Node): Value => {
    const lists = modifier?.getChildren('GroupingLabels').map((g) => g.getChildren('LabelName').map((x) => text(expr, x))) ?? [];
    const on = modifier?.getChild('On') !== null && modifier !== undefined;
    const matching = lists[0] ?? [];
    const sig = (labels: Readonly<Record<string, string>>) => (on ? key(labels, matching) : key(labels, undefined, matching));
    const rightSigs = new Set(r.map((x) => sig(x.labels)));
    if (op === 'and') return { kind: 'vector', samples: l.filter((x) => rightSigs.has(sig(x.labels))) };
    if (op === 'unless') return { kind: 'vector', samples: l.filter((x) => !rightSigs.has(sig(x.labels))) };
    if (op === 'or') {
      const leftSigs = new Set(l.map((x) => sig(x.labels)));
      return { kind: 'vector', samples: [...l, ...r.filter((x) => !leftSigs.has(sig(x.labels)))] };
    }
    const [compare, arith] = [COMPARE[op], ARITH[op]];
    if (compare === undefined && arith === undefined) return unsupported(n);
    const groupRight = modifier?.getChild('GroupRight') != null;
    const groupLeft = modifier?.getChild('GroupLeft') != null;
    if ((lists[1]?.length ?? 0) > 0) return unsupported(modifier!); // group_left(labels): copying labels is not needed here
    // The "many" side keeps its labels; the "one" side must have at most one series per signature.
    const [many, one] = groupRight ? [r, l] : [l, r];
    const ones = new Map<string, Sample>();
    for (const x of one) {
      if (ones.has(sig(x.labels))) throw new Error(`many-to-many matching in ${JSON.stringify(text(expr, n))}`);
      ones.set(sig(x.labels), x);
    }
    const seen = new Set<string>();
    const samples: Sample[] = [];
    for (const x of many) {
      const match = ones.get(sig(x.labels));
      if (match === undefined) continue;
      if (!groupLeft && !groupRight) {
        if (seen.has(sig(x.labels))) throw new Error(`many-to-one matching without group_left in ${JSON.stringify(text(expr, n))}`);
        seen.add(sig(x.labels));
      }
      const [a, b] = groupRight ? [match.value, x.value] : [x.value, match.value];
      // One-to-one keeps the matching labels only (on) or drops the ignored ones; group_left/right keep the many side's,
      // less the metric name for arithmetic (Prometheus's shouldDropMetricName).
      const manyLabels = compare !== undefined ? { ...x.labels } : dropName(x.labels);
      const kept = groupLeft || groupRight ? manyLabels : Object.fromEntries(JSON.parse(sig(x.labels)) as [string, string][]);
      if (compare !== undefined) {
        if (compare(a, b)) samples.push({ labels: kept, value: a });
      } else samples.push({ labels: kept, value: arith!(a, b) });
    }
    return { kind: 'vector', samples };
  };
  const evalBinary = (n: Node): Value => {
    const [lhsNode, opNode] = [n.firstChild!, n.firstChild!.nextSibling!];
    let rhsNode = opNode.nextSibling!;
    const modifier = rhsNode.name === 'MatchingModifierClause' ? rhsNode : undefined;
    if (modifier !== undefined) rhsNode = rhsNode.nextSibling!;
    if (rhsNode.name === 'BoolModifier') return unsupported(rhsNode);
    const op = text(expr, opNode);
    const [lhs, rhs] = [evalNode(lhsNode), evalNode(rhsNode)];
    if (lhs.kind === 'vector' && rhs.kind === 'vector') return vectorMatch(op, lhs.samples, rhs.samples, modifier, n);
    const compare = COMPARE[op];
    const arith = ARITH[op];
    if (lhs.kind === 'scalar' && rhs.kind === 'scalar') {
      if (arith === undefined) return unsupported(n);
      return { kind: 'scalar', value: arith(lhs.value, rhs.value) };
    }
    const [vec, scalar, vectorLeft] =
      lhs.kind === 'vector'
        ? [lhs.samples, (rhs as { value: number }).value, true]
        : [(rhs as { samples: Sample[] }).samples, lhs.value, false];
    if (compare !== undefined)
      return { kind: 'vector', samples: vec.filter((s) => (vectorLeft ? compare(s.value, scalar) : compare(scalar, s.value))) };
    if (arith === undefined) return unsupported(n);
    return {
      kind: 'vector',
      samples: vec.map((s) => ({ labels: dropName(s.labels), value: vectorLeft ? arith(s.value, scalar) : arith(scalar, s.value) })),
    };
  };
  const top = parser.parse(expr).topNode;
  return vector(evalNode(top), top);
}
