/**
 * kvgate's shipped envoy/envoy.yaml through the harness with a scripted gate: the public listener routes to the
 * ORIGINAL_DST decode pool the gate names in its BUFFERED body reply, and the gate sees response_headers.
 */
import { readFileSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { afterEach, describe, expect, it } from 'vitest';
import { startEnvoyHarness, type EnvoyHarness } from './data-plane.js';
import { mustLoadEnvoyConfig } from './envoy-config.js';
import { reply, setHeader, startFakeExtProc, type FakeExtProc } from './fake-ext-proc.js';
import { startFakeUpstream, type FakeUpstream } from './fake-upstream.js';
import { ok, request } from './testing.js';
import { createDevPki, shippedEnvoyTls } from '../tls/dev-pki.js';

const shipped = new URL('../../envoy/envoy.yaml', import.meta.url).pathname;
const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c();
});

describe('shipped envoy/envoy.yaml', () => {
  it('routes the public listener by the gate body reply to the ORIGINAL_DST decode endpoint', async () => {
    const decode: FakeUpstream = await startFakeUpstream('decode-a-0');
    closers.push(() => decode.close());
    // The shipped file speaks mTLS to the gate: the scripted gate serves the dev PKI's gate certificate.
    const dir = await mkdtemp(path.join(tmpdir(), 'kvgate-shipped-'));
    closers.push(() => rm(dir, { recursive: true, force: true }));
    const pki = await createDevPki(dir);
    const creds = grpc.ServerCredentials.createSsl(
      await readFile(pki.files.ca),
      [{ cert_chain: await readFile(pki.files.gateCert), private_key: await readFile(pki.files.gateKey) }],
      true,
    );
    const gate: FakeExtProc = await startFakeExtProc(async (s) => {
      for (let m = await s.recv(); m !== null; m = await s.recv()) {
        if (m.request === 'request_body') {
          s.send(
            reply(m, {
              header_mutation: {
                set_headers: [setHeader('x-kvgate-decode-cluster', 'a_decode'), setHeader('x-kvgate-decode-endpoint', decode.address)],
              },
              clear_route_cache: true,
            }),
          );
        } else if (m.request === 'response_headers') {
          s.send(reply(m, { header_mutation: { set_headers: [setHeader('x-kvgate-group', 'g-a')] } }));
        } else {
          s.send(reply(m));
        }
      }
    }, creds);
    closers.push(() => gate.close());
    const config = mustLoadEnvoyConfig(readFileSync(shipped, 'utf8'), {
      listenerPorts: { public: 0, internal: 0 },
      ...shippedEnvoyTls(pki, gate.address),
    });
    const envoy: EnvoyHarness = await startEnvoyHarness(config);
    closers.push(() => envoy.close());
    const r = ok(await request(envoy.listeners['public']?.url ?? '', { path: '/v1/chat/completions', body: '{"model":"m"}' }));
    expect(r.status).toBe(200);
    expect(r.headers['x-kvgate-group']).toBe('g-a');
    expect(JSON.parse(r.body)).toMatchObject({ upstream: 'decode-a-0' });
    expect(gate.requests().map((m) => m.request)).toEqual(['request_headers', 'request_body', 'response_headers']);
    expect(gate.streams[0]?.metadata.get('x-kvgate-listener')).toEqual(['public']);
    expect(envoy.stats()['http.kvgate_public.ext_proc.streams_closed']).toBe(1);
  });
});
