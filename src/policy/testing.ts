/**
 * Test helpers for anything that needs descriptors or route tables: hand-built, valid by construction, and close to
 * a real deployment (Llama-3-8B on vLLM with NixlConnector). Revisions `a` and `b` have identical geometry and
 * differ only in their weights revision: the pair that passes vLLM's NIXL handshake and still corrupts output.
 */
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseDescriptor, type CompatDescriptor, type CompatDescriptorInput } from '../compat/descriptor.js';
import { formatIssues } from '../config/issues.js';
import type { CompiledRouteTable } from './compile.js';
import { parse as parseYaml } from 'yaml';
import { descriptorFilesOf, descriptorPath, parseRouteTable, routeTableFromValue, type RouteTableOptions } from './load.js';

/** The directory of the YAML fixtures (`two-revisions.yaml`, ...). */
export const FIXTURES_DIR = join(dirname(fileURLToPath(import.meta.url)), 'fixtures');

/** Weights revisions of the two test revisions (hub-style commit shas). */
export const WEIGHTS = Object.freeze({
  a: '5f0b02c75b57c5855da9ae460ce51323ea669d8a',
  b: 'e1945c40cd546c78e41f1151f4db032b271faeaa',
});

/**
 * The canary digests a simulated worker of each test revision answers (computed by testbed/sim/recorded-canaries.ts
 * and checked there by a test): a routable revision must carry them (src/policy/semantic-trust.ts).
 */
export const RECORDED_CANARIES = Object.freeze({
  a: {
    tokenizer: '5fae63391979c8c723d8efd55538020e07fb5692ac92e3adc7879f7a7c4176ab',
    chatTemplate: '17b0d8d9784cc7cf122263164d8c93c2d06ef35664346b3526014b2496779e3a',
    generation: 'e0f825c398e1567160b36d51d4636901f71ef4f15e41d409d9032bb3d0011822',
  },
  b: {
    tokenizer: '5fae63391979c8c723d8efd55538020e07fb5692ac92e3adc7879f7a7c4176ab',
    chatTemplate: '17b0d8d9784cc7cf122263164d8c93c2d06ef35664346b3526014b2496779e3a',
    generation: '75c3a7ff4df976b0e1deabab8b812575b7dc0304124de6e76332abae6a300aab',
  },
});

type DeepPartial<T> = T extends readonly unknown[] ? T : T extends object ? { [K in keyof T]?: DeepPartial<T[K]> | undefined } : T;

export type DescriptorOverrides = DeepPartial<CompatDescriptorInput> & {
  /** Which weights revision to start from (default `a`). */
  readonly weights?: 'a' | 'b';
};

/** The raw (input) form of a test descriptor, for building YAML/JSON tables. */
export function testDescriptorInput(overrides: DescriptorOverrides = {}): CompatDescriptorInput {
  const { weights = 'a', ...rest } = overrides;
  const base: CompatDescriptorInput = {
    model: { id: 'meta-llama/Meta-Llama-3-8B-Instruct', revision: WEIGHTS[weights] },
    adapter: null,
    tokenizer: { id: 'meta-llama/Meta-Llama-3-8B-Instruct', revision: 'tok-2024-04-18' },
    chatTemplate: { id: 'llama-3-instruct', revision: 'tmpl-1' },
    architecture: {
      name: 'LlamaForCausalLM',
      numLayers: 32,
      numKvHeads: 8,
      headSize: 128,
      attentionBackend: 'FLASH_ATTN',
      position: { type: 'rope', ropeTheta: 500000 },
      slidingWindow: null,
    },
    modelDtype: 'bfloat16',
    kvCache: { dtype: 'auto', scaleScheme: 'none', blockSize: 16, layout: 'HND' },
    engine: { name: 'vllm', version: '0.11.0' },
    connector: { name: 'NixlConnector', version: 2, transferMode: 'pull' },
    canaries: { ...RECORDED_CANARIES[weights] },
  };
  return merge(base, rest) as CompatDescriptorInput;
}

/** A valid, frozen descriptor for revision `a` (or `b`), with overrides merged in. */
export function testDescriptor(overrides: DescriptorOverrides = {}): CompatDescriptor {
  return parseDescriptor(testDescriptorInput(overrides));
}

/** FP8 KV with dynamic per-block scales: fingerprintable, but never transferable over NixlConnector. */
export function fp8DynamicDescriptorInput(weights: 'a' | 'b' = 'a'): CompatDescriptorInput {
  return testDescriptorInput({ weights, kvCache: { dtype: 'fp8', scaleScheme: 'dynamic-per-block' } });
}

function merge(base: unknown, over: unknown): unknown {
  if (over === undefined) return base;
  if (over === null || typeof over !== 'object' || Array.isArray(over)) return over;
  if (base === null || typeof base !== 'object' || Array.isArray(base)) return over;
  const out: Record<string, unknown> = { ...(base as Record<string, unknown>) };
  for (const [k, v] of Object.entries(over as Record<string, unknown>)) out[k] = merge(out[k], v);
  return out;
}

/** Read a fixture's text. */
export function readFixture(name: string): string {
  return readFileSync(join(FIXTURES_DIR, name), 'utf8');
}

/** Parse a fixture (reading the descriptor files it names) into a table; throws with every issue on a bad fixture (a test bug). */
export function loadFixtureTable(name: string, options: RouteTableOptions = {}): CompiledRouteTable {
  const text = readFixture(name);
  const file = join(FIXTURES_DIR, name);
  const descriptorFiles: Record<string, string> = {};
  for (const ref of descriptorFilesOf(parseYaml(text))) descriptorFiles[ref] = readFileSync(descriptorPath(file, ref), 'utf8');
  const r = parseRouteTable(text, { file, descriptorFiles }, options);
  if (!r.ok) throw new Error(`fixture ${name} is invalid:\n${formatIssues(r.error)}`);
  return r.value;
}

/** Build a table from a plain value, or throw with every issue. */
export function tableFromValue(value: unknown, options: RouteTableOptions & { file?: string } = {}): CompiledRouteTable {
  const r = routeTableFromValue(value, { file: options.file ?? 'test-table.yaml' }, options);
  if (!r.ok) throw new Error(`test table is invalid:\n${formatIssues(r.error)}`);
  return r.value;
}

/** Compile a fixture; `semantic: false` lets a test compile a table the loader would reject. */
export function compiledFixture(name: string, options: RouteTableOptions = {}): CompiledRouteTable {
  return loadFixtureTable(name, options);
}

export interface TestPoolSpec {
  readonly name: string;
  readonly role: 'prefill' | 'decode' | 'both';
  readonly revision: string;
  readonly cluster?: string;
  readonly endpoints: readonly string[];
  readonly tenants?: readonly string[];
  readonly maxInFlightPerEndpoint?: number;
  readonly draining?: boolean;
}

/**
 * The raw value of a two-revision table (model `llama-3-8b`, revisions `llama-a`/`llama-b`, P/D pools for each,
 * tenants acme and globex). Tests mutate a copy to produce exactly the defect they check.
 */
export function twoRevisionTableValue(): Record<string, unknown> {
  const pool = (p: TestPoolSpec) => ({
    name: p.name,
    cluster: p.cluster ?? p.name.replace('-', '_'),
    role: p.role,
    revision: p.revision,
    endpoints: p.endpoints.map((address) => ({ address })),
    ...(p.tenants ? { tenants: [...p.tenants] } : {}),
    ...(p.maxInFlightPerEndpoint ? { maxInFlightPerEndpoint: p.maxInFlightPerEndpoint } : {}),
    ...(p.draining ? { draining: p.draining } : {}),
  });
  return {
    version: 1,
    revisions: {
      'llama-a': { descriptor: testDescriptorInput({ weights: 'a' }) },
      'llama-b': { descriptor: testDescriptorInput({ weights: 'b' }) },
    },
    models: {
      'llama-3-8b': { tenants: ['acme', 'globex'], rollout: { stable: 'llama-a', candidate: 'llama-b', weight: 10 } },
    },
    pools: [
      pool({ name: 'a-prefill', role: 'prefill', revision: 'llama-a', endpoints: ['10.0.1.1:8000', '10.0.1.2:8000'] }),
      pool({ name: 'a-decode', role: 'decode', revision: 'llama-a', endpoints: ['10.0.2.1:8000', '10.0.2.2:8000'] }),
      pool({ name: 'b-prefill', role: 'prefill', revision: 'llama-b', endpoints: ['10.0.3.1:8000'] }),
      pool({ name: 'b-decode', role: 'decode', revision: 'llama-b', endpoints: ['10.0.4.1:8000'] }),
    ],
    tenancy: { source: { header: 'x-tenant-id' }, required: true, prefixScope: 'tenant' },
    session: { header: 'x-session-id' },
    connectorMode: 'strict',
    contract: { ttlMs: 30000 },
    fallback: [{ refuse: { retryAfterSeconds: 5 } }],
  };
}

/** A deep copy of a plain value, for mutating fixture values in tests. */
export function clone<T>(value: T): T {
  return structuredClone(value);
}
