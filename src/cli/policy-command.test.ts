import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PACKAGE_ROOT } from '../package-root.js';
import { clone, fixturePath, twoRevisionTableValue } from '../policy/testing.js';
import { explainCommand } from './explain-command.js';
import { policyCommand } from './policy-command.js';

type Value = Record<string, any>;
let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kvgate-policy-'));
});
afterAll(() => rm(dir, { recursive: true, force: true }));

let n = 0;
async function table(mutate: (v: Value) => void = () => {}): Promise<string> {
  const v = clone(twoRevisionTableValue()) as Value;
  mutate(v);
  const p = join(dir, `t${n++}.json`);
  await writeFile(p, JSON.stringify(v));
  return p;
}
async function run(...argv: string[]) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await policyCommand(argv, { out: (t) => out.push(t), err: (t) => err.push(t) });
  return { code, out: out.join(''), err: err.join('') };
}

describe('kvgate policy check', () => {
  it('exit 0 for a valid table, with what it routes', async () => {
    const r = await run('check', fixturePath('rollout.yaml'));
    expect(r.code).toBe(0);
    expect(r.out).toBe(
      `${fixturePath('rollout.yaml')}: OK: 2 revisions, 4 pools, 1 served model\n` +
        '  rollout: llama-3-8b: stable llama-a 90%; verification not required\n' +
        '  rollout: llama-3-8b: candidate llama-b 10%; verified (kvgate verify report 2024-05-02 (256 prompts, token ids identical))\n' +
        '  fallback: [queue 2000 ms, depth 64, edf -> routeVia llama-a (not pinned, no adapter) -> recompute 0.2 ms/token up to 2048 tokens -> refuse, retry after 5 s]\n',
    );
  });

  it('prints warnings and still exits 0', async () => {
    const file = await table((v) => (v['revisions']['llama-b']['verification'] = { required: true }));
    const r = await run('check', file);
    expect(r.code).toBe(0);
    expect(r.out).toMatch(
      /t\d+\.json:1:\d+: warning: revisions\.llama-b\.verification\.verified: model "llama-3-8b"'s candidate "llama-b" is not verified, so it takes no cohort traffic: its 10% goes to stable "llama-a"\. Fix: run kvgate verify against "llama-b", then set revisions\.llama-b\.verification\.verified: true and record the evidence\n/,
    );
    expect(r.out).toContain(`${file}: OK with 1 warning: 2 revisions, 4 pools, 1 served model`);
    expect(r.out).toContain('rollout: llama-3-8b: candidate llama-b 10% configured, 0% effective; verification required, not passed');
  });

  it("warns, exit 0, for a KV cache dtype the revision's vLLM does not accept, listing what it accepts", async () => {
    const file = await table((v) => {
      const d = v['revisions']['llama-b']['descriptor'];
      d['engine'] = { ...d['engine'], version: '0.13.0' };
      d['kvCache'] = { ...d['kvCache'], dtype: 'fp9' };
    });
    const r = await run('check', file);
    expect(r.code).toBe(0);
    expect(r.out).toMatch(
      /warning: revisions\.llama-b\.descriptor\.kvCache\.dtype: revision "llama-b": kvCache\.dtype "fp9" is not a --kv-cache-dtype vLLM 0\.13\.0 accepts, .*accepts: auto, bfloat16, fp8, fp8_e4m3, fp8_e5m2, fp8_inc, fp8_ds_mla .*Fix: declare the --kv-cache-dtype the workers are started with/,
    );
    expect(r.out).toContain(`${file}: OK with 1 warning`);
  });

  it("warns, exit 0, where a tenant's priority does nothing: the pools it may be routed to that do not schedule by priority", async () => {
    const file = await table((v) => {
      v['priorities'] = { tenants: { acme: -10 } };
      for (const p of v['pools'] as Value[]) if (p['name'] !== 'b-decode') p['schedulingPolicy'] = 'priority';
    });
    const r = await run('check', file);
    expect(r.code).toBe(0);
    expect(r.out).toMatch(
      /warning: priorities\.tenants\.acme: tenant "acme"'s priority -10 does nothing on pool\(s\) b-decode: they do not declare schedulingPolicy: priority, so a request routed to any of them runs at 0\. Fix: declare schedulingPolicy: priority on those pools once their workers run `vllm serve --scheduling-policy priority`/,
    );
    expect(r.out).toContain(`${file}: OK with 1 warning`);
  });

  it('exit 1 with every precise message for an invalid table', async () => {
    const r = await run('check', fixturePath('typo.yaml'));
    expect(r.code).toBe(1);
    expect(r.out).toMatch(/typo\.yaml:12:5: error: pools\[0\]\.revison: unknown key "revison"\. Fix: did you mean "revision"\?/);
    expect(r.out).toMatch(/typo\.yaml: INVALID: 3 errors; the gate would keep the table it has\n$/);
    const missing = await run('check', join(dir, 'nope.yaml'));
    expect(missing.code).toBe(1);
    expect(missing.out).toMatch(/nope\.yaml: error: \(file\): the route table cannot be read: no such file \(ENOENT\)/);
  });

  it('--json gives the same verdict as data', async () => {
    const bad = await run('check', '--json', await table((v) => (v['pools'][3]['revision'] = 'llama-bb')));
    expect(bad.code).toBe(1);
    const report = JSON.parse(bad.out);
    expect(report.ok).toBe(false);
    expect(report.errors).toContainEqual(
      expect.objectContaining({
        path: 'pools[3].revision',
        severity: 'error',
        line: 1,
        fix: 'did you mean "llama-b"? Declared revisions: llama-a, llama-b',
      }),
    );
    const good = JSON.parse((await run('check', await table(), '--json')).out);
    expect(good).toMatchObject({ ok: true, errors: [], warnings: [], summary: { revisions: 2, pools: 4, models: 1 } });
  });
});

describe('kvgate policy diff', () => {
  it('says what routing changes, and exits 0', async () => {
    const before = await table();
    const after = await table((v) => {
      v['models']['llama-3-8b']['rollout']['weight'] = 25;
      v['pools'][3]['draining'] = true;
      v['models']['llama-3-8b']['tenants'] = ['acme', 'globex', 'initech'];
      v['pools'].forEach((p: Value) => (p['tenants'] = ['*']));
    });
    const r = await run('diff', before, after);
    expect(r.code).toBe(0);
    expect(r.out).toBe(
      `kvgate policy diff ${before} (2 revisions, 4 pools, 1 served model) -> ${after} (2 revisions, 4 pools, 1 served model)\n` +
        'models:\n' +
        '  - model llama-3-8b: tenants added: initech\n' +
        '  - llama-b cohort 10% -> 25%: about 15% of new sessions move to llama-b; sessions holding a binding stay\n' +
        'pools:\n' +
        '  - pool b-decode now draining: it takes no new requests; requests in flight there finish\n',
    );
    const same = await run('diff', before, before);
    expect(same.out).toMatch(/\nno routing changes\n$/);
    const j = JSON.parse((await run('diff', '--json', before, after)).out);
    expect(j.changes).toContainEqual({
      area: 'pools',
      text: 'pool b-decode now draining: it takes no new requests; requests in flight there finish',
    });
  });

  it('exit 1 when either file is invalid, with its issues', async () => {
    const r = await run('diff', await table(), fixturePath('typo.yaml'));
    expect(r.code).toBe(1);
    expect(r.err).toMatch(
      /typo\.yaml is not a valid route table:\n.*error: pools\[0\]\.revison: unknown key "revison"\. Fix: did you mean "revision"\?/,
    );
  });

  it('exit 2 on usage errors', async () => {
    expect((await run()).code).toBe(2);
    expect((await run('diff', 'one')).code).toBe(2);
    expect((await run('lint', 'x')).code).toBe(2);
    expect((await run('check', 'x', '--frobnicate')).code).toBe(2);
    expect((await run('--help')).code).toBe(0);
  });
});

/** The fenced code blocks of a Markdown document, each with its info string (`yaml`, `sh`, or '' for plain output). */
function fencedBlocks(doc: string): { lang: string; text: string }[] {
  const out: { lang: string; text: string }[] = [];
  let open: { lang: string; lines: string[] } | undefined;
  for (const line of doc.split('\n')) {
    const fence = /^```(\w*)\s*$/.exec(line);
    if (fence === null) open?.lines.push(line);
    else if (open === undefined) open = { lang: fence[1]!, lines: [] };
    else {
      out.push({ lang: open.lang, text: open.lines.join('\n') });
      open = undefined;
    }
  }
  return out;
}

describe("docs/policy-guide.md's examples", () => {
  const guide = () => readFile(join(PACKAGE_ROOT, 'docs', 'policy-guide.md'), 'utf8');

  it('every policy check output it shows is what kvgate policy check prints for that file, line for line', async () => {
    const shown = fencedBlocks(await guide()).filter((b) => b.lang === '' && /^\S+\.yaml: (OK|INVALID)/m.test(b.text));
    expect(shown.length).toBeGreaterThanOrEqual(2);
    for (const { text } of shown) {
      const file = /^(\S+\.yaml)[:]/.exec(text)![1]!; // as the guide writes it: relative to the repository root
      const r = await run('check', join(PACKAGE_ROOT, file));
      expect(
        r.out
          .split(`${join(PACKAGE_ROOT, file)}`)
          .join(file)
          .trimEnd(),
        file,
      ).toBe(text.trimEnd());
    }
  });

  /** Section 1's annotated table in a folder of its own, beside the example descriptors it names. */
  async function sectionOneTable(): Promise<string> {
    const table = fencedBlocks(await guide()).find((b) => b.lang === 'yaml' && b.text.startsWith('version: 1'));
    const at = await mkdtemp(join(dir, 'guide-'));
    await cp(join(PACKAGE_ROOT, 'examples', 'descriptors'), join(at, 'descriptors'), { recursive: true });
    await writeFile(join(at, 'route-table.yaml'), table!.text);
    return join(at, 'route-table.yaml');
  }

  it('the annotated route table of section 1 passes policy check with the example descriptors, without a finding', async () => {
    const r = await run('check', await sectionOneTable());
    expect(r.code, r.out).toBe(0);
    expect(r.out).toMatch(/^\S+route-table\.yaml: OK: 2 revisions, 4 pools, 1 served model$/m);
  });

  it("section 10's kvgate explain run prints every line the guide shows, with the table of section 1", async () => {
    const doc = await guide();
    const command = /^kvgate explain (.*)$/m.exec(doc.slice(doc.indexOf('## 10.')))![1]!.split(' ');
    const shown = fencedBlocks(doc.slice(doc.indexOf('(output shortened):'))).find((b) => b.lang === '')!.text;
    const request = join(dir, 'req.json');
    await writeFile(request, /`req\.json` = `([^`]+)`/.exec(doc)![1]!);
    const table = await sectionOneTable();
    const argv = command.map((a) => (a === 'route-table.yaml' ? table : a === 'req.json' ? request : a));
    const out: string[] = [];
    expect(await explainCommand(argv, { out: (t) => out.push(t), err: () => {} })).toBe(0);
    const printed = out.join('').split('\n');
    const lines = shown.split('\n').filter((l) => l.trim() !== '' && l.trim() !== '...');
    expect(lines.length).toBeGreaterThanOrEqual(15);
    expect(lines.filter((l) => !printed.includes(l))).toEqual([]);
  });
});
