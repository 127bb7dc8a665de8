/**
 * `npm run testbed -- harness --config envoy.yaml` as a process (spawned from dist/, like `npm run testbed`): it
 * loads the demo topology's envoy.yaml (the shipped bootstrap with the run's PKI: mTLS to the gate, ORIGINAL_DST pool
 * clusters), prints its listeners, routes a real request through the gate to the sidecars, and on SIGTERM drains and
 * exits 0. A config it cannot run exits 1 with the YAML path of each problem.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { H } from '../../src/headers.js';
import { completion, post, PROMPTS } from '../../testbed/demo/scenarios.js';
import { type ChildOutput, childOutput } from '../support/child-output.js';
import { startTopology, type Topology } from '../../testbed/demo/topology.js';

const ROOT = path.join(import.meta.dirname, '..', '..');
const MAIN = path.join(ROOT, 'dist', 'testbed', 'cli', 'main.js');

type Proc = ChildOutput;

function start(args: string[]): Proc {
  const child = spawn(process.execPath, [MAIN, 'harness', ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  return childOutput(child);
}

/** Resolves once stdout matches `re` (bounded: rejects after `ms` with what was printed). */
async function waitFor(p: Proc, re: RegExp, ms = 15_000): Promise<RegExpExecArray> {
  const until = Date.now() + ms;
  for (;;) {
    const m = re.exec(p.out());
    if (m) return m;
    if (Date.now() > until || p.child.exitCode !== null) throw new Error(`no ${re} in stdout:\n${p.out()}\nstderr:\n${p.err()}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

describe('testbed harness command', () => {
  let t: Topology;
  beforeAll(async () => {
    if (!existsSync(MAIN)) throw new Error(`${MAIN} is missing: run npm run build first (npm test does)`);
    t = await startTopology({ logger: pino({ level: 'silent' }) });
  }, 60_000);
  afterAll(() => t?.close());

  it('serves the listeners of the given envoy.yaml, routes through the gate, and exits 0 on SIGTERM', async () => {
    const gate = `127.0.0.1:${t.gate.grpcPort}`;
    const p = start([
      '--config',
      t.envoyYamlPath,
      '--listener',
      'public=0',
      '--listener',
      'internal=0',
      '--cluster',
      `kvgate_gate=${gate}`,
      '--cluster',
      `kvgate_gate_internal=${gate}`,
    ]);
    try {
      const url = (await waitFor(p, /^ {2}listener public +(http:\/\/127\.0\.0\.1:\d+)$/m))[1]!;
      await waitFor(p, /^ready; SIGTERM or SIGINT stops it$/m);
      expect(p.out()).toMatch(/^ {2}listener internal +http:\/\/127\.0\.0\.1:\d+$/m);
      expect(p.out()).toMatch(/clusters kvgate_gate, kvgate_gate_internal, a_prefill, a_decode, b_prefill, b_decode/);
      expect(url).not.toBe(t.publicUrl);
      const r = await post(`${url}/v1/completions`, completion(PROMPTS[0]), { 'x-tenant-id': 'acme', 'x-session-id': 'harness-cmd' });
      expect(r.status).toBe(200);
      expect(r.headers.get(H.revision)).toMatch(/^llama-[ab]$/);
      expect(String(r.json.choices[0].text).trim()).not.toBe('');
      const refused = await post(`${url}/v1/completions`, completion(PROMPTS[0]));
      expect([refused.status, refused.headers.get(H.rejectReason)]).toEqual([401, 'tenant_required']);
      p.child.kill('SIGTERM');
      expect(await p.exit).toEqual({ code: 0, signal: null });
      expect(p.out()).toMatch(/harness: SIGTERM received, letting requests in flight finish[^\n]*\nharness: stopped\n$/);
      await expect(fetch(`${url}/health`)).rejects.toThrow();
    } finally {
      if (p.child.exitCode === null) p.child.kill('SIGKILL');
    }
  }, 30_000);

  it('exits 1 with the YAML path of what it cannot run, and 2 without --config', async () => {
    const bad = path.join(t.dir, 'bad-envoy.yaml');
    await writeFile(bad, 'static_resources:\n  listeners: []\n  clusters:\n    - name: x\n      type: STATIC\n      colour: blue\n');
    const p = start(['--config', bad]);
    expect((await p.exit).code).toBe(1);
    expect(p.err()).toMatch(/static_resources\.clusters\[0\]\.colour/);
    const q = start([]);
    expect((await q.exit).code).toBe(2);
    expect(q.err()).toMatch(/--config FILE is required/);
  }, 30_000);
});
