import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { formatIssue, formatIssues, issue, type ConfigIssue } from '../config/issues.js';
import { loadRouteTable, parseRouteTable, routeTableFromValue } from './load.js';
import {
  clone,
  descriptorFilesFor,
  EXAMPLES_DIR,
  ROUTE_TABLES_DIR,
  fixturePath,
  readExample,
  readFixture,
  tableFromValue,
  testDescriptorInput,
  twoRevisionTableValue,
} from './testing.js';

const fixture = fixturePath;

function issuesOf(value: unknown): ConfigIssue[] {
  const r = routeTableFromValue(value, { file: 't.yaml' });
  if (r.ok) throw new Error('expected issues, the table loaded');
  return r.error;
}

function isDeepFrozen(v: unknown): boolean {
  if (v === null || typeof v !== 'object') return true;
  return Object.isFrozen(v) && Object.values(v).every(isDeepFrozen);
}

describe('parseRouteTable', () => {
  it('loads the sample two-revision table, with schema defaults, frozen', () => {
    const r = parseRouteTable(readFixture('two-revisions.yaml'), {
      file: fixture('two-revisions.yaml'),
      descriptorFiles: descriptorFilesFor('two-revisions.yaml'),
    });
    if (!r.ok) throw new Error(formatIssues(r.error));
    const t = r.value.table;
    expect(Object.keys(t.revisions)).toEqual(['llama-a', 'llama-b']);
    expect(t.pools.map((p) => p.cluster)).toEqual(['a_prefill', 'a_decode', 'b_prefill', 'b_decode']);
    expect(t.pools[0]!.maxInFlightPerEndpoint).toBe(64);
    expect(t.pools[0]!.draining).toBe(false);
    expect(t.pools[0]!.tenants).toEqual(['*']);
    expect(t.limits.maxBodyBytes).toBe(1024 * 1024);
    expect(t.session).toEqual({ header: 'x-session-id', bindingTtlMs: 3_600_000 });
    expect(t.fallback).toEqual([{ kind: 'refuse', retryAfterSeconds: 5 }]);
    expect(t.revisions['llama-a']!.descriptorFile).toBe('../descriptors/llama-a.yaml');
    expect(t.warnings).toEqual([]);
    expect(isDeepFrozen(t)).toBe(true);
    expect(r.value.warnings).toBe(t.warnings);
  });

  it('compiles a table naming descriptor files exactly as the same table with the descriptors inline', () => {
    const fromYaml = parseRouteTable(readFixture('two-revisions.yaml'), {
      file: 'x.yaml',
      descriptorFiles: descriptorFilesFor('two-revisions.yaml'),
    });
    if (!fromYaml.ok) throw new Error(formatIssues(fromYaml.error));
    const fromValue = tableFromValue(twoRevisionTableValue(), { file: 'x.yaml' });
    const fingerprints = (t: typeof fromValue) => [...t.revisions].map(([k, r]) => [k, r.fingerprint]);
    expect(fingerprints(fromYaml.value)).toEqual(fingerprints(fromValue));
    const withoutFiles = (t: typeof fromValue) =>
      Object.fromEntries(Object.entries(t.table.revisions).map(([k, r]) => [k, { ...r, descriptorFile: null }]));
    expect(withoutFiles(fromYaml.value)).toEqual(withoutFiles(fromValue));
    expect(fromYaml.value.table.pools).toEqual(fromValue.table.pools);
  });

  it('reads JSON when the format says so, and reports JSON syntax errors with a position', () => {
    const json = JSON.stringify(twoRevisionTableValue(), null, 2);
    expect(parseRouteTable(json, { file: 'table.json' }).ok).toBe(true);
    const broken = json.replace('"version": 1,', '"version": 1,,');
    const r = parseRouteTable(broken, { file: 'table.json' });
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.error[0]!.message).toMatch(/^JSON syntax error/);
    expect(r.error[0]!.line).toBe(2);
    // A comment, as YAML allows and JSON does not: the fix names it among JSON's rules.
    const commented = parseRouteTable(json.replace('"version": 1,', '"version": 1, // v1'), { file: 'table.json' });
    expect(commented.ok ? undefined : commented.error[0]!.fix).toMatch(/no comments/);
  });

  it('reports YAML syntax errors with line and column', () => {
    const r = parseRouteTable(readFixture('syntax-error.yaml'), { file: 'syntax-error.yaml' });
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.error[0]!.message).toMatch(/^YAML syntax error/);
    expect(r.error[0]!.line).toBe(5);
    expect(r.error[0]!.column).toBeGreaterThan(0);
  });

  it('reports a duplicated key instead of letting the second win', () => {
    const r = parseRouteTable('version: 1\nversion: 1\n', { file: 'dup.yaml' });
    expect(!r.ok && r.error[0]!.fix).toMatch(/duplicated keys/);
  });

  it('suggests the intended key or value for typos, with line numbers', async () => {
    const r = await loadRouteTable(fixture('typo.yaml'));
    expect(r.ok).toBe(false);
    if (r.ok) return;
    const byPath = new Map(r.error.map((i) => [i.path, i]));
    expect(byPath.get('pools[0].revison')).toMatchObject({ message: 'unknown key "revison"', line: 12 });
    expect(byPath.get('pools[0].revison')!.fix).toMatch(/^did you mean "revision"\?/);
    expect(byPath.get('pools[0].maxInflightPerEndpoint')!.fix).toMatch(/did you mean "maxInFlightPerEndpoint"/);
    // The misspelt key is reported once, not also as "revision is required".
    expect(byPath.has('pools[0].revision')).toBe(false);
    expect(byPath.get('connectorMode')).toMatchObject({ message: '"strcit" is not allowed here', fix: 'did you mean "strict"?', line: 19 });
  });

  it('media.allowedOrigins: none by default; a typo or an entry that is no origin is an issue with its path, line and fix', () => {
    const ok = routeTableFromValue(twoRevisionTableValue(), { file: 't.yaml' });
    expect(ok.ok && ok.value.media).toEqual({ allowedOrigins: [] });
    const text = `${readFixture('two-revisions.yaml')}media:\n  allowedOrigin: [https://media.example.com]\n`;
    const typo = parseRouteTable(text, { file: 'm.yaml', descriptorFiles: descriptorFilesFor('two-revisions.yaml') });
    expect(!typo.ok && typo.error.map((i) => [i.path, i.message, i.fix, i.line])).toEqual([
      [
        'media.allowedOrigin',
        'unknown key "allowedOrigin"',
        expect.stringMatching(/^did you mean "allowedOrigins"\?/),
        text.split('\n').length - 1,
      ],
    ]);
    const v = twoRevisionTableValue();
    v['media'] = {
      allowedOrigins: [
        'https://media.example.com',
        'https://media.example.com/',
        'https://169.254.169.254',
        'http://localhost:8080',
        'media.example.com',
      ],
    };
    expect(issuesOf(v).map((i) => [i.path, i.message])).toEqual([
      [
        'media.allowedOrigins[1]',
        expect.stringMatching(/^"https:\/\/media\.example\.com\/" is not an origin: write scheme:\/\/host\[:port\]/),
      ],
      ['media.allowedOrigins[2]', expect.stringMatching(/^"https:\/\/169\.254\.169\.254" names an IP address, not a host name/)],
      ['media.allowedOrigins[3]', '"http://localhost:8080" names localhost'],
      ['media.allowedOrigins[4]', '"media.example.com" is neither a data: URL nor an https:// URL'],
    ]);
    expect(issuesOf(v)[0]!.fix).toMatch(/^write an origin such as https:\/\/media\.example\.com/);
  });

  it('gives semantic issues a line number too', () => {
    const text = readFixture('two-revisions.yaml').replace(
      'revision: llama-b\n    endpoints:\n      - { address: 10.0.4.1:9090',
      'revision: llama-c\n    endpoints:\n      - { address: 10.0.4.1:9090',
    );
    const r = parseRouteTable(text, { file: 'two.yaml', descriptorFiles: descriptorFilesFor('two-revisions.yaml') });
    expect(r.ok).toBe(false);
    if (r.ok) return;
    const i = r.error.find((x) => x.path === 'pools[3].revision');
    expect(i).toMatchObject({ line: text.split('\n').findIndex((l) => l.includes('revision: llama-c')) + 1 });
  });

  it('lists the accepted keys when a key is not close to any', () => {
    const v = twoRevisionTableValue();
    v['colour'] = 'blue';
    const [i] = issuesOf(v);
    expect(i!.path).toBe('colour');
    expect(i!.fix).toMatch(/^remove it; keys accepted here: version, revisions, models, pools/);
  });

  it('explains each structural rule with its own message', () => {
    const cases: [(v: Record<string, any>) => void, string, RegExp][] = [
      [(v) => (v['version'] = 2), 'version', /must be 1/],
      [
        (v) => (v['revisions']['llama-a']['descriptorFile'] = 'a.yaml'),
        'revisions.llama-a',
        /exactly one of descriptor .* or descriptorFile/,
      ],
      [
        (v) => (v['tenancy']['source'] = { header: 'x-t', metadata: { namespace: 'n', path: ['p'] } }),
        'tenancy.source',
        /exactly one of header or metadata/,
      ],
      [
        (v) => (v['fallback'] = [{ queue: { deadlineMs: 1, maxDepth: 1 }, refuse: { retryAfterSeconds: 1 } }]),
        'fallback[0]',
        /exactly one of queue, routeVia, recompute or refuse/,
      ],
      [
        (v) => (v['models']['llama-3-8b']['tenants'] = ['*', 'acme']),
        'models.llama-3-8b.tenants',
        /'\*' means any tenant and must be the only entry/,
      ],
      [(v) => (v['pools'][1]['endpoints'][0]['address'] = 'decode-0:8000'), 'pools[1].endpoints[0].address', /must be 'ip:port'/],
      [(v) => (v['pools'][1]['endpoints'][0]['address'] = '10.0.0.1:70000'), 'pools[1].endpoints[0].address', /must be 'ip:port'/],
      [(v) => (v['pools'][1]['endpoints'][0]['status'] = 'ftp://10.0.0.1'), 'pools[1].endpoints[0].status', /sidecar's status URL/],
      [(v) => (v['models']['llama-3-8b']['rollout']['weight'] = 150), 'models.llama-3-8b.rollout.weight', /between 0 and 100/],
      [(v) => (v['tenancy']['source'] = { header: 'x tenant' }), 'tenancy.source.header', /HTTP header name/],
      [(v) => (v['contract'] = { ttlMs: 3_600_000 }), 'contract.ttlMs', /replay window/],
    ];
    for (const [mutate, path, message] of cases) {
      const v = clone(twoRevisionTableValue()) as Record<string, any>;
      mutate(v);
      const found = issuesOf(v).find((i) => i.path === path);
      expect(found, `expected an issue at ${path}`).toBeDefined();
      expect(found!.message).toMatch(message);
      expect(found!.fix.length).toBeGreaterThan(0);
    }
  });

  it('says what to write: an address as an IP literal, a quoted number or boolean without its quotes', () => {
    const v = clone(twoRevisionTableValue()) as Record<string, any>;
    v['pools'][1]['endpoints'][0]['address'] = 'decode-0.vllm:9090';
    v['version'] = '1';
    const issues = issuesOf(v);
    expect(issues.find((i) => i.path === 'pools[1].endpoints[0].address')!.fix).toMatch(
      /^write an IP address and a port, e\.g\. 10\.0\.0\.12:9090 .*host names are not resolved.*discovery\.kubernetes/,
    );
    // Not 'did you mean "1"?' to an author who wrote "1": the text is right, the type is not.
    expect(issues.find((i) => i.path === 'version')).toMatchObject({
      message: 'string "1" is not allowed here: version takes the number 1',
      fix: 'write version: 1, without quotes',
    });
  });

  it('says so, in one line, when the file is another kvgate file: gate or sidecar config, descriptor, Envoy bootstrap', () => {
    const one = (value: unknown): ConfigIssue[] => {
      const r = routeTableFromValue(value, { file: 'x.yaml' });
      return r.ok ? [] : r.error;
    };
    const gate = one({ listen: '0.0.0.0:9002', admin: '0.0.0.0:9003', policy: 'route-table.yaml', keys: { file: 'k.json' } });
    expect(gate).toHaveLength(1);
    expect(gate[0]).toMatchObject({
      message: 'this is a gate config, not a route table (it has listen, admin, policy, keys)',
      fix: "check the route table its policy: names instead: kvgate policy check route-table.yaml (relative to the gate config's folder)",
    });
    expect(one({ role: 'decode', worker: 'http://127.0.0.1:8000', descriptor: 'd.yaml' })[0]!.message).toMatch(/^this is a sidecar config/);
    expect(one(testDescriptorInput())[0]!.message).toMatch(/^this is a compatibility descriptor/);
    expect(one({ static_resources: {} })[0]!.message).toBe('this is an Envoy bootstrap, not a route table');
    // A route table with mistakes is still explained key by key.
    expect(one({ version: 1, listen: 'x' }).length).toBeGreaterThan(1);
  });

  it('suggests the fallback step a typo meant', () => {
    const v = twoRevisionTableValue();
    v['fallback'] = [{ refuze: { retryAfterSeconds: 5 } }];
    const found = issuesOf(v).find((i) => i.path === 'fallback[0].refuze');
    expect(found!.fix).toMatch(/did you mean "refuse"/);
  });

  it('reads every fallback step kind into a tagged union', () => {
    const v = twoRevisionTableValue();
    v['fallback'] = [
      { queue: { deadlineMs: 2000, maxDepth: 100 } },
      { routeVia: { revisions: ['llama-a'] } },
      { recompute: { prefillMsPerToken: 0.2, maxPromptTokens: 4096 } },
      { refuse: { retryAfterSeconds: 3 } },
    ];
    expect(tableFromValue(v).fallback).toEqual([
      { kind: 'queue', deadlineMs: 2000, maxDepth: 100, order: 'fifo' },
      { kind: 'routeVia', revisions: ['llama-a'], eligible: { notPinned: true, noAdapter: true } },
      { kind: 'recompute', prefillMsPerToken: 0.2, maxPromptTokens: 4096 },
      { kind: 'refuse', retryAfterSeconds: 3 },
    ]);
  });

  it('refuses a speculative config that is not plain JSON as an issue, never an exception out of the load', () => {
    let deep: unknown = 1;
    for (let i = 0; i < 100_000; i++) deep = [deep];
    for (const speculative of [{ num_speculative_tokens: Number.POSITIVE_INFINITY }, { x: Number.NaN }, { x: deep }, { at: new Date(0) }]) {
      const v = twoRevisionTableValue() as Record<string, any>;
      v['revisions']['llama-a']['descriptor']['speculative'] = speculative;
      expect(issuesOf(v).map((i) => [i.path, i.message])).toEqual([
        ['revisions.llama-a.descriptor.speculative', expect.stringMatching(/^must be plain JSON .* nested at most 16 deep$/)],
      ]);
    }
    // From YAML text: `.inf` is a number YAML reads and JSON cannot carry.
    const text = readFixture('two-revisions.yaml');
    const descriptorFiles = { ...descriptorFilesFor('two-revisions.yaml') };
    const [ref, body] = Object.entries(descriptorFiles)[0]!;
    descriptorFiles[ref] = `${body}\nspeculative: { method: eagle, num_speculative_tokens: .inf }\n`;
    const r = parseRouteTable(text, { file: fixture('two-revisions.yaml'), descriptorFiles });
    expect(r.ok ? '' : formatIssues(r.error)).toMatch(/speculative: must be plain JSON/);
  });

  it('lower-cases header names so they match what Envoy sends', () => {
    const v = twoRevisionTableValue();
    v['tenancy'] = { source: { header: 'X-Tenant-ID' }, required: true };
    expect(tableFromValue(v).tenancy.source.header).toBe('x-tenant-id');
  });

  it('needs descriptor file contents when parsing without file access', () => {
    const v = twoRevisionTableValue() as Record<string, any>;
    v['revisions']['llama-a'] = { descriptorFile: 'descriptors/llama-a.yaml' };
    const [i] = issuesOf(v);
    expect(i).toMatchObject({ path: 'revisions.llama-a.descriptorFile' });
    expect(i!.fix).toMatch(/loadRouteTable/);
    const withText = routeTableFromValue(v, {
      file: 't.yaml',
      descriptorFiles: { 'descriptors/llama-a.yaml': readExample('descriptors/llama-a.yaml') },
    });
    expect(withText.ok).toBe(true);
  });

  it('reports schema errors inside a descriptor file against that file', () => {
    const v = twoRevisionTableValue() as Record<string, any>;
    v['revisions']['llama-a'] = { descriptorFile: 'a.json' };
    const bad = { ...testDescriptorInput(), kvCache: { dtype: 'auto', scaleScheme: 'none', blockSize: 16, layuot: 'HND' } };
    const r = routeTableFromValue(v, { file: '/etc/kvgate/table.yaml', descriptorFiles: { 'a.json': JSON.stringify(bad) } });
    expect(r.ok).toBe(false);
    if (r.ok) return;
    const typo = r.error.find((i) => i.path === 'kvCache.layuot');
    expect(typo).toMatchObject({ file: '/etc/kvgate/a.json', line: 1 });
    expect(typo!.fix).toMatch(/did you mean "layout"/);
  });
});

describe('loadRouteTable', () => {
  it('reads descriptor files relative to the table', async () => {
    const r = await loadRouteTable(fixture('fp8-both.yaml'));
    if (!r.ok) throw new Error(formatIssues(r.error));
    expect(r.value.table.revisions['llama-fp8']).toMatchObject({ descriptorFile: '../descriptors/llama-fp8-dynamic.json' });
    expect(r.value.table.revisions['llama-fp8']!.descriptor.kvCache.scaleScheme).toBe('dynamic-per-block');
    expect(r.value.tenancy.source.metadata).toEqual({ namespace: 'envoy.filters.http.jwt_authn', path: ['jwt_payload', 'org'] });
  });

  it('loads every example route table under examples/route-tables (what operators copy)', async () => {
    const names = (await readdir(ROUTE_TABLES_DIR)).filter((f) => /\.(ya?ml|json)$/.test(f));
    expect(names.length).toBeGreaterThanOrEqual(3);
    for (const name of names) {
      const r = await loadRouteTable(join(ROUTE_TABLES_DIR, name));
      expect(r.ok ? 'ok' : formatIssues(r.error), name).toBe('ok');
    }
  });

  it('reports a missing table file as an issue, not an exception', async () => {
    const missing = await loadRouteTable(fixture('does-not-exist.yaml'));
    expect(!missing.ok && missing.error[0]).toMatchObject({
      path: '(file)',
      message: 'the route table cannot be read: no such file (ENOENT)',
    });
    // Its folder instead of the file: the fix says which to give.
    const folder = await loadRouteTable(ROUTE_TABLES_DIR);
    expect(!folder.ok && folder.error[0]).toMatchObject({
      message: 'the route table cannot be read: it is a directory, not a file (EISDIR)',
      fix: 'name the route table file itself, not its folder (e.g. route-table.yaml in it)',
    });
  });

  it('names the descriptor file that cannot be read', async () => {
    const v = twoRevisionTableValue() as Record<string, any>;
    v['revisions']['llama-b'] = { descriptorFile: 'gone.yaml' };
    const readText = async (p: string) => {
      if (p === '/t/table.json') return JSON.stringify(v);
      throw Object.assign(new Error('nope'), { code: 'ENOENT' });
    };
    const r = await loadRouteTable('/t/table.json', { readText });
    expect(!r.ok && r.error.map((i) => [i.path, i.message])).toEqual([
      ['revisions.llama-b.descriptorFile', 'descriptor file "gone.yaml" (/t/gone.yaml) cannot be read: no such file (ENOENT)'],
    ]);
  });
  it('gives a descriptor file that cannot be read the line of the descriptorFile naming it', () => {
    const text = readExample('route-tables/two-revisions.yaml').replace('../descriptors/llama-b.yaml', 'gone.yaml');
    const descriptorFiles = { ...descriptorFilesFor('two-revisions.yaml'), 'gone.yaml': { error: 'no such file (ENOENT)' } };
    const r = parseRouteTable(text, { file: 't.yaml', descriptorFiles });
    const line = text.split('\n').findIndex((l) => l.includes('descriptorFile: gone.yaml')) + 1;
    expect(!r.ok && r.error.map((i) => [i.path, i.line])).toEqual([['revisions.llama-b.descriptorFile', line]]);
  });

  it('reads an absolute descriptorFile path as written', async () => {
    const v = twoRevisionTableValue() as Record<string, any>;
    v['revisions']['llama-a'] = { descriptorFile: join(EXAMPLES_DIR, 'descriptors', 'llama-a.yaml') };
    const read: string[] = [];
    const readText = async (p: string) => {
      read.push(p);
      return p === '/t/table.json' ? JSON.stringify(v) : readExample('descriptors/llama-a.yaml');
    };
    const r = await loadRouteTable('/t/table.json', { readText });
    expect(r.ok).toBe(true);
    expect(read).toEqual(['/t/table.json', join(EXAMPLES_DIR, 'descriptors', 'llama-a.yaml')]);
  });
});

describe('formatting issues', () => {
  it('prints one line per issue with position, severity, path, message and fix, errors first', () => {
    const w = issue('t.yaml', ['fallback'], 'a warning', 'do a thing', { severity: 'warning' });
    const e = issue('t.yaml', ['pools', 2, 'revision'], 'unknown revision "x".', 'declare it', { line: 7, column: 5 });
    expect(formatIssue(e)).toBe('t.yaml:7:5: error: pools[2].revision: unknown revision "x". Fix: declare it');
    expect(formatIssues([w, e]).split('\n')).toEqual([formatIssue(e), 't.yaml: warning: fallback: a warning. Fix: do a thing']);
  });

  it('quotes path keys that are not plain words', () => {
    expect(issue('f', ['models', 'org/llama.v2', 'tenants'], 'm', 'f').path).toBe('models["org/llama.v2"].tenants');
  });
});
