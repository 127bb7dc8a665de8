import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { stringify as toYaml } from 'yaml';
import { parseGateConfig } from './config.js';

const base = { policy: 'route-table.yaml', keys: { devSeed: 'x' } };
const tls = {
  cert: 'tls/gate.crt',
  key: 'tls/gate.key',
  clientCa: 'tls/ca.crt',
  roles: { public: ['spiffe://c/ns/k/sa/envoy-public'], internal: ['dns:envoy-internal.k.svc'] },
};
const parse = (v: Record<string, unknown>) => parseGateConfig(toYaml(v), '/etc/kvgate/gate/gate.yaml');
const messages = (v: Record<string, unknown>) => {
  const r = parse(v);
  return r.ok ? [] : r.error.map((i) => `${String(i.path)}: ${i.message}`);
};

describe('gate config: the gRPC port', () => {
  it('needs tls, or an explicit insecure: true', () => {
    expect(messages(base).join('\n')).toMatch(/tls: .*needs TLS with client certificates/);
    expect(parse({ ...base, insecure: true }).ok).toBe(true);
    expect(messages({ ...base, tls, insecure: true }).join('\n')).toMatch(/exclude each other/);
  });

  it('resolves the PEM files against the config file and checks every identity', () => {
    const r = parse({ ...base, tls });
    expect(r.ok && r.value.tls).toMatchObject({
      cert: path.join('/etc/kvgate/gate', 'tls/gate.crt'),
      clientCa: path.join('/etc/kvgate/gate', 'tls/ca.crt'),
    });
    expect(messages({ ...base, tls: { ...tls, roles: { public: ['envoy-public'], internal: [] } } }).join('\n')).toMatch(
      /must be spiffe:\/\//,
    );
    expect(messages({ ...base, tls: { ...tls, roles: { public: ['dns:a'], internal: ['dns:a'] } } }).join('\n')).toMatch(
      /listed for both roles/,
    );
    expect(messages({ ...base, tls: { ...tls, roles: { public: [], internal: [] } } }).join('\n')).toMatch(/no identity is allowed/);
    expect(parse({ ...base, tls: { ...tls, roles: { public: [`sha256:${'AB:'.repeat(31)}CD`], internal: [] } } }).ok).toBe(true);
  });
});

describe('gate config: the file', () => {
  it('refuses a duplicated key in JSON (JSON.parse alone would let the second win) and names its line', () => {
    const r = parseGateConfig(
      '{\n  "policy": "a.yaml",\n  "policy": "b.yaml",\n  "keys": { "devSeed": "x" }, "insecure": true\n}',
      'gate.json',
    );
    expect(r.ok ? [] : r.error.map((i) => [i.line, i.path, i.fix])).toEqual([[3, '(syntax)', expect.stringMatching(/duplicated keys/)]]);
  });

  it('gives schema issues a line number', () => {
    const r = parseGateConfig('policy: a.yaml\nkeys: { devSeed: x }\ninsecure: true\ndrain: soon\n', 'gate.yaml');
    expect(r.ok ? [] : r.error.map((i) => [i.line, i.path])).toEqual([[4, 'drain']]);
  });
});

describe('gate config: the worker view', () => {
  it('refuses a staleAfterMs every endpoint would pass between two polls, and takes the shipped timings', () => {
    const insecure = { ...base, insecure: true };
    const r = parse({ ...insecure, workerView: { mode: 'live', intervalMs: 5000, timeoutMs: 1000, staleAfterMs: 3000 } });
    expect(r.ok ? [] : r.error.map((i) => [i.path, i.message, i.fix])).toEqual([
      [
        'workerView.staleAfterMs',
        expect.stringContaining('staleAfterMs (3000) is not above intervalMs + timeoutMs (5000 + 1000)'),
        expect.stringContaining('raise staleAfterMs above 6000'),
      ],
    ]);
    expect(parse({ ...insecure, workerView: { mode: 'live', intervalMs: 2000, timeoutMs: 1000, staleAfterMs: 3000 } }).ok).toBe(false);
    expect(parse({ ...insecure, workerView: { mode: 'live', intervalMs: 2000, timeoutMs: 1000, staleAfterMs: 10_000 } }).ok).toBe(true);
    expect(parse(insecure).ok).toBe(true);
    // static polls nothing, so its timings are never used.
    expect(parse({ ...insecure, workerView: { mode: 'static', intervalMs: 5000, staleAfterMs: 3000 } }).ok).toBe(true);
  });
});
