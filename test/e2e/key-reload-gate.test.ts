/**
 * `kvgate gate` picks up an edited key file without a restart, on SIGHUP and when the file changes: the next
 * contract and binding it signs name the new current key id, `/status` and `/metrics` show the ids held, and a
 * file that would give a key id in use another secret is refused while the gate keeps signing with the ring in use.
 */
import { EventEmitter } from 'node:events';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify as toYaml } from 'yaml';
import { gateCommand } from '../../src/cli/gate-command.js';
import { testKeyFileText, testSecret } from '../../src/contract/testing.js';
import type { RunningGate } from '../../src/gate/gate.js';
import { twoRevisionTableValue } from '../../src/policy/testing.js';
import { ok, request as rawRequest, startFakeUpstream, type EnvoyHarness, type FakeUpstream } from '../../testbed/harness/index.js';
import { createDevPki, devGateTls } from '../../testbed/tls/dev-pki.js';
import { shippedHarnessFor } from '../support/e2e-gate.js';

let dir: string;
let keyFile: string;
let decode: FakeUpstream;
let harness: EnvoyHarness;
let gate: RunningGate;
const signals = new EventEmitter();
let exit: Promise<number>;

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'kvgate-gate-keys-'));
  decode = await startFakeUpstream('a-decode');
  const table = twoRevisionTableValue() as { pools: Array<{ name: string; endpoints: Array<{ address: string }> }>; models: any };
  for (const p of table.pools) if (p.name === 'a-decode') p.endpoints = [{ address: decode.address }];
  for (const m of Object.values(table.models) as any[]) m.rollout = { stable: 'llama-a' };
  await writeFile(path.join(dir, 'route-table.yaml'), toYaml(table));
  keyFile = path.join(dir, 'keys.json');
  await writeFile(keyFile, testKeyFileText({ current: 'k1', keys: { k1: 'k1' } }));
  const pki = await createDevPki(path.join(dir, 'tls'));
  await writeFile(
    path.join(dir, 'gate.yaml'),
    toYaml({
      listen: '127.0.0.1:0',
      admin: '127.0.0.1:0',
      tls: devGateTls(pki),
      policy: 'route-table.yaml',
      keys: { file: 'keys.json' },
      workerView: { mode: 'static' },
      drain: { announceMs: 0, graceMs: 1000 },
      log: { level: 'silent' },
    }),
  );
  let ready: (g: RunningGate) => void = () => undefined;
  const started = new Promise<RunningGate>((r) => (ready = r));
  exit = gateCommand(['--config', path.join(dir, 'gate.yaml')], { signals: signals as unknown as NodeJS.Process, onReady: ready });
  gate = await Promise.race([started, exit.then((code) => Promise.reject(new Error(`the gate exited ${code}`)))]);
  harness = await shippedHarnessFor(gate, pki);
});
afterAll(async () => {
  await harness?.close();
  signals.emit('SIGTERM');
  signals.emit('SIGTERM');
  await exit;
  await decode?.close();
  await rm(dir, { recursive: true, force: true });
});

/** The key ids of the contract the decode worker received and of the binding the client got back. */
async function signedWith(): Promise<{ contract: string; binding: string }> {
  const model = Object.keys(twoRevisionTableValue().models as Record<string, unknown>)[0]!;
  const r = ok(
    await rawRequest(harness.listeners['public']!.url, {
      path: '/v1/completions',
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-tenant-id': 'acme', 'x-session-id': 's-keys' },
      body: JSON.stringify({ model, prompt: 'hello' }),
    }),
  );
  expect(r.status).toBe(200);
  const seen = decode.requests.at(-1)!;
  return {
    contract: String(seen.headers['x-kvgate-contract']).split('.')[2]!,
    binding: String(r.headers['x-kvgate-binding']).split('.')[2]!,
  };
}

async function until(check: () => boolean, what: string, timeoutMs = 5000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

const admin = async (p: string) => (await fetch(`http://127.0.0.1:${gate.adminPort}${p}`)).text();

describe('kvgate gate: key file reload without a restart', () => {
  it('SIGHUP applies the edited file: the next contract and binding are signed with the new current id', async () => {
    expect(await signedWith()).toEqual({ contract: 'k1', binding: 'k1' });
    await writeFile(keyFile, testKeyFileText({ current: 'k2', keys: { k1: 'k1', k2: 'k2' } }));
    signals.emit('SIGHUP'); // synchronous, before the watch's debounce: this reload is SIGHUP's
    expect(gate.keys.status().lastReload).toMatchObject({ result: 'applied', trigger: 'SIGHUP' });
    expect(await signedWith()).toEqual({ contract: 'k2', binding: 'k2' });
    const status = JSON.parse(await admin('/status')) as { keys: Record<string, unknown> };
    expect(status.keys).toMatchObject({ source: 'file', reloadable: true, currentId: 'k2', keyIds: ['k1', 'k2'] });
    const metrics = await admin('/metrics');
    expect(metrics).toMatch(/^kvgate_keys_loaded\{key_id="k1",current="false"\} 1$/m);
    expect(metrics).toMatch(/^kvgate_keys_loaded\{key_id="k2",current="true"\} 1$/m);
  });

  it('a change to the file is applied by the watch, and a file giving k2 another secret is refused (the ring in use stays)', async () => {
    await writeFile(keyFile, testKeyFileText({ current: 'k3', keys: { k2: 'k2', k3: 'k3' } }));
    await until(() => gate.keys.current().currentId === 'k3', 'the watch to apply k3');
    expect(gate.keys.status().lastReload).toMatchObject({
      result: 'applied',
      trigger: 'file changed',
      reason: 'added k3; removed k1; current k2 -> k3',
    });
    expect(await signedWith()).toEqual({ contract: 'k3', binding: 'k3' });
    await writeFile(keyFile, testKeyFileText({ current: 'k2', keys: { k2: 'k2-leaked', k3: 'k3' } }));
    signals.emit('SIGHUP');
    expect(gate.keys.status().lastReload).toMatchObject({
      result: 'rejected',
      reason: expect.stringContaining('k2 now map to a different secret'),
    });
    expect(await signedWith()).toEqual({ contract: 'k3', binding: 'k3' });
    const metrics = await admin('/metrics');
    expect(metrics).toMatch(/^kvgate_keys_reloads_total\{result="rejected"\} [1-9]/m);
    const everything = metrics + (await admin('/status'));
    for (const label of ['k1', 'k2', 'k3', 'k2-leaked', 'salt']) expect(everything).not.toContain(testSecret(label).toString('base64'));
  });
});
