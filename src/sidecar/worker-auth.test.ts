import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { engineLaunchId } from './engine-canary.js';
import { contractRequestId } from './server.js';
import { loadWorkerAuth, WorkerApiKeySchema } from './worker-auth.js';

describe('loadWorkerAuth', () => {
  it('reads the key from an environment variable or a file (trimmed), relative files against the config folder', async () => {
    expect(await loadWorkerAuth(undefined, {})).toEqual({ ok: true, value: {} });
    expect(await loadWorkerAuth({ env: 'K' }, { K: ' sk-1 \n' })).toEqual({ ok: true, value: { authorization: 'Bearer sk-1' } });
    const dir = await mkdtemp(path.join(tmpdir(), 'kvgate-key-'));
    try {
      await writeFile(path.join(dir, 'key'), 'sk-file\n');
      expect(await loadWorkerAuth({ file: 'key' }, {}, dir)).toEqual({ ok: true, value: { authorization: 'Bearer sk-file' } });
      await writeFile(path.join(dir, 'empty'), '\n');
      const empty = await loadWorkerAuth({ file: 'empty' }, {}, dir);
      expect(empty.ok).toBe(false);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('says where it looked, never what the key is', async () => {
    const missing = await loadWorkerAuth({ env: 'NOPE' }, {});
    expect(!missing.ok && missing.error).toMatch(/NOPE/);
    const noFile = await loadWorkerAuth({ file: '/nonexistent/kvgate-key' }, {});
    expect(!noFile.ok && noFile.error).toMatch(/\/nonexistent\/kvgate-key.*ENOENT/);
    const twoLines = await loadWorkerAuth({ env: 'K' }, { K: 'secret-a\nsecret-b' });
    expect(!twoLines.ok && twoLines.error).not.toMatch(/secret/);
    expect(WorkerApiKeySchema.safeParse({ file: 'a', env: 'b' }).success).toBe(false);
    expect(WorkerApiKeySchema.safeParse({}).success).toBe(false);
  });
});

describe('contractRequestId', () => {
  it("takes the first of a repeated x-request-id (Node joins them with ', '), as llm-d's sidecar adds a second one", () => {
    expect(contractRequestId('gate-1')).toBe('gate-1');
    expect(contractRequestId('gate-1, 0b4f7d1e-llmd')).toBe('gate-1');
    expect(contractRequestId(', x')).toBeUndefined();
    expect(contractRequestId(undefined)).toBeUndefined();
  });
});

describe('engineLaunchId', () => {
  it("strips vLLM's data-parallel rank suffix, so ranks of one launch are one launch", () => {
    expect(engineLaunchId('5d1c_dp0')).toBe('5d1c');
    expect(engineLaunchId('5d1c_dp13')).toBe('5d1c');
    expect(engineLaunchId('5d1c')).toBe('5d1c');
    expect(engineLaunchId('5d1c_dpx')).toBe('5d1c_dpx');
  });
});
