/**
 * Test helpers for anything that needs descriptors or route tables: hand-built, valid by construction, and close to
 * a real deployment (Llama-3-8B on vLLM with NixlConnector). Revisions `a` and `b` have identical geometry and
 * differ only in their weights revision: the pair that passes vLLM's NIXL handshake and still corrupts output.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { PACKAGE_ROOT } from '../package-root.js';
import { parseDescriptor, type CompatDescriptor, type CompatDescriptorInput } from '../compat/descriptor.js';
import { formatIssues } from '../config/issues.js';
import type { CompiledRouteTable } from './compile.js';
import { parse as parseYaml } from 'yaml';
import { descriptorFilesOf, descriptorPath, parseRouteTable, routeTableFromValue, type RouteTableOptions } from './load.js';

/**
 * The one fixture source: the example descriptors and route tables under `examples/` (what an operator starts from)
 * are what tests load and mutate. `examples/route-tables/two-revisions.yaml` is the two-revision table.
 */
export const EXAMPLES_DIR = join(PACKAGE_ROOT, 'examples');
export const ROUTE_TABLES_DIR = join(EXAMPLES_DIR, 'route-tables');
/** Deliberately broken route tables (a typo, a YAML syntax error): bad input, so not examples. */
export const BAD_TABLES_DIR = join(PACKAGE_ROOT, 'test', 'fixtures', 'policy');

/** An example descriptor file's plain value (`llama-a`, `llama-b`, ...). A fresh object each call. */
export function exampleDescriptorValue(name: string): CompatDescriptorInput {
  const file = join(EXAMPLES_DIR, 'descriptors', name.endsWith('.json') ? name : `${name}.yaml`);
  return parseYaml(readFileSync(file, 'utf8')) as CompatDescriptorInput;
}

const EXAMPLE_A = exampleDescriptorValue('llama-a');
const EXAMPLE_B = exampleDescriptorValue('llama-b');

/**
 * The canary digests recorded in the example descriptors: what a simulated worker of each revision answers
 * (testbed/sim/recorded-canaries.test.ts checks them). A routable revision must carry them (src/policy/semantic-trust.ts).
 */
export const RECORDED_CANARIES = Object.freeze({
  a: Object.freeze({ ...EXAMPLE_A.canaries! }),
  b: Object.freeze({ ...EXAMPLE_B.canaries! }),
});

type DeepPartial<T> = T extends readonly unknown[] ? T : T extends object ? { [K in keyof T]?: DeepPartial<T[K]> | undefined } : T;

export type DescriptorOverrides = DeepPartial<CompatDescriptorInput> & {
  /** Which example revision to start from (default `a`: examples/descriptors/llama-a.yaml). */
  readonly weights?: 'a' | 'b';
};

/** The raw (input) form of an example descriptor with overrides merged in, for building YAML/JSON tables. */
export function testDescriptorInput(overrides: DescriptorOverrides = {}): CompatDescriptorInput {
  const { weights = 'a', ...rest } = overrides;
  return merge(exampleDescriptorValue(weights === 'a' ? 'llama-a' : 'llama-b'), rest) as CompatDescriptorInput;
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

/** The path of a route table fixture: an example table, or a deliberately broken one from test/fixtures/policy. */
export function fixturePath(name: string): string {
  return existsSync(join(ROUTE_TABLES_DIR, name)) ? join(ROUTE_TABLES_DIR, name) : join(BAD_TABLES_DIR, name);
}

/** Read a fixture's text. */
export function readFixture(name: string): string {
  return readFileSync(fixturePath(name), 'utf8');
}

/** The text of a file under examples/ (e.g. `descriptors/llama-a.yaml`). */
export function readExample(relPath: string): string {
  return readFileSync(join(EXAMPLES_DIR, relPath), 'utf8');
}

/** The descriptor files a fixture table names, read relative to it: what `parseRouteTable` needs without file access. */
export function descriptorFilesFor(name: string): Record<string, string> {
  const file = fixturePath(name);
  const out: Record<string, string> = {};
  for (const ref of descriptorFilesOf(parseYaml(readFileSync(file, 'utf8')))) out[ref] = readFileSync(descriptorPath(file, ref), 'utf8');
  return out;
}

/** Parse a fixture (reading the descriptor files it names) into a table; throws with every issue on a bad fixture (a test bug). */
export function loadFixtureTable(name: string, options: RouteTableOptions = {}): CompiledRouteTable {
  const text = readFixture(name);
  const r = parseRouteTable(text, { file: fixturePath(name), descriptorFiles: descriptorFilesFor(name) }, options);
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

/**
 * The raw value of the two-revision example table (examples/route-tables/two-revisions.yaml: model `llama-3-8b`,
 * revisions `llama-a`/`llama-b`, P/D pools for each, tenants acme and globex), with each `descriptorFile` read and
 * inlined so the value stands alone. Tests mutate a copy to produce exactly the defect they check.
 */
export function twoRevisionTableValue(): Record<string, unknown> {
  const value = parseYaml(readFileSync(join(ROUTE_TABLES_DIR, 'two-revisions.yaml'), 'utf8')) as Record<string, unknown>;
  const revisions = value['revisions'] as Record<string, Record<string, unknown>>;
  for (const [name, rev] of Object.entries(revisions)) {
    const { descriptorFile, ...rest } = rev;
    if (typeof descriptorFile !== 'string') continue;
    const file = join(ROUTE_TABLES_DIR, descriptorFile);
    revisions[name] = { descriptor: parseYaml(readFileSync(file, 'utf8')) as unknown, ...rest };
  }
  return value;
}

/** A deep copy of a plain value, for mutating fixture values in tests. */
export function clone<T>(value: T): T {
  return structuredClone(value);
}
