/**
 * A client's integers beyond 2^53, kept exact on the way to the worker. A sidecar parses the body with `JSON.parse`,
 * checks the object and forwards its own `JSON.stringify` of it (never the client's bytes), so a `"seed":
 * 9007199254740993` reached the worker as 9007199254740992: another seed than the client sent, and two client seeds
 * one. vLLM reads `seed` as a Python int (any size within its int64 bounds). Node 20 has no `JSON.rawJSON`, so the
 * sidecar notes each top-level member whose value is an integer literal a double cannot hold (`keepExactIntegers`,
 * on the client's text) and writes those literals back into the body it serialises (`serializeBody`), wherever the
 * member still holds the value parsing gave it (a member the sidecar rewrote keeps the rewrite). The note travels on
 * the body object under a symbol key: object spread and rest copy it, `JSON.stringify`, `Object.keys` and every check
 * ignore it. Integers nested below the top level are passed as doubles (no request field vLLM reads takes one there).
 */
import { topLevelMembers } from '../json-members.js';

const EXACT_INTEGERS: unique symbol = Symbol('kvgate.exactIntegers');

type Noted = Record<string, unknown> & { [EXACT_INTEGERS]?: Readonly<Record<string, string>> };

/** An integer literal (JSON grammar), without sign handling beyond a leading minus. */
const INTEGER_LITERAL = /^-?(0|[1-9]\d*)$/;
/** 2^53 has 16 digits: a text without a run of 16 digits holds no integer a double cannot represent exactly. */
const LONG_DIGIT_RUN = /\d{16}/;

/** Note, on `body` (parsed from `text`), every top-level integer literal beyond 2^53. Cheap when there is none. */
export function keepExactIntegers(text: string, body: Record<string, unknown>): void {
  if (!LONG_DIGIT_RUN.test(text)) return;
  const found = topLevelMembers(text);
  if (found === undefined) return;
  let exact: Record<string, string> | undefined;
  // Every occurrence in order: JSON.parse keeps the last of duplicate keys, and so does this.
  for (const m of found.members) {
    const literal = text.slice(m.valueStart, m.valueEnd);
    if (INTEGER_LITERAL.test(literal) && !Number.isSafeInteger(Number(literal)) && typeof body[m.key] === 'number') {
      exact ??= {};
      exact[m.key] = literal;
    } else if (exact !== undefined && m.key in exact) {
      delete exact[m.key];
    }
  }
  if (exact !== undefined && Object.keys(exact).length > 0) (body as Noted)[EXACT_INTEGERS] = exact;
}

/** `JSON.stringify(body)`, with the exact literals `keepExactIntegers` noted written back where the value is unchanged. */
export function serializeBody(body: unknown): string {
  const text = JSON.stringify(body);
  const exact = body !== null && typeof body === 'object' ? (body as Noted)[EXACT_INTEGERS] : undefined;
  if (exact === undefined) return text;
  const found = topLevelMembers(text);
  if (found === undefined) return text;
  let out = text;
  // From the last member back, so the offsets of the ones before stay valid.
  for (let i = found.members.length - 1; i >= 0; i--) {
    const m = found.members[i]!;
    const literal = exact[m.key];
    if (literal === undefined || (body as Record<string, unknown>)[m.key] !== Number(literal)) continue;
    out = out.slice(0, m.valueStart) + literal + out.slice(m.valueEnd);
  }
  return out;
}
