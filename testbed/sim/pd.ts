/**
 * Disaggregated prefill/decode exactly as vLLM's NixlConnector does it, at the level kvgate can observe
 * (docs/vllm-disaggregation.md §2-§11).
 *
 * - P (request with `do_remote_decode: true`): runs prefill, keeps the request's blocks under a lease and answers
 *   `kv_transfer_params` {do_remote_prefill: true, remote_block_ids, remote_engine_id, remote_request_id,
 *   remote_host, remote_port, tp_size} (+ remote_num_tokens from connector v5, transfer_mode from v7).
 * - D (request with `do_remote_prefill: true` and all remote fields): handshakes with P's side channel (cached per
 *   remote engine), checks vLLM's compatibility hash BEFORE anything else, then the runtime checks of
 *   `_validate_remote_agent_handshake` (layout, block size, block_len, layers), reads only the blocks it lacks
 *   (`remote_block_ids[-num_missing:]`; none on a full prefix hit) and notifies P so it frees them.
 *
 * Parsing and validation are pure; `pullRemoteKv` does the I/O through an injected side-channel client.
 */
import type { Logger } from 'pino';
import type { KvBlock } from './kv-model.js';
import type { SimMetrics } from './metrics.js';
import type { FlavourTraits } from './flavour.js';
import type { HandshakePayload, SideChannelClient } from './side-channel.js';

export interface RemotePrefill {
  readonly remoteBlockIds: readonly number[];
  readonly remoteEngineId: string;
  /** P's request id to read by (versions without `remote_request_id`: D's own id, which P shared). */
  readonly remoteRequestId: string;
  readonly remoteHost: string;
  readonly remotePort: number;
  readonly tpSize: number;
}

export type KvTransferRole =
  | { readonly kind: 'none' }
  | { readonly kind: 'producer' }
  | { readonly kind: 'consumer'; readonly remote: RemotePrefill }
  | { readonly kind: 'invalid'; readonly raw: unknown };

/**
 * Block ids as vLLM sends them: one flat list (up to 0.13), or one list per KV cache group (`[[...]]`, current
 * main's `remote_block_ids: list[list[int]]`). The simulator has one group, so a nested list is its first group.
 */
function blockIdsOf(v: unknown): number[] | undefined {
  if (!Array.isArray(v)) return undefined;
  if (v.every((x) => Number.isInteger(x))) return v as number[];
  if (v.length >= 1 && v.every((g) => Array.isArray(g) && g.every((x: unknown) => Number.isInteger(x)))) return v[0] as number[];
  return undefined;
}

/**
 * What a request's `kv_transfer_params` asks for. A `do_remote_prefill` request missing any remote field is
 * `invalid`: vLLM logs "Got invalid KVTransferParams" and prefills locally. `remote_request_id` is required unless
 * `ownRequestId` is given (versions before connector v2, where P and D ran under the same request id).
 */
export function parseKvTransferParams(raw: unknown, ownRequestId?: string): KvTransferRole {
  if (raw === null || raw === undefined || typeof raw !== 'object' || Array.isArray(raw)) return { kind: 'none' };
  const p = raw as Record<string, unknown>;
  if (p['do_remote_prefill'] === true) {
    const ids = blockIdsOf(p['remote_block_ids']);
    const engine = p['remote_engine_id'];
    const req = p['remote_request_id'];
    const host = p['remote_host'];
    const port = p['remote_port'];
    const valid =
      ids !== undefined &&
      typeof engine === 'string' &&
      (typeof req === 'string' || (ownRequestId !== undefined && req === undefined)) &&
      typeof host === 'string' &&
      Number.isInteger(port);
    if (!valid) return { kind: 'invalid', raw };
    const tp = p['tp_size'];
    return {
      kind: 'consumer',
      remote: {
        remoteBlockIds: ids,
        remoteEngineId: engine,
        remoteRequestId: typeof req === 'string' ? req : ownRequestId!,
        remoteHost: host,
        remotePort: port as number,
        tpSize: Number.isInteger(tp) ? (tp as number) : 1,
      },
    };
  }
  if (p['do_remote_decode'] === true) return { kind: 'producer' };
  return { kind: 'none' };
}

/**
 * Whether P keeps blocks for a request that finished this way. The v2 connector kept only a length-capped finish
 * (`request.status != FINISHED_LENGTH_CAPPED` returns no params: single-file `v1/nixl_connector.py` @002a1057 and the
 * split `nixl/scheduler.py` @fe6adf39, both v2); by v4 a stop finish keeps them too (`nixl/pull_scheduler.py`
 * @b36ea896: lease heartbeats, `remote_num_tokens`, no `remote_blocks_expiry_time` yet), as in every later copy read
 * (@0050936b). Which of v2..v4 changed it was not established, so the simulator switches at v5.
 */
export function producerKeepsBlocks(finishReason: 'stop' | 'length', connectorVersion: number): boolean {
  return finishReason === 'length' || connectorVersion >= 5;
}

/**
 * P's `kv_transfer_params` in the response, field for field as `request_finished()` builds it in the version the
 * traits describe (flavour.ts): `remote_request_id` from connector v2, per-group block ids and the newer fields on
 * main; without a flavour, `remote_num_tokens` (v5+) and `transfer_mode` (v7+) by connector version.
 */
export function producerParams(a: {
  blockIds: readonly number[];
  engineId: string;
  requestId: string;
  host: string;
  port: number;
  tpSize: number;
  numTokens: number;
  connectorVersion: number;
  transferMode: 'pull' | 'push';
  traits: Pick<FlavourTraits, 'remoteRequestId' | 'perGroupBlockIds' | 'newParams'>;
}): Record<string, unknown> {
  const t = a.traits;
  const out: Record<string, unknown> = {
    do_remote_prefill: true,
    do_remote_decode: false,
    remote_block_ids: t.perGroupBlockIds ? [[...a.blockIds]] : [...a.blockIds],
    remote_engine_id: a.engineId,
    ...(t.remoteRequestId ? { remote_request_id: a.requestId } : {}),
    remote_host: a.host,
    remote_port: a.port,
    tp_size: a.tpSize,
  };
  if (t.newParams) {
    out['pp_size'] = 1;
    out['dcp_size'] = 1;
    out['remote_num_tokens'] = a.numTokens;
    // None from P: only a bidirectional D exports its blocks' expiry (a perf_counter() value, not wall time):
    // vllm-project/vllm vllm/distributed/kv_transfer/kv_connector/v1/nixl/pull_scheduler.py @0050936b request_finished.
    out['remote_blocks_expiry_time'] = null;
    out['transfer_mode'] = a.transferMode;
    return out;
  }
  if (a.connectorVersion >= 5) out['remote_num_tokens'] = a.numTokens;
  if (a.connectorVersion >= 7) out['transfer_mode'] = a.transferMode;
  return out;
}

/** This worker's side of the handshake comparison. */
export interface LocalAgent {
  readonly compatibilityHash: string;
  readonly layout: 'HND' | 'NHD';
  readonly blockSize: number;
  readonly blockLen: number;
  readonly numLayers: number;
  readonly hma: boolean;
  readonly enforceCompatHash: boolean;
}

/** vLLM's exact hash-mismatch error (nixl_connector.py @ 002a1057). */
export function hashMismatchMessage(local: string, remote: string): string {
  return (
    `NIXL compatibility hash mismatch. Local: ${local}, Remote: ${remote}. Prefill and decode instances have ` +
    'incompatible configurations. This may be due to: different vLLM versions, models, dtypes, KV cache layouts, ' +
    'attention backends, etc. Both instances must use identical configurations.Disable this check using ' +
    `--kv-transfer-config '{"kv_connector_extra_config": {"enforce_handshake_compat": false}}'`
  );
}

/** The checks D runs on P's handshake payload, in vLLM's order; returns the error vLLM would raise. */
export function validateHandshake(local: LocalAgent, payload: HandshakePayload, expectedEngineId: string): string | null {
  if (local.enforceCompatHash && payload.compatibility_hash !== local.compatibilityHash) {
    return hashMismatchMessage(local.compatibilityHash, payload.compatibility_hash);
  }
  const m = payload.agent_metadata;
  if (m.engine_id !== expectedEngineId) return 'Remote NIXL agent engine ID mismatch.';
  if (m.kv_cache_layout !== local.layout) {
    return (
      'Heterogeneous TP expects same kv_cache_layout. Or enable experimental feature to use HND to NHD support by ' +
      "setting 'enable_permute_local_kv'=True in --kv-transfer-config."
    );
  }
  if (m.block_size !== local.blockSize) {
    return local.hma
      ? 'HMA does not support different remote block size yet'
      : `Remote block size ${m.block_size} differs from local ${local.blockSize} (the simulator models equal block sizes only)`;
  }
  if (m.num_layers !== local.numLayers) return 'Number of KV layers must match between prefill and decode';
  if (m.block_len !== local.blockLen) {
    return 'Remote P worker KV layer cache must be of shape [2, N, local_kv_heads*tp_ratio, page_size, head_dim] and same dtype.';
  }
  return null;
}

export interface PullDeps {
  readonly client: SideChannelClient;
  readonly local: LocalAgent;
  /** Successful handshakes, keyed by remote engine id (vLLM handshakes once per remote engine). */
  readonly handshakes: Map<string, HandshakePayload>;
  readonly handshakeTimeoutMs: number;
  readonly transferTimeoutMs: number;
  readonly latency: { readonly handshakeMs: number; readonly transferMsPerBlock: number };
  readonly bytesPerBlock: number;
  readonly metrics: SimMetrics;
  readonly logger: Logger;
  readonly sleep: (ms: number) => Promise<void>;
  readonly now: () => number;
}

export interface PullFaults {
  readonly handshakeFail?: boolean;
  readonly transferTimeout?: boolean;
  readonly transferDelayMs?: number;
}

export type PullOutcome =
  | { readonly ok: true; readonly blocks: KvBlock[] }
  | { readonly ok: false; readonly reason: 'handshake_failed' | 'transfer_failed' | 'kv_expired'; readonly message: string };

/**
 * D's side of one transfer: handshake (cached), read the last `numMissing` remote blocks, notify P.
 * `numMissing` 0 is a full prefix hit: nothing is read, P is only notified.
 */
export async function pullRemoteKv(
  deps: PullDeps,
  requestId: string,
  remote: RemotePrefill,
  numMissing: number,
  faults: PullFaults,
): Promise<PullOutcome> {
  const baseUrl = `http://${remote.remoteHost}:${remote.remotePort}`;
  const hs = await ensureHandshake(deps, baseUrl, remote, faults);
  if (hs !== null) {
    deps.logger.error(
      { requestId, remoteEngineId: remote.remoteEngineId, error: hs },
      `Handshake failed for request ${requestId}, marking blocks as invalid`,
    );
    deps.metrics.failedTransfers.inc();
    return { ok: false, reason: 'handshake_failed', message: hs };
  }
  if (numMissing > remote.remoteBlockIds.length) {
    const message = `assert num_local_blocks <= num_remote_blocks failed: ${numMissing} > ${remote.remoteBlockIds.length}`;
    deps.logger.error({ requestId }, `NIXL transfer failed for request ${requestId}: ${message}. Marking blocks as invalid`);
    deps.metrics.failedTransfers.inc();
    return { ok: false, reason: 'transfer_failed', message };
  }
  let blocks: KvBlock[] = [];
  if (numMissing > 0) {
    const started = deps.now();
    const ids = remote.remoteBlockIds.slice(-numMissing);
    const delay = numMissing * deps.latency.transferMsPerBlock + (faults.transferDelayMs ?? 0);
    const read = faults.transferTimeout
      ? await deps
          .sleep(deps.transferTimeoutMs)
          .then(() => ({ ok: false as const, error: `timed out after ${deps.transferTimeoutMs} ms (fault injection)`, expired: false }))
      : await deps.sleep(delay).then(() => deps.client.read(baseUrl, remote.remoteRequestId, ids, deps.transferTimeoutMs));
    if (!read.ok) {
      deps.logger.error({ requestId, error: read.error }, `NIXL transfer failed for request ${requestId}. Marking blocks as invalid`);
      deps.metrics.failedTransfers.inc();
      return { ok: false, reason: read.expired ? 'kv_expired' : 'transfer_failed', message: read.error };
    }
    blocks = read.blocks;
    deps.metrics.xferTime.observe(Math.max(0, deps.now() - started) / 1000);
    deps.metrics.bytesTransferred.observe(numMissing * deps.bytesPerBlock);
    deps.metrics.numDescriptors.observe(numMissing * deps.local.numLayers * 2);
    deps.metrics.blocksPulled.inc(numMissing);
  }
  const n = await deps.client.notify(baseUrl, remote.remoteRequestId, deps.transferTimeoutMs);
  if (!n.ok) {
    deps.logger.warn({ requestId, error: n.error }, 'NIXL notification failed; the prefill worker frees the blocks at lease expiry');
    deps.metrics.failedNotifications.inc();
  }
  return { ok: true, blocks };
}

/**
 * D's worker told to free P's blocks without reading any: the empty read vLLM queues when a request that still has
 * `do_remote_prefill` finishes (aborted before it was scheduled, or refused by the OpenAI layer before admission and
 * submitted pre-aborted). `request_finished` adds it to `_reqs_need_recv` with no local blocks, and the worker, after
 * its handshake with P, only sends the notification (single-file `v1/nixl_connector.py` @002a1057, `nixl/
 * pull_scheduler.py` @73ee90a0: "To avoid stranding the prefill blocks in the prefill instance, we must add empty
 * block_ids to _reqs_need_recv"). A handshake that fails sends nothing; P then frees at its timeout or lease expiry.
 * Returns whether P was notified.
 */
export async function notifyWithoutReading(deps: PullDeps, requestId: string, remote: RemotePrefill, why: string): Promise<boolean> {
  const baseUrl = `http://${remote.remoteHost}:${remote.remotePort}`;
  const hs = await ensureHandshake(deps, baseUrl, remote, {});
  if (hs !== null) {
    deps.logger.warn(
      { requestId, error: hs },
      `request ${requestId} ${why}: handshake failed, the prefill worker frees its blocks at expiry`,
    );
    deps.metrics.failedNotifications.inc();
    return false;
  }
  const n = await deps.client.notify(baseUrl, remote.remoteRequestId, deps.transferTimeoutMs);
  if (!n.ok) {
    deps.logger.warn({ requestId, error: n.error }, 'NIXL notification failed; the prefill worker frees the blocks at lease expiry');
    deps.metrics.failedNotifications.inc();
    return false;
  }
  deps.logger.info(
    { requestId, remoteRequestId: remote.remoteRequestId },
    `request ${requestId} ${why}: notified the prefill worker, nothing read`,
  );
  return true;
}

async function ensureHandshake(deps: PullDeps, baseUrl: string, remote: RemotePrefill, faults: PullFaults): Promise<string | null> {
  if (faults.handshakeFail) return `${baseUrl}/handshake: handshake refused (x-sim-fault: handshake-fail)`;
  if (deps.handshakes.has(remote.remoteEngineId)) return null;
  await deps.sleep(deps.latency.handshakeMs);
  const r = await deps.client.handshake(baseUrl, deps.handshakeTimeoutMs);
  if (!r.ok) return r.error;
  const problem = validateHandshake(deps.local, r.payload, remote.remoteEngineId);
  if (problem !== null) return problem;
  deps.logger.info({ hash: r.payload.compatibility_hash }, `NIXL compatibility check passed (hash: ${r.payload.compatibility_hash})`);
  deps.handshakes.set(remote.remoteEngineId, r.payload);
  return null;
}
