/**
 * `kvgate gate` as a command, in-process: SIGTERM and SIGINT both drain (health NOT_SERVING, streams in flight
 * finish within drain.graceMs), a second signal ends the drain at once, and the command exits 0 either way.
 */
import { EventEmitter } from 'node:events';
import { spawnSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { afterEach, describe, expect, it } from 'vitest';
import type { RunningGate } from '../gate/gate.js';
import { createTableFile, queueTableValue, type TableFile } from '../gate/testing.js';
import { PACKAGE_ROOT } from '../package-root.js';
import { gateCommand } from './gate-command.js';

const healthService: grpc.ServiceDefinition = {
  Check: {
    path: '/grpc.health.v1.Health/Check',
    requestStream: false,
    responseStream: false,
    // grpc.health.v1: HealthCheckRequest { string service = 1 }, HealthCheckResponse { ServingStatus status = 1 }.
    requestSerialize: (r: { service: string }) => {
      const s = Buffer.from(r.service, 'utf8');
      return Buffer.concat([Buffer.from([0x0a, s.length]), s]);
    },
    requestDeserialize: (b: Buffer) => b,
    responseSerialize: (b: Buffer) => b,
    responseDeserialize: (b: Buffer) => ({ status: b.length >= 2 && b[0] === 0x08 ? b[1] : 0 }),
  },
};
const SERVING = 1;
const NOT_SERVING = 2;

let table: TableFile | undefined;
afterEach(async () => {
  await table?.remove();
  table = undefined;
});

async function startCommand(drain: { announceMs: number; graceMs: number }) {
  table = await createTableFile(queueTableValue());
  const config = path.join(path.dirname(table.path), 'gate.json');
  await writeFile(
    config,
    JSON.stringify({
      listen: '127.0.0.1:0',
      health: '127.0.0.1:0',
      admin: '',
      insecure: true,
      policy: 'route-table.json',
      keys: { devSeed: 'gate-command-test' },
      workerView: { mode: 'static' },
      drain,
      log: { level: 'silent' },
    }),
  );
  const signals = new EventEmitter();
  let ready: (g: RunningGate) => void = () => undefined;
  const gate = new Promise<RunningGate>((r) => (ready = r));
  const exit = gateCommand(['--config', config], { signals: signals as unknown as NodeJS.Process, onReady: ready });
  const g = await Promise.race([gate, exit.then((code) => Promise.reject(new Error(`the gate exited ${code} before serving`)))]);
  const Health = grpc.makeGenericClientConstructor(healthService, 'Health');
  const client = new Health(`127.0.0.1:${g.healthPort}`, grpc.credentials.createInsecure()) as unknown as {
    Check(req: { service: string }, cb: (e: grpc.ServiceError | null, r: { status: number }) => void): void;
    close(): void;
  };
  const check = () => new Promise<number>((res, rej) => client.Check({ service: '' }, (e, r) => (e ? rej(e) : res(r.status))));
  return { signals, exit, check, client };
}

describe('kvgate gate: signals', () => {
  it.each(['SIGTERM', 'SIGINT'])(
    '%s drains (NOT_SERVING while announced) and a second signal ends the drain; exit 0',
    async (first) => {
      // An announce window far longer than the test: only the second signal can end it.
      const c = await startCommand({ announceMs: 600_000, graceMs: 600_000 });
      try {
        expect(await c.check()).toBe(SERVING);
        c.signals.emit(first);
        // Still answering, as NOT_SERVING, so Envoy's health checks take this gate out before it stops.
        expect(await c.check()).toBe(NOT_SERVING);
        c.signals.emit(first === 'SIGTERM' ? 'SIGINT' : 'SIGTERM');
        expect(await c.exit).toBe(0);
      } finally {
        c.client.close();
      }
    },
    20_000,
  );
});

describe('kvgate gate with files missing', () => {
  it('names every missing file at once (keys, route table, each TLS file) with a fix, and starts nothing', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'kvgate-gate-preflight-'));
    try {
      const config = path.join(dir, 'gate.yaml');
      await writeFile(
        config,
        [
          'listen: 127.0.0.1:0',
          "admin: ''",
          'policy: route-table.yaml',
          'keys: { file: keys.json }',
          'tls: { cert: tls/gate.crt, key: tls/gate.key, clientCa: tls/ca.crt, roles: { public: [dns:p], internal: [dns:i] } }',
          '',
        ].join('\n'),
      );
      // The built CLI, as an operator runs it (npm test builds first): exit 2 before any port or pod watch.
      const r = spawnSync(process.execPath, [path.join(PACKAGE_ROOT, 'dist/src/cli/main.js'), 'gate', '--config', config], {
        encoding: 'utf8',
        timeout: 20_000,
      });
      expect(r.status, r.stderr).toBe(2);
      expect(r.stderr).toMatch(/^kvgate gate: cannot start; nothing was started:$/m);
      expect(r.stderr).toMatch(/gate\.yaml: keys: key file \S+keys\.json: cannot be read \(ENOENT\)/);
      expect(r.stderr).toMatch(/gate\.yaml: policy: the route table cannot be used[\s\S]*route-table\.yaml: error: \(file\)/);
      for (const what of ['cert', 'key', 'clientCa'])
        expect(r.stderr).toMatch(
          new RegExp(`gate\\.yaml: tls\\.${what}: cannot read \\S+: no such file \\(ENOENT\\)\\. Fix: mount the PEM file there`),
        );
      expect(r.stdout).toBe('');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
