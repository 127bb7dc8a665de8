import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { parse as parseYaml, stringify as stringifyYaml } from 'yaml';
import { parseSimConfig } from '../../testbed/sim/config.js';
import { createSimServer, type SimServer } from '../../testbed/sim/server.js';
import { fingerprintCommand } from './fingerprint-command.js';

const A = 'examples/descriptors/llama-a.yaml';
const B = 'examples/descriptors/llama-b.yaml';

async function run(argv: string[]): Promise<{ code: number; out: string }> {
  let out = '';
  const spy = vi.spyOn(process.stdout, 'write').mockImplementation((chunk: unknown) => {
    out += String(chunk);
    return true;
  });
  try {
    return { code: await fingerprintCommand(argv), out };
  } finally {
    spy.mockRestore();
  }
}

describe('kvgate fingerprint', () => {
  let worker: SimServer;
  beforeAll(async () => {
    const cfg = parseSimConfig({ descriptor: parseYaml(readFileSync(A, 'utf8')), sim: { servedModelName: 'llama-3-8b' } });
    if (!cfg.ok) throw cfg.error;
    worker = await createSimServer(cfg.value);
  });
  afterAll(() => worker.close());

  it('measures the canaries of a live worker and confirms it matches its descriptor', async () => {
    const r = await run(['--worker', worker.url, '--descriptor', A, '--json']);
    expect(r.code).toBe(0);
    const out = JSON.parse(r.out);
    expect(out.verified).toBe(true);
    expect(out.fingerprint).toMatch(/^[0-9a-f]{64}$/);
    expect(out.nixlHash.status).toBe('known');
    // The example descriptor's recorded digests are exactly what the worker measures.
    const declared = parseYaml(readFileSync(A, 'utf8')).canaries;
    expect(out.canaries.digests).toEqual(declared);
  });

  it('exits 1 and names the generation canary when the worker runs other weights', async () => {
    const r = await run(['--worker', worker.url, '--descriptor', B, '--json']);
    expect(r.code).toBe(1);
    const out = JSON.parse(r.out);
    expect(out.verified).toBe(false);
    expect(out.reasons.join('\n')).toMatch(/generation/);
  });

  it('prints the fingerprint and predicted NIXL hash of a descriptor without a worker', async () => {
    const a = JSON.parse((await run(['--descriptor', A, '--json'])).out);
    const b = JSON.parse((await run(['--descriptor', B, '--json'])).out);
    expect(a.fingerprint).not.toBe(b.fingerprint);
    // Same geometry, same model path: vLLM's handshake cannot tell A from B. That is the gap kvgate closes.
    expect(a.nixlHash.hash).toBe(b.nixlHash.hash);
  });

  it('reads a descriptor file as the route table does: YAML 1.2 whatever the directive; a duplicate key or a directory is an error', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'kvgate-fp-'));
    let err = '';
    const spy = vi.spyOn(process.stderr, 'write').mockImplementation((chunk: unknown) => {
      err += String(chunk);
      return true;
    });
    try {
      const text = readFileSync(A, 'utf8');
      const old = path.join(dir, 'old.yaml');
      writeFileSync(old, `%YAML 1.1\n---\n${text}`);
      const dup = path.join(dir, 'dup.json');
      const json = JSON.stringify(parseYaml(text));
      writeFileSync(dup, `${json.slice(0, -1)},"kind":"x","kind":"y"}`);
      // A %YAML 1.1 directive does not change the reading (YAML 1.2 core, as the gate reads it): same fingerprint.
      const asGate = JSON.parse((await run(['--descriptor', A, '--json'])).out).fingerprint;
      expect(JSON.parse((await run(['--descriptor', old, '--json'])).out).fingerprint).toBe(asGate);
      for (const [file, why] of [
        [dup, /[Dd]uplicate|unique/],
        [dir, /is a directory/],
      ] as const) {
        err = '';
        expect((await run(['--descriptor', file])).code, file).toBe(2);
        expect(err, file).toMatch(why);
      }
    } finally {
      spy.mockRestore();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('records an adapter revision under the adapter (what its sidecar probes), so the recorded worker verifies', async () => {
    const { canaries: _c, ...base } = parseYaml(readFileSync(A, 'utf8'));
    const declared = { ...base, adapter: { id: 'acme/support-lora', revision: 'lora-r1' } };
    const cfg = parseSimConfig({ descriptor: declared, sim: { servedModelName: 'llama-3-8b' } });
    if (!cfg.ok) throw cfg.error;
    const lora = await createSimServer(cfg.value);
    const dir = mkdtempSync(path.join(tmpdir(), 'kvgate-fp-'));
    try {
      const file = path.join(dir, 'lora.yaml');
      writeFileSync(file, stringifyYaml(declared));
      const first = JSON.parse((await run(['--worker', lora.url, '--descriptor', file, '--json'])).out);
      expect(first.canaries.model).toBe('acme/support-lora');
      const base = JSON.parse((await run(['--worker', lora.url, '--model', 'llama-3-8b', '--json'])).out);
      expect(base.canaries.digests.generation).not.toBe(first.canaries.digests.generation); // the adapter changes generation
      writeFileSync(file, stringifyYaml({ ...declared, canaries: first.canaries.digests }));
      const again = await run(['--worker', lora.url, '--descriptor', file, '--json']);
      expect(again.code).toBe(0);
      expect(JSON.parse(again.out).verified).toBe(true);
    } finally {
      await lora.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('kvgate fingerprint usage errors', () => {
  it('--worker that is not an http(s) URL is a usage error (exit 2), not a failed probe', async () => {
    const errs: string[] = [];
    const spy = vi.spyOn(process.stderr, 'write').mockImplementation((chunk: unknown) => {
      errs.push(String(chunk));
      return true;
    });
    try {
      expect(await fingerprintCommand(['--worker', 'notaurl'])).toBe(2);
      expect(await fingerprintCommand(['--worker', 'ftp://127.0.0.1:8000'])).toBe(2);
    } finally {
      spy.mockRestore();
    }
    expect(errs.join('')).toContain('--worker must be the worker\'s base URL, e.g. http://127.0.0.1:8000, got "notaurl"');
  });
});
