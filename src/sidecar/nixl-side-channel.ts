/**
 * Reading a live vLLM worker's real NIXL compatibility hash from its side channel, the way a decode worker does: a
 * ZMQ REQ socket to `VLLM_NIXL_SIDE_CHANNEL_HOST:PORT`, request `msgpack((b"get_meta_msg", [pp_rank,] tp_rank))`,
 * answer `msgpack(NixlHandshakePayload{compatibility_hash, agent_metadata_bytes})` (plus, from connector v5, a
 * msgpack timestamp frame). Followed from vLLM's sources (vllm-project/vllm):
 * - v1/v2, the 0.13 line: v1/nixl_connector.py @ 002a1057e9ae674d7bdc9c4be95bc29d65d2e808 (`_nixl_handshake`
 *   sends `(GET_META_MSG, remote_rank)`; the listener unpacks `msg, target_tp_rank`).
 * - v12, main: v1/nixl/base_scheduler.py @ 0050936b22adda2ef0197fa3bb2551fe6c5437dc (the listener unpacks
 *   `msg, target_pp_rank, target_tp_rank` and answers `(identity, b"", payload, ts)`).
 * - v13: the same listener, read at v1/nixl/base_scheduler.py @ 73ee90a0b209425fdd374f751d19686127985dd4.
 * - No hash before vLLM 0.13 (PR #29503 added it): there is nothing to read, and the canaries carry the check.
 * A request of the wrong shape kills vLLM's listener thread (the unpacking raises inside it), so the hash is read
 * only for connector versions whose request shape was read in vLLM's source; for the others the status says so.
 */
import { decode, encode } from '@msgpack/msgpack';
import { Request } from 'zeromq';
import type { CompatDescriptor } from '../compat/descriptor.js';

const GET_META_MSG = new TextEncoder().encode('get_meta_msg');

/** Connector versions whose side-channel request shape was read in vLLM's source, with their rank count. */
const READ_WIRE: Readonly<Record<number, 1 | 2>> = { 1: 1, 2: 1, 12: 2, 13: 2 };

export type LiveHashSupport =
  | { readonly kind: 'read'; readonly ranks: 1 | 2 }
  | { readonly kind: 'none' | 'unread-format'; readonly reason: string };

/** Whether (and how) the live hash of a worker running `d` can be read. */
export function liveHashSupport(d: CompatDescriptor): LiveHashSupport {
  const m = /^(\d+)\.(\d+)/.exec(d.engine.version);
  if (m !== null && Number(m[1]) === 0 && Number(m[2]) < 13) {
    return {
      kind: 'none',
      reason: `no handshake hash before vLLM 0.13; canaries carry the check (this worker declares vLLM ${d.engine.version}; PR #29503 added the hash)`,
    };
  }
  const ranks = READ_WIRE[d.connector.version];
  if (ranks === undefined) {
    return {
      kind: 'unread-format',
      reason: `the side-channel request of NIXL connector v${d.connector.version} was not read in vLLM's source (read: v1, v2, v12, v13); kvgate does not send a request of a guessed shape, which would stop vLLM's handshake listener`,
    };
  }
  return { kind: 'read', ranks };
}

/** The live hash, and the engine id in the agent metadata beside it when it decodes (names the launch in refusals). */
export type HashRead =
  | { readonly ok: true; readonly hash: string; readonly engineId?: string }
  | { readonly ok: false; readonly error: string };

/**
 * `NixlAgentMetadata.engine_id` from `agent_metadata_bytes` (msgspec msgpack of the dataclass, a map), or undefined
 * when it does not decode: only the hash is relied on, the id only names the worker.
 */
function engineIdOf(bytes: unknown): string | undefined {
  if (!(bytes instanceof Uint8Array)) return undefined;
  try {
    const meta = decode(bytes) as Record<string, unknown> | null;
    const id = meta !== null && typeof meta === 'object' ? meta['engine_id'] : undefined;
    return typeof id === 'string' ? id : undefined;
  } catch {
    return undefined;
  }
}

/** One handshake query; failures are returned, never thrown. `address` is `host:port`. */
export async function readLiveNixlHash(address: string, ranks: 1 | 2, timeoutMs: number, signal?: AbortSignal): Promise<HashRead> {
  // ZMQ connects to a bracketed IPv6 address only on a socket with IPv6 enabled (ZMQ_IPV6; without it the connect
  // never completes and the read times out), as vLLM enables it on its own sockets for an IPv6 host
  // (vllm-project/vllm vllm/utils/network_utils.py @0c175ae9 `make_zmq_socket`; `make_zmq_path` brackets the host).
  // Only then: with it, a host name such as `localhost` may resolve to ::1 while vLLM listens on 127.0.0.1.
  const ipv6 = address.startsWith('[');
  const sock = new Request({ linger: 0, receiveTimeout: timeoutMs, sendTimeout: timeoutMs, ...(ipv6 ? { ipv6 } : {}) });
  // Closing the socket ends a pending send or receive with an error: the read returns at once, as a failure.
  const onAbort = (): void => sock.close();
  signal?.addEventListener('abort', onAbort, { once: true });
  try {
    sock.connect(`tcp://${address}`);
    await sock.send(encode(ranks === 2 ? [GET_META_MSG, 0, 0] : [GET_META_MSG, 0]));
    const [first] = await sock.receive();
    if (first === undefined) return { ok: false, error: `the side channel ${address} answered an empty message` };
    const payload = decode(first) as Record<string, unknown> | null;
    const hash = payload !== null && typeof payload === 'object' ? payload['compatibility_hash'] : undefined;
    if (typeof hash !== 'string')
      return { ok: false, error: `the side channel ${address} answered no NixlHandshakePayload (no compatibility_hash)` };
    const engineId = engineIdOf(payload?.['agent_metadata_bytes']);
    return engineId === undefined ? { ok: true, hash } : { ok: true, hash, engineId };
  } catch (e) {
    const code = (e as { code?: string }).code;
    if (signal?.aborted === true)
      return { ok: false, error: `the read from the side channel ${address} was cancelled: the sidecar is closing` };
    return {
      ok: false,
      error: `the side channel ${address} did not answer (${code === 'EAGAIN' ? `no reply within ${timeoutMs} ms` : (e as Error).message})`,
    };
  } finally {
    signal?.removeEventListener('abort', onAbort);
    if (!sock.closed) sock.close();
  }
}
