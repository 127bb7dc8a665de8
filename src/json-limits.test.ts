import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { findTransferParams, jsonNestingExceeds, jsonStringEnd } from './json-limits.js';

/** The walk as first written (every value stacked, every path spelled): the oracle for the cheaper one. */
function reference(value: unknown, skipTopLevel = false): { path: string; field: string } | undefined {
  const stack: { v: unknown; path: string; top: boolean }[] = [{ v: value, path: '', top: true }];
  while (stack.length > 0) {
    const { v, path, top } = stack.pop()!;
    if (v === null || typeof v !== 'object') continue;
    if (Array.isArray(v)) {
      v.forEach((x, i) => {
        stack.push({ v: x, path: `${path}[${i}]`, top: false });
      });
      continue;
    }
    for (const [k, x] of Object.entries(v as Record<string, unknown>)) {
      const here = path === '' ? k : `${path}.${k}`;
      const bare = k.length <= 32 ? k.toLowerCase().replace(/[-_]/g, '') : '';
      const field = bare === 'kvtransferparams' ? 'kv_transfer_params' : bare === 'ectransferparams' ? 'ec_transfer_params' : undefined;
      if (field !== undefined && !(top && skipTopLevel && k === 'kv_transfer_params')) return { path: here.slice(0, 128), field };
      stack.push({ v: x, path: here, top: false });
    }
  }
  return undefined;
}

const kvKey = fc.constantFrom(
  'kv_transfer_params',
  'KV-Transfer-Params',
  'kvtransferparams',
  'kv__transfer__params',
  'k_v_transfer_params',
  'ec_transfer_params',
  'EC-Transfer-Params',
);
const key = fc.oneof(fc.string({ maxLength: 20 }), kvKey, fc.constantFrom('model', 'messages', 'vllm_xargs', '__proto__', '0', '10'));
const json = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    fc.oneof(fc.string(), fc.integer(), fc.boolean(), fc.constant(null)),
    fc.array(tie('value'), { maxLength: 4 }),
    fc.dictionary(key, tie('value'), { maxKeys: 5 }),
  ),
})).value;

describe('findTransferParams', () => {
  it('finds the same path as the full walk, on random JSON and on parsed JSON text', () => {
    fc.assert(
      fc.property(json, fc.boolean(), (v, skip) => {
        expect(findTransferParams(v, skip)).toEqual(reference(v, skip));
        const parsed: unknown = JSON.parse(JSON.stringify(v));
        expect(findTransferParams(parsed, skip)).toEqual(reference(parsed, skip));
      }),
      { numRuns: 500 },
    );
  });

  it('names where vLLM would read it, top level or nested, in any spelling', () => {
    const kv = (path: string) => ({ path, field: 'kv_transfer_params' });
    expect(findTransferParams({ model: 'm', kv_transfer_params: {} })).toEqual(kv('kv_transfer_params'));
    expect(findTransferParams({ model: 'm', kv_transfer_params: {} }, true)).toBeUndefined();
    expect(findTransferParams({ vllm_xargs: { 'KV-Transfer-Params': 1 } }, true)).toEqual(kv('vllm_xargs.KV-Transfer-Params'));
    expect(findTransferParams({ messages: [{ role: 'user', content: 'x' }, { kvtransferparams: null }] })).toEqual(
      kv('messages[1].kvtransferparams'),
    );
    expect(findTransferParams({ prompt: 'kv_transfer_params', max_tokens: 3 })).toBeUndefined();
  });

  it('finds ec_transfer_params the same way, the top level included whatever the caller skips', () => {
    const ec = (path: string) => ({ path, field: 'ec_transfer_params' });
    expect(findTransferParams({ model: 'm', ec_transfer_params: {} }, true)).toEqual(ec('ec_transfer_params'));
    expect(findTransferParams({ vllm_xargs: { Ec_Transfer_Params: 'x' } })).toEqual(ec('vllm_xargs.Ec_Transfer_Params'));
    expect(findTransferParams({ prompt: 'ec_transfer_params' })).toBeUndefined();
  });
});

/** The scans as first written, a character at a time: the oracles for the indexOf-based ones. */
function stringEndByChar(text: string, quote: number): number {
  for (let j = quote + 1; j < text.length; j++) {
    const c = text.charCodeAt(j);
    if (c === 0x5c) j++;
    else if (c === 0x22) return j + 1;
  }
  return -1;
}

function nestingExceedsByChar(text: string, max: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++;
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x7b || c === 0x5b) {
      if (++depth > max) return true;
    } else if (c === 0x7d || c === 0x5d) depth--;
  }
  return false;
}

/** Texts dense in the characters that matter: quotes, backslashes, brackets. */
const jsonish = fc.array(fc.constantFrom('"', '\\', '{', '}', '[', ']', 'a', ' ', ',', ':', 'é'), { maxLength: 60 }).map((a) => a.join(''));

describe('the string and nesting scans', () => {
  it('end a string where a character-by-character scan does, escapes and unterminated strings included', () => {
    fc.assert(
      fc.property(jsonish, (body) => {
        const text = `"${body}`;
        expect(jsonStringEnd(text, 0)).toBe(stringEndByChar(text, 0));
      }),
      { numRuns: 3000 },
    );
    expect(jsonStringEnd('"a\\"b\\\\"c', 0)).toBe(8);
  });

  it('measure nesting as a character-by-character scan does, on dense and on real JSON text', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          jsonish,
          json.map((v) => JSON.stringify(v)),
        ),
        fc.integer({ min: 0, max: 4 }),
        (text, max) => {
          expect(jsonNestingExceeds(text, max)).toBe(nestingExceedsByChar(text, max));
        },
      ),
      { numRuns: 3000 },
    );
  });
});
