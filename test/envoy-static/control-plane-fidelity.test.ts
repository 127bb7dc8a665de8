/**
 * What the rendered Istio and Envoy Gateway files say about the real control plane must match that control plane's
 * source (the proto check in this folder covers Envoy's messages, not the control plane's behaviour around them).
 * Each expectation names the upstream file or thread it comes from.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parseRenderArgs, renderRequest } from '../../src/cli/envoy-command.js';
import { ISTIO_JWT_PAYLOAD_KEY } from '../../src/envoy/render/istio.js';

const REPO = fileURLToPath(new URL('../../', import.meta.url));
const POLICY = 'deploy/kubernetes/config/route-table.yaml';

async function render(target: string, ...flags: string[]): Promise<string> {
  const parsed = parseRenderArgs(['render', target, '--policy', POLICY, ...flags]);
  if (typeof parsed === 'string') throw new Error(parsed);
  const r = await renderRequest(parsed, REPO);
  if (!r.ok) throw new Error(r.error);
  return r.text;
}

describe('Istio: where jwt_authn puts the verified payload', () => {
  // istio/istio pilot/pkg/security/authn/policy_applier.go @46d59cea `convertToEnvoyJwtConfig`:
  // PayloadInMetadata: filters.EnvoyJwtFilterPayload for every issuer; pilot/pkg/xds/filters/filters.go @4f361429:
  // EnvoyJwtFilterPayload = "payload". Not the issuer.
  it('is the fixed key "payload", not the issuer', () => {
    expect(ISTIO_JWT_PAYLOAD_KEY).toBe('payload');
  });

  it('the rendered EnvoyFilter and envoy/istio/README.md name that key in the metadata path', async () => {
    const ext = await render('istio-ext-proc');
    expect(ext).toContain(`path: [${ISTIO_JWT_PAYLOAD_KEY}, <claim>]`);
    const readme = readFileSync(`${REPO}envoy/istio/README.md`, 'utf8');
    expect(readme).toContain(`path: [${ISTIO_JWT_PAYLOAD_KEY}, tenant]`);
    expect(readme).not.toContain('<issuer key>');
  });
});

describe('Envoy Gateway: the release a FullDuplexStreamed policy needs', () => {
  // envoyproxy/gateway issue #6270: on v1.4.1 the CRD accepts FullDuplexStreamed (added by PR #5349) but the
  // translator leaves request_trailer_mode SKIP, and Envoy rejects the listener; PR #6323 sets it to SEND
  // (internal/xds/translator/extproc.go `buildProcessingMode`).
  it('the GIE header says which release translates it into a listener Envoy accepts', async () => {
    const eg = await render('envoy-gateway', '--gie');
    expect(eg).toContain('request: { body: FullDuplexStreamed }');
    expect(eg).toMatch(/PR #6323/);
    expect(eg).toMatch(/v1\.4\.1/);
  });

  it('a BUFFERED render does not carry that requirement', async () => {
    const eg = await render('envoy-gateway');
    expect(eg).not.toMatch(/PR #6323/);
  });
});

describe('Istio: the stream idle timeout of envoy.yaml', () => {
  // istio/istio pilot/pkg/networking/core/listener_builder.go @7fd2c08f `buildHTTPConnectionManager`:
  // connectionManager.StreamIdleTimeout = durationpb.New(0 * time.Second) on every HCM, gateways included. Zero
  // disables it, so without a patch a stream the gate never answers (FULL_DUPLEX_STREAMED bodies arm no
  // message_timeout) or a generation that stalls is never reset, unlike envoy.yaml's listeners.
  type Patch = { applyTo: string; match?: unknown; patch: { operation: string; value: Record<string, any> } };
  const hcmMerges = (doc: { spec: { configPatches: Patch[] } }) =>
    doc.spec.configPatches.filter(
      (p) =>
        p.applyTo === 'NETWORK_FILTER' &&
        p.patch.operation === 'MERGE' &&
        p.patch.value['name'] === 'envoy.filters.network.http_connection_manager',
    );

  it('each kvgate gateway sets stream_idle_timeout to the bootstrap value', async () => {
    const { parseAllDocuments } = await import('yaml');
    const boot = parseAllDocuments(await render('bootstrap'))[0]!.toJS() as any;
    // The public listener sets 300s; the internal one leaves Envoy's default, which is also 5 minutes
    // (http_connection_manager.proto, stream_idle_timeout: "If not specified, this defaults to 5 minutes").
    const want = boot.static_resources.listeners.map(
      (l: any) => (l.filter_chains[0].filters[0].typed_config.stream_idle_timeout as string | undefined) ?? '300s',
    ) as string[];
    expect(want).toEqual(['300s', '300s']);
    const docs = parseAllDocuments(await render('istio-ext-proc')).map((d) => d.toJS() as any);
    const filters = docs.filter((d) => d?.kind === 'EnvoyFilter');
    expect(filters.map((f) => f.metadata.name)).toEqual(['kvgate-public', 'kvgate-internal']);
    for (const f of filters) {
      const got = hcmMerges(f).map((p) => p.patch.value['typed_config']?.stream_idle_timeout);
      expect(got, f.metadata.name).toEqual([want[0]]);
    }
  });
});

describe("Istio: the VirtualServices leave Istio's default retry policy", () => {
  // istio/istio pilot/pkg/networking/core/route/retry/retry.go @7adf6095 `ConvertPolicy`: no `retries` means
  // DefaultPolicy, 2 retries on connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes (no status
  // codes listed) on another host. envoy.yaml's ORIGINAL_DST routes have none, so the file must say what differs.
  it('no route sets retries, and the header says what Istio then does', async () => {
    const { parseAllDocuments } = await import('yaml');
    const text = await render('istio-routing');
    const vs = parseAllDocuments(text)
      .map((d) => d.toJS() as any)
      .filter((d) => d?.kind === 'VirtualService');
    expect(vs.length).toBe(2);
    for (const v of vs) for (const r of v.spec.http) expect(r.retries, r.name).toBeUndefined();
    expect(text).toMatch(/retry\.go/);
    expect(text).toMatch(/connect-failure,refused-stream/);
  });
});

describe('Envoy Gateway: no route timeout on the pool routes, as envoy.yaml', () => {
  // envoyproxy/gateway internal/xds/translator/route.go `buildXdsRoute`: the route timeout is set only from a request
  // timeout (HTTPRoute timeouts.request or a BackendTrafficPolicy); otherwise Envoy's RouteAction.timeout default
  // applies, 15 s (route_components.proto), which cuts every generation streaming longer than that.
  it('every pool rule sets timeouts.request 0s (Gateway API: zero disables it)', async () => {
    const { parseAllDocuments } = await import('yaml');
    const text = await render('envoy-gateway');
    const route = parseAllDocuments(text)
      .map((d) => d.toJS() as any)
      .find((d) => d?.kind === 'HTTPRoute');
    const pools = route.spec.rules.filter((r: any) => r.matches.some((m: any) => m.headers !== undefined));
    expect(pools.length).toBeGreaterThan(0);
    for (const r of pools) expect(r.timeouts).toEqual({ request: '0s' });
    // route.go `idleTimeout`: a zero request timeout also sets the route idle_timeout to 0, so the header must say
    // that envoy.yaml's stream idle bound is not kept.
    expect(text).toMatch(/idle_timeout/);
  });
});
