/**
 * The simulated NIXL side channel of a prefill worker, and the client a decode worker uses against it.
 *
 * vLLM's side channel is a ZMQ socket that serves a handshake payload (`NixlHandshakePayload{compatibility_hash,
 * agent_metadata_bytes}`); block reads, completion notifications and lease heartbeats then go over NIXL itself.
 * Here all four are small JSON-over-HTTP calls on the side-channel port:
 *
 *   GET  /handshake -> {compatibility_hash, agent_metadata: {engine_id, kv_cache_layout, block_size, block_len, ...}}
 *   POST /read      {request_id, block_ids} -> {blocks: [{content, scale_tag}]}   (410 when the lease is gone)
 *   POST /notify    {request_id} -> frees the blocks at once (404 when unknown)
 *   POST /heartbeat {request_ids} -> extends those leases
 *
 * The handler is transport-free (`handleSideChannel`), so it is testable without sockets; `startSideChannel` is the
 * thin node:http shell.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import type { BlockPool } from './block-pool.js';
import type { FaultState } from './faults.js';
import type { KvBlock } from './kv-model.js';
import type { LeaseTable } from './leases.js';

export interface AgentMetadata {
  readonly engine_id: string;
  readonly kv_cache_layout: 'HND' | 'NHD';
  readonly block_size: number;
  /** Bytes of one block in one layer (K or V). */
  readonly block_len: number;
  readonly num_layers: number;
  readonly num_blocks: number;
  readonly tp_size: number;
  readonly connector_version: number;
  readonly attn_backend_name: string;
}

export interface HandshakePayload {
  readonly compatibility_hash: string;
  readonly agent_metadata: AgentMetadata;
}

export interface WireBlock {
  readonly content: string;
  readonly scale_tag: string;
}

export interface SideChannelDeps {
  readonly payload: HandshakePayload;
  readonly leases: LeaseTable;
  readonly pool: BlockPool;
  readonly faults: () => FaultState;
  readonly logger: Logger;
  readonly sleep: (ms: number) => Promise<void>;
  /** Blocks went back to the pool: let waiting requests in. */
  readonly onFreed: () => void;
}

export type SideChannelReply = { readonly status: number; readonly body: unknown } | { readonly hang: true };

const reply = (status: number, body: unknown): SideChannelReply => ({ status, body });

/** Serve one side-channel call. */
export async function handleSideChannel(deps: SideChannelDeps, method: string, path: string, body: unknown): Promise<SideChannelReply> {
  const route = `${method} ${path}`;
  const b = (body ?? {}) as Record<string, unknown>;
  switch (route) {
    case 'GET /handshake':
      if (deps.faults().handshakeRefusal) return reply(503, { error: 'handshake refused (fault injection)' });
      return reply(200, deps.payload);
    case 'POST /read':
      return readBlocks(deps, b);
    case 'POST /notify':
      return notify(deps, b);
    case 'POST /heartbeat': {
      const ids = Array.isArray(b['request_ids']) ? b['request_ids'].filter((x): x is string => typeof x === 'string') : [];
      return reply(200, { extended: deps.leases.heartbeat(ids) });
    }
    default:
      return reply(404, { error: `no side-channel route ${route}` });
  }
}

async function readBlocks(deps: SideChannelDeps, b: Record<string, unknown>): Promise<SideChannelReply> {
  const f = deps.faults();
  if (f.transferTimeout) return { hang: true };
  if (f.transferDelayMs > 0) await deps.sleep(f.transferDelayMs);
  const requestId = b['request_id'];
  const blockIds = b['block_ids'];
  if (typeof requestId !== 'string' || !Array.isArray(blockIds) || !blockIds.every(Number.isInteger)) {
    return reply(400, { error: 'expected {request_id: string, block_ids: int[]}' });
  }
  const lease = deps.leases.get(requestId);
  if (!lease) {
    deps.logger.warn(
      { requestId },
      `Potentially invalid KV blocks for unrecognized request ${requestId} were retrieved by a decode worker. They may have expired.`,
    );
    return reply(410, { error: `KV blocks of request ${requestId} are not held (expired or already released)` });
  }
  const held = new Set(lease.blockIds);
  const missing = (blockIds as number[]).filter((id) => !held.has(id));
  if (missing.length > 0) return reply(400, { error: `blocks ${missing.join(',')} do not belong to request ${requestId}` });
  const blocks: WireBlock[] = (blockIds as number[]).map((id) => {
    const blk = deps.pool.get(id)!;
    return { content: blk.content, scale_tag: blk.scaleTag };
  });
  return reply(200, { blocks });
}

function notify(deps: SideChannelDeps, b: Record<string, unknown>): SideChannelReply {
  if (deps.faults().notifyFailure) return reply(503, { error: 'notification rejected (fault injection)' });
  const requestId = b['request_id'];
  if (typeof requestId !== 'string') return reply(400, { error: 'expected {request_id: string}' });
  const lease = deps.leases.release(requestId);
  if (!lease) {
    deps.logger.warn(
      { requestId },
      `Potentially invalid KV blocks for unrecognized request ${requestId} were retrieved by a decode worker. They may have expired.`,
    );
    return reply(404, { error: `request ${requestId} holds no blocks` });
  }
  for (const id of lease.blockIds) deps.pool.unref(id);
  deps.onFreed();
  return reply(200, { released: lease.blockIds.length });
}

export interface RunningSideChannel {
  readonly port: number;
  close(): Promise<void>;
}

/** Listen on host:port (0 = any free port) and serve the handler over HTTP. */
export async function startSideChannel(deps: SideChannelDeps, host: string, port: number): Promise<RunningSideChannel> {
  const server = createServer((req, res) => void serve(deps, req, res));
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

async function serve(deps: SideChannelDeps, req: IncomingMessage, res: ServerResponse): Promise<void> {
  let body: unknown;
  try {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const text = Buffer.concat(chunks).toString('utf8');
    body = text === '' ? undefined : JSON.parse(text);
  } catch {
    res.writeHead(400, { 'content-type': 'application/json' }).end('{"error":"malformed JSON"}');
    return;
  }
  const out = await handleSideChannel(deps, req.method ?? 'GET', (req.url ?? '/').split('?')[0]!, body);
  if ('hang' in out) return; // closed by the peer's timeout or by server shutdown
  res.writeHead(out.status, { 'content-type': 'application/json' }).end(JSON.stringify(out.body));
}

/** What a decode worker calls; every call has a deadline. Failures are returned as strings, never thrown. */
export interface SideChannelClient {
  handshake(baseUrl: string, timeoutMs: number): Promise<{ ok: true; payload: HandshakePayload } | { ok: false; error: string }>;
  read(
    baseUrl: string,
    requestId: string,
    blockIds: readonly number[],
    timeoutMs: number,
  ): Promise<{ ok: true; blocks: KvBlock[] } | { ok: false; error: string; expired: boolean }>;
  notify(baseUrl: string, requestId: string, timeoutMs: number): Promise<{ ok: boolean; error?: string }>;
  heartbeat(baseUrl: string, requestIds: readonly string[], timeoutMs: number): Promise<void>;
}

export function createSideChannelClient(): SideChannelClient {
  return {
    async handshake(baseUrl, timeoutMs) {
      const r = await call(`${baseUrl}/handshake`, undefined, timeoutMs);
      if (!r.ok) return r;
      const p = r.body as Partial<HandshakePayload>;
      if (typeof p.compatibility_hash !== 'string' || typeof p.agent_metadata !== 'object' || p.agent_metadata === null) {
        return {
          ok: false,
          error: 'Failed to decode NixlHandshakePayload. This likely indicates an incompatibility between connector version.',
        };
      }
      return { ok: true, payload: p as HandshakePayload };
    },
    async read(baseUrl, requestId, blockIds, timeoutMs) {
      const r = await call(`${baseUrl}/read`, { request_id: requestId, block_ids: blockIds }, timeoutMs);
      if (!r.ok) return { ok: false, error: r.error, expired: r.status === 410 };
      const blocks = (r.body as { blocks?: WireBlock[] }).blocks ?? [];
      return { ok: true, blocks: blocks.map((b) => ({ content: b.content, scaleTag: b.scale_tag })) };
    },
    async notify(baseUrl, requestId, timeoutMs) {
      const r = await call(`${baseUrl}/notify`, { request_id: requestId }, timeoutMs);
      return r.ok ? { ok: true } : { ok: false, error: r.error };
    },
    async heartbeat(baseUrl, requestIds, timeoutMs) {
      await call(`${baseUrl}/heartbeat`, { request_ids: requestIds }, timeoutMs);
    },
  };
}

type CallResult = { ok: true; body: unknown } | { ok: false; error: string; status?: number };

async function call(url: string, body: unknown, timeoutMs: number): Promise<CallResult> {
  try {
    const res = await fetch(url, {
      method: body === undefined ? 'GET' : 'POST',
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      signal: AbortSignal.timeout(timeoutMs),
    });
    const text = await res.text();
    const parsed: unknown = text === '' ? null : JSON.parse(text);
    if (!res.ok) {
      const msg = (parsed as { error?: string } | null)?.error ?? `HTTP ${res.status}`;
      return { ok: false, error: `${url}: ${res.status} ${msg}`, status: res.status };
    }
    return { ok: true, body: parsed };
  } catch (e) {
    const name = (e as Error).name;
    const why = name === 'TimeoutError' || name === 'AbortError' ? `timed out after ${timeoutMs} ms` : (e as Error).message;
    return { ok: false, error: `${url}: ${why}` };
  }
}
