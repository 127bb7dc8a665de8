import { decode, encode } from '@msgpack/msgpack';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { Request } from 'zeromq';
import { predictNixlHash } from '../../src/compat/nixl-hash.js';
import { liveHashSupport, readLiveNixlHash } from '../../src/sidecar/nixl-side-channel.js';
import type { SimServer } from './server.js';
import { startZmqSideChannel } from './zmq-side-channel.js';
import { startTestSim } from './testing.js';

const sims: SimServer[] = [];
afterEach(async () => {
  await Promise.all(sims.splice(0).map((s) => s.close()));
});
const start = async (descriptor: Record<string, unknown>, sim: Record<string, unknown> = {}) => {
  const s = await startTestSim(descriptor, sim);
  sims.push(s);
  return s;
};

describe('the ZMQ side channel, served as vLLM serves it', () => {
  it("v12 (main): (get_meta_msg, pp, tp) -> [NixlHandshakePayload, timestamp]; the hash is the simulator's own", async () => {
    const s = await start({ engine: { version: '0.20.1' }, connector: { version: 12 }, hybridKvCacheManager: false });
    const sock = new Request({ linger: 0, receiveTimeout: 2000 });
    sock.connect(`tcp://127.0.0.1:${s.nixlSideChannelPort}`);
    await sock.send(encode([new TextEncoder().encode('get_meta_msg'), 0, 0]));
    const frames = await sock.receive();
    sock.close();
    expect(frames).toHaveLength(2);
    const payload = decode(frames[0]!) as { compatibility_hash: string; agent_metadata_bytes: Uint8Array };
    expect(Object.keys(payload)).toEqual(['compatibility_hash', 'agent_metadata_bytes']);
    expect(decode(payload.agent_metadata_bytes)).toMatchObject({ engine_id: s.engineId, kv_cache_layout: 'HND' });
    expect(typeof decode(frames[1]!)).toBe('number');
    // Independent code, same answer for an honest worker: kvgate's prediction agrees with the simulator's table.
    expect(payload.compatibility_hash).toBe(predictNixlHash(s.config.descriptor).hash);
  });

  it('kvgate reads it (v2 and v12 shapes); a runtime flag the declaration does not have changes it', async () => {
    const v2 = await start({ engine: { version: '0.13.0' }, connector: { version: 2 } });
    const r2 = await readLiveNixlHash(`127.0.0.1:${v2.nixlSideChannelPort}`, 1, 2000);
    // The engine id beside the hash (NixlAgentMetadata.engine_id) names the launch in refusals.
    expect(r2).toEqual({ ok: true, hash: predictNixlHash(v2.config.descriptor).hash, engineId: v2.engineId });
    const hma = await start(
      { engine: { version: '0.20.1' }, connector: { version: 12 }, hybridKvCacheManager: false },
      { behaveAs: { hybridKvCacheManager: true } },
    );
    const r12 = await readLiveNixlHash(`127.0.0.1:${hma.nixlSideChannelPort}`, 2, 2000);
    expect(r12.ok && r12.hash).not.toBe(predictNixlHash(hma.config.descriptor).hash);
  });

  it('an IPv6 side channel (vLLM on an IPv6 pod IP) is read at its bracketed address', async () => {
    const channel = await startZmqSideChannel({
      host: '::1',
      port: 0,
      connectorVersion: 2,
      compatibilityHash: 'f'.repeat(64),
      agentMetadata: { engine_id: 'engine-v6' },
      logger: pino({ level: 'silent' }),
    });
    try {
      // `--nixl-side-channel "[$(POD_IP)]:5600"` with POD_IP=::1; without ZMQ_IPV6 on the socket the read timed out.
      expect(await readLiveNixlHash(`[::1]:${channel.port}`, 1, 2000)).toEqual({ ok: true, hash: 'f'.repeat(64), engineId: 'engine-v6' });
    } finally {
      await channel.close();
    }
  });

  it("a request of the wrong shape stops the listener, as it stops vLLM's thread: nobody is answered again", async () => {
    const s = await start({ engine: { version: '0.20.1' }, connector: { version: 12 } });
    expect((await readLiveNixlHash(`127.0.0.1:${s.nixlSideChannelPort}`, 1, 300)).ok).toBe(false);
    expect((await readLiveNixlHash(`127.0.0.1:${s.nixlSideChannelPort}`, 2, 300)).ok).toBe(false);
  });

  it('vLLM before 0.13 has no hash, and connector versions whose request shape was not read are not queried', () => {
    expect(liveHashSupport({ engine: { version: '0.11.0' }, connector: { version: 2 } } as never)).toMatchObject({ kind: 'none' });
    expect(liveHashSupport({ engine: { version: '0.15.0' }, connector: { version: 8 } } as never)).toMatchObject({ kind: 'unread-format' });
    expect(liveHashSupport({ engine: { version: '0.13.0' }, connector: { version: 2 } } as never)).toEqual({ kind: 'read', ranks: 1 });
    expect(liveHashSupport({ engine: { version: '0.22.0' }, connector: { version: 14 } } as never)).toMatchObject({
      kind: 'unread-format',
    });
  });

  it('v13 (vllm-project/vllm nixl/base_scheduler.py @ 73ee90a0) keeps the v12 listener: kvgate reads it, predicted and served alike', async () => {
    expect(liveHashSupport({ engine: { version: '0.22.0' }, connector: { version: 13 } } as never)).toEqual({ kind: 'read', ranks: 2 });
    const s = await start({ engine: { version: '0.22.0' }, connector: { version: 13 } });
    const r = await readLiveNixlHash(`127.0.0.1:${s.nixlSideChannelPort}`, 2, 2000);
    expect(r).toEqual({ ok: true, hash: predictNixlHash(s.config.descriptor).hash, engineId: s.engineId });
    expect(predictNixlHash(s.config.descriptor).status).toBe('known');
  });
});
