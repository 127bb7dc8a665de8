/**
 * `npm run testbed -- demo --policy FILE` with a route table unlike the built-in one (test/fixtures/own-table:
 * model qwen-chat, revisions qwen-base and qwen-support-lora - a LoRA adapter with its own tokenizer revision -, other
 * cluster names, tenancy and session headers, descriptors without recorded canaries): the demo starts what the table
 * says, routes by it, prints where its files are and a curl that returns text; a table that cannot be used stops it
 * with the policy checker's report before anything starts.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { demoCommand } from '../../testbed/cli/demo-command.js';
import { mustLoadEnvoyConfig } from '../../testbed/harness/envoy-config.js';

const run = promisify(execFile);
const FIXTURE = path.join(import.meta.dirname, '..', 'fixtures', 'own-table', 'route-table.yaml');
const sha = async (f: string) =>
  createHash('sha256')
    .update(await readFile(f))
    .digest('hex');

/** Run the demo command in-process with --keep-running; `stop()` ends it; `done` is its exit code. */
function keptRunning(argv: string[]) {
  const out: string[] = [];
  const err: string[] = [];
  let stop!: () => void;
  const stopped = new Promise<void>((r) => (stop = r));
  let ready!: () => void;
  const isReady = new Promise<void>((r) => (ready = r));
  const done = demoCommand([...argv, '--keep-running', '--log-level', 'silent'], {
    out: (l) => {
      out.push(l);
      if (l.includes('Ctrl-C to stop')) ready();
    },
    err: (t) => err.push(t),
    stop: () => stopped,
  });
  void done.finally(ready);
  return { out, err, stop, isReady, done };
}

/** The printed curl line, run by the real curl: its status and parsed JSON body. */
async function runPrintedCurl(out: readonly string[]): Promise<{ status: number; body: any; headers: string }> {
  const line = out
    .join('\n')
    .split('\n')
    .find((l) => l.trim().startsWith('curl '));
  expect(line, 'the demo prints a curl line').toBeDefined();
  const { stdout } = await run('bash', ['-c', line!.trim()]);
  const [head, ...rest] = stdout.split('\r\n\r\n');
  return { status: Number(/^HTTP\/1\.1 (\d+)/.exec(head!)?.[1]), body: JSON.parse(rest.join('\r\n\r\n')), headers: head! };
}

describe('demo --policy with an operator table', () => {
  let d: ReturnType<typeof keptRunning>;
  let before: string;
  beforeAll(async () => {
    before = await sha(FIXTURE);
    d = keptRunning(['--policy', FIXTURE]);
    await d.isReady;
  }, 60_000);
  afterAll(async () => {
    d?.stop();
    await d?.done;
  });

  const text = () => d.out.join('\n');
  const file = (label: string) => new RegExp(`^ {4}${label} +(\\S+)$`, 'm').exec(text())?.[1];

  it('routes every cohort to its own revision by the table and passes every check', () => {
    expect(d.err.join('')).toBe('');
    expect(text()).toMatch(/Summary: (\d+)\/\1 checks passed; 10 P\/D completions, 0 allowed to mix revisions\./);
    expect(text()).toMatch(
      /PASS {2}qwen-chat -> qwen-base: routed to qwen-base's pools of the table\n {6}session \S+ -> group g_\w+, revision qwen-base; decode qwen_base_decode \(127\.0\.0\.1:\d+\), prefill qwen_base_prefill \(127\.0\.0\.1:\d+\)/,
    );
    expect(text()).toMatch(
      /PASS {2}qwen-chat -> qwen-support-lora: routed to qwen-support-lora's pools of the table\n {6}session \S+ -> group g_\w+, revision qwen-support-lora; decode qwen_lora_decode \(127\.0\.0\.1:\d+\), prefill qwen_lora_prefill \(127\.0\.0\.1:\d+\)/,
    );
    expect(text()).toMatch(
      /PASS {2}cross-group prefill leg \(qwen-base contract, cluster qwen_lora_prefill of qwen-support-lora\) refused/,
    );
    expect(text()).toMatch(/PASS {2}a request without a tenant is refused \(401 tenant_required\)\n.*header x-org/);
    expect(text()).not.toMatch(/llama|\b[ab]_(prefill|decode)\b/);
  });

  it('says what differs from a deployment: canaries recorded from a simulator, fewer workers than endpoints', () => {
    expect(text()).toMatch(/revision qwen-base: no recorded canaries .* recorded here from a simulator of its descriptor/);
    expect(text()).toMatch(/revision qwen-support-lora: no recorded canaries .* recorded here/);
    expect(text()).toMatch(/pool base-decode: 3 endpoints in the table, 2 simulated here/);
    expect(text().match(/^ {2}base-decode\/\d/gm)).toHaveLength(2);
  });

  it('prints where its files are: a runtime copy naming the started sidecars; the operator file is unchanged', async () => {
    expect(await sha(FIXTURE)).toBe(before);
    const routeTable = file('route table \\(runtime copy\\)')!;
    const copy = parseYaml(await readFile(routeTable, 'utf8')) as { pools: { cluster: string; endpoints: { address: string }[] }[] };
    const sidecars = [...text().matchAll(/sidecar http:\/\/(127\.0\.0\.1:\d+)/g)].map((m) => m[1]);
    expect(copy.pools.map((p) => p.cluster)).toEqual(['qwen_base_prefill', 'qwen_base_decode', 'qwen_lora_prefill', 'qwen_lora_decode']);
    expect(copy.pools.flatMap((p) => p.endpoints.map((e) => e.address)).sort()).toEqual(sidecars.sort());
    const descriptor = parseYaml(await readFile(file('descriptor qwen-support-lora')!, 'utf8')) as Record<string, any>;
    expect(descriptor['adapter']).toEqual({ id: 'acme/qwen-support-lora', revision: 'lora-7' });
    expect(Object.keys(descriptor['canaries'])).toEqual(['tokenizer', 'chatTemplate', 'generation']);
    expect(await readFile(file('gate config')!, 'utf8')).toMatch(/policy: route-table\.yaml/);
    expect(existsSync(path.join(file('TLS \\(dev PKI\\)')!, 'ca.crt'))).toBe(true);
  });

  it('runs an envoy.yaml rendered from the table (kvgate envoy render), not the shipped one', async () => {
    const yaml = await readFile(file('envoy\\.yaml \\(rendered\\)')!, 'utf8');
    expect(yaml).toMatch(/^# GENERATED by `kvgate envoy render bootstrap --policy \S+route-table\.yaml/);
    const clusters = Object.keys(mustLoadEnvoyConfig(yaml).clusters).sort();
    expect(clusters).toEqual([
      'kvgate_gate',
      'kvgate_gate_internal',
      'qwen_base_decode',
      'qwen_base_prefill',
      'qwen_lora_decode',
      'qwen_lora_prefill',
    ]);
    const publicPort = /Envoy public listener +http:\/\/127\.0\.0\.1:(\d+)/.exec(text())![1];
    expect(yaml).toContain(`port_value: ${publicPort}`);
  });

  it('prints a curl with the table model, tenant and session headers that really returns text', async () => {
    const r = await runPrintedCurl(d.out);
    expect(r.status).toBe(200);
    expect(r.body.model).toBe('qwen-chat');
    expect(String(r.body.choices[0].text).trim()).not.toBe('');
    expect(r.headers).toMatch(/x-kvgate-revision: qwen-(base|support-lora)/);
    expect(text()).toMatch(/curl .* -H 'x-org: blue-team' -H 'x-conversation: me'/);
  });
});

describe('demo (no --policy): the README quick start with --keep-running', () => {
  it('prints a curl that really returns text, and the files of the run', async () => {
    const d = keptRunning([]);
    try {
      await d.isReady;
      const text = d.out.join('\n');
      expect(text).toMatch(/Summary: 8\/8 checks passed/);
      for (const label of ['route table', 'envoy\\.yaml', 'gate config', 'descriptor llama-a', 'descriptor llama-b', 'TLS \\(dev PKI\\)']) {
        const f = new RegExp(`^ {4}${label} +(\\S+)$`, 'm').exec(text)?.[1];
        expect(f && existsSync(f), label).toBe(true);
      }
      const r = await runPrintedCurl(d.out);
      expect(r.status).toBe(200);
      expect(String(r.body.choices[0].text).trim()).not.toBe('');
    } finally {
      d.stop();
      expect(await d.done).toBe(0);
    }
  }, 60_000);
});

describe('demo --policy with a table that cannot be used', () => {
  const io = () => {
    const out: string[] = [];
    const err: string[] = [];
    return { out, err, io: { out: (l: string) => out.push(l), err: (t: string) => err.push(t) } };
  };

  it('exits 1 with every issue (file, line, path, fix) and starts nothing', async () => {
    const typo = path.join(import.meta.dirname, '..', 'fixtures', 'policy', 'typo.yaml');
    const t = io();
    expect(await demoCommand(['--policy', typo, '--log-level', 'silent'], t.io)).toBe(1);
    const err = t.err.join('');
    expect(err).toMatch(/the route table cannot be used \(nothing was started\)/);
    expect(err).toMatch(/typo\.yaml:12:5: error: pools\[0\]\.revison: unknown key "revison"\. Fix: did you mean "revision"\?/);
    expect(err).toMatch(/connectorMode: "strcit" is not allowed here\. Fix: did you mean "strict"\?/);
    expect(t.out).toEqual([]);
  });

  it('exits 1 for a file that does not exist, and 2 for a bad flag', async () => {
    const t = io();
    expect(await demoCommand(['--policy', '/nonexistent/route-table.yaml'], t.io)).toBe(1);
    expect(t.err.join('')).toMatch(
      /route-table\.yaml: error: \(file\): the route table cannot be read: no such file \(ENOENT\)\. Fix: check the path/,
    );
    const u = io();
    expect(await demoCommand(['--policy', FIXTURE, '--max-workers-per-pool', '0'], u.io)).toBe(2);
    expect(u.err.join('')).toMatch(/--max-workers-per-pool must be 1-16/);
  });
});
