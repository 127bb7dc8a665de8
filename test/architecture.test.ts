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
const IO_MODULES = ['@kubernetes/client-node', '@grpc/grpc-js', '@grpc/proto-loader', 'pino', 'prom-client', 'node:http', 'node:net', 'node:fs', 'node:fs/promises'];

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
