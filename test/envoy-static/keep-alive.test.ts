/**
 * The proxy, not the sidecar, ends idle connections: Envoy's idle timeout on every pool cluster (and Istio's
 * DestinationRule idleTimeout) is below the sidecar's default keep-alive timeout, in every shipped config. Otherwise
 * Envoy can reuse a connection at the moment the sidecar closes it, and that request is reset (503).
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { exampleDescriptorInput } from '../../src/compat/testing.js';
import { POOL_IDLE_TIMEOUT_S } from '../../src/envoy/render/bootstrap.js';
import { PACKAGE_ROOT } from '../../src/package-root.js';
import { parseSidecarConfig } from '../../src/sidecar/config.js';

const sidecarDefault = (): number => {
  const r = parseSidecarConfig(
    {
      role: 'decode',
      worker: 'http://127.0.0.1:8000',
      descriptor: exampleDescriptorInput(),
      keys: { devSeed: 'x' },
      nixlSideChannel: 'unchecked',
    },
    't',
  );
  if (!r.ok) throw new Error(JSON.stringify(r.error));
  return r.value.keepAliveTimeoutMs;
};
const seconds = (d: string): number => Number(/^(\d+(?:\.\d+)?)s$/.exec(d)?.[1] ?? Number.NaN);
const docs = (file: string) => parseAllDocuments(readFileSync(`${PACKAGE_ROOT}/${file}`, 'utf8')).map((d) => d.toJS() as any);

describe('idle connections to the sidecars', () => {
  it('the rendered idle timeout is below the sidecar keep-alive timeout', () => {
    expect(POOL_IDLE_TIMEOUT_S * 1000).toBeLessThan(sidecarDefault());
  });

  for (const file of ['envoy/envoy.yaml', 'deploy/kubernetes/config/envoy.yaml']) {
    it(`${file}: every ORIGINAL_DST pool cluster sets idle_timeout below it`, () => {
      const clusters = docs(file)[0].static_resources.clusters as any[];
      const pools = clusters.filter((c) => c.type === 'ORIGINAL_DST');
      expect(pools.length).toBeGreaterThan(0);
      for (const c of pools) {
        const idle =
          c.typed_extension_protocol_options?.['envoy.extensions.upstreams.http.v3.HttpProtocolOptions']?.common_http_protocol_options
            ?.idle_timeout;
        expect(seconds(idle) * 1000, c.name).toBeLessThan(sidecarDefault());
      }
    });
  }

  it('envoy/istio/destination-rules.yaml: every pool rule sets idleTimeout below it', () => {
    const rules = docs('envoy/istio/destination-rules.yaml').filter((d) => d?.kind === 'DestinationRule');
    const pools = rules.filter((r) => r.spec.trafficPolicy.connectionPool.tcp !== undefined);
    expect(pools.length).toBeGreaterThan(0);
    for (const r of pools)
      expect(seconds(r.spec.trafficPolicy.connectionPool.http.idleTimeout) * 1000, r.metadata.name).toBeLessThan(sidecarDefault());
  });
});
