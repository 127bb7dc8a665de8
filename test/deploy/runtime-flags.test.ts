/**
 * The benches start the gate, the sidecars and their floors with the Node flags of the image's ENTRYPOINT
 * (bench/lib/runtime-flags.ts), so their figures are the shipped process's. If a manifest replaced the image's
 * command, a deployment would run with other flags than the figures say.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { entrypointNodeFlags, runtimeFlags } from '../../bench/lib/runtime-flags.js';

interface PodSpec {
  readonly containers?: readonly { image?: string; command?: unknown; args?: unknown }[];
  readonly initContainers?: readonly { image?: string; command?: unknown; args?: unknown }[];
}

const DOCKERFILE = readFileSync(new URL('../../Dockerfile', import.meta.url), 'utf8');

describe('the Node flags kvgate ships with', () => {
  it('the benches start kvgate with the flags of the image ENTRYPOINT, or those KVGATE_BENCH_NODE_FLAGS names', () => {
    const shipped = entrypointNodeFlags(DOCKERFILE);
    expect(runtimeFlags({}).flags).toEqual(shipped);
    expect(runtimeFlags({}).source).toBe('the Dockerfile ENTRYPOINT');
    expect(runtimeFlags({ KVGATE_BENCH_NODE_FLAGS: 'none' }).flags).toEqual([]);
    expect(runtimeFlags({ KVGATE_BENCH_NODE_FLAGS: ' --max-semi-space-size=8  --foo ' }).flags).toEqual([
      '--max-semi-space-size=8',
      '--foo',
    ]);
  });

  it('reads only an exec-form ENTRYPOINT that runs node, and says what is wrong otherwise', () => {
    expect(entrypointNodeFlags('FROM x\nENTRYPOINT ["node", "/app/main.js"]\n')).toEqual([]);
    expect(entrypointNodeFlags('ENTRYPOINT ["node", "--max-semi-space-size=4", "/app/main.js"]')).toEqual(['--max-semi-space-size=4']);
    expect(() => entrypointNodeFlags('FROM x\nENTRYPOINT node /app/main.js\n')).toThrow(/no exec-form ENTRYPOINT/);
    expect(() => entrypointNodeFlags('ENTRYPOINT ["tini", "--", "node", "main.js"]')).toThrow(/does not start the product with node/);
    expect(() => entrypointNodeFlags('ENTRYPOINT ["node", "--a"]')).toThrow(/names no script/);
  });

  it('no kvgate container in deploy/ replaces the image command (they pass args only)', () => {
    const files = ['kubernetes/gate-deployment.yaml', 'kubernetes/workers.yaml', 'gie/epp.yaml'];
    let kvgateContainers = 0;
    for (const file of files) {
      const text = readFileSync(new URL(`../../deploy/${file}`, import.meta.url), 'utf8');
      for (const doc of parseAllDocuments(text)) {
        const spec = (doc.toJS() as { spec?: { template?: { spec?: PodSpec } } } | null)?.spec?.template?.spec;
        for (const c of [...(spec?.containers ?? []), ...(spec?.initContainers ?? [])]) {
          if (!String(c.image).includes('kvgate')) continue;
          kvgateContainers++;
          expect(c.command, `${file}: ${String(c.image)}`).toBeUndefined();
          expect(Array.isArray(c.args), `${file}: ${String(c.image)}`).toBe(true);
        }
      }
    }
    // The gate, the four worker sidecars and the GIE EPP.
    expect(kvgateContainers).toBe(6);
  });
});
