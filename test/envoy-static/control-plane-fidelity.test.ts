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
