/**
 * Key ring hot reload (src/key-store.ts): a key file reload is applied, unchanged or rejected (the ring in use
 * stays), a key id that would change its secret is refused, every cache keyed by a ring follows the swap, and no
 * secret reaches a log line, the status or a metric.
 */
import { execFileSync } from 'node:child_process';
import { mkdtemp, rename, rm, symlink, writeFile, mkdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import { deriveCacheSalt } from './contract/cache-salt.js';
import { PendingBinding, verifyBinding } from './contract/binding.js';
import { createDevKeyRing, keyRingIds, loadKeyRing, type KeyRing } from './contract/keys.js';
import { testKeyFileText, testSecret } from './contract/testing.js';
import { createKeyStore, type KeyStore } from './key-store.js';

interface Rig {
  readonly store: KeyStore;
  readonly file: string;
  readonly lines: Record<string, unknown>[];
  readonly registry: Registry;
  write(spec: Parameters<typeof testKeyFileText>[0]): Promise<void>;
}

const dirs: string[] = [];
const stores: KeyStore[] = [];
afterEach(async () => {
  for (const s of stores.splice(0)) s.close();
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

function memoryLogger(): { logger: pino.Logger; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      for (const l of chunk.toString('utf8').split('\n')) if (l.trim() !== '') lines.push(JSON.parse(l) as Record<string, unknown>);
      cb();
    },
  });
  return { logger: pino({ level: 'debug' }, sink), lines };
}

async function rig(first: Parameters<typeof testKeyFileText>[0], fileIn?: (dir: string) => Promise<string>): Promise<Rig> {
  const dir = await mkdtemp(path.join(tmpdir(), 'kvgate-keys-'));
  dirs.push(dir);
  const file = path.join(dir, 'keys.json');
  const write = (spec: Parameters<typeof testKeyFileText>[0]) => writeFile(file, testKeyFileText(spec));
  await write(first);
  const watched = fileIn === undefined ? file : await fileIn(dir);
  const initial = loadKeyRing({ file: watched });
  if (!initial.ok) throw initial.error;
  const { logger, lines } = memoryLogger();
  const registry = new Registry();
  const store = createKeyStore({ source: { file: watched }, initial: initial.value, logger, registry, metricPrefix: 'kvgate_' });
  stores.push(store);
  return { store, file, lines, registry, write };
}

async function reloads(registry: Registry): Promise<Record<string, number>> {
  const m = await registry.getSingleMetric('kvgate_keys_reloads_total')!.get();
  return Object.fromEntries(m.values.map((v) => [String(v.labels['result']), v.value]));
}

async function loaded(registry: Registry): Promise<string[]> {
  const m = await registry.getSingleMetric('kvgate_keys_loaded')!.get();
  return m.values.filter((v) => v.value === 1).map((v) => `${String(v.labels['key_id'])}:${String(v.labels['current'])}`);
}

async function until(check: () => boolean, what: string, timeoutMs = 5000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

const SECRET_LABELS = ['k1', 'k2', 'k1-new', 'salt', 'salt-2'];
function expectNoSecret(text: string): void {
  for (const label of SECRET_LABELS) {
    const s = testSecret(label);
    for (const form of [s.toString('base64'), s.toString('base64url'), s.toString('hex')]) expect(text).not.toContain(form);
  }
}

const bindingFields = (issuedAtMs: number) => ({
  model: 'llama',
  revision: 'llama-a',
  fingerprint: 'f'.repeat(64),
  tenantScope: 'tenant:acme',
  session: 's-1',
  issuedAtMs,
  expiresAtMs: issuedAtMs + 3_600_000,
});

describe('key store: reload of a key file', () => {
  it('applies a file that adds an id and switches current; status, metrics and one keys_reloaded line (ids only) say so', async () => {
    const r = await rig({ current: 'k1', keys: { k1: 'k1' } });
    const before = r.store.current();
    r.store.reload('SIGHUP');
    expect(r.store.current()).toBe(before); // an identical file: the same ring object
    await r.write({ current: 'k2', keys: { k1: 'k1', k2: 'k2' } });
    const res = r.store.reload('SIGHUP');
    expect(res).toMatchObject({ result: 'applied', trigger: 'SIGHUP', reason: 'added k2; current k1 -> k2' });
    expect(r.store.current()).not.toBe(before);
    expect(r.store.current().currentId).toBe('k2');
    expect(keyRingIds(before)).toEqual(['k1']); // the old snapshot is untouched (requests holding it finish with it)
    expect(r.store.status()).toMatchObject({ source: 'file', file: r.file, reloadable: true, currentId: 'k2', keyIds: ['k1', 'k2'] });
    expect(await reloads(r.registry)).toEqual({ applied: 1, unchanged: 1, rejected: 0 });
    expect((await loaded(r.registry)).sort()).toEqual(['k1:false', 'k2:true']);
    const applied = r.lines.filter((l) => l['event'] === 'keys_reloaded');
    expect(applied).toHaveLength(1);
    expect(applied[0]).toMatchObject({ currentId: 'k2', keyIds: ['k1', 'k2'], added: ['k2'], removed: [], saltChanged: false });
    expectNoSecret(JSON.stringify(r.lines) + JSON.stringify(r.store.status()) + (await r.registry.metrics()));
  });

  it('counts an identical file as unchanged and keeps the ring object (and with it its caches)', async () => {
    const r = await rig({ current: 'k1', keys: { k1: 'k1' } });
    const ring = r.store.current();
    await r.write({ current: 'k1', keys: { k1: 'k1' } }); // rewritten, same content
    expect(r.store.reload('file changed').result).toBe('unchanged');
    expect(r.store.current()).toBe(ring);
    expect(await reloads(r.registry)).toEqual({ applied: 0, unchanged: 1, rejected: 0 });
    expect(r.lines.filter((l) => l['event'] === 'keys_reloaded')).toEqual([]);
  });

  it('keeps the ring in use when the file is invalid, and says why at error level without any secret', async () => {
    const r = await rig({ current: 'k1', keys: { k1: 'k1' } });
    const ring = r.store.current();
    for (const bad of [
      '{ not json',
      JSON.stringify({ current: 'k9', keys: { k1: testSecret('k1').toString('base64') }, salt: testSecret('salt').toString('base64') }),
      JSON.stringify({ current: 'k1', keys: { k1: testSecret('k1').toString('base64') }, salt: testSecret('k1').toString('base64') }),
    ]) {
      await writeFile(r.file, bad);
      expect(r.store.reload('SIGHUP').result).toBe('rejected');
      expect(r.store.current()).toBe(ring);
    }
    await rm(r.file);
    expect(r.store.reload('file changed')).toMatchObject({
      result: 'rejected',
      reason: expect.stringContaining('cannot be read (ENOENT)'),
    });
    expect(r.store.current()).toBe(ring);
    expect(await reloads(r.registry)).toEqual({ applied: 0, unchanged: 0, rejected: 4 });
    const errors = r.lines.filter((l) => l['event'] === 'keys_reload_rejected');
    expect(errors).toHaveLength(4);
    expect(errors.every((l) => l['level'] === 50)).toBe(true);
    expect(String(errors[1]!['reason'])).toContain('current: key id "k9" is not among the keys');
    expect(String(errors[2]!['reason'])).toContain('the cache-salt secret must be separate');
    expect(r.store.status().lastReload).toMatchObject({ result: 'rejected', trigger: 'file changed' });
    expectNoSecret(JSON.stringify(r.lines) + JSON.stringify(r.store.status()) + (await r.registry.metrics()));
  });

  it('never reads a FIFO or an oversized file at the key path (a blocking read would stall every request)', async () => {
    const r = await rig({ current: 'k1', keys: { k1: 'k1' } });
    const ring = r.store.current();
    await rm(r.file);
    execFileSync('mkfifo', [r.file]);
    expect(r.store.reload('SIGHUP')).toMatchObject({ result: 'rejected', reason: expect.stringContaining('not a regular file') });
    await rm(r.file);
    await writeFile(r.file, ' '.repeat(2 * 1024 * 1024));
    expect(r.store.reload('SIGHUP')).toMatchObject({ result: 'rejected', reason: expect.stringContaining('byte limit') });
    expect(r.store.current()).toBe(ring);
  });

  it('refuses a file in which a key id in use maps to a different secret: other replicas still use the old one', async () => {
    const r = await rig({ current: 'k1', keys: { k1: 'k1' } });
    const ring = r.store.current();
    await r.write({ current: 'k1', keys: { k1: 'k1-new' } });
    const res = r.store.reload('SIGHUP');
    expect(res.result).toBe('rejected');
    expect(res.reason).toContain('key id(s) k1 now map to a different secret');
    expect(res.reason).toContain('add the new secret under a new id instead');
    expect(r.store.current()).toBe(ring);
    // The same secret under a new id is fine, and so is dropping k1 for it.
    await r.write({ current: 'k2', keys: { k2: 'k1-new' } });
    expect(r.store.reload('SIGHUP').result).toBe('applied');
    expectNoSecret(JSON.stringify(r.lines) + JSON.stringify(r.store.status()));
  });

  it('applies a new salt (at warn: caches start cold) and every cache_salt is derived from it, never from the old cache', async () => {
    const r = await rig({ current: 'k1', keys: { k1: 'k1' }, salt: 'salt' });
    const old = r.store.current();
    const before = deriveCacheSalt(r.store.current(), 'g_1', 'tenant:acme'); // kept in the ring's salt cache
    await r.write({ current: 'k1', keys: { k1: 'k1' }, salt: 'salt-2' });
    expect(r.store.reload('SIGHUP')).toMatchObject({ result: 'applied', reason: 'salt changed' });
    const after = deriveCacheSalt(r.store.current(), 'g_1', 'tenant:acme');
    expect(after).not.toBe(before);
    const fresh = loadKeyRing({ file: r.file });
    expect(fresh.ok && deriveCacheSalt(fresh.value, 'g_1', 'tenant:acme')).toBe(after);
    expect(deriveCacheSalt(old, 'g_1', 'tenant:acme')).toBe(before); // a request holding the old snapshot stays consistent
    expect(r.lines.find((l) => l['event'] === 'keys_salt_changed')).toMatchObject({ level: 40 });
  });

  it('never hands out a reused binding signed with a key id the reload removed', async () => {
    const r = await rig({ current: 'k1', keys: { k1: 'k1' } });
    const t0 = 1_767_225_600_000;
    const first = new PendingBinding(bindingFields(t0), r.store.current()).token();
    // Within the reuse window the same ring hands the same token out again.
    expect(new PendingBinding(bindingFields(t0 + 1000), r.store.current()).token()).toBe(first);
    await r.write({ current: 'k2', keys: { k2: 'k2' } });
    expect(r.store.reload('SIGHUP').result).toBe('applied');
    const next = new PendingBinding(bindingFields(t0 + 2000), r.store.current()).token();
    expect(next).not.toBe(first);
    expect(next.split('.')[2]).toBe('k2');
    expect(verifyBinding(next, r.store.current(), t0 + 3000).ok).toBe(true);
    const stale = verifyBinding(first, r.store.current(), t0 + 3000);
    expect(stale.ok ? '' : stale.error.reason).toBe('unknown_key');
  });

  it('reloads when the file is replaced (the folder is watched), debounced', async () => {
    const r = await rig({ current: 'k1', keys: { k1: 'k1' } });
    r.store.watch(20);
    const tmp = `${r.file}.tmp`;
    await writeFile(tmp, testKeyFileText({ current: 'k2', keys: { k1: 'k1', k2: 'k2' } }));
    await rename(tmp, r.file); // an editor's save: a rename over the file
    await until(() => r.store.current().currentId === 'k2', 'the watch to apply k2');
    expect(r.store.status().lastReload).toMatchObject({ result: 'applied', trigger: 'file changed' });
  });

  it("reloads on a Kubernetes Secret volume update: the folder's ..data link swapped to a new timestamped folder", async () => {
    // kubelet's AtomicWriter layout: keys.json -> ..data/keys.json, ..data -> ..<timestamp>; an update writes a new
    // timestamped folder, points ..data_tmp at it and renames ..data_tmp over ..data. keys.json itself never changes.
    let mountDir = '';
    const r = await rig({ current: 'k1', keys: { k1: 'k1' } }, async (dir) => {
      mountDir = path.join(dir, 'secret');
      await mkdir(path.join(mountDir, '..2026_01_01_a'), { recursive: true });
      await writeFile(path.join(mountDir, '..2026_01_01_a', 'keys.json'), testKeyFileText({ current: 'k1', keys: { k1: 'k1' } }));
      await symlink('..2026_01_01_a', path.join(mountDir, '..data'));
      await symlink('..data/keys.json', path.join(mountDir, 'keys.json'));
      return path.join(mountDir, 'keys.json');
    });
    r.store.watch(20);
    await mkdir(path.join(mountDir, '..2026_01_01_b'));
    await writeFile(path.join(mountDir, '..2026_01_01_b', 'keys.json'), testKeyFileText({ current: 'k1', keys: { k1: 'k1', k2: 'k2' } }));
    await symlink('..2026_01_01_b', path.join(mountDir, '..data_tmp'));
    await rename(path.join(mountDir, '..data_tmp'), path.join(mountDir, '..data'));
    await until(() => keyRingIds(r.store.current()).includes('k2'), 'the ..data swap to be applied');
    expect(r.store.current().currentId).toBe('k1');
  });
});

describe('key store: sources that cannot reload', () => {
  it.each([
    ['env', { env: 'KVGATE_KEYS' }],
    ['devSeed', { devSeed: 'seed' }],
  ] as const)('keys.%s is fixed for the life of the process: status says so, a reload changes and counts nothing', async (kind, source) => {
    const { logger, lines } = memoryLogger();
    const registry = new Registry();
    const ring: KeyRing = createDevKeyRing('seed');
    const store = createKeyStore({ source, initial: ring, logger, registry, metricPrefix: 'kvgate_sidecar_' });
    expect(store.reload('SIGHUP').result).toBe('unchanged');
    expect(store.current()).toBe(ring);
    expect(store.status()).toMatchObject({ source: kind, reloadable: false, currentId: 'dev-insecure', lastReload: null });
    const m = await registry.getSingleMetric('kvgate_sidecar_keys_reloads_total')!.get();
    expect(m.values.every((v) => v.value === 0)).toBe(true);
    expect(lines.find((l) => l['event'] === 'keys_not_reloadable')).toBeDefined();
  });
});
