/**
 * The top-level members of a JSON object text, found without parsing the values: where each value starts and ends,
 * and where the closing brace is. The gate rewrites a body's `cache_salt` on these offsets (src/envoy/body-rewrite.ts)
 * and a sidecar puts a client's exact integer literals back into the body it forwards (src/sidecar/exact-integers.ts).
 * Returns undefined for anything that is not one JSON object with nothing after it.
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
