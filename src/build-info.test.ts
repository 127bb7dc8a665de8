import { readFileSync } from 'node:fs';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { createGateMetrics } from './gate/metrics.js';
import { PACKAGE_ROOT } from './package-root.js';
import { createSidecarMetrics } from './sidecar/metrics.js';
import { VERSION } from './version.js';

describe('kvgate_build_info and VERSION', () => {
  it("VERSION is package.json's version, under vitest as from dist", () => {
    const pkg = JSON.parse(readFileSync(`${PACKAGE_ROOT}/package.json`, 'utf8')) as { version: string };
    expect(VERSION).toBe(pkg.version);
    expect(VERSION).not.toBe('0.0.0');
  });

  it('the gate and every sidecar export their release at 1', async () => {
    for (const [component, create] of [
      ['gate', createGateMetrics],
      ['sidecar', createSidecarMetrics],
    ] as const) {
      const registry = new Registry();
      create(registry);
      const text = await registry.getSingleMetricAsString('kvgate_build_info');
      expect(text).toContain(`kvgate_build_info{version="${VERSION}",component="${component}"} 1`);
    }
  });
});
