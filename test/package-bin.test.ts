/**
 * `npx kvgate` from a clone (README, "Commands"): npm runs the package's own `bin`, so it must name the compiled
 * CLI entry (tsc maps src/cli/main.ts to dist/src/cli/main.js), and that file must start with a node shebang (npm
 * links bins as executables). The built file is checked too (`npm test` builds first).
 */
import { spawnSync } from 'node:child_process';
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

  it('answers an unknown flag to any command as a usage error: exit 2, naming the command and its --help', () => {
    const built = path.join(PACKAGE_ROOT, pkg.bin['kvgate']!);
    for (const cmd of ['gate', 'sidecar', 'fingerprint', 'verify']) {
      const r = spawnSync(process.execPath, [built, cmd, '--bogus'], { encoding: 'utf8', timeout: 20_000 });
      expect(r.status, `${cmd}: ${r.stderr}`).toBe(2);
      expect(r.stderr.startsWith(`kvgate ${cmd}: `)).toBe(true);
      expect(r.stderr).toContain("Unknown option '--bogus'");
      expect(r.stderr).not.toMatch(/\n\s+at /); // no stack trace
    }
    const policy = spawnSync(process.execPath, [built, 'policy', 'check'], { encoding: 'utf8', timeout: 20_000 });
    expect(policy.status).toBe(2);
    expect(policy.stderr).toContain('kvgate policy: check takes one FILE, got 0');
  });
});
