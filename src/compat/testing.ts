/**
 * Test support: a realistic descriptor to start from, so tests (here and in other folders) change one field at a
 * time instead of restating thirty. Not used by product code.
 */
import { parseDescriptor, type CompatDescriptor, type CompatDescriptorInput } from './descriptor.js';

/** A Llama-3.1-8B revision served by vLLM with NixlConnector v12, pull mode, bfloat16 KV. A fresh object each call. */
export function exampleDescriptorInput(): CompatDescriptorInput {
  return {
    model: { id: 'meta-llama/Llama-3.1-8B-Instruct', revision: '0e9e39f249a16976918f6564b8830bc894c89659' },
    adapter: null,
    tokenizer: { id: 'meta-llama/Llama-3.1-8B-Instruct', revision: '0e9e39f249a16976918f6564b8830bc894c89659' },
    chatTemplate: { id: 'llama-3.1-instruct', revision: 'sha256:5a1b' },
    architecture: {
      name: 'LlamaForCausalLM',
      numLayers: 32,
      numKvHeads: 8,
      headSize: 128,
      attentionBackend: 'FLASH_ATTN',
      position: { type: 'rope', ropeTheta: 500000, ropeScaling: { type: 'llama3', factor: 8 } },
      slidingWindow: null,
    },
    modelDtype: 'bfloat16',
    kvCache: { dtype: 'auto', scaleScheme: 'none', blockSize: 16, layout: 'HND' },
    engine: { name: 'vllm', version: '0.14.2' },
    connector: { name: 'NixlConnector', version: 12, transferMode: 'pull' },
    hybridKvCacheManager: true,
    speculative: null,
    parallel: { tensorParallelSize: 1 },
  };
}

/**
 * The example descriptor, parsed, after `edit` changed the plain input. `edit` mutates its argument (a fresh copy).
 */
export function exampleDescriptor(edit?: (d: CompatDescriptorInput) => void): CompatDescriptor {
  const input = exampleDescriptorInput();
  edit?.(input);
  return parseDescriptor(input);
}

/** Rebuild every object with its keys in a seed-determined order (arrays keep their order: it is meaningful). */
export function shuffleKeys(value: unknown, seed: number): unknown {
  let state = seed >>> 0 || 1;
  const next = (): number => {
    state = (Math.imul(state, 1103515245) + 12345) >>> 0;
    return state;
  };
  const walk = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(walk);
    if (v === null || typeof v !== 'object') return v;
    const keys = Object.keys(v);
    for (let i = keys.length - 1; i > 0; i--) {
      const j = next() % (i + 1);
      [keys[i], keys[j]] = [keys[j]!, keys[i]!];
    }
    return Object.fromEntries(keys.map((k) => [k, walk((v as Record<string, unknown>)[k])]));
  };
  return walk(value);
}
