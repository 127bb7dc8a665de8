/**
 * A gate that cannot start says which setting to fix: a route table that cannot be read is named with the `policy:`
 * line that chose it and the config file it is relative to (a relative path is read next to that file, not the
 * working directory), so an operator edits the right file.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import { createDevKeyRing } from '../contract/keys.js';
import { stringify as toYaml } from 'yaml';
import { twoRevisionTableValue } from '../policy/testing.js';
import { parseGateConfig } from './config.js';
import { startGate } from './gate.js';
import { localGateConfig } from './testing.js';

let dir: string | undefined;
afterEach(async () => {
  if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  dir = undefined;
});

describe('startGate: a route table that cannot be used', () => {
  it('names the file, the policy setting and the config file it is relative to', async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'kvgate-start-'));
    const file = path.join(dir, 'gate.json');
    const cfg = parseGateConfig(
      JSON.stringify({ listen: '127.0.0.1:0', admin: '', insecure: true, policy: 'tables/missing.yaml', keys: { devSeed: 'x' } }),
      file,
    );
    if (!cfg.ok) throw new Error(JSON.stringify(cfg.error));
    const started = startGate(cfg.value, {
      logger: pino({ level: 'silent' }),
      keys: createDevKeyRing('x'),
      registry: new Registry(),
      defaultMetrics: false,
    });
    await expect(started).rejects.toThrow(/cannot read the route table/);
    await expect(started).rejects.toThrow(`(policy: tables/missing.yaml in ${file}, read as ${path.join(dir, 'tables', 'missing.yaml')})`);
  });
});

const listening = (port = 0): Promise<Server> =>
  new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject).listen(port, '127.0.0.1', () => resolve(srv));
  });
const portOf = (srv: Server): number => (srv.address() as { port: number }).port;
const closed = (srv: Server): Promise<void> => new Promise((r) => srv.close(() => r()));
const watchers = (): number => process.getActiveResourcesInfo().filter((r) => r === 'FSEventWrap').length;

describe('startGate: a start that fails after the ports begin to open', () => {
  it('leaves nothing running: no file watch, no gRPC port', async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'kvgate-start-'));
    await writeFile(path.join(dir, 'route-table.yaml'), toYaml(twoRevisionTableValue()));
    const probe = await listening();
    const grpcPort = portOf(probe);
    await closed(probe);
    const taken = await listening(); // the admin port is in use: the start fails after the gRPC port opened
    const before = watchers();
    try {
      await expect(
        startGate(localGateConfig(dir, 'route-table.yaml', { listen: `127.0.0.1:${grpcPort}`, admin: `127.0.0.1:${portOf(taken)}` }), {
          logger: pino({ level: 'silent' }),
          keys: createDevKeyRing('x'),
          registry: new Registry(),
          defaultMetrics: false,
        }),
      ).rejects.toThrow(/EADDRINUSE/);
      await new Promise((r) => setImmediate(r)); // a closed watch's handle goes once libuv has run its close callback
      expect(watchers()).toBe(before);
      await closed(await listening(grpcPort)); // the gRPC port was given back
    } finally {
      await closed(taken);
    }
  });
});
