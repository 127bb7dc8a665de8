import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml, stringify as toYaml } from 'yaml';
import { PACKAGE_ROOT } from '../../src/package-root.js';
import { planFromTable } from './table-plan.js';

const FIXTURE = path.join(PACKAGE_ROOT, 'test', 'fixtures', 'own-table', 'route-table.yaml');

async function fixture(): Promise<Record<string, any>> {
  return parseYaml(await readFile(FIXTURE, 'utf8')) as Record<string, any>;
}

/** Write `doc` (with the fixture's descriptor file beside it) and plan it. */
async function plan(doc: Record<string, unknown>) {
  const dir = await mkdtemp(path.join(tmpdir(), 'kvgate-plan-'));
  await writeFile(path.join(dir, 'qwen-base.yaml'), await readFile(path.join(path.dirname(FIXTURE), 'qwen-base.yaml')));
  const file = path.join(dir, 'route-table.yaml');
  await writeFile(file, toYaml(doc));
  return planFromTable(file, { maxWorkersPerPool: 2 });
}

describe('planFromTable', () => {
  it('records missing canaries from a simulator and caps workers per pool, saying both', async () => {
    const r = await plan(await fixture());
    if (!r.ok) throw new Error(r.report);
    expect(r.plan.revisions.map((x) => [x.name, x.canariesRecorded, x.servedModelName])).toEqual([
      ['qwen-base', true, 'qwen-chat'],
      ['qwen-support-lora', true, 'qwen-chat'],
    ]);
    expect(Object.keys(r.plan.revisions[1]!.descriptor['canaries'] as object)).toEqual(['tokenizer', 'chatTemplate', 'generation']);
    expect(r.plan.pools.map((p) => [p.name, p.workers])).toEqual([
      ['base-prefill', 1],
      ['base-decode', 2],
      ['lora-prefill', 1],
      ['lora-decode', 1],
    ]);
    expect(r.plan.notes.join('\n')).toMatch(/pool base-decode: 3 endpoints in the table, 2 simulated here/);
  });

  it('fails with the checker report when any error is not a missing canary, listing the canary ones too', async () => {
    const doc = await fixture();
    doc['pools'][0]['revision'] = 'qwen-bsae';
    const r = await plan(doc);
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.report).toMatch(/pools\[0\]\.revision: .*qwen-bsae/);
    expect(r.report).toMatch(/no recorded tokenizer, chatTemplate, generation canary digests/);
    expect(r.report).toMatch(/INVALID/);
  });

  it('keeps declared-only revisions as declared, and notes selector pools and a metadata tenant source', async () => {
    const doc = await fixture();
    doc['revisions']['qwen-support-lora']['trust'] = 'declared-only';
    doc['pools'][3] = {
      ...doc['pools'][3],
      endpoints: undefined,
      discovery: {
        kubernetes: { namespace: 'kvgate', matchLabels: { app: 'lora' }, targetPort: 8000, statusPort: 9090, expectedEndpoints: 3 },
      },
    };
    delete doc['pools'][3].endpoints;
    doc['tenancy'] = { source: { metadata: { namespace: 'envoy.filters.http.jwt_authn', path: ['payload', 'org'] } }, required: true };
    const r = await plan(doc);
    if (!r.ok) throw new Error(r.report);
    const lora = r.plan.revisions.find((x) => x.name === 'qwen-support-lora')!;
    expect(lora.canariesRecorded).toBe(false);
    expect(lora.descriptor['canaries']).toBeUndefined();
    expect(r.plan.pools[3]!.workers).toBe(2);
    const notes = r.plan.notes.join('\n');
    expect(notes).toMatch(/pool lora-decode: found by Kubernetes selector .* 2 simulated worker/);
    expect(notes).toMatch(/tenancy\.source\.metadata \(envoy\.filters\.http\.jwt_authn\) .* header x-tenant-id/);
    expect(notes).toMatch(/policy check: .*declared-only/);
  });
});
