import { describe, expect, it } from 'vitest';
import { canonicalJson } from '../compat/canonical-json.js';
import { promptDigestOf } from '../contract/body-binding.js';
import { jsonStringEnd, MAX_JSON_DEPTH } from '../json-limits.js';
import { keepExactIntegers, serializeBody } from './exact-integers.js';
import { parseJsonObject } from './http-io.js';
import { toPrefillBody, toPromptCount } from './openai-body.js';
import { prng } from '../../testbed/demo/load.js';

function parsed(text: string): Record<string, unknown> {
  const body = JSON.parse(text) as Record<string, unknown>;
  keepExactIntegers(text, body);
  return body;
}

/** An integer literal a double cannot hold: it must reach the worker as written. */
const unsafeInteger = (lit: string): boolean => /^-?(0|[1-9]\d*)$/.test(lit) && !Number.isSafeInteger(Number(lit));

/**
 * `text` with every number replaced by a string that names it: an unsafe integer literal by its text, any other number
 * by the double it means (what Python's json and JSON.parse both read). Parsing the result compares two JSON texts
 * number by number, exact where exactness matters; duplicate keys resolve as JSON.parse resolves them.
 */
function numbersNamed(text: string): unknown {
  let out = '';
  let i = 0;
  while (i < text.length) {
    const c = text[i]!;
    if (c === '"') {
      const end = jsonStringEnd(text, i);
      out += text.slice(i, end);
      i = end;
    } else if (c === '-' || (c >= '0' && c <= '9')) {
      let j = i + 1;
      while (j < text.length && /[0-9.eE+-]/.test(text[j]!)) j++;
      const lit = text.slice(i, j);
      out += JSON.stringify(`\u0001${unsafeInteger(lit) ? lit : String(Number(lit))}`);
      i = j;
    } else {
      out += c;
      i++;
    }
  }
  return JSON.parse(out);
}

const BIG = [
  '9007199254740993',
  '9007199254740992',
  '9999999999999999',
  '18446744073709551615',
  '-9223372036854775809',
  '1000000000000000000000',
  '123456789012345678901234567890',
];
const OTHER_NUMBERS = [
  '0',
  '-0',
  '7',
  '1.5',
  '1234567890123456',
  '9007199254740991',
  '1e21',
  '1.2345678901234567e20',
  '12345678901234567.0',
  '-2E-3',
];
const STRINGS = ['"x"', '"12345678901234567"', '"kvgate-exact-00-0"', '"a\\"b\\\\"', '"\\u0041"', '"1e+21"'];
const KEYS = ['"a"', '"b"', '"seed"', '"se\\u0065d"', '"maximum"', '"0"', '"enum"'];
const WS = ['', ' ', '\n  ', '\t', '\r\n'];

/** A random JSON value as text: nested objects and arrays, duplicate and escaped keys, big and ordinary numbers. */
function randomJson(r: () => number, depth: number, top = false): string {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
  const ws = (): string => pick(WS);
  const digits = (n: number): string => {
    let s = String(1 + Math.floor(r() * 9));
    while (s.length < n) s += String(Math.floor(r() * 10));
    return s;
  };
  const roll = r();
  if (top || (depth > 0 && roll < 0.3)) {
    const n = Math.floor(r() * 5);
    const members = Array.from({ length: n }, () => `${ws()}${pick(KEYS)}${ws()}:${ws()}${randomJson(r, depth - 1)}${ws()}`);
    return `{${members.join(',')}}`;
  }
  if (depth > 0 && roll < 0.5) {
    const n = Math.floor(r() * 5);
    return `[${Array.from({ length: n }, () => `${ws()}${randomJson(r, depth - 1)}${ws()}`).join(',')}]`;
  }
  if (roll < 0.65) return pick(BIG);
  if (roll < 0.75) return `${r() < 0.5 ? '-' : ''}${digits(16 + Math.floor(r() * 10))}`;
  if (roll < 0.85) return pick(OTHER_NUMBERS);
  if (roll < 0.95) return pick(STRINGS);
  return pick(['true', 'false', 'null']);
}

describe('integers beyond 2^53 reach the worker as the client wrote them, at any depth', () => {
  it('a 64-bit seed survives the parse, a spread that adds kv_transfer_params, and a rest that drops fields', () => {
    const body = parsed('{"model":"m","prompt":"hi","seed":9007199254740993,"min_tokens":2,"big":-18446744073709551615}');
    expect(body['seed']).toBe(9007199254740992); // what the checks see: a double
    expect(JSON.stringify(body)).toContain('"seed":9007199254740992');
    const decode = { ...body, kv_transfer_params: { remote_block_ids: [1, 2] } };
    expect(JSON.parse(serializeBody(decode).replace(/(-?\d{16,})/g, '"$1"'))).toMatchObject({
      seed: '9007199254740993',
      big: '-18446744073709551615',
    });
    const { min_tokens: _m, ...prefill } = body;
    const text = serializeBody({ ...prefill, max_tokens: 1 });
    expect(text).toContain('"seed":9007199254740993');
    expect(text).toContain('"big":-18446744073709551615');
    expect(text).not.toContain('min_tokens');
    expect(Object.keys(body)).toEqual(['model', 'prompt', 'seed', 'min_tokens', 'big']);
  });

  it('nested members, array elements and integers past 1e21 go as written; safe integers and strings are left to JSON', () => {
    const text =
      '{"seed":12345678901234567,"n":9007199254740991,"x":{"seed":12345678901234567,"e":[1,-9223372036854775809,[1000000000000000000000]]},"s":"12345678901234567"}';
    expect(JSON.stringify(JSON.parse(text))).toContain('1e+21'); // what Python's json would read as a float
    expect(serializeBody(parsed(text))).toBe(text);
  });

  it('a member the sidecar rewrote keeps the rewrite, at the top and nested; a container built anew carries no note', () => {
    const body = parsed('{"seed":12345678901234567,"x":{"max":18446744073709551615,"min":12345678901234567},"a":[12345678901234567,3]}');
    const x = body['x'] as Record<string, unknown>;
    // A spread copy of a nested object keeps the notes of the members it did not change.
    expect(serializeBody({ ...body, seed: 7, x: { ...x, max: 5 } })).toBe(
      '{"seed":7,"x":{"max":5,"min":12345678901234567},"a":[12345678901234567,3]}',
    );
    x['min'] = 1;
    (body['a'] as unknown[])[0] = 2;
    expect(serializeBody(body)).toBe('{"seed":12345678901234567,"x":{"max":18446744073709551615,"min":1},"a":[2,3]}');
    // An array rebuilt element by element is the sidecar's own value: its numbers go as the doubles they hold.
    expect(serializeBody({ a: [...(parsed('{"a":[12345678901234567]}')['a'] as unknown[])] })).toBe('{"a":[12345678901234568]}');
  });

  it('takes the last of duplicate keys, as JSON.parse does, at any depth, and notes nothing without a long digit run', () => {
    expect(serializeBody(parsed('{"seed":12345678901234567,"seed":3}'))).toBe('{"seed":3}');
    expect(serializeBody(parsed('{"seed":3,"seed":12345678901234567}'))).toBe('{"seed":12345678901234567}');
    expect(serializeBody(parsed('{"seed":1.2345678901234567e20}'))).toBe('{"seed":123456789012345670000}');
    // An earlier spelling's literals go with it, whatever the later one holds (here the same double, written as a float).
    expect(serializeBody(parsed('{"a":{"x":12345678901234567},"a":{"x":12345678901234567.0}}'))).toBe('{"a":{"x":12345678901234568}}');
    expect(serializeBody(parsed('{"a":{"x":[12345678901234567]},"a":{"x":[1]},"b":{"y":1},"b":{"y":12345678901234567}}'))).toBe(
      '{"a":{"x":[1]},"b":{"y":12345678901234567}}',
    );
    expect(serializeBody(parsed('{"a":[12345678901234567],"se\\u0065d":1,"a":{"0":12345678901234567},"seed":12345678901234567}'))).toBe(
      '{"a":{"0":12345678901234567},"seed":12345678901234567}',
    );
    const plain = parsed('{"model":"m","seed":42,"x":{"y":[1,2]}}');
    expect(Object.getOwnPropertySymbols(plain)).toEqual([]);
    expect(Object.getOwnPropertySymbols(plain['x'])).toEqual([]);
    expect(serializeBody(plain)).toBe(JSON.stringify(plain));
    expect(serializeBody(undefined)).toBe(JSON.stringify(undefined));
  });

  it('property: random nested bodies reach the worker with every number as the client meant it, big integers to the byte', () => {
    for (let seed = 1; seed <= 400; seed++) {
      const text = randomJson(prng(seed), 5, true);
      const out = serializeBody(parsed(text));
      expect(numbersNamed(out), `seed ${seed}: ${text}`).toEqual(numbersNamed(text));
      expect(() => JSON.parse(out), `seed ${seed}`).not.toThrow(); // (-0 goes as 0, as before: Python's int has no -0)
    }
  });

  it('a client string cannot spell the sentinel: one found in the body is detected and another drawn', () => {
    const draws = ['0'.repeat(32), '1'.repeat(32)];
    let drawn = 0;
    const bits = (): string => draws[Math.min(drawn++, draws.length - 1)]!;
    const spelled = `kvgate-exact-${'0'.repeat(32)}-0`;
    const body = parsed(`{"m":"${spelled}","${spelled}":"${spelled}-1","x":[12345678901234567,"${spelled}"]}`);
    expect(serializeBody(body, bits)).toBe(`{"m":"${spelled}","${spelled}":"${spelled}-1","x":[12345678901234567,"${spelled}"]}`);
    expect(drawn).toBe(2);
    // Strings shaped like any sentinel pass untouched under the real random source.
    const lookalikes = parsed('{"a":"kvgate-exact-","b":"\\"kvgate-exact-ab-0\\"","c":12345678901234567}');
    expect(serializeBody(lookalikes)).toBe('{"a":"kvgate-exact-","b":"\\"kvgate-exact-ab-0\\"","c":12345678901234567}');
    // A random source that only ever returns what the body spelled is a bug, not a reason to round silently.
    expect(() => serializeBody(body, () => '0'.repeat(32))).toThrow(/random source/);
    expect(() => serializeBody(body, () => '.*'.repeat(16))).toThrow(/hex digits/);
  });

  it('keeps a literal at the deepest nesting a body may have, where a deeper one is refused before parsing', () => {
    const nested = (levels: number): string => `${'{"x":['.repeat(levels / 2)}18446744073709551615${']}'.repeat(levels / 2)}`;
    const text = nested(MAX_JSON_DEPTH);
    const body = parseJsonObject(text);
    expect(body.ok).toBe(true);
    if (!body.ok) return;
    keepExactIntegers(text, body.value);
    expect(serializeBody(body.value)).toBe(text);
    expect(parseJsonObject(nested(MAX_JSON_DEPTH + 2)).ok).toBe(false);
  });

  it('stays linear: 100,000 big integers all go exact, and 100,000 ordinary numbers beside a long digit run note nothing', () => {
    const bigs = Array.from({ length: 100_000 }, (_, i) => `${9007199254740993n + BigInt(i) * 7n}${i % 10}`);
    const text = `{"prompt":"p","vllm_xargs":{"ids":[${bigs.join(',')}]}}`;
    expect(serializeBody(parsed(text))).toBe(text);
    const ordinary = `{"prompt":[${Array.from({ length: 100_000 }, (_, i) => i).join(',')}],"s":"1234567890123456789"}`;
    const body = parsed(ordinary);
    expect(Object.getOwnPropertySymbols(body)).toEqual([]);
    // The long run is inside a string: no number there can hold a note, so no sentinel is drawn and nothing is walked.
    expect(
      serializeBody(body, () => {
        throw new Error('no sentinel needed');
      }),
    ).toBe(ordinary);
  });
});

describe('what the sidecar builds from the body keeps the literals, and the prompt digest does not move', () => {
  const text =
    '{"model":"m","messages":[{"role":"user","content":"hi"}],"documents":[{"title":"t","text":"x"}],' +
    '"chat_template_kwargs":{"max_id":9007199254740995},' +
    '"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"id":{"type":"integer","maximum":18446744073709551615,"enum":[12345678901234567891,-9223372036854775809]}}}}}],' +
    '"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"type":"integer","const":9007199254740993}}},' +
    '"vllm_xargs":{"trace":1000000000000000000001},"seed":9007199254740993,"max_tokens":5}';
  const literals = [
    '9007199254740995',
    '18446744073709551615',
    '12345678901234567891',
    '-9223372036854775809',
    '9007199254740993',
    '1000000000000000000001',
  ];

  it('the prefill leg and the /tokenize body carry every literal the client wrote', () => {
    const body = parsed(text);
    const leg = serializeBody(toPrefillBody(body));
    for (const lit of literals) expect(leg).toContain(lit);
    const count = toPromptCount('chat', body, '0.22.0');
    expect(count.ok && count.value.kind).toBe('tokenize');
    if (!count.ok || count.value.kind !== 'tokenize') return;
    const tokenize = serializeBody(count.value.body);
    // /tokenize renders the tools and the template kwargs (the latter rebuilt with `documents` merged in).
    for (const lit of ['9007199254740995', '18446744073709551615', '12345678901234567891', '-9223372036854775809'])
      expect(tokenize).toContain(lit);
    expect(tokenize).toContain('"documents":[{"title":"t","text":"x"}]');
  });

  it('the prompt digest is over the parsed doubles: the same at the gate, at each sidecar and after the prefill leg', () => {
    const body = parsed(text);
    const gate = JSON.parse(text) as Record<string, unknown>;
    expect(canonicalJson(body)).toBe(canonicalJson(gate)); // the notes are symbol-keyed: canonical JSON skips them
    expect(promptDigestOf(body)).toBe(promptDigestOf(gate));
    const leg = serializeBody(toPrefillBody(body));
    expect(promptDigestOf(parsed(leg))).toBe(promptDigestOf(gate));
  });
});
