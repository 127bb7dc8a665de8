/**
 * YAML text in, plain values and source positions out: the validator works on plain values (so it can check a
 * value cut out of a Kubernetes manifest), and this module maps its paths back to lines for the person reading.
 */
import { isMap, isPair, isScalar, isSeq, LineCounter, parseAllDocuments } from 'yaml';
import type { Document, Node } from 'yaml';

/** One step of a YAML path: a mapping key or a list index. */
export type PathSegment = string | number;

/**
 * `static_resources.listeners[0].filter_chains[0]`; keys that are not plain identifiers are bracketed and quoted
 * (`typed_config["@type"]`, `typed_extension_protocol_options["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]`).
 */
export function formatPath(segments: readonly PathSegment[]): string {
  let out = '';
  for (const s of segments) {
    if (typeof s === 'number') out += `[${String(s)}]`;
    else if (/^[A-Za-z_][A-Za-z0-9_]*$/.test(s)) out += out === '' ? s : `.${s}`;
    else out += `[${JSON.stringify(s)}]`;
  }
  return out;
}

/** A parsed YAML document with what is needed to find lines again. */
export interface YamlDocument {
  /** 0-based position in a multi-document stream. */
  readonly index: number;
  readonly value: unknown;
  readonly doc: Document.Parsed;
  readonly lineCounter: LineCounter;
}

/** A YAML syntax problem (duplicate key, bad indentation), with its line. */
export interface YamlSyntaxError {
  readonly line: number;
  readonly message: string;
}

/**
 * Parses every document of a YAML stream (`---` separated). Merge keys (`<<`) are resolved as Envoy's YAML loader
 * does; duplicate keys are errors, as they are for Envoy.
 */
export function parseYamlDocuments(text: string): { docs: YamlDocument[]; syntaxErrors: YamlSyntaxError[] } {
  const lineCounter = new LineCounter();
  const parsed = parseAllDocuments(text, { lineCounter, merge: true, uniqueKeys: true, prettyErrors: false });
  const list = Array.isArray(parsed) ? parsed : [];
  const docs: YamlDocument[] = [];
  const syntaxErrors: YamlSyntaxError[] = [];
  list.forEach((doc, index) => {
    for (const e of doc.errors) syntaxErrors.push({ line: lineCounter.linePos(e.pos[0]).line, message: e.message });
    if (doc.errors.length === 0 && doc.contents !== null) docs.push({ index, value: doc.toJS(), doc, lineCounter });
  });
  return { docs, syntaxErrors };
}

/**
 * The 1-based line of the deepest node on `segments` that exists in the document: the key itself for a mapping
 * entry (so an unknown key points at its own line), the parent for a field that is missing.
 */
export function lineOf(source: YamlDocument, segments: readonly PathSegment[]): number | undefined {
  let node: unknown = source.doc.contents;
  let offset = rangeStart(node);
  for (const seg of segments) {
    if (isMap(node)) {
      const pair = node.items.find((p) => isPair(p) && keyText(p.key) === String(seg));
      if (!pair) break;
      offset = rangeStart(pair.key) ?? offset;
      node = pair.value;
      continue;
    }
    if (isSeq(node) && typeof seg === 'number') {
      const item = node.items[seg];
      if (item === undefined) break;
      offset = rangeStart(item) ?? offset;
      node = item;
      continue;
    }
    break;
  }
  return offset === undefined ? undefined : source.lineCounter.linePos(offset).line;
}

function keyText(key: unknown): string | undefined {
  if (isScalar(key)) return String(key.value);
  return undefined;
}

function rangeStart(node: unknown): number | undefined {
  const range = (node as Node | null | undefined)?.range;
  return range ? range[0] : undefined;
}
