/**
 * kvgate as an InferencePool's endpoint picker, through the Envoy-faithful harness playing a GIE data plane: the
 * gateway's subset hint (`envoy.lb.subset_hint`), the ordered endpoint list in `x-gateway-destination-endpoint` and
 * `envoy.lb` metadata, the override_host policy taking the first listed member, and the served endpoint reported
 * back (`x-gateway-destination-endpoint-served`). Protocol: kubernetes-sigs/gateway-api-inference-extension
 * @84436a96, docs/proposals/004-endpoint-picker-protocol/README.md.
 */
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { service as healthService } from 'grpc-health-check';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import { stringify as toYaml } from 'yaml';
import { createDevKeyRing } from '../../src/contract/keys.js';
import { parseGateConfig } from '../../src/gate/config.js';
import { startGate, type RunningGate } from '../../src/gate/gate.js';
import { clone, twoRevisionTableValue } from '../../src/policy/testing.js';
import {
  chunkedRequest,
  ENVOY_VERSIONS,
  type EnvoyVersion,
  mustLoadEnvoyConfig,
  ok,
  request as rawRequest,
  startEnvoyHarness,
  startFakeUpstream,
  type EnvoyHarness,
  type FakeUpstream,
} from '../../testbed/harness/index.js';
import { gieGatewayYaml } from '../support/gie-gateway.js';

const SEED = 'e2e-gie';
const silent = pino({ level: 'silent' });

/**
 * What Istio's InferencePool support configures (istio/istio pilot/pkg/xds/filters/filters.go
 * `BuildInferencePoolExtProcFilter`): FULL_DUPLEX_STREAMED bodies both ways with trailers SEND (Envoy requires it),
 * response headers SEND, a 1000 s message timeout, envoy.lb forwarded and received.
 */
const ISTIO_INFERENCE_POOL_MODE = {
  request_header_mode: 'SEND',
  request_body_mode: 'FULL_DUPLEX_STREAMED',
  request_trailer_mode: 'SEND',
  response_header_mode: 'SEND',
  response_body_mode: 'FULL_DUPLEX_STREAMED',
  response_trailer_mode: 'SEND',
};

let cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanup.reverse()) await c();
  cleanup = [];
});

interface Rig {
  gate: RunningGate;
  harness: EnvoyHarness;
  pods: FakeUpstream[];
}

/** Three decode pods of llama-a (static view: the gate believes the table); the gateway's cluster has `members`. */
async function startRig(
  members?: (pods: FakeUpstream[]) => string[],
  opts: { mode?: Record<string, string>; envoyVersion?: EnvoyVersion } = {},
): Promise<Rig> {
  const pods = await Promise.all(['p1', 'p2', 'p3'].map((n) => startFakeUpstream(n)));
  for (const p of pods) cleanup.push(() => p.close());
  const v = clone(twoRevisionTableValue()) as { pools: unknown[]; models: Record<string, { rollout: Record<string, unknown> }> };
  v.pools = [
    { name: 'a-decode', cluster: 'a_decode', role: 'both', revision: 'llama-a', endpoints: pods.map((p) => ({ address: p.address })) },
    { name: 'b-decode', cluster: 'b_decode', role: 'both', revision: 'llama-b', endpoints: [{ address: '10.0.4.1:9090' }] },
  ];
  v.models['llama-3-8b']!.rollout = { stable: 'llama-a' };
  const dir = await mkdtemp(path.join(tmpdir(), 'kvgate-gie-'));
  await writeFile(path.join(dir, 'route-table.yaml'), toYaml(v));
  const cfg = parseGateConfig(
    toYaml({
      listen: '127.0.0.1:0',
      insecure: true,
      admin: '',
      policy: 'route-table.yaml',
      keys: { devSeed: SEED },
      workerView: { mode: 'static' },
      envoy: { gieHeaders: true, gieFallbackEndpoints: 2 },
      drain: { announceMs: 0, graceMs: 1000 },
    }),
    path.join(dir, 'gate.yaml'),
  );
  if (!cfg.ok) throw new Error(JSON.stringify(cfg.error));
  const gate = await startGate(cfg.value, {
    logger: silent,
    keys: createDevKeyRing(SEED),
    registry: new Registry(),
    defaultMetrics: false,
  });
  cleanup.push(() => gate.close());
  const harness = await startEnvoyHarness(
    mustLoadEnvoyConfig(gieGatewayYaml(gate.grpcPort, members ? members(pods) : pods.map((p) => p.address), opts.mode), {
      listenerPorts: { http: 0 },
    }),
    {
      ...(opts.envoyVersion === undefined ? {} : { envoyVersion: opts.envoyVersion }),
      reportServedEndpoint: true,
      requestMetadata: (h) => {
        const subset = h['x-test-subset'];
        return typeof subset === 'string'
          ? { 'envoy.lb.subset_hint': { 'x-gateway-destination-endpoint-subset': subset === '' ? [] : subset.split(',') } }
          : undefined;
      },
    },
  );
  cleanup.push(() => harness.close());
  return { gate, harness, pods };
}

async function send(rig: Rig, session: string, subset?: string) {
  return ok(
    await rawRequest(rig.harness.listeners['http']!.url, {
      path: '/v1/completions',
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'x-tenant-id': 'acme',
        'x-session-id': session,
        ...(subset === undefined ? {} : { 'x-test-subset': subset }),
      },
      body: JSON.stringify({ model: 'llama-3-8b', prompt: `hello ${session}` }),
    }),
  );
}

/** Which pod served the last request (the access log's upstream host), and the endpoint list it carried. */
function lastServed(rig: Rig): { pod: FakeUpstream; list: string[] } {
  const host = rig.harness.accessLog().at(-1)!.upstreamHost;
  const pod = rig.pods.find((p) => p.address === host)!;
  return { pod, list: String(pod.requests.at(-1)!.headers['x-gateway-destination-endpoint']).split(',') };
}

describe('kvgate as an InferencePool endpoint picker (GIE protocol, through the harness)', () => {
  it('answers an ordered list of endpoints of the bound group; the header and envoy.lb metadata agree', async () => {
    const rig = await startRig();
    const r = await send(rig, 's1');
    expect(r.status).toBe(200);
    const total = rig.pods.reduce((n, p) => n + p.requests.length, 0);
    expect(total).toBe(1);
    const { pod, list } = lastServed(rig);
    expect(list).toHaveLength(3); // the pick + gieFallbackEndpoints: 2
    expect(new Set(list).size).toBe(3);
    expect(pod.address).toBe(list[0]);
    expect([...list].sort()).toEqual(rig.pods.map((p) => p.address).sort());
    const logged = rig.harness.accessLog().at(-1)!;
    const lb = logged.dynamicMetadata['envoy.lb']!;
    expect(lb['x-gateway-destination-endpoint']).toBe(String(pod.requests.at(-1)!.headers['x-gateway-destination-endpoint']));
    expect(lb['x-gateway-destination-endpoint-served']).toBe(pod.address);
  });

  it('honours the subset hint: only listed endpoints are picked, and none eligible is a 503', async () => {
    const rig = await startRig();
    const only = rig.pods[2]!.address;
    for (let i = 0; i < 5; i++) {
      const r = await send(rig, `sub-${i}`, only);
      expect(r.status).toBe(200);
      expect(lastServed(rig).pod.address).toBe(only);
      expect(lastServed(rig).list).toEqual([only]);
    }
    const before = rig.pods.reduce((n, p) => n + p.requests.length, 0);
    const none = await send(rig, 'sub-none', '10.9.9.9:8000');
    expect(none.status).toBe(503);
    expect(none.headers['x-kvgate-reject-reason']).toBe('no_compatible_capacity');
    const empty = await send(rig, 'sub-empty', '');
    expect(empty.status).toBe(503);
    expect(rig.pods.reduce((n, p) => n + p.requests.length, 0)).toBe(before);
  });

  it('the data plane takes the first listed endpoint it has; the served endpoint comes back and nothing leaks', async () => {
    // The gateway's pool lacks p1 (e.g. it already dropped the pod): when kvgate picks p1, the next listed one serves.
    const rig = await startRig((pods) => [pods[1]!.address, pods[2]!.address]);
    const p1 = rig.pods[0]!.address;
    let fellBack = 0;
    for (let i = 0; i < 40 && fellBack < 2; i++) {
      const r = await send(rig, `fb-${i}`);
      expect(r.status).toBe(200);
      const { pod, list } = lastServed(rig);
      expect(pod.address).toBe(list.find((a) => a !== p1)); // the first listed member of the gateway's pool
      if (list[0] === p1) fellBack++;
    }
    expect(fellBack).toBeGreaterThan(0);
    expect(rig.pods[0]!.requests).toHaveLength(0);
    // Accounting moved to the served endpoint and is released there when the stream ends (a moment after the reply).
    const inFlight = () => (rig.gate.status() as { inFlight: Record<string, number> }).inFlight;
    for (let i = 0; i < 100 && Object.keys(inFlight()).length > 0; i++) await new Promise((r) => setTimeout(r, 20));
    expect(inFlight()).toEqual({});
  });

  it('serves the gRPC health services GIE probes: liveness, readiness, inference-extension and the ext_proc service', async () => {
    const rig = await startRig();
    const Client = grpc.makeGenericClientConstructor(healthService, 'Health');
    const client = new Client(
      `127.0.0.1:${(rig.gate as unknown as { grpcPort: number }).grpcPort}`,
      grpc.credentials.createInsecure(),
    ) as unknown as {
      Check(req: { service: string }, cb: (e: Error | null, r: { status: string | number }) => void): void;
      close(): void;
    };
    const check = (service: string) =>
      new Promise<string | number>((res, rej) => client.Check({ service }, (e, r) => (e ? rej(e) : res(r.status))));
    try {
      for (const svc of ['liveness', 'readiness', 'inference-extension', 'envoy.service.ext_proc.v3.ExternalProcessor', ''])
        expect([1, 'SERVING']).toContain(await check(svc));
    } finally {
      client.close();
    }
  });
});

describe.each(ENVOY_VERSIONS)("behind Istio's InferencePool filter (FULL_DUPLEX_STREAMED both ways), Envoy %s", (envoyVersion) => {
  it('a body in chunks is bound and routed to a listed endpoint; the response reaches the client as the gate streams it back', async () => {
    const rig = await startRig(undefined, { mode: ISTIO_INFERENCE_POOL_MODE, envoyVersion });
    const body = Buffer.from(JSON.stringify({ model: 'llama-3-8b', prompt: 'Grüße aus 東京', max_tokens: 12 }));
    const cut = body.indexOf(Buffer.from('東')) + 1; // inside the 3-byte character
    const num = body.indexOf(Buffer.from('12')) + 1; // inside the JSON number
    const parts = [body.subarray(0, cut), body.subarray(cut, num), body.subarray(num)];
    const headers = { 'content-type': 'application/json', 'x-tenant-id': 'acme', 'x-session-id': `duplex-${envoyVersion}` };
    const r = ok(await chunkedRequest(rig.harness.listeners['http']!.url, parts, { path: '/v1/completions', headers }));
    expect(r.status).toBe(200);
    const { pod, list } = lastServed(rig);
    expect(pod.address).toBe(list[0]);
    // What the pod received is the client's body, whole, with only the tenant's cache_salt added.
    const received = JSON.parse(pod.requests.at(-1)!.body.toString()) as Record<string, unknown>;
    expect(received).toMatchObject({ model: 'llama-3-8b', prompt: 'Grüße aus 東京', max_tokens: 12 });
    expect(typeof received['cache_salt']).toBe('string');
    // The fake pod's answer came back through the gate chunk by chunk (Envoy drained its own copy).
    expect(JSON.parse(r.body)).toMatchObject({ upstream: pod.name, method: 'POST', path: '/v1/completions' });
    const stats = rig.harness.stats();
    expect(stats['http.ingress.ext_proc.spurious_msgs_received'] ?? 0).toBe(0);
    // headers + 3 chunks + the empty end_of_stream chunk, then response headers and at least one response chunk.
    expect(stats['http.ingress.ext_proc.stream_msgs_sent']).toBeGreaterThanOrEqual(7);
  });

  it('an unknown model gets the gate refusal, not a 500', async () => {
    const rig = await startRig(undefined, { mode: ISTIO_INFERENCE_POOL_MODE, envoyVersion });
    const body = JSON.stringify({ model: 'no-such-model', prompt: 'hi' });
    const headers = { 'content-type': 'application/json', 'x-tenant-id': 'acme' };
    const r = ok(
      await chunkedRequest(rig.harness.listeners['http']!.url, [body.slice(0, 9), body.slice(9)], { path: '/v1/completions', headers }),
    );
    expect(r.status).toBe(404);
    expect(JSON.parse(r.body).error.code).toBe('unknown_model');
    expect(rig.pods.every((p) => p.requests.length === 0)).toBe(true);
  });
});
