/**
 * `kvgate verify --record`: the recording flow that makes a revision routable. A pass writes the baseline's canary
 * digests into the route table (inline descriptor, or the descriptorFile it names); a failed run writes nothing.
 */
import { mkdtemp, readFile, rm, writeFile, copyFile, mkdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml, stringify as toYaml } from 'yaml';
import { runVerifyCommand } from '../cli/verify-command.js';
import { loadRouteTable } from '../policy/load.js';
import { EXAMPLES_DIR, RECORDED_CANARIES, testDescriptorInput, twoRevisionTableValue } from '../policy/testing.js';
import { startTestSim } from '../../testbed/sim/testing.js';
import type { SimServer } from '../../testbed/sim/server.js';
import { parseSimConfig } from '../../testbed/sim/config.js';
import { createSimServer } from '../../testbed/sim/server.js';

let dir: string;
let prompts: string;
let simA: SimServer;
let simOther: SimServer;

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'kvgate-record-'));
  prompts = path.join(dir, 'prompts.yaml');
  await writeFile(prompts, '- Hello there\n- { id: two, prompt: "Count to three" }\n');
  const { canaries: _c, ...a } = testDescriptorInput({ weights: 'a' });
  const cfg = parseSimConfig({ descriptor: a, sim: { maxModelLen: 2048, numGpuBlocks: 512 } });
  if (!cfg.ok) throw cfg.error;
  simA = await createSimServer(cfg.value);
  simOther = await startTestSim();
});
afterAll(async () => {
  await Promise.all([simA.close(), simOther.close()]);
  await rm(dir, { recursive: true, force: true });
});

function io() {
  const out: string[] = [];
  const err: string[] = [];
  return {
    out,
    err,
    io: {
      stdout: { write: (s: string) => out.push(s) },
      stderr: { write: (s: string) => err.push(s), isTTY: false },
      newSalt: () => 'fixed',
    },
  };
}

/** The two-revision example table with its descriptors inline and llama-a's canaries removed (it does not load yet). */
async function tableWithoutCanaries(): Promise<string> {
  const file = path.join(dir, `table-${Math.random().toString(36).slice(2)}.yaml`);
  const value = twoRevisionTableValue() as { revisions: Record<string, { descriptor: Record<string, unknown> }> };
  delete value.revisions['llama-a']!.descriptor['canaries'];
  await writeFile(file, `# Sample route table, descriptors inline\n${toYaml(value)}`);
  return file;
}

describe('kvgate verify --record', () => {
  it('on a pass, writes the baseline canaries into the revision inline, keeping the rest of the file, and the table then loads', async () => {
    const file = await tableWithoutCanaries();
    expect((await loadRouteTable(file)).ok).toBe(false); // llama-a has pools and no recorded behaviour
    const c = io();
    const code = await runVerifyCommand(
      ['--via', simA.url, '--baseline', simA.url, '--prompts', prompts, '--max-tokens', '4', '--record', 'llama-a', '--policy', file],
      c.io,
    );
    expect(code, c.err.join('')).toBe(0);
    expect(c.err.join('')).toMatch(/recorded the canaries of revision llama-a .* in /);
    const text = await readFile(file, 'utf8');
    expect(text).toContain('# Sample route table'); // comments kept
    const loaded = await loadRouteTable(file);
    expect(loaded.ok).toBe(true);
    expect(parseYaml(text).revisions['llama-a'].descriptor.canaries).toEqual(RECORDED_CANARIES.a);
  });

  it('writes into the descriptorFile a revision names', async () => {
    const sub = path.join(dir, 'files');
    await mkdir(path.join(sub, 'descriptors'), { recursive: true });
    const table = path.join(sub, 'route-table.yaml');
    await writeFile(table, 'version: 1\nrevisions:\n  llama-a: { descriptorFile: descriptors/a.yaml }\n');
    await copyFile(path.join(EXAMPLES_DIR, 'descriptors', 'llama-a.yaml'), path.join(sub, 'descriptors', 'a.yaml'));
    const d = path.join(sub, 'descriptors', 'a.yaml');
    await writeFile(d, (await readFile(d, 'utf8')).replace(/# Recorded[\s\S]*$/, ''));
    const c = io();
    expect(
      await runVerifyCommand(
        ['--via', simA.url, '--baseline', simA.url, '--prompts', prompts, '--max-tokens', '4', '--record', 'llama-a', '--policy', table],
        c.io,
      ),
    ).toBe(0);
    expect(parseYaml(await readFile(d, 'utf8')).canaries).toEqual(RECORDED_CANARIES.a);
  });

  it('without --policy prints the exact YAML to paste', async () => {
    const c = io();
    expect(
      await runVerifyCommand(
        ['--via', simA.url, '--baseline', simA.url, '--prompts', prompts, '--max-tokens', '4', '--record', 'llama-a'],
        c.io,
      ),
    ).toBe(0);
    const out = c.out.join('');
    expect(out).toContain('paste under\n# revisions.llama-a.descriptor');
    expect(parseYaml(out.slice(out.indexOf('canaries:')))).toEqual({ canaries: RECORDED_CANARIES.a });
  });

  it('a failed run records nothing', async () => {
    const file = await tableWithoutCanaries();
    const before = await readFile(file, 'utf8');
    const c = io();
    const code = await runVerifyCommand(
      [
        '--via',
        simOther.url,
        '--baseline',
        simA.url,
        '--prompts',
        prompts,
        '--max-tokens',
        '4',
        '--model',
        'meta-llama/Meta-Llama-3-8B-Instruct',
        '--record',
        'llama-a',
        '--policy',
        file,
      ],
      c.io,
    );
    expect(code).not.toBe(0);
    expect(c.err.join('')).toMatch(/did not pass, so nothing is recorded for revision llama-a/);
    expect(await readFile(file, 'utf8')).toBe(before);
  });
});
