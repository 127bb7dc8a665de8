/**
 * Property-based fuzzing of `parseOpenAiBody` (src/decide/request-facts.ts), the first thing that reads a client's
 * bytes: it must never throw, must refuse every client-sent `kv_transfer_params`, and must accept every well-formed
 * completions or chat body. Bounded runs, so the file finishes in a few seconds.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { parseOpenAiBody } from '../../src/decide/request-facts.js';
import { KvgateError } from '../../src/errors.js';

const LIMIT = 4096;
const limits = { maxBodyBytes: LIMIT };
const PATHS = ['/v1/completions', '/v1/chat/completions'] as const;
const encode = (v: unknown): Uint8Array => new TextEncoder().encode(JSON.stringify(v));
const RUNS = { numRuns: 300 };

/** Keys a hostile client might try: prototype names, near-misses of kvgate's fields, plain words. */
const hostileKey = fc.oneof(
  fc.constantFrom(
    '__proto__',
    'constructor',
    'prototype',
    'toString',
    'model',
    'prompt',
    'messages',
    'stream',
    'user',
    'cache_salt',
    'KV_TRANSFER_PARAMS',
    'kv_transfer_params ',
  ),
  fc.string({ maxLength: 12 }),
);
const anyJson = fc.jsonValue({ maxDepth: 3 });
const path = fc.oneof(
  fc.constantFrom(...PATHS),
  fc.constantFrom('/v1/completions/', '/v1/chat/completions?x=1', '/v1/embeddings', '/', ''),
  fc.string({ maxLength: 30 }),
);

/** Every outcome is a Result; a refusal is a KvgateError with one of the codes a body can earn. */
function expectWellFormedOutcome(r: ReturnType<typeof parseOpenAiBody>): void {
  if (r.ok) return;
  expect(r.error).toBeInstanceOf(KvgateError);
  expect(['bad_request', 'body_too_large', 'kv_params_forbidden']).toContain(r.error.code);
  expect(r.error.reason.length).toBeGreaterThan(10);
}

describe('parseOpenAiBody never throws', () => {
  it('on arbitrary bytes, on any path', () => {
    fc.assert(
      fc.property(path, fc.uint8Array({ maxLength: 2 * LIMIT }), (p, body) => {
        expectWellFormedOutcome(parseOpenAiBody(p, body, limits));
      }),
      RUNS,
    );
  });

  it('on arbitrary JSON values, and on objects with hostile keys', () => {
    const objects = fc.dictionary(hostileKey, anyJson, { maxKeys: 8 });
    fc.assert(
      fc.property(fc.constantFrom(...PATHS), fc.oneof(anyJson, objects), (p, value) => {
        expectWellFormedOutcome(parseOpenAiBody(p, encode(value), limits));
      }),
      RUNS,
    );
  });

  it('on JSON text cut at any point (a body truncated in transit)', () => {
    const body = fc.record({ model: fc.string(), prompt: fc.string(), extra: anyJson });
    fc.assert(
      fc.property(fc.constantFrom(...PATHS), body, fc.nat(), (p, value, cut) => {
        const text = JSON.stringify(value);
        const r = parseOpenAiBody(p, new TextEncoder().encode(text.slice(0, cut % (text.length + 1))), limits);
        expectWellFormedOutcome(r);
        if (cut % (text.length + 1) < text.length) expect(r.ok).toBe(false);
      }),
      RUNS,
    );
  });
});

describe('client-sent kv_transfer_params', () => {
  it('are refused with kv_params_forbidden whatever else the object holds, and whatever their value', () => {
    const rest = fc.dictionary(
      hostileKey.filter((k) => k !== 'kv_transfer_params'),
      anyJson,
      { maxKeys: 6 },
    );
    fc.assert(
      fc.property(fc.constantFrom(...PATHS), rest, anyJson, fc.boolean(), (p, others, params, first) => {
        // Key order varies: first or last in the object.
        const value = first ? { kv_transfer_params: params, ...others } : { ...others, kv_transfer_params: params };
        const body = encode(value);
        fc.pre(body.byteLength <= LIMIT);
        const r = parseOpenAiBody(p, body, limits);
        expect(r.ok).toBe(false);
        expect(!r.ok && r.error.code).toBe('kv_params_forbidden');
      }),
      RUNS,
    );
  });
});

/** Strings a client may send as a model name: anything with a non-space character. */
const modelName = fc.string({ minLength: 1, maxLength: 40 }).filter((s) => s.trim() !== '');
const ints = fc.array(fc.integer({ min: 0, max: 200_000 }), { minLength: 1, maxLength: 20 });
const prompt = fc.oneof(
  fc.string({ maxLength: 200 }),
  fc.array(fc.string({ maxLength: 20 }), { minLength: 1, maxLength: 4 }),
  ints,
  fc.array(ints, { minLength: 1, maxLength: 3 }),
);
const message = fc.record({
  role: fc.constantFrom('system', 'user', 'assistant', 'tool'),
  content: fc.oneof(fc.string({ maxLength: 100 }), fc.constant(null)),
});
/** Fields clients add that kvgate does not read: kept in `json`, never a reason to refuse. */
// Fields the gate passes on without reading. `max_tokens` and `n` are not among them: the gate refuses what vLLM would
// refuse in a field a prefill leg rewrites (src/rewritten-fields.ts), so they are generated valid in `optional`.
const passthrough = fc.dictionary(fc.constantFrom('temperature', 'top_p', 'seed', 'stop', 'logprobs', 'metadata', 'x_custom'), anyJson, {
  maxKeys: 4,
});
const optional = fc.record(
  {
    stream: fc.oneof(fc.boolean(), fc.constant(null)),
    user: fc.oneof(fc.string({ maxLength: 20 }), fc.constant(null)),
    cache_salt: fc.string({ minLength: 1, maxLength: 20 }),
    max_tokens: fc.oneof(fc.integer({ min: 1, max: 1_000_000 }), fc.constant(null)),
    n: fc.integer({ min: 1, max: 8 }),
  },
  { requiredKeys: [] },
);

describe('well-formed bodies', () => {
  it('completions with any prompt form are accepted, and what routing reads is what was sent', () => {
    fc.assert(
      fc.property(modelName, prompt, optional, passthrough, (model, p, opt, extra) => {
        const value = { ...extra, model, prompt: p, ...opt };
        const r = parseOpenAiBody('/v1/completions', encode(value), { maxBodyBytes: 1 << 20 });
        expect(r.ok, !r.ok ? r.error.message : '').toBe(true);
        if (!r.ok) return;
        expect(r.value.endpoint).toBe('completions');
        expect(r.value.model).toBe(model);
        expect(r.value.stream).toBe(opt.stream === true);
        expect(r.value.cacheSalt).toBe(opt.cache_salt);
        expect(r.value.user).toBe(typeof opt.user === 'string' ? opt.user : undefined);
        expect(r.value.json).toEqual(JSON.parse(JSON.stringify(value)));
      }),
      RUNS,
    );
  });

  it('chat bodies with any non-empty message list are accepted', () => {
    fc.assert(
      fc.property(modelName, fc.array(message, { minLength: 1, maxLength: 5 }), optional, (model, messages, opt) => {
        const r = parseOpenAiBody('/v1/chat/completions', encode({ model, messages, ...opt }), { maxBodyBytes: 1 << 20 });
        expect(r.ok, !r.ok ? r.error.message : '').toBe(true);
        expect(r.ok && [r.value.endpoint, r.value.model]).toEqual(['chat', model]);
      }),
      RUNS,
    );
  });

  it('any body over the limit is body_too_large before it is even decoded', () => {
    fc.assert(
      fc.property(fc.constantFrom(...PATHS), fc.uint8Array({ minLength: 1, maxLength: 512 }), fc.nat({ max: 511 }), (p, body, limit) => {
        fc.pre(body.byteLength > limit && limit > 0);
        const r = parseOpenAiBody(p, body, { maxBodyBytes: limit });
        expect(!r.ok && r.error.code).toBe('body_too_large');
      }),
      RUNS,
    );
  });
});
