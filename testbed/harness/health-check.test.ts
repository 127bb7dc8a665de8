/**
 * Active gRPC health checking as Envoy runs it (health-check.ts): a NOT_SERVING answer ejects at once, a host that
 * stops answering needs unhealthy_threshold failed checks, new hosts start unhealthy, a healthy host a DNS answer
 * drops stays until it fails, and below the panic threshold every host takes streams.
 */
import * as grpc from '@grpc/grpc-js';
import { HealthImplementation } from 'grpc-health-check';
import { afterEach, describe, expect, it } from 'vitest';
import { readCluster } from './cluster-config.js';
import { ConfigReader } from './config-reader.js';
import { createExtProcClient, type ExtProcClient } from './ext-proc-client.js';

const SERVICE = 'envoy.service.ext_proc.v3.ExternalProcessor';
const INTERVAL_MS = 40;

interface Backend {
  readonly address: string;
  readonly health: HealthImplementation;
  readonly server: grpc.Server;
}

let cleanup: Array<() => void> = [];
afterEach(() => {
  for (const c of cleanup.reverse()) c();
  cleanup = [];
});

async function backend(): Promise<Backend> {
  const server = new grpc.Server();
  const health = new HealthImplementation({ [SERVICE]: 'SERVING' });
  health.addToServer(server);
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))),
  );
  cleanup.push(() => server.forceShutdown());
  return { address: `127.0.0.1:${port}`, health, server };
}

/** `noTrafficMs`: the check's `no_traffic_interval` (these clusters carry no traffic), 'default' to leave Envoy's 60 s. */
function client(hosts: readonly string[], unhealthyThreshold = 3, noTrafficMs: number | 'default' = INTERVAL_MS): ExtProcClient {
  const r = new ConfigReader();
  const cluster = readCluster(
    r,
    {
      name: 'gate',
      type: 'STRICT_DNS',
      typed_extension_protocol_options: {
        'envoy.extensions.upstreams.http.v3.HttpProtocolOptions': {
          '@type': 'type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions',
          explicit_http_config: { http2_protocol_options: {} },
        },
      },
      health_checks: [
        {
          timeout: '1s', // generous: a check that times out on a busy machine is a network failure, as in Envoy
          interval: `${INTERVAL_MS / 1000}s`,
          ...(noTrafficMs === 'default' ? {} : { no_traffic_interval: `${noTrafficMs / 1000}s` }),
          unhealthy_threshold: unhealthyThreshold,
          healthy_threshold: 2,
          grpc_health_check: { service_name: SERVICE },
        },
      ],
      load_assignment: {
        cluster_name: 'gate',
        endpoints: [
          {
            lb_endpoints: hosts.map((h) => ({
              endpoint: { address: { socket_address: { address: h.split(':')[0], port_value: Number(h.split(':')[1]) } } },
            })),
          },
        ],
      },
    },
    'c',
  );
  expect(r.issues).toEqual([]);
  const c = createExtProcClient(cluster!, 'gate', [], { activeHealthChecks: true });
  cleanup.push(() => c.close());
  return c;
}

async function until(check: () => boolean, what: string): Promise<void> {
  const end = Date.now() + 3000;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe('active gRPC health checks (Envoy)', () => {
  it('start every host unhealthy and make it healthy on its first SERVING answer', async () => {
    const a = await backend();
    const c = client([a.address]);
    expect(c.health()[a.address]).toBe('unhealthy');
    await c.checked();
    expect(c.health()[a.address]).toBe('healthy');
  });

  it('eject a NOT_SERVING host at its next check, without waiting for unhealthy_threshold', async () => {
    const a = await backend();
    const c = client([a.address], 1000); // a threshold no test could wait out
    await c.checked();
    a.health.setStatus(SERVICE, 'NOT_SERVING');
    const started = Date.now();
    await until(() => c.health()[a.address] === 'unhealthy', 'the NOT_SERVING host ejected');
    expect(Date.now() - started).toBeLessThan(INTERVAL_MS * 25); // a threshold of 1,000 would take 40 s
    // Back to SERVING: healthy_threshold (2) answers, now that the host is past its first check.
    a.health.setStatus(SERVICE, 'SERVING');
    await until(() => c.health()[a.address] === 'healthy', 'the host healthy again');
  });

  it('eject a host that stops answering only after unhealthy_threshold failed checks', async () => {
    const a = await backend();
    const c = client([a.address], 3);
    await c.checked();
    const started = Date.now();
    a.server.forceShutdown();
    await until(() => c.health()[a.address] === 'unhealthy', 'the dead host ejected');
    // Three network failures, each at least an interval apart after the first.
    expect(Date.now() - started).toBeGreaterThanOrEqual(INTERVAL_MS * 2);
  });

  it('keep a healthy host a DNS answer drops until it fails its check, and add a new host unhealthy', async () => {
    const a = await backend();
    const b = await backend();
    const c = client([a.address]);
    await c.checked();
    c.setEndpoints([{ address: '127.0.0.1', port: Number(b.address.split(':')[1]) }]);
    expect(c.health()).toEqual({ [a.address]: 'healthy', [b.address]: 'unhealthy' });
    await until(() => c.health()[b.address] === 'healthy', 'the new host healthy');
    expect(c.health()[a.address]).toBe('healthy'); // still passing its checks: kept
    a.health.setStatus(SERVICE, 'NOT_SERVING');
    await until(() => c.health()[a.address] === undefined, 'the dropped host removed once it failed');
    expect(c.health()).toEqual({ [b.address]: 'healthy' });
  });

  it('check a cluster that never carried traffic every no_traffic_interval (60 s by default), not every interval', async () => {
    const a = await backend();
    const b = await backend();
    const cold = client([a.address], 3, 'default');
    const warm = client([b.address], 3);
    await cold.checked();
    await warm.checked();
    a.health.setStatus(SERVICE, 'NOT_SERVING');
    b.health.setStatus(SERVICE, 'NOT_SERVING');
    await until(() => warm.health()[b.address] === 'unhealthy', 'the host with no_traffic_interval = interval ejected');
    // Many intervals later the cold cluster has not checked again: its host still counts as healthy, draining or not.
    await new Promise((r) => setTimeout(r, INTERVAL_MS * 10));
    expect(cold.health()[a.address]).toBe('healthy');
  });

  it('switch to interval at the first check after the cluster carried a stream', async () => {
    const a = await backend();
    const NO_TRAFFIC_MS = 1000;
    const c = client([a.address], 3, NO_TRAFFIC_MS);
    await c.checked();
    // A stream opens (the backend has no ext_proc service, so it fails at once; its connection is the traffic). The
    // timer armed at the last check still runs its long wait; every check after it comes `interval` apart.
    let ended = false;
    c.start({ onMessage: () => undefined, onGrpcError: () => void (ended = true), onGrpcClose: () => void (ended = true) });
    await until(() => ended, 'the stream ended');
    await new Promise((r) => setTimeout(r, NO_TRAFFIC_MS + INTERVAL_MS * 2)); // the long wait is over
    a.health.setStatus(SERVICE, 'NOT_SERVING');
    const started = Date.now();
    await until(() => c.health()[a.address] === 'unhealthy', 'the NOT_SERVING host ejected');
    expect(Date.now() - started).toBeLessThan(NO_TRAFFIC_MS);
  });

  it('refuse a host change on a STATIC cluster (Envoy has no DNS answer for it)', async () => {
    const a = await backend();
    const r = new ConfigReader();
    const cluster = readCluster(
      r,
      {
        name: 's',
        type: 'STATIC',
        load_assignment: {
          cluster_name: 's',
          endpoints: [
            {
              lb_endpoints: [
                { endpoint: { address: { socket_address: { address: '127.0.0.1', port_value: Number(a.address.split(':')[1]) } } } },
              ],
            },
          ],
        },
      },
      'c',
    );
    const c = createExtProcClient(cluster!, 's');
    cleanup.push(() => c.close());
    expect(() => c.setEndpoints([])).toThrow(/STATIC/);
    expect(c.health()).toEqual({ [a.address]: 'healthy' }); // no active checks: every host counts as healthy
  });
});
