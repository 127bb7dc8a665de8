/**
 * YAML/JSON text to plain values, keeping source positions so every later issue can say which line to edit.
 *
 * One reader for every file kvgate reads (route table, descriptors, gate and sidecar configs), so each gets the same
 * rules: YAML 1.2 core whatever a `%YAML 1.1` directive says (`no`, `off`, `y` stay strings, `010` is ten), a
 * duplicated key is an error in YAML and JSON alike (never last-wins), a mapping key must read as a string (an
 * unquoted `1.10` would silently become "1.1"), no merge keys (`<<`) and no tags beyond the JSON types (`!!binary`,
 * `!!timestamp`, `!!set`, `!!omap` would build values that are not plain data), at most 100 alias expansions, and a
 * byte order mark is skipped.
 */
import { isAlias, isMap, isPair, isScalar, isSeq, LineCounter, parseDocument, visit, type Document } from 'yaml';
import { err, ok, type Result } from '../errors.js';
import { issue, type PathSegment, type ConfigIssue } from './issues.js';
import type { Locate } from './from-zod.js';

export type TextFormat = 'yaml' | 'json';

/** The format a file name implies: `.json` is JSON, anything else YAML. */
export function formatOf(file: string, format?: TextFormat): TextFormat {
  return format ?? (file.toLowerCase().endsWith('.json') ? 'json' : 'yaml');
}

/** Parse text into a plain value; syntax errors become issues with line and column. */
export function parseStructuredText(
  text: string,
  file: string,
  format: TextFormat,
): Result<{ value: unknown; locate: Locate }, ConfigIssue[]> {
  const lineCounter = new LineCounter();
  // schema 'core' pins YAML 1.2 (a %YAML 1.1 directive would turn `no`/`y`/`off` into booleans and `010` into 8);
  // merge: false reads `<<` as a plain key, which every strict schema here refuses (and shape() names).
  const doc = parseDocument(text, { lineCounter, prettyErrors: true, uniqueKeys: true, schema: 'core', merge: false });
  const locate = locator(doc, lineCounter);
  if (format === 'json') {
    // An empty .json file (a truncated write, an editor mid-save) is no syntax error to explain: the schema says
    // "the file is empty", as it does for an empty YAML file.
    if (text.replace(/^\uFEFF/, '').trim() === '') return ok({ value: null, locate });
    let value: unknown;
    try {
      // JSON.parse refuses a byte order mark, which editors on Windows write; YAML skips it already.
      value = JSON.parse(text.startsWith('\uFEFF') ? text.slice(1) : text) as unknown;
    } catch (e) {
      return err([jsonSyntaxIssue(text, file, e)]);
    }
    // JSON.parse lets the last of two equal keys win silently; the YAML reading of the same text saw both.
    const duplicates = doc.errors.filter((e) => e.code === 'DUPLICATE_KEY').map((e) => yamlIssue(file, e, 'JSON', doc));
    return duplicates.length > 0 ? err(duplicates) : ok({ value, locate });
  }
  if (doc.errors.length > 0) {
    // Too deep a nesting fails once per level on the way out: one line says it.
    const exhausted = doc.errors.find((e) => e.code === 'RESOURCE_EXHAUSTION');
    return err((exhausted ? [exhausted] : doc.errors).map((e) => yamlIssue(file, e, 'YAML', doc)));
  }
  const shapeIssues = shape(doc, file, lineCounter);
  if (shapeIssues.length > 0) return err(shapeIssues);
  let value: unknown;
  try {
    value = doc.toJS({ maxAliasCount: 100 });
  } catch (e) {
    // An alias to a missing anchor, or an alias bomb past maxAliasCount: the document parses but cannot be built.
    const message = (e instanceof Error ? e.message : String(e)).split('\n')[0]!;
    return err([
      issue(
        file,
        '(syntax)',
        `YAML cannot be resolved: ${message}`,
        'define every &anchor before its *alias, and do not nest aliases to expand the document (at most 100 alias expansions)',
      ),
    ]);
  }
  return ok({ value, locate });
}

function yamlIssue(file: string, e: Document.Parsed['errors'][number], syntax: 'YAML' | 'JSON', doc: Document.Parsed): ConfigIssue {
  const pos = e.linePos?.[0];
  let what = e.message.split('\n')[0]!.replace(/ at line \d+, column \d+:?$/, '');
  // The parser says only "Map keys must be unique": name the key (a model, revision or setting written twice).
  const key = e.code === 'DUPLICATE_KEY' ? keyAt(doc, e.pos[0]) : undefined;
  if (key !== undefined) what = `the key ${JSON.stringify(key)} is written twice in one mapping`;
  return issue(file, '(syntax)', `${syntax} syntax error: ${what}`, yamlFix(e.code), {
    ...(pos ? { line: pos.line, column: pos.col } : {}),
  });
}

/** The text of the mapping key that starts at `offset`, if a scalar key does. */
function keyAt(doc: Document.Parsed, offset: number): string | undefined {
  let found: string | undefined;
  visit(doc, {
    Pair(_, pair) {
      if (isScalar(pair.key) && pair.key.range?.[0] === offset) {
        found = String(pair.key.value);
        return visit.BREAK;
      }
      return undefined;
    },
  });
  return found;
}

/** The tags of plain data (YAML 1.2 core, the JSON types): `!!str 5` is fine, `!!timestamp` is not. */
const PLAIN_TAGS = new Set(['str', 'int', 'float', 'bool', 'null', 'map', 'seq'].map((t) => `tag:yaml.org,2002:${t}`));

/**
 * What parses but would not read as the author meant: a mapping key that is not a string (`1.10:` would become
 * "1.1", `true:` "true", `~:` "", a list key its text), a merge key, a tag that builds something other than plain
 * data. Walked with a stack, not recursion: a document the parser accepted is never too deep for this.
 */
function shape(doc: Document.Parsed, file: string, lc: LineCounter): ConfigIssue[] {
  const issues: ConfigIssue[] = [];
  const at = (node: unknown): { line?: number; column?: number } => {
    const range = (node as { range?: [number, number, number] } | null | undefined)?.range;
    if (!range) return {};
    const { line, col } = lc.linePos(range[0]);
    return { line, column: col };
  };
  const stack: unknown[] = [doc.contents];
  while (stack.length > 0 && issues.length < 20) {
    const node = stack.pop();
    if (node === null || node === undefined || isAlias(node)) continue;
    const tag = (node as { tag?: string }).tag;
    if (tag !== undefined && !PLAIN_TAGS.has(tag)) {
      issues.push(
        issue(
          file,
          '(syntax)',
          `YAML tag ${tag} is not read here: only plain data (strings, numbers, booleans, null, mappings, lists)`,
          'remove the tag and write the value as plain YAML (quote it to keep it a string)',
          at(node),
        ),
      );
      continue;
    }
    if (isMap(node)) {
      for (const pair of node.items) {
        const key = pair.key;
        if (isScalar(key) && key.value === '<<' && key.type === 'PLAIN') {
          issues.push(
            issue(
              file,
              '(syntax)',
              'YAML merge keys (<<) are not read',
              'write the keys out in this mapping (an anchor and *alias may stand for a whole value)',
              at(key),
            ),
          );
        } else if (!isScalar(key) || typeof key.value !== 'string') {
          const text = isScalar(key) ? String(key.source ?? key.value) : isAlias(key) ? `*${key.source}` : 'a collection';
          const read = isScalar(key)
            ? ` (YAML reads it as ${key.value === null ? 'null' : `the ${typeof key.value} ${String(key.value)}`})`
            : '';
          issues.push(
            issue(
              file,
              '(syntax)',
              `mapping key ${text} is not a string${read}`,
              `quote the key, e.g. "${isScalar(key) ? String(key.source ?? key.value ?? '') : 'name'}":`,
              at(key ?? pair.value),
            ),
          );
        }
        stack.push(pair.value);
      }
    } else if (isSeq(node)) {
      stack.push(...node.items);
    } else if (isPair(node)) {
      stack.push(node.value);
    }
  }
  return issues;
}

function yamlFix(code: string): string {
  switch (code) {
    case 'DUPLICATE_KEY':
      return 'remove or rename one of the duplicated keys (the second would silently win)';
    case 'BAD_INDENT':
    case 'MISSING_CHAR':
      return 'fix the indentation: items of one mapping or list start in the same column, and use spaces, not tabs';
    case 'TAB_AS_INDENT':
      return 'indent with spaces, not tabs';
    case 'MULTIPLE_DOCS':
      return 'keep one document per file (remove the extra --- document)';
    case 'RESOURCE_EXHAUSTION':
      return 'the nesting is far deeper than any kvgate file needs: look for unclosed or runaway [ and { brackets';
    default:
      return 'correct the YAML at the position shown';
  }
}

function jsonSyntaxIssue(text: string, file: string, e: unknown): ConfigIssue {
  const message = e instanceof Error ? e.message : String(e);
  const m = /position (\d+)/.exec(message);
  let pos: { line: number; column: number } | undefined;
  if (m) {
    const before = text.slice(0, Number(m[1]));
    const lines = before.split('\n');
    pos = { line: lines.length, column: lines[lines.length - 1]!.length + 1 };
  }
  return issue(
    file,
    '(syntax)',
    `JSON syntax error: ${message.replace(/ in JSON at position \d+.*$/, '')}`,
    'correct the JSON at the position shown (no trailing commas, no comments, keys in double quotes), or write the file as YAML',
    pos ?? {},
  );
}

function locator(doc: Document.Parsed, lc: LineCounter): Locate {
  return (path: readonly PathSegment[], key = false) => {
    // Walk as far as the text goes; a missing key (a required field left out) points at its parent.
    let node: unknown = doc.contents;
    let keyNode: unknown;
    for (const seg of path) {
      keyNode = undefined;
      let next: unknown;
      if (isMap(node)) {
        const pair = node.items.find((p) => isPair(p) && isScalar(p.key) && String(p.key.value) === String(seg));
        keyNode = pair?.key;
        next = pair?.value;
      } else if (isSeq(node) && typeof seg === 'number') {
        next = node.items[seg];
      }
      if (next === undefined || next === null) break;
      node = next;
    }
    const target = (key && keyNode ? keyNode : node) as { range?: [number, number, number] } | null | undefined;
    if (!target?.range) return undefined;
    const { line, col } = lc.linePos(target.range[0]);
    return { line, column: col };
  };
}
