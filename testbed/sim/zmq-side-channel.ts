/**
 * The simulated worker's NIXL side channel as vLLM serves it: a ZMQ ROUTER socket on the side-channel address whose
 * answer to `msgpack((b"get_meta_msg", [pp_rank,] tp_rank))` is `msgpack(NixlHandshakePayload{compatibility_hash,
 * agent_metadata_bytes})`, where `agent_metadata_bytes` is the msgpack of the agent metadata. Anyone can read the
 * live worker's real hash here, exactly as a decode worker does (kvgate's sidecars do, on every probe).
 *
 * Wire format per NIXL connector version, from vLLM's sources (vllm-project/vllm):
 * - v1/v2 (`NixlConnectorScheduler._nixl_handshake_listener` in v1/nixl_connector.py @ 002a1057, the 0.13 line):
 *   ROUTER `recv_multipart() -> (identity, b"", msg)`, `msg, tp_rank = msgspec.msgpack.decode(msg)`, reply
 *   `send_multipart((identity, b"", encoded_payload))`.
 * - v12 (`NixlBaseConnectorScheduler._nixl_handshake_listener` in v1/nixl/base_scheduler.py @ 0050936b, main):
 *   `msg, pp_rank, tp_rank = msgspec.msgpack.decode(msg)`, reply `(identity, b"", encoded_payload, ts)` with
 *   `ts = msgspec.msgpack.encode(time.perf_counter())` (the clock-sync stamp of connector v5).
 * - v13: as v12 (v1/nixl/base_scheduler.py @ 73ee90a0).
 * - v3/v4: as v2 (not read; the request changed with pipeline-parallel handshakes). v5..v11: two-element request, the
 *   timestamp frame from v5 (the version history says v5 added a clock-sync timestamp to the handshake); interpolated.
 * A request of the wrong shape makes vLLM's unpacking raise inside the listener thread, which then serves nobody
 * again; the simulator does the same (logs, then stops answering), so a client that sends the wrong shape is caught.
 */
import { isIP } from 'node:net';
import { decode, encode } from '@msgpack/msgpack';
import type { Logger } from 'pino';
import { Router } from 'zeromq';

export const GET_META_MSG = Buffer.from('get_meta_msg');

/** How a connector version frames the side channel (see the file comment for provenance). */
export function sideChannelWire(connectorVersion: number): { readonly requestRanks: 1 | 2; readonly timestampFrame: boolean } {
  return { requestRanks: connectorVersion >= 12 ? 2 : 1, timestampFrame: connectorVersion >= 5 };
}

export interface ZmqSideChannelOptions {
  readonly host: string;
  readonly port: number;
  readonly connectorVersion: number;
  /** The hash this worker's vLLM computes, or null for a vLLM without one (then the payload carries ""). */
  readonly compatibilityHash: string | null;
  readonly agentMetadata: Readonly<Record<string, unknown>>;
  readonly logger: Logger;
}

export interface RunningZmqSideChannel {
  readonly port: number;
  close(): Promise<void>;
}

/** How long after the last request served the ROUTER waits before it closes (see close()). */
const SETTLE_MS = 150;

export async function startZmqSideChannel(o: ZmqSideChannelOptions): Promise<RunningZmqSideChannel> {
  // An IPv6 host is bracketed and the socket IPv6-enabled, as vLLM does (vllm-project/vllm
  // vllm/utils/network_utils.py @0c175ae9 `make_zmq_path`, `make_zmq_socket`).
  const v6 = isIP(o.host) === 6;
  const sock = new Router({ linger: 0, ...(v6 ? { ipv6: true } : {}) });
  await sock.bind(`tcp://${v6 ? `[${o.host}]` : o.host}:${o.port}`);
  const port = Number(/:(\d+)$/.exec(sock.lastEndpoint ?? '')?.[1] ?? o.port);
  const wire = sideChannelWire(o.connectorVersion);
  // msgspec encodes a dataclass as a map of its fields in declaration order, bytes as msgpack bin.
  const payload = encode({ compatibility_hash: o.compatibilityHash ?? '', agent_metadata_bytes: encode(o.agentMetadata) });
  let lastActivityMs = 0;
  const serving = (async () => {
    try {
      for await (const frames of sock) {
        lastActivityMs = performance.now();
        const [identity, , msg] = frames;
        if (identity === undefined || msg === undefined) continue;
        const req = decode(msg) as unknown;
        if (!Array.isArray(req) || req.length !== 1 + wire.requestRanks) {
          o.logger.error(
            { request: req },
            `nixl_handshake_listener: cannot unpack ${JSON.stringify(req)} into (msg, ${wire.requestRanks === 2 ? 'pp_rank, ' : ''}tp_rank); the listener thread died`,
          );
          return;
        }
        if (!Buffer.from(req[0] as Uint8Array).equals(GET_META_MSG))
          o.logger.warn({ msg: String(req[0]) }, 'Connection listener got unexpected message');
        const out: (Buffer | Uint8Array)[] = [identity, Buffer.alloc(0), payload];
        if (wire.timestampFrame) out.push(encode(performance.now() / 1000, { forceFloat32: false }));
        await sock.send(out);
      }
    } catch {
      // closed
    }
  })();
  return {
    port,
    async close() {
      if (sock.closed) return; // idempotent: a test may close a restarted server twice
      // In tests the reader's REQ socket lives in this same process (never in a deployment, where vLLM is another
      // process). Closing the ROUTER while libzmq still tears down a connection it just served has aborted the whole
      // process under load (libzmq 4.3.5, pipe.cpp:355 assertion), so give that teardown a moment first.
      const settle = SETTLE_MS - (performance.now() - lastActivityMs);
      if (settle > 0) await new Promise((resolve) => setTimeout(resolve, settle));
      // And close without unbinding first: an unbind racing the teardown of a peer's connection (a REQ closed after
      // its own timeout, long after the last request) aborted the same way, about 4 runs in 10 of
      // zmq-side-channel.test.ts under load, none in 20 without it. The port is released asynchronously; a restart
      // on the same port retries a bind that finds it taken (restart.ts).
      sock.close();
      await serving;
    },
  };
}
