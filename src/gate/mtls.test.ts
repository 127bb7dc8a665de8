/**
 * The gate's gRPC port with mutual TLS: a caller without an allowed certificate cannot open a stream, and the
 * listener role comes from the verified certificate, never from the `x-kvgate-listener` metadata a caller sends.
 * Real TLS on loopback with a throwaway CA (testbed/tls/dev-pki.ts).
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import * as grpc from '@grpc/grpc-js';
import { service as healthService } from 'grpc-health-check';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RawRequestFacts } from '../decide/decide-request.js';
import { extProcClientConstructor } from '../envoy/protos.js';
import { createCa, createDevPki, DEV_IDENTITIES, type DevPki, issueLeaf } from '../../testbed/tls/dev-pki.js';
import type { Admission } from './admission.js';
import { createGateMetrics } from './metrics.js';
import { startGateServer, type GateServer } from './server.js';

type Msg = Record<string, any>;
let dir: string;
let pki: DevPki;
let gate: GateServer;
const seen: RawRequestFacts[] = [];
const lines: Record<string, unknown>[] = [];
const registry = new Registry();

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'kvgate-mtls-'));
  pki = await createDevPki(dir);
  const sink = new Writable({
    write(chunk: Buffer, _e, done) {
      for (const l of chunk.toString('utf8').split('\n')) if (l.trim() !== '') lines.push(JSON.parse(l) as Record<string, unknown>);
      done();
    },
  });
  const admission: Admission = {
    admit: (facts: RawRequestFacts) => {
      seen.push(facts);
      return { decision: { kind: 'refuse', requestId: facts.requestId, code: 'bad_request', message: 'recorded', trace: [] } };
    },
  } as unknown as Admission;
  gate = await startGateServer({
    admission,
    logger: pino({ level: 'info' }, sink),
    metrics: createGateMetrics(registry),
    listen: '127.0.0.1:0',
    transport: {
      kind: 'mtls',
      cert: await readFile(pki.files.gateCert),
      key: await readFile(pki.files.gateKey),
      clientCa: await readFile(pki.files.ca),
      roles: { public: [DEV_IDENTITIES.public.spiffe], internal: [`dns:${DEV_IDENTITIES.internal.dns}`] },
    },
  });
});
afterAll(async () => {
  gate?.close();
  await rm(dir, { recursive: true, force: true });
});

/** One ext_proc stream: headers (with a forged contract), then a body; resolves to the first answer or the status. */
async function attempt(
  creds: grpc.ChannelCredentials,
  metadata: Record<string, string> = {},
): Promise<{ answer?: Msg; status: grpc.StatusObject }> {
  const Client = extProcClientConstructor();
  const client = new Client(`127.0.0.1:${gate.port}`, creds, { 'grpc.ssl_target_name_override': DEV_IDENTITIES.gate.dns }) as any;
  const md = new grpc.Metadata();
  for (const [k, v] of Object.entries(metadata)) md.set(k, v);
  const call: grpc.ClientDuplexStream<Msg, Msg> = client.Process(md);
  let answer: Msg | undefined;
  const status = new Promise<grpc.StatusObject>((resolve) => call.on('status', resolve));
  call.on('error', () => undefined);
  call.on('data', (m: Msg) => {
    answer ??= m;
    call.end();
  });
  const headers = { ':method': 'POST', ':path': '/v1/completions', 'x-kvgate-contract': 'kvgate.v1.k.forged.sig', 'x-tenant-id': 'acme' };
  call.write({
    request_headers: {
      headers: { headers: Object.entries(headers).map(([key, v]) => ({ key, raw_value: Buffer.from(v) })) },
      end_of_stream: true,
    },
  });
  const s = await status;
  client.close();
  return { ...(answer === undefined ? {} : { answer }), status: s };
}

const ca = async () => readFile(pki.files.ca);
const withCert = async (cert: Buffer, key: Buffer) => grpc.credentials.createSsl(await ca(), key, cert);
const envoyPublic = async () => withCert(await readFile(pki.files.publicCert), await readFile(pki.files.publicKey));
const envoyInternal = async () => withCert(await readFile(pki.files.internalCert), await readFile(pki.files.internalKey));

describe('mTLS on the gate port: who may open a stream', () => {
  it('a caller without a client certificate, or with one from another CA, cannot connect', async () => {
    const before = seen.length;
    expect((await attempt(grpc.credentials.createSsl(await ca()))).status.code).toBe(grpc.status.UNAVAILABLE);
    const stranger = await issueLeaf(await createCa('someone else'), 'stranger', 'client', { spiffe: DEV_IDENTITIES.public.spiffe });
    expect((await attempt(await withCert(Buffer.from(stranger.cert), Buffer.from(stranger.key)))).status.code).toBe(
      grpc.status.UNAVAILABLE,
    );
    expect((await attempt(grpc.credentials.createInsecure())).status.code).toBe(grpc.status.UNAVAILABLE);
    expect(seen.length).toBe(before);
  });

  it('an in-mesh workload with a certificate from the same CA but in no allowlist gets PERMISSION_DENIED, audited', async () => {
    const before = seen.length;
    const wl = await pki.issueClient('curl', { spiffe: 'spiffe://cluster.local/ns/default/sa/curl', dns: 'curl.default.svc' });
    const r = await attempt(await withCert(wl.cert, wl.key), { 'x-kvgate-listener': 'internal' });
    expect(r.status.code).toBe(grpc.status.PERMISSION_DENIED);
    expect(r.answer).toBeUndefined();
    expect(seen.length).toBe(before);
    expect(lines.some((l) => l['audit'] === 'refusal' && String(l['reason']).includes('spiffe://cluster.local/ns/default/sa/curl'))).toBe(
      true,
    );
    expect(await registry.getSingleMetricAsString('kvgate_ext_proc_streams_refused_total')).toContain('reason="not_allowed"} 1');
  });
});

describe('mTLS on the gate port: the role comes from the certificate', () => {
  it("Envoy's public certificate claiming the internal role gets public behaviour: its contract header is not read", async () => {
    const r = await attempt(await envoyPublic(), { 'x-kvgate-listener': 'internal' });
    expect(r.status.code).toBe(grpc.status.OK);
    const facts = seen.at(-1)!;
    expect(facts.listener).toBe('public');
    expect(facts.hop).toBeUndefined();
  });

  it("Envoy's internal certificate claiming the public role gets internal behaviour: a hop, decided on its contract", async () => {
    const r = await attempt(await envoyInternal(), { 'x-kvgate-listener': 'public' });
    expect(r.status.code).toBe(grpc.status.OK);
    const facts = seen.at(-1)!;
    expect(facts.listener).toBe('internal');
    expect(facts.hop?.contract).toBe('kvgate.v1.k.forged.sig');
  });

  it('reports mTLS: kvgate_gate_insecure_transport is 0', async () => {
    expect(await registry.getSingleMetricAsString('kvgate_gate_insecure_transport')).toContain('kvgate_gate_insecure_transport 0');
  });
});

describe('insecure: true', () => {
  it('warns at start, reports kvgate_gate_insecure_transport 1, and takes the role from caller metadata', async () => {
    const reg = new Registry();
    const own: Record<string, unknown>[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _e, done) {
        for (const l of chunk.toString('utf8').split('\n')) if (l.trim() !== '') own.push(JSON.parse(l) as Record<string, unknown>);
        done();
      },
    });
    const facts: RawRequestFacts[] = [];
    const plain = await startGateServer({
      admission: {
        admit: (f: RawRequestFacts) => (
          facts.push(f), { decision: { kind: 'refuse', requestId: f.requestId, code: 'bad_request', message: 'x', trace: [] } }
        ),
      } as unknown as Admission,
      logger: pino({ level: 'info' }, sink),
      metrics: createGateMetrics(reg),
      listen: '127.0.0.1:0',
      transport: { kind: 'insecure' },
    });
    try {
      expect(own.some((l) => l['level'] === 40 && String(l['msg']).startsWith('INSECURE gate port'))).toBe(true);
      expect(await reg.getSingleMetricAsString('kvgate_gate_insecure_transport')).toContain('kvgate_gate_insecure_transport 1');
      const Client = extProcClientConstructor();
      const client = new Client(`127.0.0.1:${plain.port}`, grpc.credentials.createInsecure()) as any;
      const md = new grpc.Metadata();
      md.set('x-kvgate-listener', 'internal');
      const call: grpc.ClientDuplexStream<Msg, Msg> = client.Process(md);
      call.on('error', () => undefined);
      const done = new Promise((resolve) => call.on('status', resolve));
      call.on('data', () => call.end());
      call.write({
        request_headers: { headers: { headers: [{ key: ':path', raw_value: Buffer.from('/v1/completions') }] }, end_of_stream: true },
      });
      await done;
      client.close();
      // What an insecure port trusts: whoever connects says which listener it is.
      expect(facts[0]?.listener).toBe('internal');
    } finally {
      plain.close();
    }
  });
});

describe('the plaintext health port (kubelet gRPC probes carry no client certificate)', () => {
  it('answers grpc.health.v1 without TLS, follows readiness and drain, and serves no ext_proc', async () => {
    const h = await startGateServer({
      admission: {} as Admission,
      logger: pino({ level: 'silent' }),
      metrics: createGateMetrics(new Registry()),
      listen: '127.0.0.1:0',
      healthListen: '127.0.0.1:0',
      ready: () => false, // pods not discovered yet
      drainAnnounceMs: 200,
      drainGraceMs: 100,
      transport: {
        kind: 'mtls',
        cert: await readFile(pki.files.gateCert),
        key: await readFile(pki.files.gateKey),
        clientCa: await readFile(pki.files.ca),
        roles: { public: [DEV_IDENTITIES.public.spiffe], internal: [`dns:${DEV_IDENTITIES.internal.dns}`] },
      },
    });
    const Health = grpc.makeGenericClientConstructor(healthService, 'Health');
    const client = new Health(`127.0.0.1:${h.healthPort}`, grpc.credentials.createInsecure()) as unknown as {
      Check(req: { service: string }, cb: (e: grpc.ServiceError | null, r: { status: string | number }) => void): void;
      close(): void;
    };
    const check = (service: string) =>
      new Promise<string | number>((res, rej) => client.Check({ service }, (e, r) => (e ? rej(e) : res(r.status))));
    try {
      expect(h.healthPort).toBeGreaterThan(0);
      expect(h.healthPort).not.toBe(h.port);
      // Before the pods are discovered only liveness is SERVING.
      expect(await check('liveness')).toBe('SERVING');
      for (const svc of ['readiness', 'inference-extension', 'envoy.service.ext_proc.v3.ExternalProcessor', ''])
        expect(await check(svc)).toBe('NOT_SERVING');
      h.setReady(true);
      // `inference-extension`: the name GIE's own EPP chart probes with one replica and the only name its
      // lightweight EPP registers on the health port (gateway-api-inference-extension @1748e829
      // config/charts/epplib/templates/_deployment.yaml; @84436a96 pkg/lwepp/server/runserver.go).
      for (const svc of ['liveness', 'readiness', 'inference-extension', 'envoy.service.ext_proc.v3.ExternalProcessor', ''])
        expect(await check(svc)).toBe('SERVING');
      h.setReady(false);
      expect(await check('readiness')).toBe('NOT_SERVING');
      expect(await check('liveness')).toBe('SERVING');
      // GIE's name goes SERVING once the pool synced and never back (HealthServerRunnable @84436a96), since GIE's
      // manifests probe liveness with it too (conformance/resources/base.yaml).
      expect(await check('inference-extension')).toBe('SERVING');
      h.setReady(true);
      // The health port serves health only: an ext_proc stream there is UNIMPLEMENTED.
      const ExtProc = extProcClientConstructor();
      const ext = new ExtProc(`127.0.0.1:${h.healthPort}`, grpc.credentials.createInsecure()) as any;
      const call: grpc.ClientDuplexStream<Msg, Msg> = ext.Process(new grpc.Metadata());
      const status = await new Promise<grpc.StatusObject>((resolve) => {
        call.on('status', resolve);
        call.on('error', () => undefined);
        call.write({ requestHeaders: { headers: { headers: [] } } });
      });
      expect(status.code).toBe(grpc.status.UNIMPLEMENTED);
      ext.close();
      // Drain: readiness goes NOT_SERVING on the health port too, before the server stops; GIE's name stays
      // SERVING, or a liveness probe on it would restart the pod in the middle of the drain.
      const drained = h.drain();
      expect(await check('readiness')).toBe('NOT_SERVING');
      expect(await check('envoy.service.ext_proc.v3.ExternalProcessor')).toBe('NOT_SERVING');
      expect(await check('inference-extension')).toBe('SERVING');
      await drained;
    } finally {
      client.close();
      h.close();
    }
  });
});
