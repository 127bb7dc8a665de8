/**
 * The Kubernetes ConfigMap `kvgate-envoy` holding the bootstrap as `envoy.yaml`, for clusters that apply plain
 * manifests (deploy/kubernetes generates the same ConfigMap from config/envoy.yaml with kustomize).
 */
import { renderBootstrap } from './bootstrap.js';
import type { RenderInput } from './input.js';
import { type RenderSettings, renderFlags } from './settings.js';
import { header, indent } from './text.js';

export function renderConfigMap(input: RenderInput, s: RenderSettings): string {
  const bootstrap = renderBootstrap(input, s).trimEnd().split('\n');
  return [
    ...header(renderFlags('configmap', s), ['The Envoy bootstrap as a ConfigMap; mount it at /etc/envoy/envoy.yaml.']),
    'apiVersion: v1',
    'kind: ConfigMap',
    'metadata:',
    '  name: kvgate-envoy',
    `  namespace: ${s.namespace}`,
    '  labels: { app.kubernetes.io/name: kvgate-envoy, app.kubernetes.io/part-of: kvgate }',
    'data:',
    '  envoy.yaml: |',
    ...indent(bootstrap, 4),
    '',
  ].join('\n');
}
