import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { PACKAGE_ROOT } from '../../src/package-root.js';
import { RECORDED_CANARIES, testDescriptorInput } from '../../src/policy/testing.js';
import { simCanaryDigests } from './recorded-canaries.js';

const yaml = (rel: string): Record<string, unknown> =>
  parseYaml(readFileSync(path.join(PACKAGE_ROOT, rel), 'utf8')) as Record<string, unknown>;

describe('recorded canaries of the fixtures are what the simulator answers', () => {
  it('policy test revisions a and b', async () => {
    for (const weights of ['a', 'b'] as const) {
      const { canaries: _recorded, ...input } = testDescriptorInput({ weights });
      expect(await simCanaryDigests(input)).toEqual(RECORDED_CANARIES[weights]);
    }
  });

  it('the example descriptors the demo and the end-to-end tests run', async () => {
    for (const f of [
      'examples/descriptors/llama-a.yaml',
      'examples/descriptors/llama-b.yaml',
      'examples/descriptors/llama-fp8-dynamic.json',
      'examples/descriptors/llama-3.1-8b.yaml',
    ]) {
      const { canaries, ...input } = yaml(f);
      expect(await simCanaryDigests(input as never), f).toEqual(canaries);
    }
  });

  it('another weights revision answers another generation digest (the canary tells weights apart)', async () => {
    const a = await simCanaryDigests(testDescriptorInput({ weights: 'a', canaries: undefined }));
    const other = await simCanaryDigests(testDescriptorInput({ weights: 'a', model: { revision: 'f'.repeat(40) } }));
    expect(other.generation).not.toBe(a.generation);
    expect(other.tokenizer).toBe(a.tokenizer);
  });
});
