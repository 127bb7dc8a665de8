/**
 * The harness's gate cluster with `transport_socket: envoy.transport_sockets.tls`, as Envoy uses it: the client
 * certificate from `tls_certificates`, the server chain checked against `trusted_ca`, the server's SAN against
 * `match_typed_subject_alt_names`, SNI from `sni`; files found through the loader's file roots. Against the real
 * gate server with mTLS (src/gate/server.ts) and a throwaway CA.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RawRequestFacts } from '../../src/decide/decide-request.js';
import type { Admission } from '../../src/gate/admission.js';
import { createGateMetrics } from '../../src/gate/metrics.js';
import { startGateServer, type GateServer } from '../../src/gate/server.js';
import { createDevPki, DEV_IDENTITIES, TLS_DIR, type DevPki } from '../tls/dev-pki.js';
import { loadEnvoyConfig } from './envoy-config.js';
import { createExtProcClient } from './ext-proc-client.js';
import { scenarioYaml } from './testing.js';
import type { ClusterConfig } from './envoy-config-types.js';

let dir: string;
let pki: DevPki;
let gate: GateServer;
const seen: RawRequestFacts[] = [];

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'kvgate-harness-tls-'));
  pki = await createDevPki(dir);
  gate = await startGateServer({
    admission: {
      admit: (f: RawRequestFacts) => (
        seen.push(f), { decision: { kind: 'refuse', requestId: f.requestId, code: 'bad_request', message: 'x', trace: [] } }
      ),
    } as unknown as Admission,
    logger: pino({ level: 'silent' }),
    metrics: createGateMetrics(new Registry()),
    listen: '127.0.0.1:0',
    transport: {
      kind: 'mtls',
      cert: await readFile(pki.files.gateCert),
      key: await readFile(pki.files.gateKey),
      clientCa: await readFile(pki.files.ca),
      roles: { public: [DEV_IDENTITIES.public.spiffe], internal: [DEV_IDENTITIES.internal.spiffe] },
    },
  });
});
afterAll(async () => {
  gate?.close();
  await rm(dir, { recursive: true, force: true });
});

/** The scenario bootstrap with a TLS transport socket on its ext_proc cluster, as `kvgate envoy render` writes it. */
function tlsYaml(role: 'public' | 'internal', serverName: string): string {
  const transport_socket = {
    name: 'envoy.transport_sockets.tls',
    typed_config: {
      '@type': 'type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext',
      sni: serverName,
      common_tls_context: {
        alpn_protocols: ['h2'],
        tls_certificates: [
          { certificate_chain: { filename: `${TLS_DIR}/envoy-${role}.crt` }, private_key: { filename: `${TLS_DIR}/envoy-${role}.key` } },
        ],
        validation_context: {
          trusted_ca: { filename: `${TLS_DIR}/ca.crt` },
          match_typed_subject_alt_names: [{ san_type: 'DNS', matcher: { exact: serverName } }],
        },
      },
    },
  };
  return scenarioYaml({ clusterFields: { ext_proc: { transport_socket } } });
}

const load = (text: string) => {
  const r = loadEnvoyConfig(text, { fileRoots: { [TLS_DIR]: dir }, clusterEndpoints: { ext_proc: [`127.0.0.1:${gate.port}`] } });
  if (!r.ok) throw new Error(r.error.message);
  return r.value.clusters['ext_proc']!;
};

/**
 * Open one stream through the cluster; resolves to 0 once the gate answers its first message (the stream was admitted;
 * the filter then closes it, as Envoy's does), else to the gRPC status code it ended with, or -1 if nothing came.
 */
function oneStream(cluster: ClusterConfig): Promise<number> {
  const client = createExtProcClient(cluster, cluster.name);
  return new Promise<number>((resolve) => {
    const s = client.start({
      onMessage: () => {
        resolve(0);
        s.close();
      },
      onGrpcError: (code) => resolve(code),
      onGrpcClose: () => resolve(0),
    });
    s.send({
      request_headers: { headers: { headers: [{ key: ':path', raw_value: Buffer.from('/v1/completions') }] }, end_of_stream: true },
    });
    setTimeout(() => resolve(-1), 5_000).unref();
  }).finally(() => client.close());
}

describe('the tls transport socket on the ext_proc cluster', () => {
  it('reads the UpstreamTlsContext and maps its files through the file roots', () => {
    expect(load(tlsYaml('public', DEV_IDENTITIES.gate.dns)).tls).toEqual({
      sni: DEV_IDENTITIES.gate.dns,
      certFile: path.join(dir, 'envoy-public.crt'),
      keyFile: path.join(dir, 'envoy-public.key'),
      caFile: path.join(dir, 'ca.crt'),
      sanMatchers: [{ type: 'DNS', exact: DEV_IDENTITIES.gate.dns }],
    });
  });

  it("connects with the listener's client certificate, and the gate sees the role that certificate carries", async () => {
    for (const role of ['public', 'internal'] as const) {
      const before = seen.length;
      // The gate answered: the stream was admitted over the listener's certificate.
      expect(await oneStream(load(tlsYaml(role, DEV_IDENTITIES.gate.dns)))).toBe(0);
      expect(seen.length).toBe(before + 1);
      expect(seen.at(-1)!.listener).toBe(role);
    }
  });

  it('refuses a gate whose certificate does not carry the SAN the matcher names, as Envoy does', async () => {
    const before = seen.length;
    expect(await oneStream(load(tlsYaml('public', 'someone-else.kvgate.svc')))).toBe(14); // UNAVAILABLE: no connection
    expect(seen.length).toBe(before);
  });
});
