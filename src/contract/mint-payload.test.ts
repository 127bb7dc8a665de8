import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { BindingSchema, bindingPayload } from './binding.js';
import { contractPayload, TransferContractSchema } from './contract.js';
import { exampleContractFields } from './testing.js';
import { TEST_NOW_MS } from '../../test/support/clock.js';

type Fields = Record<string, unknown>;

/** Values a field may be set to: valid ones, and each way a schema refuses one. */
const value = fc.oneof(
  fc.constantFrom(
    '',
    'x',
    'a'.repeat(64),
    'A'.repeat(64),
    'f'.repeat(63),
    '0'.repeat(65),
    null,
    undefined,
    0,
    -1,
    1.5,
    2 ** 53,
    Number.NaN,
  ),
  fc.constantFrom(TEST_NOW_MS, TEST_NOW_MS + 1, TEST_NOW_MS - 1),
  fc.constantFrom(
    [],
    ['10.0.0.1:1'],
    [''],
    Array.from({ length: 9 }, (_, i) => `10.0.0.${i}:1`),
    {},
    { cluster: 'c', endpoint: null },
  ),
  fc.string({ maxLength: 3 }),
);

/** Fields with 0-3 of them replaced (or added, or removed), nested targets included. */
function mutated(base: Fields, paths: readonly string[]): fc.Arbitrary<Fields> {
  const edit = fc.record({ path: fc.constantFrom(...paths, 'extra', 'decode.extra', 'prefill.extra'), v: value, remove: fc.boolean() });
  return fc.array(edit, { maxLength: 3 }).map((edits) => {
    const out = structuredClone(base) as Fields;
    for (const e of edits) {
      const [head, tail] = e.path.split('.') as [string, string | undefined];
      let target = out;
      let key = head;
      if (tail !== undefined) {
        const inner = out[head];
        if (inner === null || typeof inner !== 'object') continue;
        target = inner as Fields;
        key = tail;
      }
      if (e.remove) delete target[key];
      else target[key] = e.v;
    }
    return out;
  });
}

/** The schema's verdict and output, as the zod-based minting had them. */
function bySchema(parse: (v: unknown) => unknown, kind: string, f: Fields): string | undefined {
  try {
    return JSON.stringify(parse({ kind, ...f }));
  } catch {
    return undefined;
  }
}

function byHand(build: (f: never) => unknown, f: Fields): string | undefined {
  try {
    return JSON.stringify(build(f as never));
  } catch {
    return undefined;
  }
}

describe('mint payloads: the schema rule for rule, and the schema key order byte for byte', () => {
  const contract = {
    ...exampleContractFields(),
    decode: { cluster: 'decode-a', endpoint: '10.0.0.7:8000', alternates: ['10.0.0.8:8000'] },
  };
  const contractPaths = [
    ...Object.keys(contract),
    'decode.cluster',
    'decode.endpoint',
    'decode.alternates',
    'prefill.cluster',
    'prefill.endpoint',
  ];
  const binding = {
    model: 'llama',
    revision: 'rev-a',
    fingerprint: 'f'.repeat(64),
    tenantScope: 'tenant:acme',
    session: 's-1',
    issuedAtMs: TEST_NOW_MS,
    expiresAtMs: TEST_NOW_MS + 1000,
  };

  it('accepts exactly what TransferContractSchema accepts, and writes the same JSON', () => {
    expect(byHand(contractPayload, contract)).toBe(bySchema((v) => TransferContractSchema.parse(v), 'contract', contract));
    fc.assert(
      fc.property(mutated(contract, contractPaths), (f) => {
        expect(byHand(contractPayload, f)).toBe(bySchema((v) => TransferContractSchema.parse(v), 'contract', f));
      }),
      { numRuns: 2000 },
    );
  });

  it('accepts exactly what BindingSchema accepts, and writes the same JSON', () => {
    expect(byHand(bindingPayload, binding)).toBe(bySchema((v) => BindingSchema.parse(v), 'binding', binding));
    fc.assert(
      fc.property(mutated(binding, Object.keys(binding)), (f) => {
        expect(byHand(bindingPayload, f)).toBe(bySchema((v) => BindingSchema.parse(v), 'binding', f));
      }),
      { numRuns: 2000 },
    );
  });

  it('says which field was wrong', () => {
    expect(() => contractPayload({ ...exampleContractFields(), promptDigest: 'nope' })).toThrow(
      /promptDigest must be a lowercase hex sha256/,
    );
    expect(() => bindingPayload({ ...binding, expiresAtMs: binding.issuedAtMs })).toThrow(/expiresAtMs must be after issuedAtMs/);
  });
});
