import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import type { CompatDescriptor } from './descriptor.js';
import { describeFingerprintDiff, FINGERPRINT_FIELDS, fingerprintOf, groupIdOf, tryFingerprintOf } from './fingerprint.js';
import { exampleDescriptor, shuffleKeys } from './testing.js';

type Mutable<T> = { -readonly [K in keyof T]: T[K] extends object ? Mutable<T[K]> : T[K] };
type Edit = (d: Mutable<CompatDescriptor>) => void;

/** A parsed descriptor, copied so an edit may change anything (even values the schema would refuse). */
function edited(base: Edit | undefined, change?: Edit): CompatDescriptor {
  const d = structuredClone(exampleDescriptor()) as Mutable<CompatDescriptor>;
  base?.(d);
  change?.(d);
  return d as CompatDescriptor;
}

const withAdapter: Edit = (d) => {
  d.adapter = { id: 'acme/support-lora', revision: 'r1' };
};
const withFp8: Edit = (d) => {
  d.kvCache.dtype = 'fp8_e4m3';
  d.kvCache.scaleScheme = 'static-checkpoint';
};

/** One case per fingerprinted field: `change` alters only that field (from `base`, when given). */
const FIELD_CASES: { path: string; base?: Edit; change: Edit }[] = [
  { path: 'model.id', change: (d) => void (d.model.id = 'meta-llama/Llama-3.1-8B') },
  { path: 'model.revision', change: (d) => void (d.model.revision = 'def') },
  { path: 'adapter.id', base: withAdapter, change: (d) => void (d.adapter!.id = 'acme/sales-lora') },
  { path: 'adapter.revision', base: withAdapter, change: (d) => void (d.adapter!.revision = 'r2') },
  { path: 'tokenizer.id', change: (d) => void (d.tokenizer.id = 'acme/tokenizer') },
  { path: 'tokenizer.revision', change: (d) => void (d.tokenizer.revision = 'abc') },
  { path: 'chatTemplate.id', change: (d) => void (d.chatTemplate.id = 'chatml') },
  { path: 'chatTemplate.revision', change: (d) => void (d.chatTemplate.revision = 'sha256:ffff') },
  { path: 'architecture.name', change: (d) => void (d.architecture.name = 'MistralForCausalLM') },
  { path: 'architecture.numLayers', change: (d) => void (d.architecture.numLayers = 40) },
  { path: 'architecture.numKvHeads', change: (d) => void (d.architecture.numKvHeads = 4) },
  { path: 'architecture.headSize', change: (d) => void (d.architecture.headSize = 64) },
  { path: 'architecture.attentionBackend', change: (d) => void (d.architecture.attentionBackend = 'FLASHINFER') },
  { path: 'architecture.position.type', change: (d) => void (d.architecture.position.type = 'alibi') },
  { path: 'architecture.position.ropeTheta', change: (d) => void (d.architecture.position.ropeTheta = 10000) },
  { path: 'architecture.position.ropeScaling', change: (d) => void (d.architecture.position.ropeScaling = { type: 'llama3', factor: 4 }) },
  { path: 'architecture.slidingWindow', change: (d) => void (d.architecture.slidingWindow = 4096) },
  { path: 'modelDtype', base: (d) => void (d.kvCache.dtype = 'bfloat16'), change: (d) => void (d.modelDtype = 'float16') },
  { path: 'kvCache.dtype', base: withFp8, change: (d) => void (d.kvCache.dtype = 'fp8_e5m2') },
  { path: 'kvCache.scaleScheme', base: withFp8, change: (d) => void (d.kvCache.scaleScheme = 'packed') },
  { path: 'kvCache.layout', change: (d) => void (d.kvCache.layout = 'NHD') },
  { path: 'engine.name', change: (d) => void ((d.engine as { name: string }).name = 'sglang') },
  { path: 'engine.version', change: (d) => void (d.engine.version = '0.14.3') },
  { path: 'connector.name', change: (d) => void (d.connector.name = 'LMCacheConnectorV1') },
  { path: 'connector.version', change: (d) => void (d.connector.version = 11) },
  { path: 'connector.transferMode', change: (d) => void (d.connector.transferMode = 'push') },
  { path: 'speculative', change: (d) => void (d.speculative = { method: 'eagle3', model: 'yuhuili/EAGLE3' }) },
  { path: 'hybridKvCacheManager', change: (d) => void (d.hybridKvCacheManager = false) },
];

/** Things that may differ between prefill and decode without changing what the KV means. */
const EXCLUDED_CASES: { what: string; change: Edit }[] = [
  { what: 'tensor parallel size', change: (d) => void (d.parallel.tensorParallelSize = 8) },
  { what: 'block size (a transfer rule, not KV meaning)', change: (d) => void (d.kvCache.blockSize = 32) },
  { what: 'model path (the NIXL hash rule checks it)', change: (d) => void (d.model.path = '/mnt/models/llama') },
];

describe('fingerprintOf', () => {
  it('is a sha256 hex digest and deterministic', () => {
    const fp = fingerprintOf(exampleDescriptor());
    expect(fp).toMatch(/^[0-9a-f]{64}$/);
    expect(fingerprintOf(exampleDescriptor())).toBe(fp);
  });

  it('has exactly one test case per fingerprinted field', () => {
    expect(FIELD_CASES.map((c) => c.path).sort()).toEqual(FINGERPRINT_FIELDS.map((f) => f.path).sort());
    for (const f of FINGERPRINT_FIELDS) expect(f.why.length).toBeGreaterThan(20);
  });

  it.each(FIELD_CASES)('changes when $path changes', ({ path, base, change }) => {
    const before = edited(base);
    const after = edited(base, change);
    expect(fingerprintOf(after)).not.toBe(fingerprintOf(before));
    const diff = describeFingerprintDiff(before, after);
    const label = FINGERPRINT_FIELDS.find((f) => f.path === path)!.label;
    expect(diff.some((line) => line.startsWith(`${label}:`))).toBe(true);
  });

  it.each(EXCLUDED_CASES)('ignores $what', ({ change }) => {
    expect(fingerprintOf(edited(undefined, change))).toBe(fingerprintOf(exampleDescriptor()));
    expect(describeFingerprintDiff(exampleDescriptor(), edited(undefined, change))).toEqual([]);
  });

  it('distinguishes no adapter from an adapter', () => {
    expect(fingerprintOf(edited(withAdapter))).not.toBe(fingerprintOf(exampleDescriptor()));
  });

  it('does not depend on key order', () => {
    const d = exampleDescriptor();
    const reversed = reverseKeys(d) as CompatDescriptor;
    expect(JSON.stringify(reversed)).not.toBe(JSON.stringify(d));
    expect(fingerprintOf(reversed)).toBe(fingerprintOf(d));
  });

  it('refuses to fingerprint a contradictory descriptor, naming the field and the fix', () => {
    const bad = edited(undefined, (d) => void (d.kvCache.scaleScheme = 'static-checkpoint'));
    const r = tryFingerprintOf(bad);
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.error.message).toMatch(/kvCache\.scaleScheme: .*set scaleScheme to 'none'/);
    expect(() => fingerprintOf(bad)).toThrow(/kvCache\.scaleScheme/);
  });

  it('property: invariant under recursive key reordering', () => {
    fc.assert(
      fc.property(fc.integer(), (seed) => {
        const d = exampleDescriptor((x) => void (x.speculative = { method: 'mtp', b: [1, { y: 2, x: 1 }], a: null }));
        expect(fingerprintOf(shuffleKeys(d, seed) as CompatDescriptor)).toBe(fingerprintOf(d));
      }),
      { numRuns: 100 },
    );
  });
});

describe('describeFingerprintDiff', () => {
  it('names the field and both sides in words a person can act on', () => {
    const a = edited(undefined, (d) => void (d.model.revision = 'abc'));
    const b = edited(undefined, (d) => void (d.model.revision = 'def'));
    expect(describeFingerprintDiff(a, b, { a: 'prefill pool', b: 'decode pool' })).toEqual([
      'weights revision: prefill pool runs "abc", decode pool runs "def"',
    ]);
  });

  it('lists every differing field and nothing else', () => {
    const b = edited(undefined, (d) => {
      d.tokenizer.revision = 'other';
      d.kvCache.layout = 'NHD';
      d.parallel.tensorParallelSize = 4;
    });
    expect(describeFingerprintDiff(exampleDescriptor(), b).map((l) => l.split(':')[0])).toEqual(['tokenizer revision', 'KV cache layout']);
  });

  it('reports normalisation problems instead of a diff', () => {
    const bad = edited(undefined, (d) => void (d.modelDtype = 'auto'));
    const lines = describeFingerprintDiff(exampleDescriptor(), bad, { a: 'prefill', b: 'decode' });
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^decode: modelDtype: 'auto'/);
  });
});

describe('groupIdOf', () => {
  const fp = fingerprintOf(exampleDescriptor());

  it('is g_ + 24 hex digits of sha256(fingerprint \\n scope)', async () => {
    const { createHash } = await import('node:crypto');
    const expected = `g_${createHash('sha256').update(`${fp}\ntenant:acme`).digest('hex').slice(0, 24)}`;
    expect(groupIdOf(fp, 'tenant:acme')).toBe(expected);
    expect(groupIdOf(fp, 'tenant:acme')).toMatch(/^g_[0-9a-f]{24}$/);
  });

  it('depends on the tenant scope and on the fingerprint', () => {
    expect(groupIdOf(fp, 'tenant:acme')).not.toBe(groupIdOf(fp, 'tenant:globex'));
    expect(groupIdOf(fp, 'tenant:acme')).not.toBe(groupIdOf(fp, 'shared'));
    const other = fingerprintOf(edited(undefined, (d) => void (d.model.revision = 'def')));
    expect(groupIdOf(other, 'tenant:acme')).not.toBe(groupIdOf(fp, 'tenant:acme'));
  });

  it('gives the same id for a pair asked again after many other scopes (the kept ids are bounded)', async () => {
    const { createHash } = await import('node:crypto');
    const expected = `g_${createHash('sha256').update(`${fp}\ntenant:again`).digest('hex').slice(0, 24)}`;
    expect(groupIdOf(fp, 'tenant:again')).toBe(expected);
    for (let i = 0; i < 5000; i++) groupIdOf(fp, `tenant-user:acme/u${i}`);
    expect(groupIdOf(fp, 'tenant:again')).toBe(expected);
  });
});

function reverseKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(reverseKeys);
  if (value === null || typeof value !== 'object') return value;
  return Object.fromEntries(
    Object.keys(value)
      .reverse()
      .map((k) => [k, reverseKeys((value as Record<string, unknown>)[k])]),
  );
}

describe('README', () => {
  it('documents every fingerprinted field with its reason', async () => {
    const { readFileSync } = await import('node:fs');
    const readme = readFileSync(new URL('./README.md', import.meta.url), 'utf8');
    for (const f of FINGERPRINT_FIELDS) expect(readme).toContain(`| \`${f.path}\` | ${f.label} | ${f.why} |`);
  });
});
