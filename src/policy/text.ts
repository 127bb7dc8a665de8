/**
 * YAML/JSON text to plain values, keeping source positions so every later issue can say which line to edit.
 */
import { isMap, isPair, isScalar, isSeq, LineCounter, parseDocument, type Document } from 'yaml';
import { err, ok, type Result } from '../errors.js';
import { issue, type PathSegment, type ConfigIssue } from '../config/issues.js';
import type { Locate } from '../config/from-zod.js';

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
  const doc = parseDocument(text, { lineCounter, prettyErrors: true, uniqueKeys: true });
  const locate = locator(doc, lineCounter);
  if (format === 'json') {
    try {
      return ok({ value: JSON.parse(text) as unknown, locate });
    } catch (e) {
      return err([jsonSyntaxIssue(text, file, e)]);
    }
  }
  if (doc.errors.length > 0) {
    return err(
      doc.errors.map((e) => {
        const pos = e.linePos?.[0];
        const what = e.message.split('\n')[0]!.replace(/ at line \d+, column \d+:?$/, '');
        return issue(file, '(syntax)', `YAML syntax error: ${what}`, yamlFix(e.code), {
          ...(pos ? { line: pos.line, column: pos.col } : {}),
        });
      }),
    );
  }
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
      return 'keep one route table per file (remove the extra --- document)';
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
    'correct the JSON at the position shown (no trailing commas, keys in double quotes), or write the table as YAML',
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
