import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { fingerprintOf } from '../compat/fingerprint.js';
import { exampleDescriptorInput } from '../compat/testing.js';
import { formatIssues } from '../config/issues.js';
import { keyRingFrom } from '../contract/key-source.js';
import { configFromArgs, sidecarCommand } from './command.js';
import { loadSidecarConfig, parseSidecarConfig, SidecarConfigSchema, sidecarConfigWarnings, type SidecarConfig } from './config.js';
import { staticStatusOf, toStatus } from './status.js';

const base = () => ({
  role: 'decode',
  worker: 'http://127.0.0.1:8000',
  descriptor: exampleDescriptorInput(),
  keys: { devSeed: 'x' },
  nixlSideChannel: '127.0.0.1:5600',
});

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'kvgate-sidecar-config-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('parseSidecarConfig', () => {
  it('applies fail-closed defaults and computes the fingerprint once', () => {
    const r = parseSidecarConfig(base(), 'sidecar.yaml');
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.value).toMatchObject({
      listen: '0.0.0.0:9090',
      onTransferFailure: 'fail',
      compatMode: 'strict',
      tenantScopes: ['*'],
      prefill: { via: { envoy: 'http://127.0.0.1:10001' }, maxAttempts: 3 },
    });
    expect(r.value.fingerprint).toBe(fingerprintOf(r.value.descriptor));
    expect(Object.isFrozen(r.value)).toBe(true);
  });

  it('reports unknown keys with a did-you-mean, and bad values with path and fix', () => {
    const r = parseSidecarConfig({ ...base(), onTransferFailur: 'recompute', role: 'both', prefill: { via: 'direkt' } }, 'sidecar.yaml');
    expect(r.ok).toBe(false);
    if (r.ok) return;
    const text = formatIssues(r.error);
    expect(text).toContain('sidecar.yaml: error: onTransferFailur: unknown key "onTransferFailur". Fix: did you mean "onTransferFailure"?');
    expect(text).toMatch(/sidecar\.yaml: error: role: .* Fix: use one of: prefill, decode/);
    expect(text).toContain('prefill.via');
  });

  it('media.allowedOrigins: its own list, none by default; an entry that is no origin is refused with path and fix', () => {
    const d = parseSidecarConfig(base(), 'sidecar.yaml');
    expect(d.ok && d.value.media).toEqual({ allowedOrigins: [] });
    const allowing = parseSidecarConfig({ ...base(), media: { allowedOrigins: ['https://media.example.com'] } }, 'sidecar.yaml');
    expect(allowing.ok && allowing.value.media.allowedOrigins).toEqual(['https://media.example.com']);
    const r = parseSidecarConfig(
      { ...base(), media: { allowedOrigins: ['https://10.0.0.7:8443'], allowedDomains: ['x'] } },
      'sidecar.yaml',
    );
    expect(r.ok).toBe(false);
    if (r.ok) return;
    const text = formatIssues(r.error);
    expect(text).toMatch(
      /sidecar\.yaml: error: media\.allowedOrigins\[0\]: "https:\/\/10\.0\.0\.7:8443" names an IP address.*Fix: write an origin such as/,
    );
    expect(text).toContain('media.allowedDomains: unknown key "allowedDomains". Fix: remove it; keys accepted here: allowedOrigins');
  });

  it('needs exactly one descriptor source and some keys', () => {
    const { descriptor: _d, ...noDescriptor } = base();
    expect(parseSidecarConfig(noDescriptor, 'f').ok).toBe(false);
    const { keys: _k, ...noKeys } = base();
    const r = parseSidecarConfig(noKeys, 'f');
    expect(r.ok ? '' : formatIssues(r.error)).toContain('f: error: keys: no signing keys configured');
    expect(parseSidecarConfig({ ...base(), keys: { devSeed: 'x', file: 'k.yaml' } }, 'f').ok).toBe(false);
  });

  it('announces a drain for 4 s by default, and refuses an announce window longer than the drain grace', () => {
    const r = parseSidecarConfig(base(), 'f');
    expect(r.ok && [r.value.drainAnnounceMs, r.value.drainGraceMs]).toEqual([4_000, 30_000]);
    const long = parseSidecarConfig({ ...base(), drainAnnounceMs: 6_000, drainGraceMs: 5_000 }, 'f');
    expect(long.ok ? '' : formatIssues(long.error)).toMatch(
      /f: error: drainAnnounceMs: drainAnnounceMs \(6000\) is longer than drainGraceMs \(5000\).*Fix: lower drainAnnounceMs or raise drainGraceMs/,
    );
  });

  it('refuses probe.generation: never under trust: recorded (it would pass a worker with other weights); declared-only may', () => {
    const r = parseSidecarConfig({ ...base(), probe: { generation: 'never' } }, 'f');
    expect(r.ok ? '' : formatIssues(r.error)).toMatch(
      /f: error: probe\.generation: probe\.generation: never turns off the generation canary.*Fix: use generation: declared .* or set trust: declared-only/,
    );
    expect(parseSidecarConfig({ ...base(), trust: 'declared-only', probe: { generation: 'never' } }, 'f').ok).toBe(true);
    expect(parseSidecarConfig({ ...base(), probe: { generation: 'always' } }, 'f').ok).toBe(true);
  });

  it('refuses a descriptor that cannot be fingerprinted, naming the field', () => {
    const bad = base();
    bad.descriptor.modelDtype = 'auto';
    const r = parseSidecarConfig(bad, 'f');
    expect(r.ok ? '' : formatIssues(r.error)).toContain('modelDtype');
  });
});

describe('loading from files and flags', () => {
  it('resolves descriptorFile relative to the config file', async () => {
    await writeFile(path.join(dir, 'rev-a.yaml'), stringify(exampleDescriptorInput()));
    const { descriptor: _d, ...rest } = base();
    await writeFile(path.join(dir, 'sidecar.yaml'), stringify({ ...rest, descriptorFile: 'rev-a.yaml' }));
    const r = await loadSidecarConfig(path.join(dir, 'sidecar.yaml'));
    expect(r.ok && r.value.descriptor.model.id).toBe('meta-llama/Llama-3.1-8B-Instruct');
    const missing = await loadSidecarConfig(path.join(dir, 'nope.yaml'));
    expect(missing.ok ? '' : formatIssues(missing.error)).toContain('cannot read the file');
  });

  it('reads a config and its descriptor file by the route-table rules: a duplicated JSON key or a directory is an issue', async () => {
    // JSON.parse alone would let the second "role" win: a sidecar started as decode from a file that says prefill first.
    const json = JSON.stringify(base(), null, 2).replace('"role": "decode",', '"role": "prefill",\n  "role": "decode",');
    await writeFile(path.join(dir, 'dup.json'), json);
    const dup = await loadSidecarConfig(path.join(dir, 'dup.json'));
    expect(dup.ok ? '' : formatIssues(dup.error)).toMatch(/dup\.json:3:3: error: \(syntax\): JSON syntax error: .*duplicated keys/);
    const { descriptor: _d, ...rest } = base();
    await mkdir(path.join(dir, 'rev-dir.yaml'), { recursive: true });
    await writeFile(path.join(dir, 'dir-ref.yaml'), stringify({ ...rest, descriptorFile: 'rev-dir.yaml' }));
    const d = await loadSidecarConfig(path.join(dir, 'dir-ref.yaml'));
    expect(d.ok ? '' : formatIssues(d.error)).toMatch(
      /dir-ref\.yaml:\d+:1: error: descriptorFile: cannot read the descriptor file \S+rev-dir\.yaml: it is a directory, not a file/,
    );
  });

  it('gives every issue in a config file and its descriptor file a line, as the gate and route table do', async () => {
    const { descriptor: _d, ...rest } = base();
    const descriptor = stringify({ ...exampleDescriptorInput(), modelDtype: 16 });
    await writeFile(path.join(dir, 'rev-line.yaml'), descriptor);
    await writeFile(path.join(dir, 'rev-ok.yaml'), stringify(exampleDescriptorInput()));
    const text = (extra: string, file = 'rev-ok.yaml') => `${stringify({ ...rest, descriptorFile: file })}${extra}`;
    const load = async (name: string, extra: string, overrides: Record<string, unknown> = {}, file?: string) => {
      await writeFile(path.join(dir, name), text(extra, file));
      const r = await loadSidecarConfig(path.join(dir, name), overrides);
      return r.ok ? '' : formatIssues(r.error);
    };
    const lines = text('').split('\n').length;
    expect(await load('typo.yaml', 'drainAnounceMs: 5\n')).toContain(`typo.yaml:${lines}:1: error: drainAnounceMs: unknown key`);
    expect(await load('long.yaml', 'drainAnnounceMs: 40000\n')).toContain(`long.yaml:${lines}:1: error: drainAnnounceMs:`);
    const dline = descriptor.split('\n').findIndex((l) => l.startsWith('modelDtype:')) + 1;
    expect(await load('desc.yaml', '', {}, 'rev-line.yaml')).toContain(
      `desc.yaml -> rev-line.yaml:${dline}:13: error: modelDtype: expected string`,
    );
    // A value a flag replaced is not in the file: no line for it.
    expect(await load('flag.yaml', '', { nixlSideChannel: 5600 })).toMatch(
      /flag\.yaml: error: nixlSideChannel: expected a string or "unchecked", got number 5600/,
    );
  });

  it('says first that a config gives both descriptor and descriptorFile, whatever the inline one holds', () => {
    const r = parseSidecarConfig({ ...base(), descriptor: { model: { id: 'x' } }, descriptorFile: 'a.yaml' }, 'f');
    expect(r.ok ? [] : r.error.map((i) => `${i.path}: ${i.message}`)).toEqual([
      'descriptor: needs exactly one of descriptor (inline) or descriptorFile',
    ]);
  });

  it('resolves keys.file relative to the config file, not the working directory (as the gate does)', async () => {
    const sub = path.join(dir, 'etc');
    await mkdir(sub, { recursive: true });
    const secret = Buffer.alloc(32, 7).toString('base64');
    const salt = Buffer.alloc(32, 8).toString('base64'); // separate from the signing key
    await writeFile(path.join(sub, 'keys.json'), JSON.stringify({ current: 'k1', keys: { k1: secret }, salt }));
    const { keys: _k, ...rest } = base();
    await writeFile(path.join(sub, 'sidecar.yaml'), stringify({ ...rest, keys: { file: 'keys.json' } }));
    const cwd = process.cwd();
    expect(path.resolve('keys.json')).not.toBe(path.join(sub, 'keys.json')); // the working directory is elsewhere
    const r = await loadSidecarConfig(path.relative(cwd, path.join(sub, 'sidecar.yaml')));
    expect(r.ok && r.value.keys).toEqual({ file: path.join(sub, 'keys.json') });
    if (!r.ok) return;
    const ring = keyRingFrom(r.value.keys!, {});
    expect(ring.ok).toBe(true);
  });

  it('builds the same config from flags', async () => {
    await writeFile(path.join(dir, 'd.json'), JSON.stringify(exampleDescriptorInput()));
    const r = await configFromArgs([
      '--role',
      'prefill',
      '--worker',
      'http://127.0.0.1:8001',
      '--descriptor',
      path.join(dir, 'd.json'),
      '--listen',
      '127.0.0.1:0',
      '--dev-keys',
      'seed',
      '--prefill-via',
      'direct',
      '--nixl-side-channel',
      '127.0.0.1:5600',
    ]);
    expect(
      r.ok && r.value !== 'help' && { role: r.value.role, listen: r.value.listen, via: r.value.prefill.via, keys: r.value.keys },
    ).toEqual({ role: 'prefill', listen: '127.0.0.1:0', via: 'direct', keys: { devSeed: 'seed' } });
    const bad = await configFromArgs(['--role', 'prefill', '--bogus']);
    expect(bad.ok).toBe(false);
    const mixed = await configFromArgs(['--config', 'a.yaml', '--role', 'decode']);
    expect(mixed.ok ? '' : formatIssues(mixed.error)).toContain('--config cannot be combined with --role');
  });
});

describe('nixlSideChannel: safe by default', () => {
  const { nixlSideChannel: _, ...withoutSideChannel } = base();
  const versioned = (version: string) => ({
    ...withoutSideChannel,
    descriptor: { ...exampleDescriptorInput(), engine: { name: 'vllm', version } },
  });

  it('is required when the declared vLLM has a handshake hash kvgate reads, with the fix in the message', () => {
    const r = parseSidecarConfig(versioned('0.14.2'), 'sidecar.yaml');
    expect(r.ok).toBe(false);
    const text = r.ok ? '' : formatIssues(r.error);
    expect(text).toContain('nixlSideChannel');
    expect(text).toContain('VLLM_NIXL_SIDE_CHANNEL_HOST:PORT');
    expect(text).toContain('nixlSideChannel: unchecked');
  });

  it('--nixl-side-channel may accompany --config (the pod IP is known only at run time) and overrides the file', async () => {
    const file = path.join(dir, 'needs-side-channel.yaml');
    await writeFile(file, stringify(versioned('0.14.2')));
    const missing = await configFromArgs(['--config', file]);
    expect(missing.ok ? '' : formatIssues(missing.error)).toContain('nixlSideChannel');
    const r = await configFromArgs(['--config', file, '--nixl-side-channel', '10.1.2.3:5600']);
    expect(r.ok && r.value !== 'help' && r.value.nixlSideChannel).toBe('10.1.2.3:5600');
    const mixed = await configFromArgs(['--config', file, '--role', 'decode']);
    expect(mixed.ok ? '' : formatIssues(mixed.error)).toContain('--config cannot be combined with --role');
  });

  it('--pod-uid may accompany --config (known only at run time) and is reported on /status', async () => {
    const file = path.join(dir, 'pod-uid.yaml');
    await writeFile(file, stringify(versioned('0.14.2')));
    const r = await configFromArgs(['--config', file, '--nixl-side-channel', '10.1.2.3:5600', '--pod-uid', '6f1c-uid']);
    if (!r.ok || r.value === 'help') throw new Error('expected a config');
    expect(r.value.podUid).toBe('6f1c-uid');
    const status = toStatus(r.value, staticStatusOf(r.value), {
      verdict: null,
      checkedAtMs: null,
      draining: false,
      inFlight: 0,
      engineId: null,
    });
    expect(status.podUid).toBe('6f1c-uid');
    const none = await configFromArgs(['--config', file, '--nixl-side-channel', '10.1.2.3:5600']);
    expect(
      none.ok &&
        none.value !== 'help' &&
        toStatus(none.value, staticStatusOf(none.value), { verdict: null, checkedAtMs: null, draining: false, inFlight: 0, engineId: null })
          .podUid,
    ).toBeNull();
  });

  it("/status says why a side channel's hash is not taken when it answered for another engine, not that it is silent", async () => {
    const file = path.join(dir, 'foreign-side-channel.yaml');
    await writeFile(file, stringify(versioned('0.14.2')));
    const r = await configFromArgs(['--config', file, '--nixl-side-channel', '10.1.2.3:5600']);
    if (!r.ok || r.value === 'help') throw new Error('expected a config');
    const snapshot = (reasons: string[]) =>
      toStatus(r.value as SidecarConfig, staticStatusOf(r.value as SidecarConfig), {
        verdict: { verified: false, reasons, measured: { sideChannelEngineId: 'e2' }, declaredOnly: [] },
        checkedAtMs: 1,
        draining: false,
        inFlight: 0,
        engineId: 'e1',
      }).nixlHash.live;
    const foreign =
      "NIXL compatibility hash: the side channel 10.1.2.3:5600 answers for engine e2, but the worker's HTTP port answers for engine e1: the hash read there is another vLLM's, not this worker's";
    expect(snapshot([foreign])).toEqual({ state: 'unread', observed: null, note: foreign });
    expect(snapshot(['something else']).note).toBe('the side channel 10.1.2.3:5600 has not answered yet');
  });

  it('is optional before vLLM 0.13 (no hash to read); unchecked is the explicit opt-out', () => {
    const old = {
      ...versioned('0.11.0'),
      descriptor: { ...versioned('0.11.0').descriptor, connector: { name: 'NixlConnector', version: 2 } },
    };
    expect(parseSidecarConfig(old, 'f').ok).toBe(true);
    const optOut = parseSidecarConfig({ ...versioned('0.14.2'), nixlSideChannel: 'unchecked' }, 'f');
    expect(optOut.ok && optOut.value.nixlSideChannel).toBe('unchecked');
    expect(parseSidecarConfig({ ...versioned('0.14.2'), nixlSideChannel: 'sometimes' }, 'f').ok).toBe(false);
  });
});

describe('keysFor', () => {
  it('loads a key file, reads a named environment variable, and says which variable is missing', async () => {
    const secret = Buffer.alloc(32, 7).toString('base64');
    const salt = Buffer.alloc(32, 8).toString('base64'); // separate from the signing key
    const keyJson = JSON.stringify({ current: 'k1', keys: { k1: secret }, salt });
    await writeFile(path.join(dir, 'keys.json'), keyJson);
    const withFile = parseSidecarConfig({ ...base(), keys: { file: path.join(dir, 'keys.json') } }, 'f');
    if (!withFile.ok) throw new Error('config');
    const fromFile = keyRingFrom(withFile.value.keys!, {});
    expect(fromFile.ok && fromFile.value.currentId).toBe('k1');
    const withEnv = parseSidecarConfig({ ...base(), keys: { env: 'MY_KEYS' } }, 'f');
    if (!withEnv.ok) throw new Error('config');
    expect(keyRingFrom(withEnv.value.keys!, {})).toEqual({ ok: false, error: expect.stringContaining('MY_KEYS, which is not set') });
    const fromEnv = keyRingFrom(withEnv.value.keys!, { MY_KEYS: keyJson });
    expect(fromEnv.ok && fromEnv.value.currentId).toBe('k1');
  });
});

describe('--advertise and --nixl-side-channel from the pod IP', () => {
  const withFile = async (name: string, extra: Record<string, unknown> = {}) => {
    const file = path.join(dir, name);
    await writeFile(file, stringify({ ...base(), ...extra }));
    return file;
  };
  const configOf = async (argv: string[]) => {
    const r = await configFromArgs(argv);
    if (!r.ok || r.value === 'help') throw new Error(r.ok ? 'help' : formatIssues(r.error));
    return r.value;
  };
  const errorOf = async (argv: string[]) => {
    const r = await configFromArgs(argv);
    if (r.ok) throw new Error(`expected a refusal of ${argv.join(' ')}`);
    return formatIssues(r.error);
  };

  it('--advertise may accompany --config and overrides the file; "[$(POD_IP)]:9090" is right for either IP family', async () => {
    const file = await withFile('advertise.yaml', { advertise: '10.9.9.9:9090' });
    expect((await configOf(['--config', file])).advertise).toBe('10.9.9.9:9090');
    // What Kubernetes makes of "[$(POD_IP)]:9090": the gate's spelling of podIP:targetPort (src/discovery/pods.ts).
    expect((await configOf(['--config', file, '--advertise', '[10.1.2.3]:9090'])).advertise).toBe('10.1.2.3:9090');
    expect((await configOf(['--config', file, '--advertise', '[fd00::1]:9090'])).advertise).toBe('[fd00::1]:9090');
    expect((await configOf(['--config', file, '--advertise', '10.1.2.3:9090'])).advertise).toBe('10.1.2.3:9090');
    const all = await configOf([
      '--config',
      file,
      '--advertise',
      '[fd00::1]:9090',
      '--pod-uid',
      'u-1',
      '--nixl-side-channel',
      '[fd00::1]:5600',
    ]);
    expect([all.advertise, all.podUid, all.nixlSideChannel]).toEqual(['[fd00::1]:9090', 'u-1', '[fd00::1]:5600']);
  });

  it('--advertise works without --config too', async () => {
    await writeFile(path.join(dir, 'd2.json'), JSON.stringify(exampleDescriptorInput()));
    const flags = ['--role', 'decode', '--worker', 'http://127.0.0.1:8001', '--descriptor', path.join(dir, 'd2.json'), '--dev-keys', 's'];
    const c = await configOf([...flags, '--nixl-side-channel', '[10.1.2.3]:5600', '--advertise', '[10.1.2.3]:9090']);
    expect([c.advertise, c.nixlSideChannel]).toEqual(['10.1.2.3:9090', '10.1.2.3:5600']);
  });

  it('refuses an address it cannot read unambiguously, naming the flag and the bracketed fix', async () => {
    const file = await withFile('advertise-bad.yaml');
    // "$(POD_IP):9090" with an IPv6 pod IP: is the port 9090, or is fd00::1:9090 the address?
    const v6 = await errorOf(['--config', file, '--advertise', 'fd00::1:9090']);
    expect(v6).toContain('--advertise "fd00::1:9090": an IPv6 address must be in brackets');
    expect(v6).toContain('"[$(POD_IP)]:9090"');
    expect(await errorOf(['--config', file, '--nixl-side-channel', 'fd00::1:5600'])).toContain(
      '--nixl-side-channel "fd00::1:5600": an IPv6 address must be in brackets',
    );
    expect(await errorOf(['--config', file, '--advertise', '[fd00::1]'])).toContain('must be followed by :PORT');
    expect(await errorOf(['--config', file, '--advertise', '[decode-0.vllm]:9090'])).toContain('in brackets is not an IP address');
    expect(await errorOf(['--config', file, '--advertise', '[10.1.2.3]:0'])).toContain('port 0 is not 1-65535');
    // A host name is never the gate's name for an endpoint: such a decode sidecar would refuse every contract.
    expect(await errorOf(['--config', file, '--advertise', 'decode-0.vllm:9090'])).toContain(
      '--advertise "decode-0.vllm:9090" is not an IP address and port',
    );
    expect(await errorOf(['--config', file, '--advertise', ''])).toContain('is not an IP address and port');
    const inFile = await errorOf(['--config', await withFile('advertise-host.yaml', { advertise: 'decode-0.vllm:9090' })]);
    expect(inFile).toContain('advertise');
    expect(inFile).toContain("must be 'ip:port' (IPv4) or '[ipv6]:port'");
  });

  it('the side channel keeps host names and the unchecked opt-out', async () => {
    const file = await withFile('side-channel.yaml');
    expect((await configOf(['--config', file, '--nixl-side-channel', 'localhost:5600'])).nixlSideChannel).toBe('localhost:5600');
    expect((await configOf(['--config', file, '--nixl-side-channel', 'unchecked'])).nixlSideChannel).toBe('unchecked');
  });

  it('kvgate sidecar exits 2 before opening a port, with the reason on stderr', async () => {
    const file = await withFile('advertise-exit.yaml');
    let stderr = '';
    const code = await sidecarCommand(['--config', file, '--advertise', 'fd00::1:9090'], {
      signals: process,
      stdout: () => undefined,
      stderr: (t) => (stderr += t),
      env: {},
    });
    expect(code).toBe(2);
    expect(stderr).toContain('kvgate sidecar: invalid configuration');
    expect(stderr).toContain('an IPv6 address must be in brackets');
  });
});

describe('docs/sidecar-config.md', () => {
  it('lists every key the sidecar accepts, and each default as the schema applies it', async () => {
    const doc = await readFile(path.join(import.meta.dirname, '..', '..', 'docs', 'sidecar-config.md'), 'utf8');
    const rows = [...doc.matchAll(/^\| `([^`]+)` \| ([^|]+) \|/gm)].map((m) => ({ key: m[1]!, given: m[2]!.trim() }));
    // The keys: one row per leaf, a row per field of prefill, probe, tracing and log, one row for keys and workerApiKey.
    const leaves = (schema: unknown, prefix: string): string[] => {
      let s = schema as { _zod: { def: { type: string; shape?: Record<string, unknown>; innerType?: unknown } } };
      while (s._zod.def.innerType !== undefined) s = s._zod.def.innerType as typeof s;
      const whole = ['descriptor', 'keys', 'workerApiKey'];
      if (s._zod.def.type !== 'object' || whole.includes(prefix)) return [prefix];
      return Object.entries(s._zod.def.shape!).flatMap(([k, v]) => leaves(v, prefix === '' ? k : `${prefix}.${k}`));
    };
    expect(rows.map((r) => r.key).sort()).toEqual(leaves(SidecarConfigSchema, '').sort());
    // The defaults: a backticked value is what a config that leaves the key out gets; "none" is unset.
    const parsed = SidecarConfigSchema.parse({ role: 'decode', worker: 'http://127.0.0.1:8000', descriptorFile: 'x' });
    const at = (key: string) => key.split('.').reduce<unknown>((o, k) => (o as Record<string, unknown> | undefined)?.[k], parsed);
    for (const { key, given } of rows) {
      if (given === '(required)' || key === 'descriptorFile') continue;
      const literal = /^`([^`]+)`$/.exec(given)?.[1];
      if (given.startsWith('none')) expect({ key, value: at(key) }).toEqual({ key, value: undefined });
      else if (literal !== undefined) expect({ key, default: at(key) }).toEqual({ key, default: parse(literal) });
      else throw new Error(`docs/sidecar-config.md: the default of ${key} is neither (required), none nor a \`value\`: ${given}`);
    }
  });
});

describe('kvgate sidecar --config: every start problem at once', () => {
  const run = async (argv: string[], env: Record<string, string> = {}) => {
    let stderr = '';
    let ready = false;
    const code = await sidecarCommand(argv, {
      signals: process,
      stdout: () => undefined,
      stderr: (t) => (stderr += t),
      env,
      onReady: () => (ready = true),
    });
    return { code, stderr, ready };
  };

  it('names the descriptor file, the key file, the worker API key file and a config typo in one run, each with the config file, setting, path and fix', async () => {
    const sub = path.join(dir, 'all-at-once');
    await mkdir(sub, { recursive: true });
    const { descriptor: _d, keys: _k, ...rest } = base();
    const file = path.join(sub, 'sidecar.yaml');
    await writeFile(
      file,
      stringify({
        ...rest,
        listen: '127.0.0.1:0',
        descriptorFile: 'rev-missing.yaml',
        keys: { file: 'keys-missing.json' },
        workerApiKey: { file: 'api-key-missing' },
        drainAnounceMs: 5,
      }),
    );
    const { code, stderr, ready } = await run(['--config', file]);
    expect(code).toBe(2);
    expect(ready).toBe(false); // no port, no probe
    expect(stderr).toMatch(/^kvgate sidecar: invalid configuration; nothing was started:$/m);
    const lines = stderr.split('\n').filter((l) => l.includes(': error: '));
    const expected = [
      /sidecar\.yaml:\d+:1: error: descriptorFile: cannot read the descriptor file \S+rev-missing\.yaml: no such file \(ENOENT\)\. Fix: put the worker's descriptor there, or correct descriptorFile/,
      /sidecar\.yaml:\d+:\d+: error: keys\.file: cannot read the key file \S+keys-missing\.json: no such file \(ENOENT\)\. Fix: mount the key file there/,
      /sidecar\.yaml:\d+:\d+: error: workerApiKey\.file: cannot read the worker API key file \S+api-key-missing: no such file \(ENOENT\)\. Fix: mount the worker's --api-key value there/,
      /sidecar\.yaml:\d+:1: error: drainAnounceMs: unknown key "drainAnounceMs"\. Fix: did you mean "drainAnnounceMs"\?/,
    ];
    for (const re of expected)
      expect(
        lines.filter((l) => re.test(l)),
        `${re}\n${stderr}`,
      ).toHaveLength(1);
    expect(lines).toHaveLength(expected.length);
  });

  it('checks the descriptor it could read and the key file it could not together; keys.env against the environment', async () => {
    const sub = path.join(dir, 'desc-and-keys');
    await mkdir(sub, { recursive: true });
    await writeFile(path.join(sub, 'rev.yaml'), stringify({ ...exampleDescriptorInput(), modelDtype: 'auto' }));
    await writeFile(path.join(sub, 'keys.json'), '{"current": "k1"}');
    const { descriptor: _d, keys: _k, ...rest } = base();
    const file = path.join(sub, 'sidecar.yaml');
    await writeFile(file, stringify({ ...rest, descriptorFile: 'rev.yaml', keys: { file: 'keys.json' } }));
    const { code, stderr } = await run(['--config', file]);
    expect(code).toBe(2);
    expect(stderr).toMatch(/sidecar\.yaml:\d+:1: error: descriptorFile: rev\.yaml: descriptor cannot be fingerprinted: modelDtype/);
    expect(stderr).toMatch(
      /sidecar\.yaml:\d+:\d+: error: keys\.file: key file \S+keys\.json: invalid key file: .*Fix: correct the key file as the message says/,
    );
    await writeFile(file, stringify({ ...rest, descriptorFile: 'rev.yaml', keys: { env: 'SIDECAR_KEYS' } }));
    const env = await run(['--config', file]);
    expect(env.stderr).toMatch(
      /sidecar\.yaml:\d+:\d+: error: keys\.env: keys\.env names the environment variable SIDECAR_KEYS, which is not set.*Fix: set SIDECAR_KEYS/,
    );
  });

  it('the flags name their own problems at once too', async () => {
    const { code, stderr } = await run([
      '--role',
      'decode',
      '--worker',
      'http://127.0.0.1:8000',
      '--descriptor',
      path.join(dir, 'flags-missing-rev.yaml'),
      '--keys',
      path.join(dir, 'flags-missing-keys.json'),
      '--listen',
      '127.0.0.1:0',
    ]);
    expect(code).toBe(2);
    expect(stderr).toMatch(
      /flags-missing-rev\.yaml: error: \(root\): cannot read the file: no such file \(ENOENT\)\. Fix: check the path given to --descriptor/,
    );
    expect(stderr).toMatch(
      /command line: error: --keys: cannot read the key file \S+flags-missing-keys\.json: no such file \(ENOENT\)\. Fix: mount the key file there/,
    );
  });
});

describe('sidecarConfigWarnings', () => {
  it("warns, without refusing the config, when the descriptor's KV cache dtype is not one its vLLM accepts", () => {
    const at = (version: string, dtype: string) => {
      const input = exampleDescriptorInput();
      const r = parseSidecarConfig(
        { ...base(), descriptor: { ...input, engine: { ...input.engine, version }, kvCache: { ...input.kvCache, dtype } } },
        'f',
      );
      if (!r.ok) throw new Error(formatIssues(r.error));
      return sidecarConfigWarnings(r.value);
    };
    expect(at('0.14.2', 'fp9')).toEqual([
      expect.stringMatching(
        /^descriptor: kvCache\.dtype "fp9" is not a --kv-cache-dtype vLLM 0\.14\.2 accepts.*accepts: auto, bfloat16, fp8,/,
      ),
    ]);
    expect(at('0.14.2', 'auto')).toEqual([]);
    // 0.11.0's list was not read: only a value no release read accepts is warned about.
    expect(at('0.11.0', 'fp9')).toEqual([expect.stringContaining('not a --kv-cache-dtype any vLLM release kvgate read accepts')]);
    expect(at('0.11.0', 'bfloat16')).toEqual([]);
  });
});
