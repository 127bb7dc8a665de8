/**
 * Catching a worker upgraded in place between two probes. Probes are periodic; a worker restarted with other weights,
 * tokenizer or version in between would otherwise be served, and attested, under the verdict of the launch before.
 *
 * Each role watches a per-launch fact on every request and compares it with what its last probe saw:
 * - prefill: the NIXL engine id in the prefill answer (`remote_engine_id`, a fresh uuid per vLLM launch) against the
 *   one the probe's engine canary read (engine-canary.ts);
 * - decode: the worker's `GET /version` against the probed version (cheap; it catches version changes only: a decode
 *   worker's engine id is not observable over HTTP, and a tokenizer or template change shows in the prompt token count
 *   the attestation check compares).
 * When the fact differs, the sidecar re-probes at once (a fresh round, bounded by `probe.timeoutMs`) and goes on only
 * if that round verifies the launch now running (same revision, just restarted); otherwise it refuses with 409
 * `incompatible_transfer`, before any KV is attested or consumed. The failed round leaves the sidecar unverified, so
 * the gate stops routing to it at its next poll.
 */
import type { Logger } from 'pino';
import { err, KvgateError, ok, type Result } from '../errors.js';
import type { IncomingCall, SidecarContext } from './context.js';
import { engineLaunchId } from './engine-canary.js';
import { callUpstream, parseJsonObject, upstreamMessage } from './http-io.js';
import type { SidecarStatus } from './status.js';

type Role = 'prefill' | 'decode';

const WHO: Readonly<Record<Role, string>> = { prefill: 'prefill worker', decode: 'decode worker' };

/** The per-launch fact a role watches, as the status records it. */
function probedFact(role: Role, status: SidecarStatus): string | null {
  if (role === 'prefill') return status.engineId === null ? null : engineLaunchId(status.engineId);
  const v = status.measured['engine.version'];
  return typeof v === 'string' ? v : null;
}

function launchOf(role: Role, seen: string): string {
  return role === 'prefill' ? engineLaunchId(seen) : seen;
}

function describeFact(role: Role, fact: string | null): string {
  if (fact === null) return 'nothing';
  return role === 'prefill' ? `NIXL engine ${fact}` : `vLLM ${JSON.stringify(fact)}`;
}

/**
 * Pure: the answer for a request that saw `seen`, given the sidecar's status. `reprobe` when `seen` is not the
 * launch the status is about; otherwise go on while verified, or refuse with the verdict's reasons.
 */
export function judgeLaunch(
  role: Role,
  status: SidecarStatus,
  seen: string,
): { kind: 'ok' } | { kind: 'reprobe' } | { kind: 'refuse'; error: KvgateError } {
  if (probedFact(role, status) !== launchOf(role, seen)) return { kind: 'reprobe' };
  if (status.verified) return { kind: 'ok' };
  if (isDown(status)) return { kind: 'refuse', error: downError(role, status) };
  return {
    kind: 'refuse',
    error: new KvgateError(
      'incompatible_transfer',
      `the ${WHO[role]} no longer matches its declared descriptor: ${status.reasons.join('; ')}`,
    ),
  };
}

/** The last probe found the worker not answering at all: not shown to be something else, just gone. */
function isDown(status: SidecarStatus): boolean {
  return status.workerDown;
}

/**
 * A worker that stopped answering is a worker failure (502, which the decode side retries on another endpoint of the
 * group), not a 409: nothing says it became another revision, and its KV is lost with it either way. Still refused:
 * nothing of this request is attested or used.
 */
function downError(role: Role, status: SidecarStatus): KvgateError {
  return new KvgateError(
    'worker_error',
    `the ${WHO[role]} stopped answering since it was verified (${status.reasons.join('; ')}); nothing from it is used, retry on another endpoint`,
  );
}

/** Pure: the refusal after a fresh probe that did not vouch for the launch a request saw (undefined: timed out). */
export function restartRefusal(role: Role, after: SidecarStatus | undefined, seen: string, timeoutMs: number): KvgateError {
  const who = WHO[role];
  if (after === undefined) {
    return new KvgateError(
      'incompatible_transfer',
      `the ${who} restarted since it was verified (it now reports ${describeFact(role, seen)}), and a fresh probe did not finish within ${timeoutMs} ms; nothing from it is used until a probe verifies it`,
    );
  }
  if (!after.verified && isDown(after)) return downError(role, after);
  if (!after.verified)
    return new KvgateError(
      'incompatible_transfer',
      `${who} restarted as something else since it was verified: ${after.reasons.join('; ')}`,
    );
  return new KvgateError(
    'incompatible_transfer',
    `the ${who} restarted again while it was re-verified: this request saw ${describeFact(role, launchOf(role, seen))}, the fresh probe checked ${describeFact(role, probedFact(role, after))}; retry the request`,
  );
}

/** Judge; on a new launch, re-probe once and judge that launch. Counts and logs every restart it notices. */
async function confirmLaunch(ctx: SidecarContext, role: Role, seen: string, logger: Logger): Promise<Result<void, KvgateError>> {
  const first = judgeLaunch(role, ctx.status(), seen);
  if (first.kind === 'ok') return ok(undefined);
  if (first.kind === 'refuse') return err(first.error);
  const was = probedFact(role, ctx.status());
  logger.warn(
    { event: 'worker_restarted', role, seen, verifiedLaunch: was },
    `the ${WHO[role]} reports ${describeFact(role, seen)}, the last probe verified ${describeFact(role, was)}: re-probing before anything it computed is used`,
  );
  // Prefill: a round under way that read this very engine id checked this launch (the canary runs first). Decode:
  // /version is read alongside the other checks, so only a round started now is known to be about this launch.
  const after = await ctx.reverify(
    role === 'prefill' ? (s) => s.engineId !== null && engineLaunchId(s.engineId) === engineLaunchId(seen) : undefined,
  );
  if (after !== undefined && judgeLaunch(role, after, seen).kind === 'ok') {
    ctx.metrics.restarts.inc({ role, result: 'reverified' });
    logger.info({ event: 'worker_reverified', role, seen }, `the restarted ${WHO[role]} still matches its declared descriptor`);
    return ok(undefined);
  }
  ctx.metrics.restarts.inc({ role, result: 'refused' });
  const e = restartRefusal(role, after, seen, ctx.config.probe.timeoutMs);
  logger.error({ event: 'worker_restart_refused', role, seen }, e.reason);
  return err(e);
}

/** Prefill role, before attesting: is this answer's engine the launch the last probe verified? */
export function confirmPrefillEngine(ctx: SidecarContext, engineId: string, logger: Logger): Promise<Result<void, KvgateError>> {
  return confirmLaunch(ctx, 'prefill', engineId, logger);
}

/**
 * This decode worker's `GET /version`, or why it could not be read (never rejects). Shared between concurrent
 * requests (`SidecarContext.workerVersion`, shared-read.ts): a read that started after a request arrived tells as
 * much about the worker that request will run on as a read of its own.
 */
export async function readWorkerVersion(
  ctx: Pick<SidecarContext, 'fetch' | 'workerUrl' | 'workerAuth' | 'config' | 'closed'>,
): Promise<Result<string, KvgateError>> {
  const reply = await callUpstream(ctx.fetch, `${ctx.workerUrl}/version`, {
    timeoutMs: ctx.config.probe.timeoutMs,
    signal: ctx.closed,
    headers: { ...ctx.workerAuth },
  });
  if (!reply.ok) return err(new KvgateError('worker_error', `this decode worker did not answer GET /version: ${reply.error.message}`));
  if (reply.value.status !== 200) {
    return err(
      new KvgateError(
        'worker_error',
        `this decode worker answered GET /version with HTTP ${reply.value.status}: ${upstreamMessage(reply.value.text)}`,
      ),
    );
  }
  const parsed = parseJsonObject(reply.value.text, 'the GET /version answer');
  const version = parsed.ok ? parsed.value['version'] : undefined;
  if (typeof version !== 'string')
    return err(new KvgateError('worker_error', 'this decode worker answered GET /version without { version }'));
  return ok(version);
}

const CANCELLED = err(new KvgateError('worker_error', 'the request was cancelled while its decode worker was checked'));

/** Decode role, before any KV is consumed: is the local worker still the vLLM version the last probe verified? */
export async function confirmDecodeWorker(
  ctx: SidecarContext,
  call: Pick<IncomingCall, 'receivedAt' | 'signal' | 'logger'>,
): Promise<Result<void, KvgateError>> {
  const version = await ctx.workerVersion.read(call.receivedAt, call.signal, CANCELLED);
  if (!version.ok) return version;
  return confirmLaunch(ctx, 'decode', version.value, call.logger);
}
