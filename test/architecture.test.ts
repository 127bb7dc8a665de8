/**
 * The folder tree is the architecture (README.md, "Architecture"): arrows point inward. The pure core (compat, policy, decide,
 * contract, envoy translation) imports no I/O shell and no transport; the product (src/) never imports the
 * testbed (simulator, harness, demo) or a dev dependency. This test reads the import statements, so a new
 * arrow pointing the wrong way fails here.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { PACKAGE_ROOT } from '../src/package-root.js';

const SRC = path.join(PACKAGE_ROOT, 'src');
const PURE = ['compat', 'policy', 'decide', 'contract', 'envoy'];
const SHELLS = ['gate', 'sidecar', 'cli', 'verify', 'discovery'];
/** File I/O at the edge of a pure component, each one named: loading a table, a key file, the protos. */
const EDGE_IO = new Set(['policy/load.ts', 'contract/keys.ts', 'envoy/protos.ts']);
/** Pure functions from I/O modules, named per file: `isIP` parses a string and opens nothing. */
const PURE_USES: Readonly<Record<string, readonly string[]>> = { 'policy/schema.ts': ['node:net'] };
const IO_MODULES = [
  '@kubernetes/client-node',
  '@grpc/grpc-js',
  '@grpc/proto-loader',
  'pino',
  'prom-client',
  'node:http',
  'node:net',
  'node:fs',
  'node:fs/promises',
];

function files(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) return files(p);
    return e.name.endsWith('.ts') && !e.name.endsWith('.test.ts') && e.name !== 'testing.ts' ? [p] : [];
  });
}

/** Value imports only: `import type` carries no runtime dependency. */
function imports(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  return [...text.matchAll(/^\s*(?:import|export)\s+(?!type\b)[^'"]*?from\s+'([^']+)'/gm)].map((m) => m[1]!);
}

describe('architecture: arrows point inward', () => {
  for (const component of PURE) {
    it(`src/${component} imports no I/O shell and no transport`, () => {
      const offenders: string[] = [];
      for (const file of files(path.join(SRC, component))) {
        const rel = path.relative(SRC, file);
        for (const spec of imports(file)) {
          const target = spec.startsWith('.') ? path.relative(SRC, path.resolve(path.dirname(file), spec)) : spec;
          if (SHELLS.some((s) => target.startsWith(`${s}/`))) offenders.push(`${rel} -> ${spec}`);
          if (IO_MODULES.includes(spec) && !EDGE_IO.has(rel) && !(PURE_USES[rel] ?? []).includes(spec)) offenders.push(`${rel} -> ${spec}`);
        }
      }
      expect(offenders).toEqual([]);
    });
  }

  it('the product never imports the testbed or a dev dependency', () => {
    const pkg = JSON.parse(readFileSync(path.join(PACKAGE_ROOT, 'package.json'), 'utf8')) as { devDependencies?: Record<string, string> };
    const devDeps = Object.keys(pkg.devDependencies ?? {});
    const offenders: string[] = [];
    for (const file of files(SRC)) {
      const rel = path.relative(SRC, file);
      for (const spec of imports(file)) {
        const target = spec.startsWith('.') ? path.relative(PACKAGE_ROOT, path.resolve(path.dirname(file), spec)) : spec;
        if (!target.startsWith('src/') && spec.startsWith('.')) offenders.push(`${rel} -> ${spec}`);
        if (devDeps.some((d) => spec === d || spec.startsWith(`${d}/`))) offenders.push(`${rel} -> ${spec}`);
      }
    }
    expect(offenders).toEqual([]);
  });
});

/** Every relative import, type-only ones included: a cycle of types still ties two modules' meanings together. */
function allImports(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  return [...text.matchAll(/^\s*(?:import|export)\s[^'"]*?from\s+'(\.[^']+)'/gm)].map((m) =>
    path.resolve(path.dirname(file), m[1]!.replace(/\.js$/, '.ts')),
  );
}

function cyclesIn(roots: readonly string[]): string[][] {
  const graph = new Map<string, string[]>();
  for (const root of roots)
    for (const f of files(root))
      graph.set(
        f,
        allImports(f).filter((t) => t.endsWith('.ts')),
      );
  const cycles: string[][] = [];
  const state = new Map<string, 'active' | 'done'>();
  const stack: string[] = [];
  const visit = (f: string): void => {
    state.set(f, 'active');
    stack.push(f);
    for (const t of graph.get(f) ?? []) {
      if (state.get(t) === 'active') cycles.push([...stack.slice(stack.indexOf(t)), t].map((p) => path.relative(PACKAGE_ROOT, p)));
      else if (!state.has(t) && graph.has(t)) visit(t);
    }
    stack.pop();
    state.set(f, 'done');
  };
  for (const f of [...graph.keys()].sort()) if (!state.has(f)) visit(f);
  return cycles;
}

describe('architecture: no import cycles', () => {
  it('src/ and testbed/ import each other in one direction only, type imports included', () => {
    expect(cyclesIn([SRC, path.join(PACKAGE_ROOT, 'testbed')])).toEqual([]);
  });
});

describe('architecture: the repository explains itself', () => {
  it('no code, test or doc cites a document outside the repository', () => {
    // Project notes kept beside the repository are not part of it; cite docs/ or an upstream source instead.
    const outside = /\.\.\/shared\/|\b(?:DESIGN|STYLE)\.md\b|shared\/reference|seed\/design-note/;
    const roots = ['src', 'testbed', 'test', 'bench', 'docs', 'deploy', 'envoy', 'examples', 'protos'].map((d) =>
      path.join(PACKAGE_ROOT, d),
    );
    const texts = (dir: string): string[] =>
      readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
        const p = path.join(dir, e.name);
        if (e.isDirectory()) return e.name === 'node_modules' ? [] : texts(p);
        return /\.(ts|md|ya?ml|json|py|mjs)$/.test(e.name) && !p.endsWith('architecture.test.ts') ? [p] : [];
      });
    const offenders = [...roots, path.join(PACKAGE_ROOT, 'README.md')]
      .flatMap((r) => (r.endsWith('.md') ? [r] : texts(r)))
      .filter((f) => outside.test(readFileSync(f, 'utf8')))
      .map((f) => path.relative(PACKAGE_ROOT, f));
    expect(offenders).toEqual([]);
  });
});

describe('architecture: test files share their worker', () => {
  it('no test replaces a module or a global for the whole process (vitest.config.ts runs files with isolate: false)', () => {
    // A `vi.mock` in one file would be in force, or not, for whichever files its worker runs next.
    const replaces = /\bvi\.(?:mock|doMock|stubGlobal|stubEnv)\(/;
    const tests = (dir: string): string[] =>
      readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
        const p = path.join(dir, e.name);
        if (e.isDirectory()) return tests(p);
        return e.name.endsWith('.test.ts') && !p.endsWith('architecture.test.ts') ? [p] : [];
      });
    const offenders = ['src', 'testbed', 'test']
      .flatMap((d) => tests(path.join(PACKAGE_ROOT, d)))
      .filter((f) => replaces.test(readFileSync(f, 'utf8')))
      .map((f) => path.relative(PACKAGE_ROOT, f));
    expect(offenders).toEqual([]);
  });
});
