import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { findYamlFiles, validateEnvoyYamlFile } from './envoy-yaml-targets.js';
import { loadEnvoyRoot } from './proto-root.js';

const root = loadEnvoyRoot();
const ISTIO = readFileSync(new URL('./fixtures/istio-envoy-filter.yaml', import.meta.url), 'utf8');
const BOOTSTRAP = readFileSync(new URL('./fixtures/ext-proc-bootstrap.yaml', import.meta.url), 'utf8');

function seed(text: string, from: string, to: string): string {
  if (!text.includes(from)) throw new Error(`seed: ${JSON.stringify(from)} is not in the text`);
  return text.replace(from, to);
}

describe('Kubernetes manifests', () => {
  it('checks each EnvoyFilter patch value as the type its applyTo implies, and skips kinds with no Envoy proto', () => {
    const result = validateEnvoyYamlFile(root, ISTIO);
    expect(result.syntaxErrors).toEqual([]);
    const summary = result.targets.map(({ target, report }) => ({
      label: target.label,
      kind: target.kind,
      type: target.kind === 'message' ? target.typeName : undefined,
      partial: target.kind === 'message' ? target.partial : undefined,
      errors: report.errors.length,
    }));
    expect(summary).toEqual([
      {
        label: 'document 1: EnvoyFilter kvgate-ext-proc patch 0 (HTTP_FILTER INSERT_BEFORE)',
        kind: 'message',
        type: 'envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter',
        partial: false,
        errors: 0,
      },
      {
        label: 'document 1: EnvoyFilter kvgate-ext-proc patch 1 (CLUSTER MERGE)',
        kind: 'message',
        type: 'envoy.config.cluster.v3.Cluster',
        partial: true,
        errors: 0,
      },
      {
        label: 'document 1: EnvoyFilter kvgate-ext-proc patch 2 (CLUSTER ADD)',
        kind: 'message',
        type: 'envoy.config.cluster.v3.Cluster',
        partial: false,
        errors: 0,
      },
      {
        label: 'document 1: EnvoyFilter kvgate-ext-proc patch 3 (HTTP_FILTER REMOVE)',
        kind: 'skip',
        type: undefined,
        partial: undefined,
        errors: 0,
      },
      { label: 'document 2: EnvoyExtensionPolicy kvgate', kind: 'skip', type: undefined, partial: undefined, errors: 0 },
      { label: 'document 3: Service kvgate-gate', kind: 'skip', type: undefined, partial: undefined, errors: 0 },
    ]);
  });

  it('reports a typo inside a patch value with its path in the manifest and its line', () => {
    const text = seed(ISTIO, 'request_body_mode: BUFFERED', 'request_body_mode: BUFFERD');
    const errors = validateEnvoyYamlFile(root, text).targets.flatMap((t) => t.report.errors);
    expect(errors).toEqual([
      expect.objectContaining({
        path: 'spec.configPatches[0].patch.value.typed_config.processing_mode.request_body_mode',
        message: expect.stringContaining('`BUFFERD` is not a value of BodySendMode'),
        line: text.split('\n').findIndex((l) => l.includes('BUFFERD')) + 1,
      }),
    ]);
  });

  it('holds an ADD patch to the whole-message rules that a MERGE patch is spared', () => {
    const text = seed(ISTIO, '      operation: MERGE', '      operation: ADD');
    const errors = validateEnvoyYamlFile(root, text).targets.flatMap((t) => t.report.errors);
    expect(errors.map((e) => e.path)).toEqual(['spec.configPatches[1].patch.value.name']);
  });

  it('refuses an applyTo it cannot type, and a patch without a value', () => {
    const text = seed(
      seed(ISTIO, 'applyTo: CLUSTER\n    match:\n      context: GATEWAY', 'applyTo: CLUSTERS\n    match:\n      context: GATEWAY'),
      '    patch: { operation: REMOVE }',
      '    patch: { operation: ADD }',
    );
    const errors = validateEnvoyYamlFile(root, text).targets.flatMap((t) => t.report.errors);
    expect(errors.map((e) => e.path)).toEqual(['spec.configPatches[1].applyTo', 'spec.configPatches[3].patch.value']);
  });

  it('checks a bootstrap embedded in a ConfigMap', () => {
    const configMap = (bootstrap: string): string =>
      `apiVersion: v1\nkind: ConfigMap\nmetadata: { name: envoy }\ndata:\n  envoy.yaml: |\n${bootstrap
        .split('\n')
        .map((l) => `    ${l}`)
        .join('\n')}\n`;
    const good = validateEnvoyYamlFile(root, configMap(BOOTSTRAP));
    expect(good.targets.map((t) => [t.target.label, t.report.errors.length])).toEqual([
      ['document 1: ConfigMap envoy data.envoy.yaml: Envoy bootstrap', 0],
    ]);
    const bad = validateEnvoyYamlFile(root, configMap(seed(BOOTSTRAP, 'request_body_mode: BUFFERED', 'request_body_mode: BUFFERD')));
    expect(bad.targets.flatMap((t) => t.report.errors.map((e) => e.path))).toEqual([
      'data["envoy.yaml"].static_resources.listeners[0].filter_chains[0].filters[0].typed_config.http_filters[0].typed_config.processing_mode.request_body_mode',
    ]);
  });
});

describe('finding YAML files', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'kvgate-envoy-static-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('walks subfolders and takes .yaml and .yml only', () => {
    mkdirSync(path.join(dir, 'istio', 'deep'), { recursive: true });
    for (const f of ['envoy.yaml', 'istio/filter.yml', 'istio/deep/x.yaml', 'README.md', 'istio/notes.txt'])
      writeFileSync(path.join(dir, f), '{}\n');
    expect(findYamlFiles(dir)).toEqual(['envoy.yaml', path.join('istio', 'deep', 'x.yaml'), path.join('istio', 'filter.yml')]);
    expect(findYamlFiles(path.join(dir, 'absent'))).toEqual([]);
  });
});
