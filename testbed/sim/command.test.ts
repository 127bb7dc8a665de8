import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { simCommand } from './command.js';
import { getJson, testDescriptor } from './testing.js';

async function configFile(sim: Record<string, unknown>): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'kvgate-simcmd-'));
  const path = join(dir, 'sim.json');
  await writeFile(path, JSON.stringify({ descriptor: testDescriptor(), sim }));
  return path;
}

function io() {
  const out: string[] = [];
  const err: string[] = [];
  let stop: (s: string) => void = () => {};
  const shutdown = new Promise<string>((r) => (stop = r));
  let listening: (info: { url: string }) => void = () => {};
  const ready = new Promise<{ url: string }>((r) => (listening = r));
  return {
    out,
    err,
    stop: (s: string) => stop(s),
    ready,
    io: {
      out: (l: string) => out.push(l),
      err: (l: string) => err.push(l),
      shutdown,
      logger: pino({ enabled: false }),
      onListening: (i: { url: string }) => listening(i),
    },
  };
}

describe('kvgate sim', () => {
  it('serves until a shutdown signal, then closes and exits 0; --port overrides the file', async () => {
    const path = await configFile({ servedModelName: 'llama', port: 1 });
    const t = io();
    const done = simCommand(['--config', path, '--port', '0'], t.io);
    const { url } = await t.ready;
    expect(t.out[0]).toMatch(
      /^kvgate sim: llama \(vLLM 0\.11\.0\) listening on http:\/\/127\.0\.0\.1:\d+, NIXL side channel http:\/\/127\.0\.0\.1:\d+, engine_id /,
    );
    expect((await getJson(`${url}/version`)).body.version).toBe('0.11.0');
    t.stop('SIGTERM');
    expect(await done).toBe(0);
    expect(t.out[1]).toBe('kvgate sim: SIGTERM received, shutting down');
    await expect(fetch(`${url}/health`)).rejects.toThrow();
  });

  it('exits 1 with the path and fix when the config is invalid', async () => {
    const path = await configFile({ leaseMs: -1 });
    const t = io();
    expect(await simCommand(['--config', path], t.io)).toBe(1);
    expect(t.err.join('\n')).toMatch(/sim\.leaseMs: .*Fix: use a value greater than 0/);
  });

  it('exits 2 on usage errors', async () => {
    const t = io();
    expect(await simCommand([], t.io)).toBe(2);
    expect(await simCommand(['--config', 'x', '--port', 'http'], t.io)).toBe(2);
    expect(await simCommand(['--bogus'], t.io)).toBe(2);
    expect(t.err.join('\n')).toMatch(/usage: npm run testbed -- sim --config FILE/);
    expect(await simCommand(['--help'], t.io)).toBe(0);
  });
});
