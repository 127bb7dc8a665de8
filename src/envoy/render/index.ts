/**
 * `kvgate envoy render`: one source for every Envoy config kvgate ships. Each target is a pure function of the
 * route table (clusters, capacity, body limit, queue) and the deployment settings.
 */
import { renderBootstrap } from './bootstrap.js';
import { renderConfigMap } from './configmap.js';
import { renderEnvoyGateway } from './envoy-gateway.js';
import type { RenderInput } from './input.js';
import { renderIstioDestinationRules, renderIstioExtProc, renderIstioRouting, renderIstioSecurity } from './istio.js';
import { poolServiceDocs } from './pool-services.js';
import type { RenderSettings, RenderTarget } from './settings.js';

export { type RenderInput, renderInputOf } from './input.js';
export {
  DEFAULT_SETTINGS,
  ENVOY_VERSIONS,
  RENDER_TARGETS,
  type RenderSettings,
  type RenderTarget,
} from './settings.js';

/** The config for `target`, as the text of a YAML file. */
export function renderEnvoyConfig(target: RenderTarget, input: RenderInput, s: RenderSettings): string {
  switch (target) {
    case 'bootstrap':
      return renderBootstrap(input, s);
    case 'configmap':
      return renderConfigMap(input, s);
    case 'istio-ext-proc':
      return renderIstioExtProc(input, s);
    case 'istio-routing':
      return renderIstioRouting(input, s);
    case 'istio-destination-rules':
      return renderIstioDestinationRules(input, s);
    case 'istio-security':
      return renderIstioSecurity(input, s);
    case 'envoy-gateway':
      return renderEnvoyGateway(input, s);
  }
}

/** What the operator must still provide for `target`'s config to work, one line each (the command prints them on stderr). */
export function renderWarnings(target: RenderTarget, input: RenderInput, s: RenderSettings): string[] {
  switch (target) {
    case 'istio-routing':
      return poolServiceDocs(input.clusters, s).warnings;
    case 'envoy-gateway':
      return poolServiceDocs(
        input.clusters.filter((c) => c.role === 'decode'),
        s,
      ).warnings;
    default:
      return [];
  }
}
