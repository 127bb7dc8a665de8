/**
 * `kvgate verify` as a command: argument handling, exit codes and output, against small fake endpoints.
 * (The command lives in src/cli/verify-command.ts; the end-to-end run through kvgate is test/e2e/verify.test.ts.)
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseVerifyArgs, runVerifyCommand } from '../cli/verify-command.js';

let dir: string;
let promptsFile: string;
const servers: Server[] = [];

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'kvgate-verify-cmd-'));
  promptsFile = path.join(dir, 'prompts.yaml');
  await writeFile(promptsFile, '- Hello\n- { id: two, prompt: Goodbye, max_tokens: 2 }\n');
});
afterAll(async () => {
  for (const s of servers) {
    s.closeAllConnections();
    await new Promise((r) => s.close(r));
  }
  await rm(dir, { recursive: true, force: true });
});

/** An endpoint whose ids depend on the prompt and on `offset` (offset != 0: a wrong worker). */
async function endpoint(offset: number, seen: any[] = []): Promise<string> {
  const server = createServer((req, res) => {
    let data = '';
    req.on('data', (c) => (data += c));
    req.on('end', () => {
      res.setHeader('content-type', 'application/json');
      if (req.url === '/v1/models') return res.end(JSON.stringify({ data: [{ id: 'served-model', parent: null }] }));
      const body = JSON.parse(data);
      seen.push(body);
      const ids = Array.from({ length: body.max_tokens as number }, (_, i) => body.prompt.length * 10 + i + (i > 0 ? offset : 0));
      res.end(JSON.stringify({ choices: [{ index: 0, text: ids.join(' '), finish_reason: 'length', token_ids: ids }] }));
    });
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

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

describe('kvgate verify (command)', () => {
  it('exits 0 and prints VERIFIED when the ids match, discovering the model from the baseline', async () => {
    const seen: any[] = [];
    const via = await endpoint(0);
    const base = await endpoint(0, seen);
    const c = io();
    const code = await runVerifyCommand(['--via', via, '--baseline', base, '--prompts', promptsFile, '--max-tokens', '4'], c.io);
    expect(code).toBe(0);
    expect(c.out.join('')).toMatch(/VERIFIED/);
    expect(c.out.join('')).toMatch(/model +served-model/);
    expect(c.err).toEqual(expect.arrayContaining([expect.stringMatching(/^verify: \d\/2 /)]));
    expect(seen.every((b) => b.cache_salt === 'kvgate-verify-fixed' && b.model === 'served-model')).toBe(true);
  });

  it('exits 1 with the first divergent position in --json output', async () => {
    const via = await endpoint(5);
    const base = await endpoint(0);
    const c = io();
    const code = await runVerifyCommand(['--via', via, '--baseline', base, '--prompts', promptsFile, '--model', 'm', '--json'], c.io);
    expect(code).toBe(1);
    const j = JSON.parse(c.out.join(''));
    expect(j.verified).toBe(false);
    expect(j.prompts.map((p: any) => [p.id, p.result, p.comparison.position])).toEqual([
      ['p1', 'diverged', 1],
      ['two', 'diverged', 1],
    ]);
  });

  it('exits 1 when the via path did not bind the expected revision', async () => {
    const via = await endpoint(0);
    const base = await endpoint(0);
    const c = io();
    const code = await runVerifyCommand(
      ['--via', via, '--baseline', base, '--prompts', promptsFile, '--model', 'm', '--expect-revision', 'llama-b'],
      c.io,
    );
    expect(code).toBe(1);
    expect(c.out.join('')).toContain('NOT VERIFIED: via responses were bound to (none), not the expected revision llama-b');
  });

  it('exits 2 on usage errors, listing every problem', async () => {
    const c = io();
    const code = await runVerifyCommand(['--via', 'ftp://x', '--header', 'novalue', '--max-tokens', '0'], c.io);
    expect(code).toBe(2);
    const err = c.err.join('');
    expect(err).toContain('--via "ftp://x" is not an http(s) URL');
    expect(err).toContain('--baseline URL is required');
    expect(err).toContain('--prompts FILE is required');
    expect(err).toContain('--header "novalue" must be NAME=VALUE');
    expect(err).toContain('--max-tokens must be a positive integer; got "0"');
    expect(err).toContain('usage: kvgate verify');
    const unknown = io();
    expect(await runVerifyCommand(['--vía', 'x'], unknown.io)).toBe(2);
  });

  it('exits 2 on an invalid prompts file, naming the file and path', async () => {
    const bad = path.join(dir, 'bad.yaml');
    await writeFile(bad, '- { promt: Hello }\n');
    const c = io();
    expect(await runVerifyCommand(['--via', 'http://127.0.0.1:1', '--baseline', 'http://127.0.0.1:1', '--prompts', bad], c.io)).toBe(2);
    expect(c.err.join('')).toContain(`${bad}: error: [0].promt: unknown key "promt". Fix: did you mean "prompt"?`);
  });

  it('exits 3 when the endpoints cannot be reached', async () => {
    const c = io();
    const args = ['--via', 'http://127.0.0.1:1', '--baseline', 'http://127.0.0.1:1', '--prompts', promptsFile, '--timeout-ms', '2000'];
    expect(await runVerifyCommand(args, c.io)).toBe(3);
    expect(c.err.join('')).toMatch(/cannot tell which model to verify: .*pass --model NAME/);
    const d = io();
    expect(await runVerifyCommand([...args, '--model', 'm'], d.io)).toBe(3);
    expect(d.out.join('')).toMatch(/NOT VERIFIED: 2 of 2 prompts could not be compared/);
  });

  it('prints help with exit 0', async () => {
    const c = io();
    expect(await runVerifyCommand(['--help'], c.io)).toBe(0);
    expect(c.out.join('')).toMatch(/^usage: kvgate verify --via URL --baseline URL --prompts FILE/);
  });
});

describe('parseVerifyArgs', () => {
  it('collects repeated headers, lower-cases names and keeps "=" inside values', () => {
    const a = parseVerifyArgs([
      '--via',
      'http://a',
      '--baseline',
      'http://b/v1',
      '--prompts',
      'f',
      '--header',
      'X-Tenant-Id=acme',
      '--header',
      'x-session-id=s=1',
      '--baseline-header',
      'authorization=Bearer t',
    ]);
    expect(a).toMatchObject({
      viaHeaders: { 'x-tenant-id': 'acme', 'x-session-id': 's=1' },
      baselineHeaders: { authorization: 'Bearer t' },
      maxTokens: 32,
      concurrency: 4,
      timeoutMs: 60000,
      salt: undefined,
      json: false,
    });
  });

  it('reads --baseline-salt none as "send no salt"', () => {
    expect(parseVerifyArgs(['--via', 'http://a', '--baseline', 'http://b', '--prompts', 'f', '--baseline-salt', 'none'])).toMatchObject({
      salt: null,
    });
    expect(parseVerifyArgs(['--via', 'http://a', '--baseline', 'http://b', '--prompts', 'f', '--baseline-salt', 'abc'])).toMatchObject({
      salt: 'abc',
    });
  });
});
