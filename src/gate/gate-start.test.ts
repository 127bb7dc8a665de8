/**
 * A gate that cannot start says which setting to fix: a route table that cannot be read is named with the `policy:`
 * line that chose it and the config file it is relative to (a relative path is read next to that file, not the
 * working directory), so an operator edits the right file.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import { createDevKeyRing } from '../contract/keys.js';
import { parseGateConfig } from './config.js';
import { startGate } from './gate.js';

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
