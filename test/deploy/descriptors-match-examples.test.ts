/**
 * The descriptors shipped in deploy/ are the example descriptors (examples/descriptors/, the one fixture source the
 * tests load): same values, comments free to differ. A drift would ship a revision no test ever ran.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';

const read = (relPath: string): unknown => parseYaml(readFileSync(new URL(`../../${relPath}`, import.meta.url), 'utf8'));

describe('deploy descriptors', () => {
  for (const dir of ['deploy/kubernetes/config', 'deploy/gie/config']) {
    for (const revision of ['llama-a', 'llama-b']) {
      it(`${dir}/${revision}.yaml is examples/descriptors/${revision}.yaml`, () => {
        expect(read(`${dir}/${revision}.yaml`)).toEqual(read(`examples/descriptors/${revision}.yaml`));
      });
    }
  }
});
