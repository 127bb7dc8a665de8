/**
 * Test support: a realistic descriptor to start from, so tests (here and in other folders) change one field at a
 * time instead of restating thirty. Not used by product code.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { PACKAGE_ROOT } from '../package-root.js';
import { parseDescriptor, type CompatDescriptor, type CompatDescriptorInput } from './descriptor.js';

const EXAMPLE_FILE = join(PACKAGE_ROOT, 'examples', 'descriptors', 'llama-3.1-8b.yaml');

/**
 * examples/descriptors/llama-3.1-8b.yaml: Llama-3.1-8B on vLLM 0.14 with NixlConnector v12, pull mode, bfloat16 KV,
 * the example operators start from, without its recorded canaries (a test states the canaries it checks). A fresh
 * object each call.
 */
export function exampleDescriptorInput(): CompatDescriptorInput {
  const { canaries: _recorded, ...rest } = parseYaml(readFileSync(EXAMPLE_FILE, 'utf8')) as CompatDescriptorInput;
  return rest;
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
