import { execFileSync } from 'node:child_process';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createPolicyStore, type PolicyStore } from './policy-store.js';
import { readConfigText } from '../config/read-text.js';
import { createTableFile, queueTableValue, type TableFile, type TableValue } from './testing.js';

/**
 * Holds the next read of the route-table file after it has read the bytes, until `release()`: a reload that has read
 * the file and is still compiling it, the window in which the file can change under it. Handed to the store as its
 * `readText`, so nothing in the process's own `node:fs` is replaced.
 */
const hold = { path: undefined as string | undefined, gate: undefined as Promise<void> | undefined };
async function heldRead(file: string): Promise<string> {
  const out = await readConfigText(file);
  if (hold.path !== undefined && file === hold.path && hold.gate !== undefined) {
    const gate = hold.gate;
    hold.gate = undefined; // only the one read
    await gate;
  }
  return out;
}

describe('policy store: hot reload', () => {
  let file: TableFile | undefined;
  let store: PolicyStore | undefined;
  afterEach(async () => {
    store?.close();
    await file?.remove();
    hold.path = undefined;
    hold.gate = undefined;
  });

  it('a change made while a reload is running is applied by a reload after it, never lost', async () => {
    file = await createTableFile(queueTableValue());
    const created = await createPolicyStore({
      file: file.path,
      logger: pino({ level: 'silent' }),
      registry: new Registry(),
      readText: heldRead,
    });
    if (!created.ok) throw new Error(created.message);
    store = created.store;
    const v0 = store.version();
    // Change 1 is on disk; a reload (SIGHUP) reads it and is held before it compiles.
    await file.write(queueTableValue((v) => (v['models']['llama-3-8b']['rollout']['weight'] = 50)));
    let release = (): void => undefined;
    hold.path = file.path;
    hold.gate = new Promise<void>((r) => (release = r));
    const first = store.reload('SIGHUP');
    await vi.waitFor(() => expect(hold.gate).toBeUndefined()); // the first reload has read change 1
    // Change 2 lands (the file watch fires) while the first reload is still running.
    await file.write(queueTableValue((v) => (v['pools'][3]['draining'] = true)));
    const second = store.reload('file changed');
    release();
    const [a, b] = await Promise.all([first, second]);
    expect(a.ok && b.ok).toBe(true);
    expect(a.version).not.toBe(v0);
    // The table in use is the file as it is now: change 2 (b-decode draining) applied, not only change 1.
    expect(b.version).not.toBe(a.version);
    expect(store.version()).toBe(b.version);
    expect(store.current().pools.get('b-decode')?.draining).toBe(true);
  });

  it('reloads asked for while one is running share one follow-up reload', async () => {
    file = await createTableFile(queueTableValue());
    const created = await createPolicyStore({
      file: file.path,
      logger: pino({ level: 'silent' }),
      registry: new Registry(),
      readText: heldRead,
    });
    if (!created.ok) throw new Error(created.message);
    store = created.store;
    let release = (): void => undefined;
    hold.path = file.path;
    hold.gate = new Promise<void>((r) => (release = r));
    const first = store.reload('SIGHUP');
    await vi.waitFor(() => expect(hold.gate).toBeUndefined());
    await file.write(queueTableValue((v) => (v['pools'][3]['draining'] = true)));
    const second = store.reload('file changed');
    const third = store.reload('file changed');
    expect(third).toBe(second);
    release();
    await Promise.all([first, second]);
    expect(store.current().pools.get('b-decode')?.draining).toBe(true);
    // Nothing is pending any more: the next reload runs at once.
    expect((await store.reload('SIGHUP')).version).toBe(store.version());
  });

  it("a SIGHUP after editing only a descriptor file applies it (the table's own text is unchanged)", async () => {
    // llama-b's descriptor lives in its own file next to the table, as in the examples.
    const value = queueTableValue();
    const descriptor = value['revisions']['llama-b']['descriptor'] as TableValue;
    const { descriptor: _inline, ...rest } = value['revisions']['llama-b'] as TableValue;
    value['revisions']['llama-b'] = { descriptorFile: 'llama-b.json', ...rest };
    file = await createTableFile(value);
    const descriptorPath = join(dirname(file.path), 'llama-b.json');
    await writeFile(descriptorPath, JSON.stringify(descriptor));
    const created = await createPolicyStore({ file: file.path, logger: pino({ level: 'silent' }), registry: new Registry() });
    if (!created.ok) throw new Error(created.message);
    store = created.store;
    const before = store.current().revisions.get('llama-b')!.fingerprint;
    // The revision is redeclared: new weights (a new fingerprint), in the descriptor file only.
    await writeFile(descriptorPath, JSON.stringify({ ...descriptor, model: { ...descriptor['model'], revision: 'b'.repeat(40) } }));
    const r = await store.reload('SIGHUP');
    expect(r.ok).toBe(true);
    const after = store.current().revisions.get('llama-b')!.fingerprint;
    expect(after).not.toBe(before);
    expect(r.version).toBe(store.version());
    // Nothing changed since: unchanged, and the version is stable.
    const again = await store.reload('SIGHUP');
    expect(again.version).toBe(r.version);
    expect(store.current().revisions.get('llama-b')!.fingerprint).toBe(after);
  });

  it('a reload that redeclares a revision under the pools serving it is applied, and said at warn level and in lastReload', async () => {
    file = await createTableFile(queueTableValue());
    const lines: Record<string, unknown>[] = [];
    const logger = pino({ level: 'info' }, { write: (l: string) => void lines.push(JSON.parse(l) as Record<string, unknown>) });
    const created = await createPolicyStore({ file: file.path, logger, registry: new Registry() });
    if (!created.ok) throw new Error(created.message);
    store = created.store;
    // A vLLM upgrade written into llama-b's declaration while b-prefill and b-decode still list the old workers.
    await file.write(queueTableValue((v) => (v['revisions']['llama-b']['descriptor']['engine'] = { name: 'vllm', version: '0.13.0' })));
    lines.length = 0;
    const r = await store.reload('SIGHUP');
    expect(r.ok).toBe(true);
    expect(r.message.split('\n')[0]).toMatch(/^revision llama-b is redeclared in place under the same pools \(b-prefill, b-decode\)/);
    const warned = lines.filter((l) => l['level'] === 40);
    expect(warned.map((l) => l['msg'])).toEqual(['route table reloaded: a revision was redeclared in place']);
    expect(String((warned[0]!['redeclared'] as string[])[0])).toContain('that is an outage of this revision');
    // A weight change is not a redeclaration: nothing said.
    await file.write(
      queueTableValue((v) => {
        v['revisions']['llama-b']['descriptor']['engine'] = { name: 'vllm', version: '0.13.0' };
        v['models']['llama-3-8b']['rollout']['weight'] = 50;
      }),
    );
    lines.length = 0;
    expect((await store.reload('SIGHUP')).message).not.toContain('redeclared');
    expect(lines.filter((l) => l['level'] === 40)).toEqual([]);
  });

  it('a reload of a hostile or mistaken file keeps the table in use and says why (log, /status, metrics)', async () => {
    file = await createTableFile(queueTableValue());
    const registry = new Registry();
    const created = await createPolicyStore({ file: file.path, logger: pino({ level: 'silent' }), registry });
    if (!created.ok) throw new Error(created.message);
    store = created.store;
    const v0 = store.version();
    const good = JSON.stringify(queueTableValue(), null, 2);
    const cases: Array<[string, () => Promise<void>, RegExp]> = [
      [
        'duplicate key',
        () => file!.writeText(good.replace('"version": 1,', '"version": 1,\n  "version": 1,')),
        /JSON syntax error: .*duplicated keys/,
      ],
      [
        'directory',
        async () => {
          await rm(file!.path);
          await mkdir(file!.path);
        },
        /cannot read the route table: it is a directory, not a file/,
      ],
      [
        'FIFO',
        async () => {
          await rm(file!.path, { recursive: true });
          execFileSync('mkfifo', [file!.path]);
        },
        /not a regular file/,
      ],
    ];
    for (const [name, make, why] of cases) {
      await make();
      const r = await store.reload('SIGHUP');
      expect({ name, ok: r.ok, version: r.version }).toEqual({ name, ok: false, version: v0 });
      expect(r.message).toContain(file.path);
      expect(r.message).toMatch(why);
      expect(store.lastReload()).toBe(r);
      expect(store.version()).toBe(v0);
    }
    const rejected = (await registry.getSingleMetric('kvgate_policy_reloads_total')!.get()).values.find(
      (v) => v.labels['result'] === 'rejected',
    );
    expect(rejected?.value).toBe(cases.length);
  });

  it('a broken edit (a key at the wrong level, a truncated write, an unknown revision) is rejected loudly, and fixing the file recovers', async () => {
    file = await createTableFile(queueTableValue());
    const registry = new Registry();
    const lines: Record<string, unknown>[] = [];
    const logger = pino({ level: 'info' }, { write: (l: string) => void lines.push(JSON.parse(l) as Record<string, unknown>) });
    const created = await createPolicyStore({ file: file.path, logger, registry });
    if (!created.ok) throw new Error(created.message);
    store = created.store;
    const v0 = store.version();
    const good = JSON.stringify(queueTableValue(), null, 2);
    const counts = async () =>
      Object.fromEntries(
        (await registry.getSingleMetric('kvgate_policy_reloads_total')!.get()).values.map((v) => [v.labels['result'], v.value]),
      );
    const broken: Array<[string, string, RegExp]> = [
      [
        'a key at the wrong level',
        JSON.stringify(queueTableValue((v) => (v['required'] = true))),
        /required: unknown key "required"\. Fix: required belongs under .*tenancy/,
      ],
      ['truncated write', '', /the file is empty/],
      [
        'unknown revision',
        JSON.stringify(queueTableValue((v) => (v['pools'][3]['revision'] = 'llama-c'))),
        /pools\[3\]\.revision: pool "[^"]+" names revision "llama-c", which is not declared under revisions\. Fix: did you mean/,
      ],
    ];
    for (const [name, text, why] of broken) {
      lines.length = 0;
      await file.writeText(text);
      const r = await store.reload('file changed');
      expect({ name, ok: r.ok, version: store.version() }).toEqual({ name, ok: false, version: v0 });
      expect(r.message).toMatch(why);
      expect(store.lastReload()).toMatchObject({ ok: false, version: v0 });
      expect(lines).toEqual([
        expect.objectContaining({ level: 50, msg: 'route table reload rejected; keeping the table in use', kept: v0 }),
      ]);
      expect(String(lines[0]!['issues'])).toMatch(why);
    }
    expect(await counts()).toEqual({ applied: 0, unchanged: 0, rejected: broken.length });
    // Put back as it was: unchanged, the status clears, and the log says the file is good again.
    lines.length = 0;
    await file.writeText(good);
    expect(await store.reload('file changed')).toMatchObject({ ok: true, version: v0 });
    expect(store.lastReload().ok).toBe(true);
    expect(lines).toEqual([expect.objectContaining({ level: 30, msg: 'route table file valid again; it equals the table in use' })]);
    // Fixed with a real change: applied.
    await file.write(queueTableValue((v) => (v['pools'][3]['maxInFlightPerEndpoint'] = 2)));
    const applied = await store.reload('SIGHUP');
    expect(applied.ok && applied.version !== v0).toBe(true);
    expect(store.version()).toBe(applied.version);
    expect(await counts()).toEqual({ applied: 1, unchanged: 1, rejected: broken.length });
  });
});
