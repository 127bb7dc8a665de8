/**
 * A sidecar picks up an edited key file without a restart: when the file changes (watch) and on SIGHUP (`kvgate
 * sidecar`). The next attestation a prefill sidecar signs names the new current key id, a contract signed with a
 * newly added id verifies, and `/kvgate/v1/status` and `/metrics` show the ids held (never a secret).
 */
import { mkdtemp, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadKeyRing, type KeyRing } from '../contract/keys.js';
import { testKeyFileText, testSecret } from '../contract/testing.js';
import { postJson, startTestSim } from '../../testbed/sim/testing.js';
import type { SimServer } from '../../testbed/sim/server.js';
import { bound, contractFor, runSidecarCommand, sidecarConfigFor, startTestSidecar, withRecordedCanaries } from './testing.js';
import type { CompatDescriptorInput } from '../compat/descriptor.js';

const MODEL = '/models/acme-llama-3-8b';
let sim: SimServer;
let dir: string;
beforeAll(async () => {
  sim = await startTestSim();
  dir = await mkdtemp(path.join(tmpdir(), 'kvgate-sidecar-keys-'));
});
afterAll(async () => {
  await sim.close();
  await rm(dir, { recursive: true, force: true });
});

/** The ring a gate holds with this key file (through the loader, as a gate loads it). */
function ringOf(spec: Parameters<typeof testKeyFileText>[0]): KeyRing {
  const r = loadKeyRing({ env: { KVGATE_KEYS: testKeyFileText(spec) } });
  if (!r.ok) throw r.error;
  return r.value;
}

let n = 0;
/** A prefill request through `url` with a contract signed by `gate`; the attestation's key id, or the refusal. */
async function prefill(url: string, fingerprint: string, gate: KeyRing): Promise<{ status: number; kid?: string; code?: string }> {
  const c = contractFor(fingerprint, '127.0.0.1:9999', { requestId: `keys-${++n}` });
  const r = await postJson(`${url}/v1/completions`, ...bound(c, { model: MODEL, prompt: 'The capital of France is', max_tokens: 5 }, gate));
  if (r.status !== 200) return { status: r.status, code: String(r.body?.error?.code ?? r.body?.code ?? '') };
  const token = String((r.body.kv_transfer_params as Record<string, unknown>)['kvgate']);
  return { status: 200, kid: token.split('.')[2]! };
}

/**
 * Replace `file` in one step (write beside it, then rename), as a Kubernetes Secret volume or a config tool swaps it.
 * A plain `writeFile` truncates and then writes; on a loaded machine the watch can see those as two changes more than
 * the debounce apart, and the second one's reload reads the same keys (`unchanged`), which would hide the `applied`
 * reload this test looks at in the status.
 */
async function replaceFile(file: string, text: string): Promise<void> {
  const tmp = `${file}.${++n}.tmp`;
  await writeFile(tmp, text);
  await rename(tmp, file);
}

async function until(check: () => boolean | Promise<boolean>, what: string, timeoutMs = 5000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('sidecar: key file reload', () => {
  it('applies an edited key file when it changes: the next attestation is signed with the new current id', async () => {
    const file = path.join(dir, 'watched.json');
    await writeFile(file, testKeyFileText({ current: 'k1', keys: { k1: 'k1' } }));
    const config = await sidecarConfigFor(sim, 'prefill', { advertise: '127.0.0.1:9999', keys: { file } });
    const initial = loadKeyRing({ file });
    if (!initial.ok) throw initial.error;
    const p = await startTestSidecar(config, undefined, undefined, { keys: initial.value, keyWatchDebounceMs: 20 });
    try {
      const k1 = ringOf({ current: 'k1', keys: { k1: 'k1' } });
      const k2 = ringOf({ current: 'k2', keys: { k2: 'k2' } });
      expect(await prefill(p.sidecar.url, config.fingerprint, k1)).toEqual({ status: 200, kid: 'k1' });
      // A gate already on k2 before this sidecar has it: refused, unknown key.
      expect(await prefill(p.sidecar.url, config.fingerprint, k2)).toMatchObject({ status: 403, code: 'contract_invalid' });
      await replaceFile(file, testKeyFileText({ current: 'k2', keys: { k1: 'k1', k2: 'k2' } }));
      await until(() => p.sidecar.keys.current().currentId === 'k2', 'the watch to apply k2');
      expect(await prefill(p.sidecar.url, config.fingerprint, k1)).toEqual({ status: 200, kid: 'k2' });
      expect(await prefill(p.sidecar.url, config.fingerprint, k2)).toEqual({ status: 200, kid: 'k2' });
      const status = (await (await fetch(`${p.sidecar.url}/kvgate/v1/status`)).json()) as { keys: Record<string, unknown> };
      expect(status.keys).toMatchObject({ source: 'file', reloadable: true, currentId: 'k2', keyIds: ['k1', 'k2'] });
      expect(status.keys['lastReload']).toMatchObject({ result: 'applied', trigger: 'file changed' });
      const metrics = await (await fetch(`${p.sidecar.url}/metrics`)).text();
      expect(metrics).toMatch(/^kvgate_sidecar_keys_loaded\{key_id="k2",current="true"\} 1$/m);
      expect(metrics).toMatch(/^kvgate_sidecar_keys_loaded\{key_id="k1",current="false"\} 1$/m);
      expect(metrics).toMatch(/^kvgate_sidecar_keys_reloads_total\{result="applied"\} 1$/m);
      // A file that reuses k1 for another secret is refused; the ring in use stays.
      await replaceFile(file, testKeyFileText({ current: 'k2', keys: { k1: 'k1-new', k2: 'k2' } }));
      await until(() => p.sidecar.keys.status().lastReload?.result === 'rejected', 'the refused reload');
      expect(await prefill(p.sidecar.url, config.fingerprint, k1)).toEqual({ status: 200, kid: 'k2' });
      const text = JSON.stringify(p.lines) + JSON.stringify(status) + metrics;
      for (const label of ['k1', 'k2', 'k1-new', 'salt']) expect(text).not.toContain(testSecret(label).toString('base64'));
    } finally {
      await p.sidecar.close();
    }
  }, 10_000);

  it('kvgate sidecar reloads the key file on SIGHUP', async () => {
    const keys = path.join(dir, 'hup.json');
    await writeFile(keys, testKeyFileText({ current: 'k1', keys: { k1: 'k1' } }));
    const descriptor = await withRecordedCanaries(sim.config.descriptor as CompatDescriptorInput);
    const config = path.join(dir, 'sidecar.json');
    await writeFile(
      config,
      JSON.stringify({
        role: 'prefill',
        worker: sim.url,
        descriptor,
        listen: '127.0.0.1:0',
        admin: '',
        metrics: '',
        advertise: '127.0.0.1:9999',
        keys: { file: 'hup.json' },
        nixlSideChannel: `127.0.0.1:${sim.nixlSideChannelPort}`,
        prefill: { via: 'direct' },
        drainGraceMs: 0,
        drainAnnounceMs: 0,
        log: { level: 'silent' },
      }),
    );
    const { url: base, signals, exit } = await runSidecarCommand(['--config', config]);
    const status = async () =>
      ((await (await fetch(`${base}/kvgate/v1/status`)).json()) as { fingerprint: string; keys: Record<string, any> }).keys;
    const fingerprint = ((await (await fetch(`${base}/kvgate/v1/status`)).json()) as { fingerprint: string }).fingerprint;
    const k1 = ringOf({ current: 'k1', keys: { k1: 'k1' } });
    try {
      expect(await prefill(base, fingerprint, k1)).toEqual({ status: 200, kid: 'k1' });
      await writeFile(keys, testKeyFileText({ current: 'k2', keys: { k1: 'k1', k2: 'k2' } }));
      signals.emit('SIGHUP'); // before the watch's debounce: this reload is SIGHUP's
      expect(await status()).toMatchObject({ currentId: 'k2', keyIds: ['k1', 'k2'], lastReload: { result: 'applied', trigger: 'SIGHUP' } });
      expect(await prefill(base, fingerprint, k1)).toEqual({ status: 200, kid: 'k2' });
    } finally {
      signals.emit('SIGTERM');
      expect(await exit).toBe(0);
    }
  }, 10_000);
});
