/**
 * Scanners of JSON text that find what parsing loses, without parsing the values. `topLevelMembers`: where each
 * top-level member's value starts and ends, and where the closing brace is; the gate rewrites a body's `cache_salt` on
 * these offsets (src/envoy/body-rewrite.ts). `unsafeIntegerLiterals`: where, at any depth, an integer literal sits
 * that a double cannot hold; a sidecar writes those back into the body it forwards (src/sidecar/exact-integers.ts).
 */
import { jsonStringEnd } from './json-limits.js';

export interface Member {
  readonly key: string;
  readonly valueStart: number;
  readonly valueEnd: number;
}

/** The top-level members of a JSON object text, and where its closing brace is. */
export function topLevelMembers(text: string): { members: Member[]; closeAt: number } | undefined {
  let i = skipWs(text, 0);
  if (text[i] !== '{') return undefined;
  i = skipWs(text, i + 1);
  const members: Member[] = [];
  if (text[i] === '}') return trailingOnly(text, i) ? { members, closeAt: i } : undefined;
  for (;;) {
    const keyEnd = stringEnd(text, i);
    if (keyEnd === undefined) return undefined;
    let key: string;
    try {
      key = JSON.parse(text.slice(i, keyEnd)) as string; // escapes in keys count: "cache\u005fsalt" is cache_salt
    } catch {
      return undefined;
    }
    i = skipWs(text, keyEnd);
    if (text[i] !== ':') return undefined;
    const valueStart = skipWs(text, i + 1);
    const valueEnd = valueEndAt(text, valueStart);
    if (valueEnd === undefined) return undefined;
    members.push({ key, valueStart, valueEnd });
    i = skipWs(text, valueEnd);
    if (text[i] === ',') {
      i = skipWs(text, i + 1);
      continue;
    }
    if (text[i] === '}') return trailingOnly(text, i) ? { members, closeAt: i } : undefined;
    return undefined;
  }
}

function trailingOnly(text: string, close: number): boolean {
  return skipWs(text, close + 1) === text.length;
}

function skipWs(text: string, i: number): number {
  while (i < text.length && (text[i] === ' ' || text[i] === '\t' || text[i] === '\n' || text[i] === '\r')) i++;
  return i;
}

/** The index after the string token starting at `i` (which must be `"`). */
function stringEnd(text: string, i: number): number | undefined {
  if (text.charCodeAt(i) !== QUOTE) return undefined;
  const end = jsonStringEnd(text, i);
  return end === -1 ? undefined : end;
}

const QUOTE = 0x22;

/** The index after the value starting at `i`: a string, or a nested value balanced by brackets outside strings. */
function valueEndAt(text: string, i: number): number | undefined {
  if (text.charCodeAt(i) === QUOTE) return stringEnd(text, i);
  let depth = 0;
  for (let j = i; j < text.length; j++) {
    const c = text.charCodeAt(j);
    if (c === QUOTE) {
      const end = stringEnd(text, j);
      if (end === undefined) return undefined;
      j = end - 1;
    } else if (c === 0x7b || c === 0x5b)
      depth++; // { [
    else if (c === 0x7d || c === 0x5d) {
      // } ]
      if (depth === 0) return trimEnd(text, i, j);
      depth--;
      if (depth === 0) return j + 1;
    } else if (c === 0x2c && depth === 0) return trimEnd(text, i, j); // ,
  }
  return undefined;
}

/** A scalar ends before the whitespace that precedes the delimiter at `j`. */
function trimEnd(text: string, start: number, j: number): number | undefined {
  let end = j;
  while (end > start && /\s/.test(text[end - 1]!)) end--;
  return end > start ? end : undefined;
}

/**
 * Where a JSON text holds integer literals that a double cannot represent exactly (beyond 2^53 in magnitude), as a
 * tree of the containers on their paths: a node is an object or array, keyed by member name or array index (decimal).
 * Only containers on the way to such a literal get a node, so a body without one costs no allocation.
 */
export interface LiteralTree {
  /** Member name or array index -> the literal's text, as written. */
  readonly literals: Map<string, string>;
  /** Member name or array index -> the node of the object or array there. */
  readonly children: Map<string, LiteralTree>;
}

interface Frame {
  readonly array: boolean;
  /** The member whose value comes next (objects), or the index of the current element (arrays). */
  key: string;
  index: number;
  /** Whether the next string is a member name. */
  expectKey: boolean;
  node: LiteralTree | undefined;
  readonly parent: Frame | undefined;
  /** Where this container sits in its parent. */
  readonly at: string;
}

/**
 * The integer literals of `text` (JSON that `JSON.parse` accepted) a double cannot hold, by path: what `JSON.parse`
 * rounds to the nearest double. Of duplicate member names the last one counts, as `JSON.parse` keeps the last: a
 * later spelling drops whatever an earlier one noted below it. One pass, no recursion: strings are skipped with
 * `indexOf`, and each literal costs its length plus, once per container on its path, a node. Undefined when there is
 * none. For text that is not JSON the answer means nothing; callers compare each literal with the parsed value.
 */
export function unsafeIntegerLiterals(text: string): LiteralTree | undefined {
  let top: Frame | undefined;
  let root: LiteralTree | undefined;
  const nodeOf = (frame: Frame): LiteralTree => {
    if (frame.node !== undefined) return frame.node;
    // The frames up to the nearest one that has a node (or the outermost), then nodes created downward from there.
    const path: Frame[] = [];
    let f: Frame | undefined = frame;
    for (; f !== undefined && f.node === undefined; f = f.parent) path.push(f);
    for (let k = path.length - 1; k >= 0; k--) {
      const p = path[k]!;
      p.node = { literals: new Map(), children: new Map() };
      if (p.parent === undefined) root = p.node;
      else p.parent.node!.children.set(p.at, p.node);
    }
    return frame.node!;
  };
  const n = text.length;
  let i = 0;
  while (i < n) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      const end = jsonStringEnd(text, i);
      if (end === -1) return root;
      if (top?.expectKey) {
        top.expectKey = false;
        top.key = memberName(text.slice(i, end));
        // A member spelled again replaces the earlier value whole, as in JSON.parse.
        top.node?.literals.delete(top.key);
        top.node?.children.delete(top.key);
      }
      i = end;
    } else if (c === 0x7b || c === 0x5b) {
      // { [
      const at = top === undefined ? '' : top.array ? String(top.index) : top.key;
      top = { array: c === 0x5b, key: '', index: 0, expectKey: c === 0x7b, node: undefined, parent: top, at };
      i++;
    } else if (c === 0x7d || c === 0x5d) {
      // } ]
      top = top?.parent;
      i++;
    } else if (c === 0x2c) {
      // ,
      if (top?.array) top.index++;
      else if (top !== undefined) top.expectKey = true;
      i++;
    } else if (c === 0x2d || (c >= 0x30 && c <= 0x39)) {
      // A number: its integer digits, then any fraction or exponent.
      const start = i;
      if (c === 0x2d) i++;
      while (i < n && isDigit(text.charCodeAt(i))) i++;
      const digitsEnd = i;
      while (i < n && isNumberTail(text.charCodeAt(i))) i++;
      if (top !== undefined && digitsEnd === i && digitsEnd - start >= 16) {
        const literal = text.slice(start, i);
        if (!Number.isSafeInteger(Number(literal))) nodeOf(top).literals.set(top.array ? String(top.index) : top.key, literal);
      }
    } else i++; // whitespace, ':', and the letters of true, false and null
  }
  return root;
}

/** A member name's value: escapes count (`"se\u0065d"` is seed); most names have none and are not parsed. */
function memberName(quoted: string): string {
  if (!quoted.includes('\\')) return quoted.slice(1, -1);
  try {
    return JSON.parse(quoted) as string;
  } catch {
    return quoted;
  }
}

function isDigit(c: number): boolean {
  return c >= 0x30 && c <= 0x39;
}

/** Digits, `.`, `e`, `E`, `+`, `-`: what may follow a number's integer part. */
function isNumberTail(c: number): boolean {
  return isDigit(c) || c === 0x2e || c === 0x65 || c === 0x45 || c === 0x2b || c === 0x2d;
}
