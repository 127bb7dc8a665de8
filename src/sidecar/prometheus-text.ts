/**
 * A parser for the Prometheus text exposition format (version 0.0.4, and the sample lines OpenMetrics shares with
 * it), so the sidecar can read `vllm:cache_config_info` labels from a worker's `/metrics`.
 *
 * Label values are arbitrary strings: vLLM's cache-config labels are `str(value)` of Python objects, so they may
 * contain quotes, commas, braces, `#` and backslashes. The parser therefore reads label values character by
 * character with the format's escapes (`\\`, `\"`, `\n`) instead of splitting on separators. Comment lines
 * (`# HELP`, `# TYPE`, anything else after `#`) and blank lines are skipped; an OpenMetrics exemplar (` # {...}`
 * after the value) is ignored. Pure: no I/O.
 */
import { err, ok, type Result } from '../errors.js';

export interface PromSample {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  /** The sample value; `NaN`, `+Inf` and `-Inf` are kept as numbers. */
  readonly value: number;
  readonly timestampMs?: number;
}

export interface PromParseError {
  /** 1-based line number of the first malformed line. */
  readonly line: number;
  readonly message: string;
}

const NAME_START = /[A-Za-z_:]/;
const NAME_CHAR = /[A-Za-z0-9_:]/;
const LABEL_START = /[A-Za-z_]/;
const LABEL_CHAR = /[A-Za-z0-9_]/;

/** Parse a whole exposition. Fails on the first malformed sample line, naming its line number. */
export function parsePrometheusText(text: string): Result<PromSample[], PromParseError> {
  const samples: PromSample[] = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!.replace(/\r$/, '');
    const trimmed = line.trim();
    if (trimmed === '' || trimmed.startsWith('#')) continue;
    const sample = parseSampleLine(trimmed);
    if (!sample.ok) return err({ line: i + 1, message: sample.error });
    samples.push(sample.value);
  }
  return ok(samples);
}

/** The samples of one metric family member, by exact sample name. */
export function samplesNamed(samples: readonly PromSample[], name: string): PromSample[] {
  return samples.filter((s) => s.name === name);
}

/** Parse one sample line: `name{labels} value [timestamp]`. */
export function parseSampleLine(line: string): Result<PromSample, string> {
  const cursor = { pos: 0 };
  const name = readName(line, cursor, NAME_START, NAME_CHAR);
  if (name === '') return err(`expected a metric name at column ${cursor.pos + 1}`);
  let labels: Record<string, string> = {};
  skipSpaces(line, cursor);
  if (line[cursor.pos] === '{') {
    const parsed = readLabels(line, cursor);
    if (!parsed.ok) return parsed;
    labels = parsed.value;
  }
  const rest = line.slice(cursor.pos).trim();
  const fields = stripExemplar(rest)
    .split(/\s+/)
    .filter((f) => f !== '');
  if (fields.length === 0) return err(`metric ${name} has no value`);
  if (fields.length > 2) return err(`metric ${name}: unexpected text after the value and timestamp: ${fields.slice(2).join(' ')}`);
  const value = parseValue(fields[0]!);
  if (value === undefined) return err(`metric ${name}: ${JSON.stringify(fields[0])} is not a number`);
  if (fields[1] === undefined) return ok({ name, labels, value });
  const ts = Number(fields[1]);
  if (!Number.isFinite(ts)) return err(`metric ${name}: timestamp ${JSON.stringify(fields[1])} is not a number`);
  return ok({ name, labels, value, timestampMs: ts });
}

function readName(line: string, cursor: { pos: number }, start: RegExp, rest: RegExp): string {
  const begin = cursor.pos;
  if (begin >= line.length || !start.test(line[begin]!)) return '';
  cursor.pos++;
  while (cursor.pos < line.length && rest.test(line[cursor.pos]!)) cursor.pos++;
  return line.slice(begin, cursor.pos);
}

function skipSpaces(line: string, cursor: { pos: number }): void {
  while (line[cursor.pos] === ' ' || line[cursor.pos] === '\t') cursor.pos++;
}

/** Read `{a="x",b="y"}` (trailing comma allowed) starting at `{`; leaves the cursor after `}`. */
function readLabels(line: string, cursor: { pos: number }): Result<Record<string, string>, string> {
  const labels: Record<string, string> = {};
  cursor.pos++; // '{'
  for (;;) {
    skipSpaces(line, cursor);
    if (line[cursor.pos] === '}') {
      cursor.pos++;
      return ok(labels);
    }
    const key = readName(line, cursor, LABEL_START, LABEL_CHAR);
    if (key === '') return err(`expected a label name or '}' at column ${cursor.pos + 1}`);
    skipSpaces(line, cursor);
    if (line[cursor.pos] !== '=') return err(`expected '=' after label ${key} at column ${cursor.pos + 1}`);
    cursor.pos++;
    skipSpaces(line, cursor);
    const value = readQuoted(line, cursor);
    if (value === undefined) return err(`label ${key}: expected a double-quoted value at column ${cursor.pos + 1}`);
    if (Object.hasOwn(labels, key)) return err(`label ${key} appears twice`);
    labels[key] = value;
    skipSpaces(line, cursor);
    if (line[cursor.pos] === ',') cursor.pos++;
    else if (line[cursor.pos] !== '}') return err(`expected ',' or '}' after label ${key} at column ${cursor.pos + 1}`);
  }
}

/** Read a `"..."` string with the exposition format's escapes; undefined if unterminated. */
function readQuoted(line: string, cursor: { pos: number }): string | undefined {
  if (line[cursor.pos] !== '"') return undefined;
  let out = '';
  for (let i = cursor.pos + 1; i < line.length; i++) {
    const ch = line[i]!;
    if (ch === '"') {
      cursor.pos = i + 1;
      return out;
    }
    if (ch === '\\' && i + 1 < line.length) {
      const next = line[++i]!;
      out += next === 'n' ? '\n' : next; // `\\` -> `\`, `\"` -> `"`; unknown escapes keep the character
      continue;
    }
    out += ch;
  }
  return undefined;
}

/** Drop an OpenMetrics exemplar: ` # {labels} value [ts]` after the sample value. */
function stripExemplar(rest: string): string {
  const i = rest.indexOf('#');
  return i < 0 ? rest : rest.slice(0, i);
}

function parseValue(text: string): number | undefined {
  switch (text) {
    case '+Inf':
    case 'Inf':
      return Number.POSITIVE_INFINITY;
    case '-Inf':
      return Number.NEGATIVE_INFINITY;
    case 'NaN':
      return Number.NaN;
    default: {
      const n = Number(text);
      return text.trim() !== '' && !Number.isNaN(n) ? n : undefined;
    }
  }
}
