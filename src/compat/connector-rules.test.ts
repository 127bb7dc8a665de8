import { describe, expect, it } from 'vitest';
import type { CompatDescriptorInput } from './descriptor.js';
import { checkDescriptor, checkTransfer, findConnectorRule, NIXL_RULE } from './connector-rules.js';
import { exampleDescriptor } from './testing.js';

const base = exampleDescriptor();
const d = (edit: (x: CompatDescriptorInput) => void) => exampleDescriptor(edit);
const fp8 = (scheme: 'static-checkpoint' | 'packed' | 'dynamic-per-block') => (x: CompatDescriptorInput) => {
  x.kvCache.dtype = 'fp8_e4m3';
  x.kvCache.scaleScheme = scheme;
};

describe('checkTransfer: NixlConnector', () => {
  it('accepts identical descriptors and differing tensor-parallel sizes', () => {
    expect(checkTransfer(base, base, 'strict')).toEqual({ verdict: 'ok', reasons: [], warnings: [] });
    const tp8 = d((x) => void (x.parallel = { tensorParallelSize: 8 }));
    expect(checkTransfer(base, tp8, 'strict').verdict).toBe('ok');
  });

  it('refuses different fingerprints, naming the differing field with both sides', () => {
    const r = checkTransfer(
      base,
      d((x) => void (x.model.revision = 'def')),
      'strict',
    );
    expect(r.verdict).toBe('refuse');
    expect(r.reasons[0]).toMatch(/fingerprints differ/);
    expect(r.reasons).toContain(`weights revision: prefill runs "${base.model.revision}", decode runs "def"`);
  });

  it('refuses different KV dtypes with the NIXL reason', () => {
    const r = checkTransfer(
      d(fp8('static-checkpoint')),
      d((x) => void (x.kvCache.dtype = 'bfloat16')),
      'lenient',
    );
    expect(r.verdict).toBe('refuse');
    expect(r.reasons.join('\n')).toMatch(/KV cache dtype: prefill fp8_e4m3, decode bfloat16; NixlConnector requires the same cache_dtype/);
  });

  it.each(['static-checkpoint', 'packed'] as const)('transfers fp8 with %s scales', (scheme) => {
    expect(checkTransfer(d(fp8(scheme)), d(fp8(scheme)), 'strict')).toEqual({ verdict: 'ok', reasons: [], warnings: [] });
  });

  it('refuses fp8 with dynamic per-block scales in both modes', () => {
    for (const mode of ['strict', 'lenient'] as const) {
      const r = checkTransfer(d(fp8('dynamic-per-block')), d(fp8('dynamic-per-block')), mode);
      expect(r.verdict).toBe('refuse');
      expect(r.reasons.join('\n')).toMatch(/per-block scales are not transferred with the KV blocks/);
    }
  });

  it('refuses mixing static and packed scales even though each alone is fine', () => {
    const r = checkTransfer(d(fp8('static-checkpoint')), d(fp8('packed')), 'strict');
    expect(r.verdict).toBe('refuse');
    expect(r.reasons.join('\n')).toMatch(/KV scale scheme: prefill static-checkpoint, decode packed/);
  });

  it('refuses push with pull', () => {
    const r = checkTransfer(
      base,
      d((x) => void (x.connector.transferMode = 'push')),
      'strict',
    );
    expect(r.verdict).toBe('refuse');
    expect(r.reasons.join('\n')).toMatch(/transfer mode: prefill pull, decode push; a push connector and a pull connector never pair/);
  });

  it('allows a smaller prefill block size only without HMA', () => {
    const noHma = (bs: number) =>
      d((x) => {
        x.hybridKvCacheManager = false;
        x.kvCache.blockSize = bs;
      });
    expect(checkTransfer(noHma(16), noHma(32), 'strict').verdict).toBe('ok');
    const bigger = checkTransfer(noHma(32), noHma(16), 'strict');
    expect(bigger.verdict).toBe('refuse');
    expect(bigger.reasons.join('\n')).toMatch(/prefill 32 > decode 16/);
    const hma = checkTransfer(
      base,
      d((x) => void (x.kvCache.blockSize = 32)),
      'strict',
    );
    expect(hma.verdict).toBe('refuse');
    expect(hma.reasons.join('\n')).toMatch(/hybrid KV cache manager off/);
  });

  it("refuses a pair vLLM's own handshake would reject even when the fingerprints agree", () => {
    const r = checkTransfer(
      base,
      d((x) => void (x.model.path = '/mnt/models/llama')),
      'strict',
    );
    expect(r.verdict).toBe('refuse');
    expect(r.reasons).toHaveLength(1);
    expect(r.reasons[0]).toMatch(/NIXL handshake would reject.*model "meta-llama\/Llama-3.1-8B-Instruct" vs "\/mnt\/models\/llama"/);
  });

  it('warns when the NIXL factor set is interpolated', () => {
    const v7 = d((x) => void (x.connector.version = 7));
    const r = checkTransfer(v7, v7, 'strict');
    expect(r.verdict).toBe('ok');
    expect(r.warnings.join('\n')).toMatch(/interpolated/);
  });

  it('refuses descriptors that cannot be normalised', () => {
    const r = checkTransfer(
      base,
      d((x) => void (x.modelDtype = 'auto')),
      'lenient',
    );
    expect(r.verdict).toBe('refuse');
    expect(r.reasons[0]).toMatch(/^decode: modelDtype/);
  });
});

describe('recheck: connector versions and connectors without rules', () => {
  const v14 = d((x) => void (x.connector.version = 14));
  const lmcache = d((x) => {
    x.connector.name = 'LMCacheConnectorV1';
    x.connector.version = 3;
  });

  it('strict mode refuses an unknown NIXL version with a recheck message', () => {
    const r = checkTransfer(v14, v14, 'strict');
    expect(r.verdict).toBe('refuse');
    expect(r.reasons.join('\n')).toMatch(/NixlConnector v14 is outside the versions .* \(v1-v13\)/);
    expect(r.reasons.join('\n')).toMatch(/implementation-specific limit to recheck when the engine version changes/);
    expect(r.reasons.join('\n')).toMatch(/vLLM 0\.14\.2/);
  });

  it('lenient mode allows it with a warning', () => {
    const r = checkTransfer(v14, v14, 'lenient');
    expect(r.verdict).toBe('recheck');
    expect(r.reasons).toEqual([]);
    expect(r.warnings.join('\n')).toMatch(/recheck/);
  });

  it('lenient mode never waives a known limit', () => {
    const dyn = d((x) => {
      fp8('dynamic-per-block')(x);
      x.connector.version = 14;
    });
    const r = checkTransfer(dyn, dyn, 'lenient');
    expect(r.verdict).toBe('refuse');
    expect(r.warnings.join('\n')).toMatch(/recheck/);
  });

  it('an unknown connector is a recheck, and still needs equal fingerprints', () => {
    expect(checkTransfer(lmcache, lmcache, 'strict').verdict).toBe('refuse');
    expect(checkTransfer(lmcache, lmcache, 'strict').reasons[0]).toMatch(/no capability rules for connector LMCacheConnectorV1/);
    expect(checkTransfer(lmcache, lmcache, 'lenient').verdict).toBe('recheck');
    const other = d((x) => {
      x.connector.name = 'LMCacheConnectorV1';
      x.connector.version = 3;
      x.tokenizer.revision = 'new';
    });
    expect(checkTransfer(lmcache, other, 'lenient').verdict).toBe('refuse');
  });

  it('the rule table covers NixlConnector v1-v13', () => {
    expect(findConnectorRule('NixlConnector')).toBe(NIXL_RULE);
    expect([NIXL_RULE.minVersion, NIXL_RULE.maxVersion]).toEqual([1, 13]);
    expect(findConnectorRule('nixlconnector')).toBeUndefined();
  });
});

describe('checkDescriptor', () => {
  it('accepts a plain revision', () => {
    expect(checkDescriptor(base, 'strict')).toEqual({ verdict: 'ok', reasons: [], warnings: [] });
  });

  it('refuses a revision whose KV uses dynamic per-block scales over NIXL', () => {
    const r = checkDescriptor(d(fp8('dynamic-per-block')), 'lenient');
    expect(r.verdict).toBe('refuse');
    expect(r.reasons[0]).toMatch(/cannot disaggregate: per-block scales are not transferred with the KV blocks/);
  });

  it('rechecks unknown versions: strict refuses, lenient warns', () => {
    const v14 = d((x) => void (x.connector.version = 14));
    expect(checkDescriptor(v14, 'strict').verdict).toBe('refuse');
    const lenient = checkDescriptor(v14, 'lenient');
    expect(lenient.verdict).toBe('recheck');
    expect(lenient.warnings[0]).toMatch(/recheck/);
  });

  it('refuses a contradictory descriptor with the normalisation issue', () => {
    const r = checkDescriptor(
      d((x) => void (x.kvCache.scaleScheme = 'packed')),
      'strict',
    );
    expect(r.verdict).toBe('refuse');
    expect(r.reasons[0]).toMatch(/^kvCache\.scaleScheme:/);
  });
});
