/**
 * Clients that trickle their request bodies hold no gate stream: the shipped envoy/envoy.yaml puts Envoy's buffer
 * filter before ext_proc on both listeners, so the gate's stream opens only when a request is whole, and the HCM's
 * request_timeout ends a body that never finishes with a 408. Without the buffer filter each such client held one
 * ext_proc stream from its headers on, for up to stream_idle_timeout (300 s): about 1,024 of them fill the gate
 * cluster's circuit breaker, and Envoy then fails every request closed (500). Run through the real gate and the
 * harness loading the shipped file.
 */
import http from 'node:http';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import { stringify as toYaml } from 'yaml';
import { createDevKeyRing } from '../../src/contract/keys.js';
import { startGate } from '../../src/gate/gate.js';
import { twoRevisionTableValue } from '../../src/policy/testing.js';
import { request, startFakeUpstream } from '../../testbed/harness/index.js';
import { createDevPki } from '../../testbed/tls/dev-pki.js';
import { e2eGateConfig, shippedHarnessFor } from '../support/e2e-gate.js';

const SEED = 'e2e-slow-clients';
const SLOW = 20;

let cleanup: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanup.reverse()) await c();
  cleanup = [];
});

describe('slow clients through the shipped envoy.yaml', () => {
  it('a body trickled without end holds no gate stream, and the requests beside it are served', async () => {
    const table = twoRevisionTableValue() as { pools: Array<{ name: string; endpoints: Array<{ address: string }> }> };
    for (const name of ['a-decode', 'b-decode']) {
      const decode = await startFakeUpstream(name, (_req, res) => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('{"choices":[{"text":"ok"}]}');
      });
      cleanup.push(() => decode.close());
      table.pools.find((p) => p.name === name)!.endpoints = [{ address: decode.address }];
    }
    const dir = await mkdtemp(path.join(tmpdir(), 'kvgate-slow-'));
    await writeFile(path.join(dir, 'route-table.yaml'), toYaml(table));
    const pki = await createDevPki(path.join(dir, 'tls'));
    const gate = await startGate(e2eGateConfig(dir, pki, SEED), {
      logger: pino({ level: 'silent' }),
      keys: createDevKeyRing(SEED),
      registry: new Registry(),
      defaultMetrics: false,
    });
    cleanup.push(() => gate.close());
    const harness = await shippedHarnessFor(gate, pki);
    cleanup.push(() => harness.close());
    const url = harness.listeners['public']!.url;
    const headers = { 'content-type': 'application/json', 'x-tenant-id': 'acme', 'x-session-id': 'slow' };

    // SLOW clients send their headers and half a body, then stop.
    const slow = Array.from({ length: SLOW }, () => {
      const req = http.request(`${url}/v1/completions`, { method: 'POST', headers });
      req.on('error', () => undefined);
      req.write('{"model":"llama-3-8b","prompt":"never fin');
      return req;
    });
    cleanup.push(async () => {
      for (const r of slow) r.destroy();
    });
    await new Promise((r) => setTimeout(r, 300));
    expect(harness.stats()['http.kvgate_public.ext_proc.streams_started'] ?? 0).toBe(0);
    expect((gate.status() as { streams: number }).streams).toBe(0);

    // A whole request beside them: one gate stream, decided, served.
    const ok = await request(url, {
      path: '/v1/completions',
      method: 'POST',
      headers,
      body: JSON.stringify({ model: 'llama-3-8b', prompt: 'hello' }),
    });
    if ('error' in ok) throw new Error(ok.error);
    expect(ok.status).toBe(200);
    expect(ok.headers['x-kvgate-group']).toMatch(/^g_/);
    expect(harness.stats()['http.kvgate_public.ext_proc.streams_started']).toBe(1);
  });
});
