/**
 * Issue 19: `kvgate status` against a running topology shows the gate and every sidecar: each endpoint with its
 * pool, revision, role, state and why, in a table, and the same as JSON with `--json`.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { renderStatus, statusCommand } from '../../src/cli/status-command.js';
import { createDevKeyRing } from '../../src/contract/keys.js';
import { VERSION } from '../../src/version.js';
import { DEMO_KEY_SEED, startTopology, type Topology } from '../../testbed/demo/topology.js';
import { silent } from './failure-matrix-support.js';

let t: Topology;
beforeAll(async () => {
  t = await startTopology({ logger: silent, candidateWeight: 0, workerViewIntervalMs: 60_000, sidecarProbeIntervalMs: 60_000 });
});
afterAll(() => t.close());

async function run(args: string[]) {
  return runWith(args, {});
}

/** `kvgate status` with `env` as its environment (where KVGATE_KEYS is read). */
async function runWith(args: string[], env: Record<string, string>) {
  let out = '';
  let err = '';
  const code = await statusCommand(args, { stdout: (s) => (out += s), stderr: (s) => (err += s), env });
  return { code, out, err };
}

describe('kvgate status', () => {
  it('prints the gate and one row per endpoint, with a drained sidecar shown as draining and why', async () => {
    void t.worker('llama-b', 'decode').sidecar.drain(); // draining shows at once; the promise ends after the announce window
    await t.gate.refreshWorkerView();
    const r = await run(['--gate', `http://127.0.0.1:${t.gate.adminPort}`]);
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/^gate: serving/m);
    expect(r.out).toMatch(/^route table: .*route-table\.yaml version \S+; last reload: ok at \d{4}-\d\d-\d\dT[^,]+, version \S+/m);
    expect(r.out).toMatch(/^queues: none waiting$/m);
    // Every process reports its kvgate release: one line of it, and no skew note on any row.
    expect(r.out).toContain(`\nreleases: gate ${VERSION}; sidecars ${VERSION} x4\n`);
    expect(r.out).not.toContain('kvgate release');
    expect(r.out).toMatch(/^keys: dev-insecure\* \(keys\.devSeed, read at start only\); last reload: none$/m);
    expect(r.out).toMatch(/^OPT-INS IN USE: .*keys\.devSeed/m); // the demo signs with a dev seed, and says so
    expect(r.out).not.toMatch(/[{}]/); // readable text, no raw JSON
    const row = (pool: string) => r.out.split('\n').find((l) => l.startsWith(`${pool} `)) ?? '';
    expect(row('a-decode')).toMatch(
      new RegExp(`a-decode\\s+llama-a\\s+decode\\s+${t.worker('llama-a', 'decode').address}\\s+routable\\s+verified\\s+0/\\d+`),
    );
    expect(row('b-decode')).toMatch(/b-decode\s+llama-b\s+decode\s+\S+\s+draining\s+verified, draining/);
  });

  it('--json: the gate status and every sidecar status, keyed by status URL', async () => {
    const r = await run(['--gate', `http://127.0.0.1:${t.gate.adminPort}`, '--json']);
    const doc = JSON.parse(r.out) as {
      gate: { workerView: { pools: Array<{ pool: string; endpoints: Array<{ state: string; status: string }> }> } };
      sidecars: Record<string, { role: string }>;
    };
    expect(doc.gate.workerView.pools.map((p) => p.pool).sort()).toEqual(['a-decode', 'a-prefill', 'b-decode', 'b-prefill']);
    const prefillA = doc.gate.workerView.pools.find((p) => p.pool === 'a-prefill')!.endpoints[0]!;
    expect(doc.sidecars[prefillA.status]!.role).toBe('prefill');
  });

  it("with the key ring, checks each sidecar's answer is signed for this call; without, says it did not check", async () => {
    const gate = `http://127.0.0.1:${t.gate.adminPort}`;
    const plain = await run(['--gate', gate]);
    expect(plain.out).toMatch(/^sidecar signatures: not checked: no keys \(pass --keys FILE or set KVGATE_KEYS\)$/m);
    expect(plain.out.split('\n').find((l) => l.startsWith('a-decode '))).toMatch(/\bunchecked\b/);
    const ring = createDevKeyRing(DEMO_KEY_SEED);
    const keyFile = (secret: Buffer) =>
      JSON.stringify({
        current: 'dev-insecure',
        keys: { 'dev-insecure': secret.toString('base64') },
        salt: ring.saltSecret.toString('base64'),
      });
    const held = await runWith(['--gate', gate], { KVGATE_KEYS: keyFile(ring.secret('dev-insecure')!) });
    expect(held.code).toBe(0);
    expect(held.out).not.toContain('sidecar signatures: not checked');
    for (const pool of ['a-decode', 'a-prefill', 'b-prefill']) {
      expect(held.out.split('\n').find((l) => l.startsWith(`${pool} `))).toMatch(/\bok dev-insecure\b/);
    }
    // Another secret under the same id (not the ring the sidecars hold): every answer fails, and says why.
    const dir = await mkdtemp(path.join(tmpdir(), 'kvgate-status-keys-'));
    await writeFile(path.join(dir, 'keys.json'), keyFile(Buffer.alloc(32, 9)));
    const other = await runWith(['--gate', gate, '--keys', path.join(dir, 'keys.json'), '--json'], {});
    expect(other.code).toBe(3); // a script stops here without parsing the table
    expect(other.err).toMatch(/sidecar answer\(s\) failed the signature check/);
    const doc = JSON.parse(other.out) as { sidecars: Record<string, { signature: { verified: boolean; reason: string } }> };
    expect(Object.values(doc.sidecars).map((s) => s.signature)).toEqual(
      Object.values(doc.sidecars).map(() => expect.objectContaining({ checked: true, verified: false, reason: 'bad_signature' })),
    );
    const text = await runWith(['--gate', gate, '--keys', path.join(dir, 'keys.json')], {});
    expect(text.out.split('\n').find((l) => l.startsWith('a-decode '))).toMatch(
      /FAILED \(bad_signature\)\s+signature: the answer's signature does not verify under key id dev-insecure/,
    );
    // A key file without the sidecars' id: the file given here lacks it, not the gate (whose row still says routable).
    await writeFile(
      path.join(dir, 'other-id.json'),
      JSON.stringify({ ...JSON.parse(keyFile(Buffer.alloc(32, 9))), current: 'k9', keys: { k9: Buffer.alloc(32, 9).toString('base64') } }),
    );
    const otherId = await runWith(['--gate', gate, '--keys', path.join(dir, 'other-id.json')], {});
    const row = otherId.out.split('\n').find((l) => l.startsWith('a-decode ')) ?? '';
    expect(row).toMatch(
      /routable .*FAILED \(unknown_key\)\s+signature: the answer is signed with key id dev-insecure, which the key file given to kvgate status \(--keys or KVGATE_KEYS\) does not hold/,
    );
    expect(row).not.toContain('this gate does not hold');
  });

  it('a gate that does not answer: exit 1 with what to check', async () => {
    const r = await run(['--gate', 'http://127.0.0.1:1', '--timeout-ms', '500']);
    expect(r.code).toBe(1);
    expect(r.err).toContain('check --gate');
  });

  it('says a rejected reload and the groups waiting in words', () => {
    const text = renderStatus(
      {
        policy: { file: 't.yaml', version: 'v2', lastReload: { ok: false, version: 'v1', atMs: 0, message: 't.yaml: error: x\nmore' } },
        queues: { waiting: 3, groups: [{ groupId: 'g_a', depth: 3, oldestWaitMs: 120 }] },
      },
      {},
    );
    expect(text).toContain('last reload: REJECTED at 1970-01-01T00:00:00.000Z (the gate kept version v1): t.yaml: error: x');
    expect(text).toContain('queues: 3 waiting: g_a 3 (oldest 120 ms)');
    expect(text).toContain('opt-ins: none');
  });

  it('shows a rolling upgrade of kvgate: each sidecar on another release than the gate, and one older than the field', () => {
    const endpoint = (pool: string, n: number) => ({
      pool,
      revision: 'llama-a',
      role: pool.endsWith('prefill') ? 'prefill' : 'decode',
      cluster: pool,
      endpoints: [{ address: `10.0.0.${n}:9090`, status: `http://10.0.0.${n}:9090`, state: 'routable' as const, reasons: [], named: null }],
    });
    const text = renderStatus(
      {
        release: '0.2.0',
        workerView: { mode: 'live', pools: [endpoint('a-prefill', 1), endpoint('a-decode', 2), endpoint('b-decode', 3)] },
      },
      {
        'http://10.0.0.1:9090': { verified: true, release: '0.1.0' },
        'http://10.0.0.2:9090': { verified: true, release: '0.2.0' },
        'http://10.0.0.3:9090': { verified: true },
      },
    );
    expect(text).toMatch(/^releases: gate 0\.2\.0; sidecars 0\.1\.0 x1, 0\.2\.0 x1, not reported x1$/m);
    const row = (pool: string) => text.split('\n').find((l) => l.startsWith(`${pool} `)) ?? '';
    expect(row('a-prefill')).toMatch(/kvgate release 0\.1\.0, the gate runs 0\.2\.0 \(a rolling upgrade: sidecars go first\)$/);
    expect(row('a-decode')).not.toContain('kvgate release');
    expect(row('b-decode')).toMatch(/kvgate release not reported: older than the gate's 0\.2\.0; upgrade sidecars before gates/);
    // A gate older than the field says nothing about its sidecars' releases.
    expect(renderStatus({}, {})).toContain('releases: gate not reported; sidecars none answered');
  });

  it('shouts the loud opt-ins of the gate and of each sidecar', () => {
    const text = renderStatus(
      {
        optIns: ['keys.devSeed', 'revisions.llama-b.trust: declared-only'],
        workerView: {
          mode: 'live',
          pools: [
            {
              pool: 'b-decode',
              revision: 'llama-b',
              role: 'decode',
              cluster: 'b_decode',
              endpoints: [{ address: '10.0.0.9:9090', status: 'http://10.0.0.9:9090', state: 'routable', reasons: [], named: null }],
            },
          ],
        },
      },
      { 'http://10.0.0.9:9090': { verified: true, optIns: ['onTransferFailure: recompute'] } },
    );
    expect(text).toMatch(/^OPT-INS IN USE: keys\.devSeed, revisions\.llama-b\.trust: declared-only$/m);
    expect(text.split('\n').find((l) => l.startsWith('b-decode '))).toMatch(/sidecar opt-ins: onTransferFailure: recompute$/);
  });
});
