/**
 * A gate drain never cuts a generation, on either Envoy stream lifetime: the real gate behind the harness running
 * the shipped envoy/envoy.yaml, a generation that streams for several times the gate's `drain.graceMs`, and a
 * SIGTERM-style drain in the middle of it. Envoy 1.36 keeps the ext_proc stream open for the whole generation, so
 * the gate must end it with status OK (Envoy carries on without the processor) rather than cancel it (Envoy would
 * reset the client's stream mid-response). The target is a 60 s generation with graceMs 5 s; this runs the
 * same ratio in less time.
 */
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import { stringify as toYaml } from 'yaml';
import { createDevKeyRing } from '../../src/contract/keys.js';
import { startGate, type RunningGate } from '../../src/gate/gate.js';
import { twoRevisionTableValue } from '../../src/policy/testing.js';
import {
  ENVOY_VERSIONS,
  request,
  startFakeUpstream,
  type EnvoyHarness,
  type EnvoyVersion,
  type FakeUpstream,
} from '../../testbed/harness/index.js';
import { createDevPki } from '../../testbed/tls/dev-pki.js';
import { e2eGateConfig, shippedHarnessFor } from '../support/e2e-gate.js';

const SEED = 'e2e-drain';
const GRACE_MS = 300;
const TOKENS = 12;
const TOKEN_GAP_MS = 100; // 1.2 s of generation: four times the grace period

let open: { harness: EnvoyHarness; gate: RunningGate; decode: FakeUpstream } | undefined;
afterEach(async () => {
  await open?.harness.close();
  await open?.gate.close();
  await open?.decode.close();
  open = undefined;
});

async function start(envoyVersion: EnvoyVersion) {
  const decode = await startFakeUpstream('a-decode', async (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    for (let i = 0; i < TOKENS; i++) {
      res.write(`data: {"token":${i}}\n\n`);
      await new Promise((r) => setTimeout(r, TOKEN_GAP_MS));
    }
    res.end('data: [DONE]\n\n');
  });
  const table = twoRevisionTableValue() as { pools: Array<{ name: string; endpoints: Array<{ address: string }> }> };
  for (const p of table.pools) if (p.name === 'a-decode') p.endpoints = [{ address: decode.address }];
  const dir = await mkdtemp(path.join(tmpdir(), 'kvgate-drain-'));
  await writeFile(path.join(dir, 'route-table.yaml'), toYaml(table));
  const pki = await createDevPki(path.join(dir, 'tls'));
  const gate = await startGate(e2eGateConfig(dir, pki, SEED, { drain: { announceMs: 0, graceMs: GRACE_MS } }), {
    logger: pino({ level: 'silent' }),
    keys: createDevKeyRing(SEED),
    registry: new Registry(),
    defaultMetrics: false,
  });
  const harness = await shippedHarnessFor(gate, pki, { envoyVersion });
  open = { harness, gate, decode };
  return open;
}

describe.each(ENVOY_VERSIONS)('a gate drain on Envoy %s', (envoyVersion) => {
  it('lets a generation longer than graceMs finish: every token, status 200, no reset', async () => {
    const { harness, gate, decode } = await start(envoyVersion);
    const body = JSON.stringify({ model: 'llama-3-8b', stream: true, messages: [{ role: 'user', content: 'Tell a long story.' }] });
    const pending = request(harness.listeners['public']!.url, {
      path: '/v1/chat/completions',
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-tenant-id': 'acme', 'x-session-id': 's-1' },
      body,
    });
    // Wait until the worker streams, then drain the gate in the middle of the generation.
    for (let i = 0; i < 200 && decode.requests.length === 0; i++) await new Promise((r) => setTimeout(r, 10));
    expect(decode.requests).toHaveLength(1);
    const started = Date.now();
    await gate.drain();
    const drainedMs = Date.now() - started;
    const r = await pending;
    if ('error' in r) throw new Error(`the client's stream was reset: ${r.error}; got ${r.partial.length} bytes`);
    expect(r.status).toBe(200);
    expect(r.headers['x-kvgate-group']).toMatch(/^g_/); // the response headers were stamped before the drain
    for (let i = 0; i < TOKENS; i++) expect(r.body).toContain(`{"token":${i}}`);
    expect(r.body).toContain('[DONE]');
    // The drain did not wait for the generation: it ended the settled stream at once (or found it closed).
    expect(drainedMs).toBeLessThan(TOKENS * TOKEN_GAP_MS);
    const stats = harness.stats();
    expect(stats['http.kvgate_public.ext_proc.streams_failed'] ?? 0).toBe(0);
  }, 30_000);
});

describe('a second signal during a drain', () => {
  it('stops the gate once: close() is one shutdown, and the drain it cut short does not run a second', async () => {
    const { gate } = await start('1.37');
    const draining = gate.drain();
    const first = gate.close();
    // Every later close (the CLI's third signal, the drain's own end) is the same shutdown, not another one.
    expect(gate.close()).toBe(first);
    await first;
    await draining;
    expect(gate.close()).toBe(first);
  }, 30_000);
});
