/**
 * A client's integers beyond 2^53, kept exact on the way to the worker, at any depth. A sidecar parses the body with
 * `JSON.parse`, checks the object and forwards its own `JSON.stringify` of it (never the client's bytes), so a
 * `"seed": 9007199254740993` reached the worker as 9007199254740992, and a JSON Schema bound of 18446744073709551615
 * in `response_format`, `structured_outputs` or a tool's `parameters` as 18446744073709552000: the worker constrained
 * its output to another schema than the client sent (and an integer >= 1e21 went as `1e+21`, which Python's `json`
 * reads as a float). vLLM hands those fields on as parsed by Python's `json`, ints exact (see src/sidecar/README.md
 * for the fields and their sources).
 *
 * Node 20 has no `JSON.rawJSON`, so: `keepExactIntegers` finds, on the client's text, every integer literal a double
 * cannot hold (src/json-members.ts `unsafeIntegerLiterals`) and notes it on the parsed object or array that holds it,
 * under a symbol key (`JSON.stringify`, `Object.keys`, the prompt digest and every check ignore it; object spread and
 * rest copy it, so the prefill body, the decode body and the `/tokenize` body built from the client's objects keep
 * it). `serializeBody` writes the body with a replacer that puts a sentinel string, random per call, where a noted
 * member still holds the double parsing gave it, then replaces each quoted sentinel by the literal. A member the
 * sidecar rewrote keeps the rewrite; an object or array the sidecar built anew carries no note.
 */
import { randomBytes } from 'node:crypto';
import { type LiteralTree, unsafeIntegerLiterals } from '../json-members.js';

const EXACT_INTEGERS: unique symbol = Symbol('kvgate.exactIntegers');

interface ExactLiteral {
  /** As the client wrote it. */
  readonly text: string;
  /** What `JSON.parse` made of it. */
  readonly value: number;
}

/** A parsed object or array with its members' exact literals, by member name or index (decimal). */
type Noted = { [EXACT_INTEGERS]?: ReadonlyMap<string, ExactLiteral> };

/** 2^53 has 16 digits: a text without a run of 16 digits holds no integer a double cannot represent exactly. */
const LONG_DIGIT_RUN = /\d{16}/;

/**
 * Note, on `body` (parsed from `text`) and the objects and arrays inside it, every integer literal beyond 2^53.
 * Cheap when the text has no run of 16 digits; otherwise one pass over the text and one walk down the noted paths.
 */
export function keepExactIntegers(text: string, body: Record<string, unknown>): void {
  if (!LONG_DIGIT_RUN.test(text)) return;
  const tree = unsafeIntegerLiterals(text);
  if (tree !== undefined) attach(tree, body);
}

function attach(tree: LiteralTree, body: object): void {
  const stack: [LiteralTree, object][] = [[tree, body]];
  while (stack.length > 0) {
    const [node, holder] = stack.pop()!;
    const members = holder as Record<string, unknown>;
    let note: Map<string, ExactLiteral> | undefined;
    for (const [key, text] of node.literals) {
      const value = Number(text);
      // The value parsing gave this member: anything else means the scan and the parse disagree (not JSON), so no note.
      if (!Object.hasOwn(members, key) || members[key] !== value) continue;
      note ??= new Map();
      note.set(key, { text, value });
    }
    if (note !== undefined) (holder as Noted)[EXACT_INTEGERS] = note;
    for (const [key, child] of node.children) {
      const v = Object.hasOwn(members, key) ? members[key] : undefined;
      if (v !== null && typeof v === 'object') stack.push([child, v]);
    }
  }
}

/**
 * How `JSON.stringify` writes a member or element whose value is an integer at or past 2^53: 16 or more digits
 * (below 1e21) or an exponent (1e21 and up), after `:`, `,` or `[` and before `,`, `]` or `}`. A text without one
 * holds no noted value (only a string could look like one), so it goes as it is, and nothing else is walked.
 */
const UNSAFE_NUMBER_OUT = /[:,[]-?(?:\d{16,}|\d(?:\.\d+)?e\+\d+)[,\]}]/;

/** 128 random bits in hex: a sentinel no client text can spell except by guessing them. */
const randomSentinelBits = (): string => randomBytes(16).toString('hex');

/**
 * `JSON.stringify(body)`, with the exact literals `keepExactIntegers` noted written back wherever a member still holds
 * the value parsing gave it. `randomBits` is a seam for tests; a sentinel that the text already holds (a client string
 * that spelled it) is detected, and another one drawn.
 */
export function serializeBody(body: unknown, randomBits: () => string = randomSentinelBits): string {
  const plain = JSON.stringify(body);
  if (plain === undefined || !UNSAFE_NUMBER_OUT.test(plain)) return plain;
  for (let attempt = 0; attempt < 4; attempt++) {
    const bits = randomBits();
    // Hex only: the sentinel goes into a regular expression below, and must need no escaping inside a JSON string.
    if (!/^[0-9a-f]{16,}$/.test(bits)) throw new Error('serializeBody: the random source must give at least 16 hex digits');
    const sentinel = `kvgate-exact-${bits}-`;
    const literals: string[] = [];
    const text = JSON.stringify(body, function (this: unknown, key: string, value: unknown): unknown {
      if (typeof value !== 'number') return value;
      const exact = (this as Noted)[EXACT_INTEGERS]?.get(key);
      if (exact === undefined || exact.value !== value) return value;
      literals.push(exact.text);
      return `${sentinel}${literals.length - 1}`;
    });
    if (literals.length === 0) return plain;
    // Every quoted sentinel must be one this call wrote; otherwise the body spelled it, and another one is drawn.
    if (occurrences(text, `"${sentinel}`) !== literals.length) continue;
    return text.replace(new RegExp(`"${sentinel}(\\d+)"`, 'g'), (_m, i: string) => literals[Number(i)]!);
  }
  throw new Error('serializeBody: every sentinel drawn already occurs in the body; the random source is broken');
}

function occurrences(text: string, needle: string): number {
  let count = 0;
  for (let at = text.indexOf(needle); at !== -1; at = text.indexOf(needle, at + needle.length)) count++;
  return count;
}
