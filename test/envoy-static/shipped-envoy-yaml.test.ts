/**
 * Every YAML file kvgate ships under envoy/ (found anew on each run, so a file added later is checked without
 * editing this test) must load in Envoy as far as the protos can tell: zero errors. The three example bootstraps
 * in fixtures/reference (one per routing pattern of docs/envoy-ext-proc.md §7) must too, except where they use an Envoy type
 * newer than the vendored protos.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { findYamlFiles, validateEnvoyYamlFile } from './envoy-yaml-targets.js';
import { loadEnvoyRoot } from './proto-root.js';
import { validateEnvoyYaml } from './validate-envoy-yaml.js';
import type { EnvoyIssue } from './validate-envoy-yaml.js';

const root = loadEnvoyRoot();
const ENVOY_DIR = fileURLToPath(new URL('../../envoy/', import.meta.url));
const REPO_DIR = fileURLToPath(new URL('../../', import.meta.url));
/** Envoy configs shipped outside envoy/ (every copy is checked, not only the folder). */
const OTHER_COPIES = ['deploy/kubernetes/config/envoy.yaml'];
const REFERENCE_DIR = fileURLToPath(new URL('./fixtures/reference/', import.meta.url));

function show(issues: readonly EnvoyIssue[]): string[] {
  return issues.map((i) => `line ${String(i.line ?? '?')}: ${i.path || '(root)'}: ${i.message}`);
}

const shipped = [...findYamlFiles(ENVOY_DIR).map((f) => path.join('envoy', f)), ...OTHER_COPIES].map((file) => ({
  file,
  result: validateEnvoyYamlFile(root, readFileSync(path.join(REPO_DIR, file), 'utf8')),
}));

describe('shipped Envoy YAML (envoy/ and every other copy)', () => {
  it('includes the bootstrap envoy/envoy.yaml and the Kubernetes copy', () => {
    expect(shipped.map((s) => s.file)).toContain(path.join('envoy', 'envoy.yaml'));
    expect(shipped.map((s) => s.file)).toContain(OTHER_COPIES[0]);
  });

  for (const { file, result } of shipped) {
    it(`${file} parses as YAML`, () => {
      expect(result.syntaxErrors).toEqual([]);
      expect(result.targets.length).toBeGreaterThan(0);
    });
    for (const { target, report } of result.targets) {
      if (target.kind === 'skip') {
        it(`${file} ${target.label}: not checked, ${target.reason}`, () => {
          expect(report).toEqual({ errors: [], warnings: [] });
        });
        continue;
      }
      const what = target.kind === 'message' ? target.typeName : 'unusable';
      it(`${file} ${target.label}: valid ${what}`, () => {
        expect(show(report.errors)).toEqual([]);
      });
    }
  }
});

describe('example Envoy bootstraps (fixtures/reference)', () => {
  const check = (name: string) => validateEnvoyYaml(root, readFileSync(path.join(REFERENCE_DIR, name), 'utf8'));

  it('envoy-cluster-header.yaml (variant A: cluster_header + clear_route_cache) is valid', () => {
    expect(show(check('envoy-cluster-header.yaml').errors)).toEqual([]);
  });

  it('envoy-original-dst.yaml (variant C: ORIGINAL_DST from a header) is valid', () => {
    expect(show(check('envoy-original-dst.yaml').errors)).toEqual([]);
  });

  it('envoy-override-host.yaml (variant B) fails only on OverrideHost, which is newer than the vendored protos', () => {
    const { errors } = check('envoy-override-host.yaml');
    expect(errors).toEqual([
      expect.objectContaining({
        path: 'static_resources.clusters[1].load_balancing_policy.policies[0].typed_extension_config.typed_config["@type"]',
        message: expect.stringContaining('unknown @type `envoy.extensions.load_balancing_policies.override_host.v3.OverrideHost`'),
      }),
    ]);
  });
});
