/**
 * `npx kvgate` from a clone (README, "Commands"): npm runs the package's own `bin`, so it must name the compiled
 * CLI entry (tsc maps src/cli/main.ts to dist/src/cli/main.js), and that file must start with a node shebang (npm
 * links bins as executables). The built file is checked too (`npm test` builds first).
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { COMMANDS } from '../src/cli/commands.js';
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

/**
 * Every `kvgate ...` command line a user's document shows (an inline code span, or a code-block line starting with
 * `kvgate`, continued over trailing backslashes), with its file and line.
 */
function documentedCommandLines(): { where: string; line: string }[] {
  const files = ['README.md', 'examples/README.md', 'deploy/README.md', 'deploy/kubernetes/README.md', 'envoy/istio/README.md'];
  for (const f of readdirSync(path.join(PACKAGE_ROOT, 'docs'))) if (f.endsWith('.md')) files.push(`docs/${f}`);
  const out: { where: string; line: string }[] = [];
  for (const f of files) {
    const lines = readFileSync(path.join(PACKAGE_ROOT, f), 'utf8').split('\n');
    let block = false;
    for (const [i, l] of lines.entries()) {
      if (/^\s*```/.test(l)) block = !block;
      else if (block) {
        const m = /^\s*(?:\$ )?(?:npx )?kvgate (.*)$/.exec(l);
        if (!m) continue;
        let line = m[1]!;
        for (let j = i; /\\\s*$/.test(lines[j]!) && j + 1 < lines.length; j++) line += ` ${lines[j + 1]!}`;
        out.push({ where: `${f}:${i + 1}`, line: line.replace(/\s+#.*$/, '') });
      } else for (const m of l.matchAll(/`(?:npx )?kvgate ([^`]*)`/g)) out.push({ where: `${f}:${i + 1}`, line: m[1]! });
    }
  }
  return out;
}

describe('the commands the documents show', () => {
  it('name a kvgate command and only options its --help lists', () => {
    const built = path.join(PACKAGE_ROOT, pkg.bin['kvgate']!);
    const help = new Map(
      COMMANDS.map((c) => [c.name, spawnSync(process.execPath, [built, c.name, '--help'], { encoding: 'utf8', timeout: 20_000 }).stdout]),
    );
    const shown = documentedCommandLines();
    expect(shown.length).toBeGreaterThanOrEqual(50);
    const problems: string[] = [];
    for (const { where, line } of shown) {
      const name = line.split(/\s+/)[0]!;
      if (name === '<command>') continue; // README: "kvgate <command> --help"
      const text = help.get(name);
      if (text === undefined) problems.push(`${where}: kvgate ${name} is not a command (${[...help.keys()].join(', ')})`);
      else
        for (const [flag] of line.matchAll(/(?<![\w-])--[a-z][a-z0-9-]*/g))
          if (!text.includes(flag)) problems.push(`${where}: kvgate ${name} has no ${flag}`);
    }
    expect(problems).toEqual([]);
  });
});
