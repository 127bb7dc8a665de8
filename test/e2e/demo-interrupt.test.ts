/**
 * `npm start` (`npm run testbed -- demo`) interrupted before it finished, as a process (spawned from dist/, like
 * `npm start`): Ctrl-C or SIGTERM during start-up or the sample traffic stops everything it started, removes its
 * run folder (which holds the dev TLS private keys) and exits 130 / 143. Each child gets its own TMPDIR, so "the
 * folder is gone" is "that TMPDIR is empty again".
 */
import { spawn } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type ChildOutput, childOutput } from '../support/child-output.js';

const ROOT = path.join(import.meta.dirname, '..', '..');
const MAIN = path.join(ROOT, 'dist', 'testbed', 'cli', 'main.js');

interface Proc extends ChildOutput {
  readonly tmp: string;
}

const tmps: string[] = [];

async function startDemo(): Promise<Proc> {
  const tmp = await mkdtemp(path.join(tmpdir(), 'kvgate-demo-interrupt-'));
  tmps.push(tmp);
  const child = spawn(process.execPath, [MAIN, 'demo'], {
    cwd: ROOT,
    env: { ...process.env, TMPDIR: tmp },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  return { ...childOutput(child), tmp };
}

/** Resolves once `ready()` holds (bounded: throws after `ms` with what the demo printed). */
async function until(p: Proc, what: string, ready: () => boolean, ms = 15_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!ready()) {
    if (Date.now() > deadline || p.child.exitCode !== null) throw new Error(`never saw ${what}; stdout:\n${p.out()}\nstderr:\n${p.err()}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** The demo's run folder inside the child's TMPDIR, once it exists. */
const runDir = (p: Proc): string | undefined => {
  const d = readdirSync(p.tmp).find((n) => n.startsWith('kvgate-demo-'));
  return d === undefined ? undefined : path.join(p.tmp, d);
};

describe('testbed demo interrupted', () => {
  beforeAll(() => {
    if (!existsSync(MAIN)) throw new Error(`${MAIN} is missing: run npm run build first (npm test does)`);
  });
  afterEach(async () => {
    for (const t of tmps.splice(0)) await rm(t, { recursive: true, force: true });
  });

  it('SIGINT as soon as its run folder exists: stops, removes the folder, exits 130', async () => {
    const p = await startDemo();
    await until(p, 'the run folder', () => runDir(p) !== undefined);
    p.child.kill('SIGINT');
    expect(await p.exit).toEqual({ code: 130, signal: null });
    expect(readdirSync(p.tmp)).toEqual([]);
    expect(p.err()).toContain('interrupted (SIGINT)');
  });

  it('SIGTERM once the dev TLS private keys are written: stops, removes them, exits 143', async () => {
    const p = await startDemo();
    await until(p, 'the dev TLS keys', () => {
      const d = runDir(p);
      return d !== undefined && existsSync(path.join(d, 'tls', 'gate.key'));
    });
    p.child.kill('SIGTERM');
    expect(await p.exit).toEqual({ code: 143, signal: null });
    expect(readdirSync(p.tmp)).toEqual([]);
  });

  it('SIGINT during the sample traffic: stops, removes the folder, exits 130 without reporting checks', async () => {
    const p = await startDemo();
    await until(p, 'the sample traffic', () => p.out().includes('1. A-to-A'));
    p.child.kill('SIGINT');
    expect(await p.exit).toEqual({ code: 130, signal: null });
    expect(readdirSync(p.tmp)).toEqual([]);
    expect(p.out()).not.toContain('Summary:');
  });
});
