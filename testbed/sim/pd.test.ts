import { traitsOf } from './flavour.js';
import { describe, expect, it } from 'vitest';
import {
  hashMismatchMessage,
  parseKvTransferParams,
  producerKeepsBlocks,
  producerParams,
  validateHandshake,
  type LocalAgent,
} from './pd.js';
import type { HandshakePayload } from './side-channel.js';

const remote = {
  do_remote_prefill: true,
  do_remote_decode: false,
  remote_block_ids: [4, 5],
  remote_engine_id: 'e1',
  remote_request_id: 'cmpl-1-0',
  remote_host: '127.0.0.1',
  remote_port: 5600,
  tp_size: 1,
};

describe('kv_transfer_params', () => {
  it('classifies producer, consumer, invalid and plain requests', () => {
    expect(parseKvTransferParams(null).kind).toBe('none');
    expect(parseKvTransferParams({ do_remote_decode: true, do_remote_prefill: false }).kind).toBe('producer');
    const c = parseKvTransferParams(remote);
    expect(c.kind === 'consumer' && c.remote.remoteBlockIds).toEqual([4, 5]);
    for (const field of ['remote_block_ids', 'remote_engine_id', 'remote_request_id', 'remote_host', 'remote_port']) {
      const { [field]: _, ...rest } = remote as Record<string, unknown>;
      expect(parseKvTransferParams(rest).kind).toBe('invalid');
    }
  });

  it('builds P params field for field, growing with the connector version', () => {
    const a = {
      blockIds: [1, 2],
      engineId: 'e',
      requestId: 'r',
      host: 'h',
      port: 1,
      tpSize: 2,
      numTokens: 20,
      transferMode: 'pull' as const,
      traits: traitsOf(undefined),
    };
    expect(producerParams({ ...a, connectorVersion: 2 })).toEqual({
      do_remote_prefill: true,
      do_remote_decode: false,
      remote_block_ids: [1, 2],
      remote_engine_id: 'e',
      remote_request_id: 'r',
      remote_host: 'h',
      remote_port: 1,
      tp_size: 2,
    });
    expect(producerParams({ ...a, connectorVersion: 5 })['remote_num_tokens']).toBe(20);
    expect(producerParams({ ...a, connectorVersion: 7 })['transfer_mode']).toBe('pull');
    // vLLM 0.11: no remote_request_id (D reads under the id it shares with P); main: per-group ids and newer fields.
    const old = producerParams({ ...a, connectorVersion: 1, traits: traitsOf('0.11') });
    expect(old).not.toHaveProperty('remote_request_id');
    expect(parseKvTransferParams(old).kind).toBe('invalid');
    const shared = parseKvTransferParams(old, 'cmpl-x-0');
    expect(shared.kind === 'consumer' && shared.remote.remoteRequestId).toBe('cmpl-x-0');
    const main = producerParams({ ...a, connectorVersion: 12, traits: traitsOf('main') });
    expect(main).toMatchObject({
      remote_block_ids: [[1, 2]],
      remote_request_id: 'r',
      remote_num_tokens: 20,
      remote_blocks_expiry_time: null,
      transfer_mode: 'pull',
      pp_size: 1,
      dcp_size: 1,
    });
    const nested = parseKvTransferParams(main);
    expect(nested.kind === 'consumer' && nested.remote.remoteBlockIds).toEqual([1, 2]);
    expect(producerKeepsBlocks('stop', 2)).toBe(false);
    expect(producerKeepsBlocks('length', 2)).toBe(true);
    // v2 (@002a1057, @fe6adf39) length-only; from v4 (@b36ea896) a stop finish too; the simulator switches at v5.
    expect(producerKeepsBlocks('stop', 4)).toBe(false);
    expect(producerKeepsBlocks('stop', 5)).toBe(true);
  });
});

describe('handshake validation', () => {
  const local: LocalAgent = {
    compatibilityHash: 'aaa',
    layout: 'HND',
    blockSize: 16,
    blockLen: 4096,
    numLayers: 32,
    hma: false,
    enforceCompatHash: true,
  };
  const payload = (o: Partial<HandshakePayload['agent_metadata']> & { hash?: string } = {}): HandshakePayload => ({
    compatibility_hash: o.hash ?? 'aaa',
    agent_metadata: {
      engine_id: 'e1',
      kv_cache_layout: 'HND',
      block_size: 16,
      block_len: 4096,
      num_layers: 32,
      num_blocks: 10,
      tp_size: 1,
      connector_version: 2,
      attn_backend_name: 'FLASH_ATTN',
      ...o,
    },
  });

  it("checks the hash first, with vLLM's message", () => {
    const m = validateHandshake(local, payload({ hash: 'bbb', kv_cache_layout: 'NHD' }), 'e1');
    expect(m).toBe(hashMismatchMessage('aaa', 'bbb'));
    expect(m).toMatch(
      /^NIXL compatibility hash mismatch\. Local: aaa, Remote: bbb\. Prefill and decode instances have incompatible configurations\./,
    );
    expect(validateHandshake({ ...local, enforceCompatHash: false }, payload({ hash: 'bbb' }), 'e1')).toBeNull();
  });

  it('then engine id, layout, block size, layers and block_len', () => {
    expect(validateHandshake(local, payload(), 'e1')).toBeNull();
    expect(validateHandshake(local, payload(), 'other')).toBe('Remote NIXL agent engine ID mismatch.');
    expect(validateHandshake(local, payload({ kv_cache_layout: 'NHD' }), 'e1')).toMatch(/same kv_cache_layout/);
    expect(validateHandshake({ ...local, hma: true }, payload({ block_size: 32 }), 'e1')).toBe(
      'HMA does not support different remote block size yet',
    );
    expect(validateHandshake(local, payload({ num_layers: 16 }), 'e1')).toMatch(/Number of KV layers/);
    expect(validateHandshake(local, payload({ block_len: 2048 }), 'e1')).toMatch(/same dtype/);
  });
});
