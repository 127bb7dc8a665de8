/**
 * Safe by default: every setting a user can set, and whether any value of it leaves a mixed-revision route, an
 * unverified worker, a cross-tenant cache share, a forged route or an unchecked KV transfer possible. For each that
 * can, this file asserts that the default is the safe value and that the unsafe value is loud: a warning at start
 * (the route table's on every reload too), `/status` (`optIns`, plus the setting's own field where it has one), a
 * metric, and the audit lines where the setting touches a request.
 *
 * Risky settings (default first; "->" the unsafe value and how it is made loud):
 *
 * | setting (file)                               | default      | risk of the unsafe value                        | loud                                                                                                   |
 * |----------------------------------------------|--------------|-------------------------------------------------|--------------------------------------------------------------------------------------------------------|
 * | gate `insecure` (gate.yaml)                  | false (TLS required) | true: plaintext, caller-claimed roles -> forged route | start warn (server.ts), /status transport + optIns, kvgate_gate_insecure_transport, kvgate_gate_opt_in |
 * | gate `keys.devSeed`                          | none (one of file/env/devSeed required) | anyone with the seed mints contracts -> forged route | start warn, /status optIns, kvgate_gate_opt_in                                      |
 * | gate `workerView.mode`                       | live         | static: routes on the table's word, no sidecar polled -> unverified worker | start warn, /status workerView.mode + optIns, kvgate_gate_opt_in                |
 * | table `pools[].endpoints[].unverified`       | absent       | true: routed without a status URL -> unverified worker | policy check/start/reload warn, /status optIns, kvgate_gate_opt_in                               |
 * | table `revisions.*.trust`                    | recorded     | declared-only: no canaries -> mixed revision undetected | warn, /status trust + optIns, kvgate_revision_trust, kvgate_gate_opt_in, audit `trust`           |
 * | table `connectorMode`                        | strict       | lenient: unknown connector versions split -> unchecked KV transfer | warn (now always, not only with an unknown version), /status optIns, kvgate_gate_opt_in |
 * | table `tenancy.prefixScope`                  | tenant       | shared: one prefix cache for all tenants -> cross-tenant cache share | warn (NEW), /status optIns (NEW), kvgate_gate_opt_in (NEW)                       |
 * | table `tenancy.prefixScope: tenant-user` w/o `userHeader` | (userHeader unset) | user from the client's body field | warn (semantic.ts, existing)                                                           |
 * | table `media.allowedOrigins`                 | [] (only data: media) | workers fetch client media URLs from inside the mesh; P and D fetch separately -> KV of other media | warn, /status optIns, kvgate_gate_opt_in                          |
 * | sidecar `keys.devSeed` / `--dev-keys`        | none (required) | forged contracts                             | start warn, /status optIns (NEW), kvgate_sidecar_opt_in (NEW)                                          |
 * | sidecar `trust` / `--trust`                  | recorded     | declared-only -> unverified worker              | start warn, /status trust + optIns, kvgate_sidecar_opt_in, audit lines                                 |
 * | sidecar `probe.generation`                   | declared     | never: weights unchecked                        | refused with trust: recorded (config error); allowed only with declared-only                           |
 * | sidecar `nixlSideChannel`                    | required where readable | unchecked -> unchecked KV transfer flags | config error when missing; unchecked: start warn, /status nixlHash.live + optIns, kvgate_sidecar_opt_in |
 * | sidecar `compatMode`                         | strict       | lenient -> unchecked KV transfer                | start warn, /status connector verdict + optIns, kvgate_sidecar_opt_in                                  |
 * | sidecar `onTransferFailure` / `--on-transfer-failure` | fail | recompute: a failed transfer is hidden        | start warn (NEW), /status optIns (NEW), kvgate_sidecar_opt_in (NEW), per request warn + kvgate_sidecar_transfer_failures_total{action} |
 * | sidecar `media.allowedOrigins`               | [] (only data: media) | the worker fetches client media URLs from those origins | start warn, /status optIns, kvgate_sidecar_opt_in                                                  |
 * | sidecar `admin`                              | 127.0.0.1:9092 | drain/undrain from outside                    | only loopback accepted (schema), '' disables                                                          |
 * | `kvgate envoy render bootstrap` w/o --gate-tls-* | plaintext | plaintext to the gate                          | stderr WARNING + file header (src/cli/envoy-command.test.ts); the gate refuses it unless insecure: true |
 *
 * Settings judged not risky in these terms (they bound time, size or load, name files or ports, or only narrow what
 * is allowed): gate listen/health/admin/policy/tls.*, workerView.intervalMs/timeoutMs/staleAfterMs (stale -> fail
 * closed), discovery.*, envoy.gieHeaders/gieFallbackEndpoints/maxMessageTimeoutMs, drain.*, tracing.*, log.*; table
 * version, models, rollout (candidates gated by verification; a stable must be trusted), pools[].tenants (the cache
 * salt is per prefix scope, not per pool), pool discovery (revision label must match), verification (absent: not
 * required, see docs/policy-guide.md), session.*, contract.ttlMs (capped at 10 min), fallback (routeVia stays inside
 * one revision's pools; pinned and adapter requests excluded by default), limits, priorities and
 * pools[].schedulingPolicy (none by default; a priority orders requests inside the group already bound, changes no
 * group, endpoint, cache_salt or prompt digest, and a client's own stays refused; src/decide/decide.test.ts); sidecar role, worker, listen,
 * metrics, advertise, descriptor*, podUid, keepAliveTimeoutMs, servedModelName, workerApiKey, tenantScopes (['*']
 * trusts the gate's signed choice), probe intervals, prefill.via (direct calls only the endpoint the signed contract
 * names), timeouts and limits, drain*, tracing, log; envoy render flags other than --gate-tls-* (ports, namespace,
 * --gie, --request-body-mode, --use-remote-address).
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import { exampleDescriptorInput } from '../src/compat/testing.js';
import { formatIssues, type ConfigIssue } from '../src/config/issues.js';
import { createDevKeyRing } from '../src/contract/keys.js';
import { parseGateConfig } from '../src/gate/config.js';
import { localGateConfig } from '../src/gate/testing.js';
import { startGate, type RunningGate } from '../src/gate/gate.js';
import { gateConfigOptIns, tableOptIns } from '../src/gate/opt-ins.js';
import { createPolicyStore, type PolicyStore } from '../src/gate/policy-store.js';
import { routeTableFromValue } from '../src/policy/load.js';
import { clone, tableFromValue, twoRevisionTableValue } from '../src/policy/testing.js';
import { parseSidecarConfig } from '../src/sidecar/config.js';
import { sidecarOptIns } from '../src/sidecar/opt-ins.js';
import { staticStatusOf, toStatus } from '../src/sidecar/status.js';
import { createMemoryLogger, startTestSidecar } from '../src/sidecar/testing.js';

type Value = Record<string, any>;

const warnings = (lines: Record<string, unknown>[]): string[] =>
  lines.filter((l) => l['level'] === 40).map((l) => `${String(l['msg'])} ${JSON.stringify(l['warnings'] ?? '')}`);

function tableIssues(mutate: (v: Value) => void = () => {}): ConfigIssue[] {
  const v = clone(twoRevisionTableValue()) as Value;
  mutate(v);
  const r = routeTableFromValue(v, { file: 't.yaml' });
  return r.ok ? [...r.value.warnings] : r.error;
}

describe('gate config: safe defaults, loud opt-ins', () => {
  const tls = { cert: 'c.pem', key: 'k.pem', clientCa: 'ca.pem', roles: { public: ['dns:envoy'], internal: ['dns:envoy-internal'] } };

  it('defaults: TLS required, live worker view, no opt-in', () => {
    const bare = parseGateConfig(JSON.stringify({ policy: 't.yaml', keys: { file: 'k.yaml' } }), '/x/gate.yaml');
    expect(bare.ok ? '' : formatIssues(bare.error)).toMatch(/tls: the gate's gRPC port needs TLS with client certificates/);
    const r = parseGateConfig(JSON.stringify({ policy: 't.yaml', keys: { file: 'k.yaml' }, tls }), '/x/gate.yaml');
    if (!r.ok) throw new Error(formatIssues(r.error));
    expect([r.value.insecure, r.value.workerView.mode]).toEqual([false, 'live']);
    expect(gateConfigOptIns(r.value)).toEqual([]);
  });

  it('each unsafe value is an opt-in', () => {
    const r = parseGateConfig(
      JSON.stringify({ policy: 't.yaml', keys: { devSeed: 'x' }, insecure: true, workerView: { mode: 'static' } }),
      '/x/gate.yaml',
    );
    if (!r.ok) throw new Error(formatIssues(r.error));
    expect(gateConfigOptIns(r.value)).toEqual(['insecure: true', 'keys.devSeed', 'workerView.mode: static']);
  });
});

describe('route table: safe defaults, loud opt-ins', () => {
  it('defaults: trust recorded, connectorMode strict, prefixScope tenant, no unverified endpoint, no opt-in', () => {
    const t = tableFromValue(twoRevisionTableValue());
    expect([t.connectorMode, t.tenancy.prefixScope]).toEqual(['strict', 'tenant']);
    expect([...t.revisions.values()].map((r) => r.trust)).toEqual(['recorded', 'recorded']);
    expect(tableOptIns(t)).toEqual([]);
    expect(tableIssues().filter((i) => i.severity === 'warning')).toEqual([]);
  });

  it('prefixScope: shared (a cross-tenant cache share) is a warning and an opt-in', () => {
    const issues = tableIssues((v) => (v['tenancy']['prefixScope'] = 'shared'));
    const w = issues.filter((i) => i.path === 'tenancy.prefixScope');
    expect(w.map((i) => i.severity)).toEqual(['warning']);
    expect(w[0]!.message).toMatch(/every tenant shares one prefix cache/);
    const t = tableFromValue(
      (() => {
        const v = clone(twoRevisionTableValue()) as Value;
        v['tenancy']['prefixScope'] = 'shared';
        return v;
      })(),
    );
    expect(tableOptIns(t)).toEqual(['tenancy.prefixScope: shared']);
  });

  it('media.allowedOrigins (workers fetch client media URLs) is a warning and an opt-in', () => {
    const allow = (v: Value) => (v['media'] = { allowedOrigins: ['https://media.example.com'] });
    const w = tableIssues(allow).filter((i) => i.path === 'media.allowedOrigins');
    expect(w.map((i) => [i.severity, i.message])).toEqual([
      ['warning', expect.stringMatching(/^media\.allowedOrigins - workers fetch client media from https:\/\/media\.example\.com/)],
    ]);
    const v = clone(twoRevisionTableValue()) as Value;
    allow(v);
    expect(tableOptIns(tableFromValue(v))).toEqual(['media.allowedOrigins']);
  });

  it('connectorMode: lenient is a warning even when every declared connector version has rules', () => {
    const w = tableIssues((v) => (v['connectorMode'] = 'lenient')).filter((i) => i.path === 'connectorMode');
    expect(w.map((i) => [i.severity, i.message])).toEqual([['warning', expect.stringMatching(/^connectorMode: lenient - /)]]);
  });

  it('unverified: true and trust: declared-only are warnings and opt-ins', () => {
    const v = clone(twoRevisionTableValue()) as Value;
    delete v['pools'][0]['endpoints'][0]['status'];
    v['pools'][0]['endpoints'][0]['unverified'] = true;
    delete v['revisions']['llama-b']['descriptor']['canaries'];
    v['revisions']['llama-b']['trust'] = 'declared-only';
    const r = routeTableFromValue(v, { file: 't.yaml' });
    if (!r.ok) throw new Error(formatIssues(r.error));
    const messages = r.value.warnings.map((i) => i.message).join('\n');
    expect(messages).toMatch(/NO check that the worker is verified \(unverified: true\)/);
    expect(messages).toMatch(/routed on its declaration alone \(trust: declared-only\)/);
    expect(tableOptIns(tableFromValue(v))).toEqual([
      'revisions.llama-b.trust: declared-only',
      `pools.${v['pools'][0]['name']}.endpoints[].unverified: true`,
    ]);
  });
});

describe('gate: opt-ins are warned at start and on reload, listed on /status, and counted', () => {
  let gate: RunningGate | undefined;
  let store: PolicyStore | undefined;
  let dir: string | undefined;
  afterEach(async () => {
    await gate?.close();
    store?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
    gate = undefined;
    store = undefined;
  });

  it('start: a warning per gate opt-in, /status optIns and kvgate_gate_opt_in name each', async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'kvgate-safe-defaults-'));
    const v = clone(twoRevisionTableValue()) as Value;
    v['tenancy']['prefixScope'] = 'shared';
    await writeFile(path.join(dir, 'route-table.json'), JSON.stringify(v));
    const { logger, lines } = createMemoryLogger('info');
    const registry = new Registry();
    gate = await startGate(localGateConfig(dir, 'route-table.json'), {
      logger,
      keys: createDevKeyRing('x'),
      registry,
      defaultMetrics: false,
    });
    const w = warnings(lines).join('\n');
    expect(w).toMatch(/INSECURE development keys \(keys\.devSeed\)/);
    expect(w).toMatch(/STATIC worker view \(workerView\.mode: static\)/);
    expect(w).toMatch(/INSECURE gate port \(insecure: true\)/);
    expect(w).toMatch(/route table loaded with warnings.*prefixScope: shared/);
    const status = gate.status() as { optIns: string[]; workerView: { mode: string }; transport: unknown };
    expect(status.optIns).toEqual(['insecure: true', 'keys.devSeed', 'workerView.mode: static', 'tenancy.prefixScope: shared']);
    expect(status.workerView.mode).toBe('static');
    const text = await registry.metrics();
    for (const s of status.optIns) expect(text).toContain(`kvgate_gate_opt_in{setting="${s}"} 1`);
    expect(text).toContain('kvgate_gate_insecure_transport 1');
  });

  it('reload: a table with warnings is logged at warn level, not info', async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'kvgate-safe-defaults-'));
    const file = path.join(dir, 'route-table.json');
    await writeFile(file, JSON.stringify(twoRevisionTableValue()));
    const { logger, lines } = createMemoryLogger('info');
    const created = await createPolicyStore({ file, logger, registry: new Registry() });
    if (!created.ok) throw new Error(created.message);
    store = created.store;
    expect(warnings(lines)).toEqual([]);
    const v = clone(twoRevisionTableValue()) as Value;
    v['connectorMode'] = 'lenient';
    await writeFile(file, JSON.stringify(v));
    expect((await store.reload('test')).ok).toBe(true);
    expect(warnings(lines).join('\n')).toMatch(/route table reloaded with warnings.*connectorMode: lenient/);
  });
});

describe('sidecar config: safe defaults, loud opt-ins', () => {
  const base = () => ({
    role: 'decode',
    worker: 'http://127.0.0.1:8000',
    descriptor: exampleDescriptorInput(),
    keys: { env: 'KVGATE_KEYS' },
    nixlSideChannel: '127.0.0.1:5600',
  });
  const statusOf = (raw: Record<string, unknown>) => {
    const r = parseSidecarConfig(raw, 'sidecar.yaml');
    if (!r.ok) throw new Error(formatIssues(r.error));
    return {
      config: r.value,
      status: toStatus(r.value, staticStatusOf(r.value), {
        verdict: null,
        checkedAtMs: null,
        draining: false,
        inFlight: 0,
        engineId: null,
      }),
    };
  };

  it('defaults: trust recorded, compatMode strict, onTransferFailure fail, prefill through Envoy, loopback admin, no opt-in', () => {
    const { config, status } = statusOf(base());
    expect([config.trust, config.compatMode, config.onTransferFailure, config.admin, config.probe.generation]).toEqual([
      'recorded',
      'strict',
      'fail',
      '127.0.0.1:9092',
      'declared',
    ]);
    expect(config.prefill.via).toEqual({ envoy: 'http://127.0.0.1:10001' });
    expect(sidecarOptIns(config)).toEqual([]);
    expect(status.optIns).toEqual([]);
  });

  it('each unsafe value is a start warning and a /status optIns entry', () => {
    const { config, status } = statusOf({
      ...base(),
      keys: { devSeed: 'x' },
      trust: 'declared-only',
      compatMode: 'lenient',
      nixlSideChannel: 'unchecked',
      onTransferFailure: 'recompute',
      media: { allowedOrigins: ['https://media.example.com'] },
    });
    const settings = [
      'keys.devSeed',
      'trust: declared-only',
      'compatMode: lenient',
      'nixlSideChannel: unchecked',
      'onTransferFailure: recompute',
      'media.allowedOrigins',
    ];
    expect(sidecarOptIns(config).map((o) => o.setting)).toEqual(settings);
    for (const o of sidecarOptIns(config)) expect(o.message.length).toBeGreaterThan(40);
    expect(status.optIns).toEqual(settings);
    expect(status.trust).toBe('declared-only');
  });

  it('each opt-in is a kvgate_sidecar_opt_in series; none with the safe defaults', async () => {
    const start = async (raw: Record<string, unknown>) => {
      const r = parseSidecarConfig({ ...raw, listen: '127.0.0.1:0', admin: '', metrics: '' }, 'sidecar.yaml');
      if (!r.ok) throw new Error(formatIssues(r.error));
      const t = await startTestSidecar(r.value);
      const text = await t.registry.metrics();
      await t.sidecar.close();
      return text;
    };
    expect(await start({ ...base(), keys: { env: 'KVGATE_KEYS' } })).not.toMatch(/kvgate_sidecar_opt_in\{/);
    const text = await start({ ...base(), compatMode: 'lenient', onTransferFailure: 'recompute' });
    expect(text).toContain('kvgate_sidecar_opt_in{setting="compatMode: lenient"} 1');
    expect(text).toContain('kvgate_sidecar_opt_in{setting="onTransferFailure: recompute"} 1');
  });

  it('refuses what would leave the worker unchecked without the loud opt-in', () => {
    const never = parseSidecarConfig({ ...base(), probe: { generation: 'never' } }, 'f');
    expect(never.ok ? '' : formatIssues(never.error)).toMatch(/probe\.generation: never turns off the generation canary/);
    const admin = parseSidecarConfig({ ...base(), admin: '0.0.0.0:9092' }, 'f');
    expect(admin.ok ? '' : formatIssues(admin.error)).toMatch(/must be a loopback address/);
    const { keys: _k, ...noKeys } = base();
    expect(parseSidecarConfig(noKeys, 'f').ok).toBe(false);
  });
});
