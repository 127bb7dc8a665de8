/**
 * Upstream connection idle timeout (`common_http_protocol_options.idle_timeout` on a cluster): the harness, like
 * Envoy, closes a pooled upstream connection idle that long and opens a new one for the next request; without it the
 * connection is kept. This is what keeps a proxy from reusing a connection the sidecar is closing.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { loadEnvoyConfig } from './envoy-config.js';
import { continueAll } from './fake-ext-proc.js';
import { ok, request, type Scenario, scenarioYaml, startScenario } from './testing.js';

let scenario: Scenario | undefined;
afterEach(async () => {
  await scenario?.close();
  scenario = undefined;
});

const NO_RESPONSE = { processing_mode: { response_header_mode: 'SKIP' } };
const protocolOptions = (idle: string) => ({
  typed_extension_protocol_options: {
    'envoy.extensions.upstreams.http.v3.HttpProtocolOptions': {
      '@type': 'type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions',
      explicit_http_config: { http_protocol_options: {} },
      common_http_protocol_options: { idle_timeout: idle },
    },
  },
});

/** Two requests `gapMs` apart through backend_a; how many connections the upstream saw, and how many it saw close. */
async function connectionsFor(idle: string | undefined, gapMs: number): Promise<{ opened: number; closed: number }> {
  scenario = await startScenario({
    filter: NO_RESPONSE,
    route: { cluster: 'backend_a', timeout: '0s' },
    upstreams: ['backend_a'],
    handler: continueAll,
    ...(idle === undefined ? {} : { clusterFields: { backend_a: protocolOptions(idle) } }),
  });
  expect(ok(await request(scenario.url)).status).toBe(200);
  await new Promise((r) => setTimeout(r, gapMs));
  expect(ok(await request(scenario.url)).status).toBe(200);
  return scenario.upstreams['backend_a']!.connections();
}

describe('upstream idle_timeout', () => {
  it('is read from the cluster (absent: Envoy keeps the connection an hour, modelled as no timer)', () => {
    const set = loadEnvoyConfig(scenarioYaml({ upstreams: ['backend_a'], clusterFields: { backend_a: protocolOptions('0.25s') } }));
    if (!set.ok) throw new Error(set.error.message);
    expect(set.value.clusters['backend_a']?.idleTimeoutMs).toBe(250);
    const plain = loadEnvoyConfig(scenarioYaml({ upstreams: ['backend_a'] }));
    if (!plain.ok) throw new Error(plain.error.message);
    expect(plain.value.clusters['backend_a']?.idleTimeoutMs).toBeUndefined();
  });

  it('closes a connection idle longer than the timeout; the next request opens a new one', async () => {
    const r = await connectionsFor('0.1s', 600);
    expect(r.opened).toBe(2);
    expect(r.closed).toBeGreaterThanOrEqual(1);
  });

  it('keeps reusing the connection while it is busier than the timeout, and always without one', async () => {
    expect((await connectionsFor('30s', 200)).opened).toBe(1);
    await scenario?.close();
    scenario = undefined;
    expect((await connectionsFor(undefined, 200)).opened).toBe(1);
  });
});
