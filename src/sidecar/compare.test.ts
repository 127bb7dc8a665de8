import { describe, expect, it } from 'vitest';
import { predictNixlHash } from '../compat/nixl-hash.js';
import { exampleDescriptor } from '../compat/testing.js';
import { compareObservation, type Observation } from './compare.js';

const okv = <T>(value: T) => ({ ok: true as const, value });
const TOK = 'a'.repeat(64);
const CHAT = 'b'.repeat(64);
const GEN = 'c'.repeat(64);

function goodObservation(): Observation {
  return {
    version: okv('0.14.2'),
    models: okv([{ id: 'meta-llama/Llama-3.1-8B-Instruct', root: 'meta-llama/Llama-3.1-8B-Instruct', parent: null, maxModelLen: 4096 }]),
    cacheConfig: okv({
      block_size: '16',
      cache_dtype: 'auto',
      kv_cache_layout: 'HND',
      calculate_kv_scales: 'False',
      sliding_window: 'None',
      enable_prefix_caching: 'True',
    }),
    canaries: { tokenizer: okv(TOK), chatTemplate: okv(CHAT) },
  };
}

const declared = exampleDescriptor((d) => {
  d.canaries = { tokenizer: TOK, chatTemplate: CHAT };
});

describe('compareObservation', () => {
  it("folds current vLLM's layout names onto HND/NHD, and still catches the other layout", () => {
    const withLayout = (kv_cache_layout: string): Observation => ({
      ...goodObservation(),
      cacheConfig: okv({ ...(goodObservation().cacheConfig as { value: Record<string, string> }).value, kv_cache_layout }),
    });
    expect(compareObservation(declared, withLayout('LBHNC')).verified).toBe(true);
    const nhd = compareObservation(declared, withLayout('LBNHC'));
    expect(nhd.verified).toBe(false);
    expect(nhd.reasons.join(' ')).toMatch(/kv_cache_layout="LBNHC"/);
    expect(compareObservation(declared, withLayout('BLHNC')).verified).toBe(false);
    const declaredNew = exampleDescriptor((d) => {
      d.canaries = { tokenizer: TOK, chatTemplate: CHAT };
      d.kvCache.layout = 'LBHNC';
    });
    expect(compareObservation(declaredNew, withLayout('HND')).verified).toBe(true);
  });

  it('takes sliding_window None as no evidence (mixed sliding-window models report it), and a number as a value', () => {
    const gemma = exampleDescriptor((d) => {
      d.canaries = { tokenizer: TOK, chatTemplate: CHAT };
      d.architecture.slidingWindow = 4096;
    });
    const withWindow = (sliding_window: string): Observation => ({
      ...goodObservation(),
      cacheConfig: okv({ ...(goodObservation().cacheConfig as { value: Record<string, string> }).value, sliding_window }),
    });
    const none = compareObservation(gemma, withWindow('None'));
    expect(none.verified).toBe(true);
    expect(none.declaredOnly).toContain('architecture.slidingWindow');
    expect(compareObservation(gemma, withWindow('4096')).declaredOnly).not.toContain('architecture.slidingWindow');
    expect(compareObservation(gemma, withWindow('1024')).reasons.join(' ')).toMatch(/sliding window/);
    expect(compareObservation(declared, withWindow('4096')).verified).toBe(false);
  });

  it('verifies a worker whose every exposed field agrees, and lists the rest as declared-only', () => {
    const v = compareObservation(declared, goodObservation());
    expect(v.reasons).toEqual([]);
    expect(v.verified).toBe(true);
    expect(v.measured).toMatchObject({
      'engine.version': '0.14.2',
      'kvCache.blockSize': 16,
      'canaries.tokenizer': TOK,
      maxModelLen: 4096,
      enablePrefixCaching: true,
    });
    // No endpoint exposes these: they are trusted, and the status says so.
    expect(v.declaredOnly).toEqual(
      expect.arrayContaining(['model.revision', 'architecture.attentionBackend', 'architecture.position.ropeTheta', 'modelDtype']),
    );
    expect(v.declaredOnly).not.toContain('tokenizer.revision');
    expect(v.declaredOnly).not.toContain('engine.version');
    expect(v.declaredOnly).not.toContain('kvCache.layout');
  });

  it("records the engine canary's engine id, and is unverified when a requested engine id could not be read", () => {
    const seen = compareObservation(declared, { ...goodObservation(), engineId: okv('engine-1') });
    expect(seen.verified).toBe(true);
    expect(seen.measured['engineId']).toBe('engine-1');
    const missing = compareObservation(declared, {
      ...goodObservation(),
      engineId: { ok: false, error: 'the canary prefill answered kv_transfer_params without remote_engine_id' },
    });
    expect(missing.verified).toBe(false);
    expect(missing.reasons).toEqual([
      'engine id: the canary prefill answered kv_transfer_params without remote_engine_id; without it no prefill answer can be tied to this verification, so none is attested',
    ]);
    expect(missing.measured).not.toHaveProperty('engineId');
  });

  it("takes the live NIXL hash only from a side channel that names the engine the worker's HTTP port answers for", () => {
    const predicted = predictNixlHash(declared).hash;
    const live = (engineId?: string): NonNullable<Observation['nixlHash']> => ({
      sideChannel: '10.0.0.7:5600',
      observed: okv(predicted),
      ...(engineId === undefined ? {} : { engineId }),
    });
    // The same launch, another data-parallel rank: one worker.
    const same = compareObservation(declared, { ...goodObservation(), engineId: okv('e1_dp3'), nixlHash: live('e1_dp0') });
    expect(same.verified).toBe(true);
    expect(same.measured['nixlHash']).toBe(predicted);
    // Another vLLM answers there with the predicted hash: its hash says nothing about this worker.
    const other = compareObservation(declared, { ...goodObservation(), engineId: okv('e1'), nixlHash: live('e2') });
    expect(other.verified).toBe(false);
    expect(other.measured).not.toHaveProperty('nixlHash');
    expect(other.reasons).toEqual([
      "NIXL compatibility hash: the side channel 10.0.0.7:5600 answers for engine e2, but the worker's HTTP port answers for engine e1: the hash read there is another vLLM's, not this worker's (check VLLM_NIXL_SIDE_CHANNEL_HOST/PORT and the sidecar's nixlSideChannel or --nixl-side-channel), and decode workers' handshakes with it would fail",
    ]);
    // An answer that hides its engine id cannot be told to be this worker's.
    const hidden = compareObservation(declared, { ...goodObservation(), engineId: okv('e1'), nixlHash: live() });
    expect(hidden.verified).toBe(false);
    expect(hidden.reasons[0]).toMatch(/answered without an engine id in its agent metadata/);
    // No HTTP engine id to compare with (a decode sidecar runs no engine canary): the hash alone decides, as before.
    expect(compareObservation(declared, { ...goodObservation(), nixlHash: live('e2') }).verified).toBe(true);
  });

  it('a generation canary that agrees verifies the weights revision', () => {
    const d = exampleDescriptor((x) => {
      x.canaries = { tokenizer: TOK, chatTemplate: CHAT, generation: GEN };
    });
    const v = compareObservation(d, {
      ...goodObservation(),
      canaries: { tokenizer: okv(TOK), chatTemplate: okv(CHAT), generation: okv(GEN) },
    });
    expect(v.verified).toBe(true);
    expect(v.declaredOnly).not.toContain('model.revision');
  });

  it('names each disagreeing field with both values', () => {
    const o: Observation = {
      ...goodObservation(),
      version: okv('0.15.0'),
      cacheConfig: okv({
        block_size: '32',
        cache_dtype: 'fp8',
        kv_cache_layout: 'NHD',
        calculate_kv_scales: 'True',
        sliding_window: '4096',
      }),
      canaries: { tokenizer: okv('f'.repeat(64)), chatTemplate: okv(CHAT) },
    };
    const v = compareObservation(declared, o);
    expect(v.verified).toBe(false);
    const text = v.reasons.join('\n');
    expect(text).toContain('engine version: the worker reports vLLM "0.15.0"');
    expect(text).toContain('KV block size');
    expect(text).toContain('cache_dtype="fp8"');
    expect(text).toContain('KV cache layout');
    expect(text).toContain('sliding window');
    expect(text).toMatch(
      /tokenizer canary digest ffffffffffff… differs from the declared aaaaaaaaaaaa…: the worker's tokenizer is not meta-llama\/Llama-3.1-8B-Instruct rev 0e9e39f/,
    );
    expect(v.reasons).toHaveLength(6);
  });

  it('flags dynamic fp8 scales declared as static, and a raw dtype spelling vLLM would hash differently', () => {
    const fp8 = exampleDescriptor((x) => {
      x.kvCache = { dtype: 'fp8', scaleScheme: 'static-checkpoint', blockSize: 16, layout: 'HND' };
    });
    const scales = compareObservation(fp8, {
      ...goodObservation(),
      cacheConfig: okv({ block_size: '16', cache_dtype: 'fp8', calculate_kv_scales: 'True' }),
    });
    expect(scales.reasons.join()).toContain('KV scale scheme');
    const spelling = compareObservation(fp8, {
      ...goodObservation(),
      cacheConfig: okv({ block_size: '16', cache_dtype: 'fp8_e4m3', calculate_kv_scales: 'False' }),
    });
    expect(spelling.reasons).toHaveLength(1);
    expect(spelling.reasons[0]).toContain('NIXL handshake hashes the raw');
  });

  it('a worker serving other weights (root) or missing its adapter is unverified', () => {
    const o = goodObservation();
    const other = compareObservation(declared, {
      ...o,
      models: okv([{ id: 'x', root: 'org/other-model', parent: null, maxModelLen: null }]),
    });
    expect(other.reasons.join()).toContain('"org/other-model"');
    const withAdapter = exampleDescriptor((x) => {
      x.adapter = { id: 'sql-lora', revision: 'r1' };
    });
    expect(compareObservation(withAdapter, o).reasons.join()).toContain('no LoRA card for "sql-lora"');
    const served = compareObservation(withAdapter, {
      ...o,
      models: okv([
        { id: 'meta-llama/Llama-3.1-8B-Instruct', root: 'meta-llama/Llama-3.1-8B-Instruct', parent: null, maxModelLen: 4096 },
        { id: 'sql-lora', root: '/loras/sql', parent: 'meta-llama/Llama-3.1-8B-Instruct', maxModelLen: null },
      ]),
    });
    expect(served.verified).toBe(true);
    expect(served.declaredOnly).toContain('adapter.revision');
    expect(served.declaredOnly).not.toContain('adapter.id');
  });

  it('checks the configured served model name', () => {
    expect(compareObservation(declared, goodObservation(), { servedModelName: 'llama' }).reasons.join()).toContain(
      'served model name "llama"',
    );
  });

  it('fails closed when the worker is down or a declared canary cannot be measured', () => {
    const down = compareObservation(declared, { down: 'http://127.0.0.1:1/version: ECONNREFUSED' });
    expect(down).toMatchObject({
      verified: false,
      reasons: [expect.stringContaining('down or unreachable: http://127.0.0.1:1/version: ECONNREFUSED')],
    });
    const noTokenize = compareObservation(declared, {
      ...goodObservation(),
      canaries: { tokenizer: { ok: false, error: 'HTTP 404' }, chatTemplate: okv(CHAT) },
    });
    expect(noTokenize.reasons).toEqual([expect.stringContaining('tokenizer canary: could not be measured (HTTP 404)')]);
    // Without a declared digest the same failure is not a disagreement: the field just stays declared-only.
    const undeclared = compareObservation(exampleDescriptor(), {
      ...goodObservation(),
      canaries: { tokenizer: { ok: false, error: 'HTTP 404' } },
    });
    expect(undeclared.verified).toBe(true);
    expect(undeclared.declaredOnly).toContain('tokenizer.revision');
  });

  it('an engine without cache_config_info leaves the cache fields declared-only', () => {
    const v = compareObservation(declared, { ...goodObservation(), cacheConfig: okv(null) });
    expect(v.verified).toBe(true);
    expect(v.declaredOnly).toEqual(expect.arrayContaining(['kvCache.dtype', 'kvCache.layout', 'kvCache.blockSize']));
  });
});
