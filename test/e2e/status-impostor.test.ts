/**
 * The gate's status polls are the one hop without mesh mTLS (docs/security.md section 6): whatever answers for a pod
 * IP answers the poll. Two impostors without keys are listed in the stable decode pool next to the real sidecar: one
 * answers every poll with a perfect copy of the real sidecar's status JSON (read from it at that moment), the other
 * with a replay of a real answer the sidecar signed for an earlier poll. The gate never routes to either and says why,
 * while every real sidecar stays verified and serves.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newStatusNonce } from '../../src/contract/status-signature.js';
import { H } from '../../src/headers.js';
import { PROMPTS } from '../../testbed/demo/scenarios.js';
import { startTopology, type Topology } from '../../testbed/demo/topology.js';
import { client, complete, counter, editRouteTable, eventually, silent } from './failure-matrix-support.js';

interface Impostor {
  readonly address: string;
  /** Requests other than status polls that reached it: completions the gate routed here. */
  served: number;
  polls: number;
  close(): Promise<void>;
}

/** An HTTP server without keys that answers status polls with `answer()` and counts everything else it receives. */
async function startImpostor(answer: () => Promise<{ body: Buffer; headers: Record<string, string> }>): Promise<Impostor> {
  const server = http.createServer((req, res) => {
    if (req.url === '/kvgate/v1/status') {
      me.polls++;
      // The copy reads the real sidecar per poll: a poll in flight while afterAll closes the topology fails that read,
      // which must end this answer, not surface as an unhandled rejection in whatever test file runs next.
      void answer().then(
        ({ body, headers }) => res.writeHead(200, { ...headers, 'content-type': 'application/json' }).end(body),
        () => res.destroy(),
      );
      return;
    }
    me.served++;
    req.resume();
    res.writeHead(200, { 'content-type': 'application/json' }).end('{"choices":[{"text":"forged"}]}');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const me: Impostor = {
    address: `127.0.0.1:${(server.address() as AddressInfo).port}`,
    served: 0,
    polls: 0,
    close: () => {
      server.closeAllConnections();
      return new Promise((r) => server.close(() => r()));
    },
  };
  return me;
}

let t: Topology;
let copy: Impostor;
let replay: Impostor;

beforeAll(async () => {
  t = await startTopology({ logger: silent, candidateWeight: 0, sidecarProbeIntervalMs: 60_000, workerViewIntervalMs: 200 });
  const real = `http://${t.worker('llama-a', 'decode').address}/kvgate/v1/status`;
  // A perfect copy: the real sidecar's JSON, byte for byte, as anyone admitted to its port can read it (no nonce).
  copy = await startImpostor(async () => ({ body: Buffer.from(await (await fetch(real)).arrayBuffer()), headers: {} }));
  // A replay: one real answer the sidecar signed for a poll's nonce, signature included, sent again on every poll.
  const recorded = await fetch(real, { headers: { [H.statusNonce]: newStatusNonce() } });
  const signature = recorded.headers.get(H.statusSignature);
  expect(signature).toMatch(/^dev-insecure\./);
  const recordedBody = Buffer.from(await recorded.arrayBuffer());
  replay = await startImpostor(async () => ({ body: recordedBody, headers: { [H.statusSignature]: signature! } }));
  await editRouteTable(t, (table) => {
    const pool = table.pools.find((p: { name: string }) => p.name === 'a-decode');
    for (const i of [copy, replay]) pool.endpoints.push({ address: i.address, status: `http://${i.address}` });
  });
  expect(
    await eventually(async () => {
      await t.gate.policy.reload('impostor test');
      return t.gate.policy.current().pools.get('a-decode')!.endpoints.length === 3;
    }),
  ).toBe(true);
  await t.gate.refreshWorkerView();
}, 60_000);
afterAll(async () => {
  await t?.close();
  await copy?.close();
  await replay?.close();
});

interface EndpointView {
  readonly address: string;
  readonly state: string;
  readonly reasons: readonly string[];
}

async function endpointsOf(pool: string): Promise<EndpointView[]> {
  const s = (await (await fetch(`http://127.0.0.1:${t.gate.adminPort}/status`)).json()) as {
    workerView: { pools: Array<{ pool: string; endpoints: EndpointView[] }> };
  };
  return s.workerView.pools.find((p) => p.pool === pool)!.endpoints;
}

describe("an impostor answering the gate's status poll for an endpoint", () => {
  it('is polled, says exactly what the real sidecar says, and is unverified with the reason, while the real sidecars stay routable', async () => {
    expect(copy.polls).toBeGreaterThan(0);
    expect(replay.polls).toBeGreaterThan(0);
    const said = (await (await fetch(`http://${copy.address}/kvgate/v1/status`)).json()) as Record<string, unknown>;
    expect(said).toMatchObject({
      verified: true,
      draining: false,
      fingerprint: t.gate.policy.current().pools.get('a-decode')!.fingerprint,
    });
    const byAddress = new Map((await endpointsOf('a-decode')).map((e) => [e.address, e]));
    expect(byAddress.get(t.worker('llama-a', 'decode').address)!.state).toBe('routable');
    expect(byAddress.get(copy.address)!.state).toBe('unverified');
    expect(byAddress.get(copy.address)!.reasons.join('; ')).toMatch(/the answer is not signed \(no x-kvgate-status-signature\)/);
    expect(byAddress.get(replay.address)!.state).toBe('unverified');
    expect(byAddress.get(replay.address)!.reasons.join('; ')).toMatch(
      /signature does not verify under key id dev-insecure for this poll's nonce and body: replayed/,
    );
    for (const pool of ['a-prefill', 'b-decode', 'b-prefill']) {
      expect((await endpointsOf(pool)).map((e) => e.state)).toEqual(['routable']);
    }
    const metrics = `http://127.0.0.1:${t.gate.adminPort}`;
    expect(await counter(metrics, 'kvgate_worker_status_polls_total', { result: 'unsigned' })).toBeGreaterThan(0);
    expect(await counter(metrics, 'kvgate_worker_status_polls_total', { result: 'bad_signature' })).toBeGreaterThan(0);
  });

  it('never receives a request: every one is served by the real sidecars', async () => {
    const real = t.worker('llama-a', 'decode');
    for (let i = 0; i < 12; i++) {
      const r = await complete(t, PROMPTS[i % 2]!, 4, client('acme', `impostor-${i}`));
      expect(r.status, JSON.stringify(r.json)).toBe(200);
      expect(r.headers.get(H.revision)).toBe('llama-a');
    }
    const served = t.harness.accessLog().filter((e) => e.listener === 'public');
    expect(served).toHaveLength(12);
    expect([...new Set(served.map((e) => e.upstreamHost))]).toEqual([real.address]);
    expect(copy.served + replay.served).toBe(0);
    expect(real.sidecar.status().verified).toBe(true);
  });
});
