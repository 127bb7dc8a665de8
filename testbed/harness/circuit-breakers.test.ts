/**
 * Circuit breakers and the runtime layer: read from the YAML (Envoy's defaults when absent), enforced on upstream
 * clusters (503 overflow, flag UO) and on the ext_proc cluster (the stream fails, the request fails closed), and
 * `ext_proc_graceful_grpc_close` half-closes finished ext_proc streams instead of resetting them.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { ENVOY_DEFAULT_BREAKERS } from './circuit-breakers.js';
import { loadEnvoyConfig } from './envoy-config.js';
import { continueAll, type FakeHandler, reply } from './fake-ext-proc.js';
import { ok, request, type Scenario, scenarioYaml, startScenario } from './testing.js';

let scenario: Scenario | undefined;
afterEach(async () => {
  await scenario?.close();
  scenario = undefined;
});

const NO_RESPONSE = { processing_mode: { response_header_mode: 'SKIP' } };
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A request held where it arrived until the test releases it: no timing guesses. */
function gate() {
  let arrived = () => undefined as void;
  let release = () => undefined as void;
  const arrival = new Promise<void>((r) => (arrived = r));
  const released = new Promise<void>((r) => (release = r));
  return { arrival, released, arrived: () => arrived(), release: () => release() };
}

describe('reading circuit_breakers and layered_runtime', () => {
  it('Envoy defaults when absent; thresholds and runtime flags when present', () => {
    const plain = loadEnvoyConfig(scenarioYaml({}));
    if (!plain.ok) throw new Error(plain.error.message);
    expect(plain.value.clusters['backend_a']?.circuitBreakers).toEqual(ENVOY_DEFAULT_BREAKERS);
    expect(plain.value.runtime).toEqual({
      extProcGracefulGrpcClose: false,
      extProcStreamCloseOptimization: true,
      sendHeaderRawValue: true,
    });
    const set = loadEnvoyConfig(
      scenarioYaml({
        clusterFields: {
          backend_a: {
            circuit_breakers: {
              thresholds: [
                {
                  priority: 'DEFAULT',
                  max_connections: 2,
                  max_pending_requests: 1,
                  max_requests: 5,
                },
              ],
            },
          },
        },
        runtime: {
          'envoy.reloadable_features.ext_proc_graceful_grpc_close': true,
          'envoy.reloadable_features.send_header_raw_value': false,
        },
      }),
    );
    if (!set.ok) throw new Error(set.error.message);
    expect(set.value.runtime.sendHeaderRawValue).toBe(false);
    expect(set.value.clusters['backend_a']?.circuitBreakers).toEqual({
      maxConnections: 2,
      maxPendingRequests: 1,
      maxRequests: 5,
      maxRetries: 3,
    });
    expect(set.value.runtime.extProcGracefulGrpcClose).toBe(true);
  });

  it('refuses what it does not model: HIGH priority, other runtime keys (the 1.36 lifetime is modelled: accepted)', () => {
    const r = loadEnvoyConfig(
      scenarioYaml({
        clusterFields: {
          backend_a: {
            circuit_breakers: {
              thresholds: [{ priority: 'HIGH', max_requests: 5 }],
            },
          },
        },
        runtime: {
          'envoy.reloadable_features.something_else': true,
          'envoy.reloadable_features.ext_proc_stream_close_optimization': false,
        },
      }),
    );
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.error.issues).toEqual([
      'layered_runtime.layers[0].static_layer["envoy.reloadable_features.something_else"]: unsupported by the kvgate harness',
      'static_resources.clusters[1].circuit_breakers.thresholds[0].priority: HIGH unsupported by the kvgate harness (DEFAULT only)',
    ]);
  });
});

describe('enforcement', () => {
  it('an upstream cluster at its limit answers 503 overflow (UO) and recovers when a request ends', async () => {
    const first = gate();
    let held = 0;
    scenario = await startScenario({
      filter: NO_RESPONSE,
      route: { cluster: 'backend_a', timeout: '0s' },
      upstreams: ['backend_a'],
      clusterFields: {
        backend_a: { circuit_breakers: { thresholds: [{ max_connections: 1, max_pending_requests: 0, max_requests: 1 }] } },
      },
      upstreamHandler: (_req, res) => {
        if (held++ > 0) return void res.end('done');
        first.arrived();
        void first.released.then(() => res.end('done'));
      },
      handler: continueAll,
    });
    const pending = request(scenario.url);
    await first.arrival;
    const second = ok(await request(scenario.url));
    expect(second.status).toBe(503);
    expect(second.body).toBe('upstream connect error or disconnect/reset before headers. reset reason: overflow');
    first.release();
    expect(ok(await pending).status).toBe(200);
    expect(scenario.stat('cluster.backend_a.upstream_rq_pending_overflow')).toBe(1);
    const flags = (await scenario.harness.waitForAccessLog(2)).map((e) => e.responseFlags);
    expect(flags).toContainEqual(['UO']);
    expect(ok(await request(scenario.url)).status).toBe(200);
  });

  it('the ext_proc cluster at its limit fails the next stream: the request fails closed with 500', async () => {
    const first = gate();
    const hold: FakeHandler = async (s) => {
      const m = await s.recv();
      if (m === null) return;
      first.arrived();
      await first.released;
      s.send(reply(m));
      await continueAll(s);
    };
    scenario = await startScenario({
      filter: { ...NO_RESPONSE, message_timeout: '5s' },
      route: { cluster: 'backend_a', timeout: '0s' },
      upstreams: ['backend_a'],
      clusterFields: { ext_proc: { circuit_breakers: { thresholds: [{ max_requests: 1 }] } } },
      handler: hold,
    });
    const pending = request(scenario.url);
    await first.arrival;
    expect(ok(await request(scenario.url)).status).toBe(500);
    first.release();
    expect(ok(await pending).status).toBe(200);
  });
});

describe('ext_proc_graceful_grpc_close', () => {
  /** Whether Envoy reset the stream while the processor took its time (500 ms) to end it after the half-close. */
  async function resetBeforeProcessorClosed(runtime: Record<string, boolean> | undefined): Promise<boolean> {
    let result: Promise<boolean> | undefined;
    const closeLate: FakeHandler = (s) => {
      result = (async () => {
        for (let m = await s.recv(); m !== null; m = await s.recv()) s.send(reply(m));
        // Up to 500 ms (half of Envoy's 1 s remote-close timeout) for a reset to arrive, by the clock: on a loaded
        // machine 50 sleeps of 10 ms can take longer than the timeout itself, and then the reset is the timeout's.
        const until = Date.now() + 500;
        while (Date.now() < until && !s.wasCancelled()) await sleep(10);
        const reset = s.wasCancelled();
        s.closeOk();
        return reset;
      })();
    };
    scenario = await startScenario({
      filter: NO_RESPONSE,
      route: { cluster: 'backend_a', timeout: '0s' },
      upstreams: ['backend_a'],
      handler: closeLate,
      ...(runtime === undefined ? {} : { runtime }),
    });
    expect(ok(await request(scenario.url)).status).toBe(200);
    return result!;
  }

  it('on: Envoy half-closes the finished stream and waits for the processor to end it', async () => {
    expect(
      await resetBeforeProcessorClosed({
        'envoy.reloadable_features.ext_proc_graceful_grpc_close': true,
      }),
    ).toBe(false);
  });

  it("off (Envoy's default): the finished stream is half-closed and reset at once", async () => {
    expect(await resetBeforeProcessorClosed(undefined)).toBe(true);
  });
});
