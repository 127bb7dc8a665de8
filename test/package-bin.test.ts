/**
 * `npx kvgate` from a clone (README, "Commands"): npm runs the package's own `bin`, so it must name the compiled
 * CLI entry (tsc maps src/cli/main.ts to dist/src/cli/main.js), and that file must start with a node shebang (npm
 * links bins as executables). The built file is checked too (`npm test` builds first).
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { PACKAGE_ROOT } from '../src/package-root.js';

const pkg = JSON.parse(readFileSync(path.join(PACKAGE_ROOT, 'package.json'), 'utf8')) as { bin: Record<string, string>; files: string[] };

describe('the kvgate bin', () => {
  it('names the compiled CLI entry, which starts with a node shebang and ships in the package', () => {
    expect(pkg.bin['kvgate']).toBe('dist/src/cli/main.js');
    const source = readFileSync(path.join(PACKAGE_ROOT, 'src', 'cli', 'main.ts'), 'utf8');
    expect(source.startsWith('#!/usr/bin/env node\n')).toBe(true);
    expect(pkg.files).toContain('dist/src');
    const built = path.join(PACKAGE_ROOT, pkg.bin['kvgate']!);
    expect(existsSync(built)).toBe(true); // npm test builds first
    expect(readFileSync(built, 'utf8').startsWith('#!/usr/bin/env node\n')).toBe(true);
  });
});
