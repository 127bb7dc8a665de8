import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { AttestationSchema, attestationPayload } from './attestation.js';
import { BindingSchema, bindingPayload } from './binding.js';
import { contractPayload, TransferContractSchema } from './contract.js';
import { createDevKeyRing } from './keys.js';
import { exampleAttestationFields, exampleContractFields } from './testing.js';
import { openToken, signToken } from './token.js';
import { TEST_NOW_MS } from '../../test/support/clock.js';

type Fields = Record<string, unknown>;

/** Values a field may be set to: valid ones, and each way a schema refuses one. */
const EDGE_VALUES: readonly unknown[] = [
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
  TEST_NOW_MS,
  TEST_NOW_MS + 1,
  TEST_NOW_MS - 1,
  16,
  'HND',
  'NHD',
  'hnd',
  [],
  ['10.0.0.1:1'],
  [''],
  Array.from({ length: 9 }, (_, i) => `10.0.0.${i}:1`),
  {},
  { cluster: 'c', endpoint: null },
];
const value = fc.oneof(fc.constantFrom(...EDGE_VALUES), fc.string({ maxLength: 3 }));

const REMOVE = Symbol('remove');

/** Every payload one edit away from `base`: each path set to each edge value, or removed. Deterministic. */
function singleEdits(base: Fields, paths: readonly string[]): Fields[] {
  const out: Fields[] = [];
  for (const path of [...paths, 'extra']) {
    for (const v of [...EDGE_VALUES, REMOVE]) {
      const f = structuredClone(base) as Fields;
      const [head, tail] = path.split('.') as [string, string | undefined];
      const target = tail === undefined ? f : (f[head] as Fields | null);
      if (target === null || typeof target !== 'object') continue;
      const key = tail ?? head;
      if (v === REMOVE) delete target[key];
      else target[key] = structuredClone(v);
      out.push(f);
    }
  }
  return out;
}

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
    decode: { cluster: 'decode-a', endpoint: '10.0.0.7:9090', alternates: ['10.0.0.8:9090'] },
    priority: -10,
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

  const attestation = { ...exampleAttestationFields(), promptTokenDigest: 'b'.repeat(64) };
  const builders = [
    { kind: 'contract', base: contract, paths: contractPaths, schema: TransferContractSchema, build: contractPayload },
    { kind: 'binding', base: binding, paths: Object.keys(binding), schema: BindingSchema, build: bindingPayload },
    { kind: 'attestation', base: attestation, paths: Object.keys(attestation), schema: AttestationSchema, build: attestationPayload },
  ] as const;

  it.each(builders)('accepts exactly what the $kind schema accepts, and writes the same JSON', (c) => {
    const same = (f: Fields): void => {
      expect(byHand(c.build, f)).toBe(bySchema((v) => c.schema.parse(v), c.kind, f));
    };
    same(c.base);
    for (const f of singleEdits(c.base, c.paths)) same(f);
    fc.assert(fc.property(mutated(c.base, c.paths), same), { numRuns: 2000 });
  });

  it('verifying with the hand-written builder answers exactly as the schema alone, refusals worded by the schema', () => {
    const keys = createDevKeyRing('mint-payload-test');
    for (const c of builders.filter((b) => b.kind !== 'binding')) {
      const verdicts = (f: Fields) => {
        // Signed as they are, valid or not: what a verifier of another version could be handed.
        const token = signToken(JSON.parse(JSON.stringify({ kind: c.kind, ...f })) as { kind: typeof c.kind }, keys);
        const bySchemaAlone = openToken(token, keys, TEST_NOW_MS, c.kind, c.schema as never);
        const withBuilder = openToken(token, keys, TEST_NOW_MS, c.kind, c.schema as never, c.build as never);
        return [withBuilder, bySchemaAlone];
      };
      for (const f of singleEdits(c.base, c.paths)) {
        const [withBuilder, bySchemaAlone] = verdicts(f);
        expect(withBuilder).toEqual(bySchemaAlone);
      }
      fc.assert(
        fc.property(mutated(c.base, c.paths), (f) => {
          const [withBuilder, bySchemaAlone] = verdicts(f);
          expect(withBuilder).toEqual(bySchemaAlone);
        }),
        { numRuns: 1000 },
      );
    }
  });

  it('says which field was wrong', () => {
    expect(() => contractPayload({ ...exampleContractFields(), promptDigest: 'nope' })).toThrow(
      /promptDigest must be a lowercase hex sha256/,
    );
    expect(() => bindingPayload({ ...binding, expiresAtMs: binding.issuedAtMs })).toThrow(/expiresAtMs must be after issuedAtMs/);
  });
});
