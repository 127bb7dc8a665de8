import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { PACKAGE_ROOT } from '../../src/package-root.js';
import { checkPolicyFile } from '../../src/policy/check-report.js';
import { mustLoadEnvoyConfig } from '../harness/envoy-config.js';
import { clusterMismatches } from './cluster-match.js';
import { harnessCommand } from './harness-command.js';

const SHIPPED = path.join(PACKAGE_ROOT, 'envoy', 'envoy.yaml');
const TWO_REVISIONS = path.join(PACKAGE_ROOT, 'examples', 'route-tables', 'two-revisions.yaml');
const OWN_TABLE = path.join(PACKAGE_ROOT, 'test', 'fixtures', 'own-table', 'route-table.yaml');

async function table(file: string) {
  const c = await checkPolicyFile(file, { allowInvalid: true });
  if (!c.ok) throw new Error(file);
  return c.table;
}

describe('route-table clusters against an Envoy config', () => {
  it('the shipped envoy.yaml serves the example table: every cluster present, each reading the header the gate stamps', async () => {
    expect(clusterMismatches(await table(TWO_REVISIONS), mustLoadEnvoyConfig(await readFile(SHIPPED, 'utf8')), TWO_REVISIONS)).toEqual([]);
  });

  it('names each missing cluster and a cluster reading another endpoint header', async () => {
    const yaml = (await readFile(SHIPPED, 'utf8')).replace(
      /(- name: a_decode[\s\S]*?http_header_name: )x-kvgate-decode-endpoint/,
      '$1x-kvgate-prefill-endpoint',
    );
    const problems = clusterMismatches(await table(OWN_TABLE), mustLoadEnvoyConfig(yaml), OWN_TABLE);
    expect(problems).toHaveLength(4);
    expect(problems[0]).toMatch(/^route table cluster "qwen_base_prefill" \(pools base-prefill\) has no Envoy cluster: .* 503 NC; render/);
    const swapped = clusterMismatches(await table(TWO_REVISIONS), mustLoadEnvoyConfig(yaml), TWO_REVISIONS);
    expect(swapped).toEqual([
      'Envoy cluster "a_decode" reads the endpoint from x-kvgate-prefill-endpoint, but the gate stamps x-kvgate-decode-endpoint for pools a-decode',
    ]);
  });

  it('harness --policy refuses to start on a mismatch, before opening a port', async () => {
    const err: string[] = [];
    const out: string[] = [];
    const code = await harnessCommand(['--config', SHIPPED, '--listener', 'public=0', '--listener', 'internal=0', '--policy', OWN_TABLE], {
      out: (l) => out.push(l),
      err: (t) => err.push(t),
      shutdown: new Promise(() => undefined),
    });
    expect(code).toBe(1);
    expect(err.join('')).toMatch(
      /does not serve the route table .*own-table\/route-table\.yaml:\n {2}route table cluster "qwen_base_prefill"/,
    );
    expect(out).toEqual([]);
  });
});
