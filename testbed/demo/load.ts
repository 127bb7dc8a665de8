/**
 * A bounded load-with-faults run through the full local topology: N requests at concurrency C across both
 * revisions, with a decode drain, a worker kill and a route-table reload in the middle. Every request ends in one
 * of: completed with token ids equal to the non-disaggregated baseline of the revision it was bound to, refused
 * with a reason (a kvgate error code), or failed visibly (an error status or an SSE error event). The two numbers
 * that must be zero: silently wrong completions, and requests without any response.
 */
import type { Logger } from 'pino';
import { H } from '../../src/headers.js';
import { attributeToFaults, type FaultAttribution, type UnservedRequest } from './fault-attribution.js';
import { faultSchedule } from './load-faults.js';
import { baseline, completion, firstDivergence, PROMPTS } from './scenarios.js';
import type { EnvoyVersion } from '../harness/runtime-config.js';
import { REVISIONS, startTopology, type RevisionName, type Topology } from './topology.js';

export interface LoadOptions {
  readonly requests: number;
  readonly concurrency: number;
  readonly faults: boolean;
  readonly logger: Logger;
  readonly print?: (line: string) => void;
  /** Per-request limit; a request still open after it counts as "no response". */
  readonly requestTimeoutMs?: number;
  readonly seed?: number;
  /** The Envoy release line the harness plays (default 1.37). */
  readonly envoyVersion?: EnvoyVersion;
}

export interface LoadReport {
  readonly total: number;
  readonly completed: number;
  readonly refused: Readonly<Record<string, number>>;
  readonly failedVisibly: Readonly<Record<string, number>>;
  readonly silentlyWrong: number;
  readonly noResponse: number;
  readonly byRevision: Readonly<Record<string, number>>;
  readonly streamed: number;
  readonly durationMs: number;
  readonly events: readonly string[];
  readonly wrongExamples: readonly string[];
  readonly failedExamples: readonly string[];
  /** The first few refusals, with the gate's request id and message. */
  readonly refusedExamples: readonly string[];
  /**
   * Refusals and visible failures the faults caused, per fault: a planned drain and a prefill worker killed mid-leg
   * must cause none (fault-attribution.ts says how each is attributed).
   */
  readonly byFault: FaultAttribution;
}

type Outcome =
  | { kind: 'completed'; revision: string; streamed: boolean }
  | ({ kind: 'refused'; code: string } & Unserved)
  | ({ kind: 'failed'; reason: string; detail?: string } & Unserved)
  | { kind: 'wrong'; detail: string }
  | { kind: 'none' };

/** Who a request that was not served was, to attribute it to a fault: ours (`load-N`), the gate's id, when it ended. */
interface Unserved {
  readonly id: string;
  readonly gateId?: string;
  readonly message?: string;
  readonly endedAtMs: number;
}

const MAX_TOKENS = 12;
/** Deterministic PRNG (mulberry32): the same seed sends the same request mix (and a seeded test the same inputs). */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export async function runLoadWithFaults(opts: LoadOptions): Promise<LoadReport> {
  const print = opts.print ?? (() => undefined);
  const t = await startTopology({
    logger: opts.logger,
    replicas: 2,
    candidateWeight: 30,
    workerViewIntervalMs: 500,
    sidecarProbeIntervalMs: 1000,
    ...(opts.envoyVersion === undefined ? {} : { envoyVersion: opts.envoyVersion }),
  });
  try {
    const baselines = new Map<string, number[]>();
    for (const rev of REVISIONS) for (const p of PROMPTS) baselines.set(`${rev}|${p}`, await baseline(t, rev, p, MAX_TOKENS));
    print(`baselines recorded: ${baselines.size} (revision x prompt), ${MAX_TOKENS} tokens each`);
    return await drive(t, baselines, opts, print);
  } finally {
    await t.close();
  }
}

async function drive(
  t: Topology,
  baselines: ReadonlyMap<string, number[]>,
  opts: LoadOptions,
  print: (l: string) => void,
): Promise<LoadReport> {
  const random = prng(opts.seed ?? 7);
  const plan = Array.from({ length: opts.requests }, (_, i) => ({
    prompt: PROMPTS[Math.floor(random() * PROMPTS.length)]!,
    tenant: random() < 0.5 ? 'acme' : 'globex',
    session: `load-${Math.floor(random() * 101)}`,
    stream: random() < 0.3,
    i,
  }));
  const outcomes: Outcome[] = [];
  const events: string[] = [];
  const faults = opts.faults ? faultSchedule(t, opts.requests) : [];
  let next = 0;
  let done = 0;
  const started = Date.now();
  const worker = async () => {
    for (;;) {
      const k = next++;
      if (k >= plan.length) return;
      const r = plan[k]!;
      outcomes.push(await one(t, r, baselines, opts.requestTimeoutMs ?? 30_000));
      done++;
      for (const f of faults) {
        if (!f.fired && done >= f.at) {
          f.fired = true;
          const msg = await f.run().catch((e: unknown) => `fault failed: ${(e as Error).message}`);
          events.push(`after ${done} requests: ${msg}`);
          print(`  [fault] after ${done} requests: ${msg}`);
        }
      }
      if (done % Math.max(1, Math.floor(plan.length / 10)) === 0) print(`  ${done}/${plan.length} requests`);
    }
  };
  await Promise.all(Array.from({ length: opts.concurrency }, worker));
  await t.harness.waitForAccessLog(outcomes.length, 2000).catch(() => undefined);
  const report = summarize(withEnvoyDetails(t, outcomes), events, Date.now() - started);
  const unserved = outcomes.filter((o): o is Outcome & UnservedRequest => o.kind === 'refused' || o.kind === 'failed');
  return { ...report, byFault: attributeToFaults(unserved, faults, t.harness.accessLog()) };
}

/** Name each visible failure by what the data plane recorded (Envoy's %RESPONSE_CODE_DETAILS%). */
function withEnvoyDetails(t: Topology, outcomes: readonly Outcome[]): Outcome[] {
  const details = new Map<string, string>();
  for (const e of t.harness.accessLog()) if (e.listener === 'public') details.set(e.requestId, e.responseCodeDetails);
  return outcomes.map((o) => {
    if (o.kind !== 'failed') return o;
    const d = details.get(o.id);
    return d === undefined || d === 'via_upstream'
      ? o
      : { ...o, reason: `${o.reason} (${d.replace(/\{.*$/, '')})`, detail: `${o.detail ?? ''} ${d}` };
  });
}

interface Planned {
  readonly prompt: string;
  readonly tenant: string;
  readonly session: string;
  readonly stream: boolean;
  readonly i: number;
}

async function one(t: Topology, r: Planned, baselines: ReadonlyMap<string, number[]>, timeoutMs: number): Promise<Outcome> {
  let res: Response;
  try {
    res = await fetch(`${t.publicUrl}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-tenant-id': r.tenant, 'x-session-id': r.session, 'x-request-id': `load-${r.i}` },
      body: JSON.stringify({ ...completion(r.prompt, MAX_TOKENS), stream: r.stream }),
      signal: AbortSignal.timeout(timeoutMs),
    });
  } catch (e) {
    return (e as Error).name === 'TimeoutError' ? { kind: 'none' } : { kind: 'failed', reason: 'connection reset', ...unserved(r) };
  }
  let text: string;
  try {
    text = await res.text();
  } catch (e) {
    return (e as Error).name === 'TimeoutError' ? { kind: 'none' } : { kind: 'failed', reason: 'stream reset', ...unserved(r) };
  }
  if (res.status !== 200) {
    const e = kvgateError(text);
    return e !== undefined
      ? { kind: 'refused', code: e.code, ...unserved(r, e) }
      : { kind: 'failed', reason: `HTTP ${res.status}`, detail: `load-${r.i}: HTTP ${res.status} ${text.slice(0, 160)}`, ...unserved(r) };
  }
  const revision = res.headers.get(H.revision) as RevisionName | null;
  const parsed = r.stream ? idsFromSse(text) : idsFromJson(text);
  if ('error' in parsed) return { kind: 'failed', reason: parsed.error, ...unserved(r) };
  const base = revision === null ? undefined : baselines.get(`${revision}|${r.prompt}`);
  if (base === undefined)
    return { kind: 'wrong', detail: `request load-${r.i}: 200 without a known revision header (${String(revision)})` };
  const at = firstDivergence(parsed.ids, base);
  if (at !== -1) return { kind: 'wrong', detail: `request load-${r.i} (${revision}, "${r.prompt.slice(0, 30)}"): diverges at token ${at}` };
  return { kind: 'completed', revision: revision ?? '', streamed: r.stream };
}

function unserved(r: Planned, e?: { requestId?: string; message?: string }): Unserved {
  return {
    id: `load-${r.i}`,
    endedAtMs: Date.now(),
    ...(e?.requestId === undefined ? {} : { gateId: e.requestId }),
    ...(e?.message === undefined ? {} : { message: e.message }),
  };
}

/** A kvgate error body: its code, the gate's request id (to find the request's prefill leg) and the message. */
function kvgateError(text: string): { code: string; requestId?: string; message?: string } | undefined {
  try {
    const e = (JSON.parse(text) as { error?: { type?: string; code?: string; request_id?: unknown; message?: unknown } }).error;
    if (e?.type !== 'kvgate_error' || typeof e.code !== 'string') return undefined;
    return {
      code: e.code,
      ...(typeof e.request_id === 'string' && e.request_id !== '' ? { requestId: e.request_id } : {}),
      ...(typeof e.message === 'string' ? { message: e.message.slice(0, 300) } : {}),
    };
  } catch {
    return undefined;
  }
}

function idsFromJson(text: string): { ids: number[] } | { error: string } {
  try {
    const ids = (JSON.parse(text) as { choices?: Array<{ token_ids?: number[] }> }).choices?.[0]?.token_ids;
    return Array.isArray(ids) ? { ids } : { error: '200 without token ids' };
  } catch {
    return { error: '200 with a body that is not JSON' };
  }
}

function idsFromSse(text: string): { ids: number[] } | { error: string } {
  const ids: number[] = [];
  let sawDone = false;
  for (const line of text.split('\n')) {
    if (!line.startsWith('data: ')) continue;
    const data = line.slice(6).trim();
    if (data === '[DONE]') {
      sawDone = true;
      continue;
    }
    const j = JSON.parse(data) as { error?: unknown; choices?: Array<{ token_ids?: number[] }> };
    if (j.error !== undefined) return { error: 'SSE error event' };
    ids.push(...(j.choices?.[0]?.token_ids ?? []));
  }
  return sawDone ? { ids } : { error: 'stream ended without [DONE]' };
}

function summarize(outcomes: readonly Outcome[], events: readonly string[], durationMs: number): Omit<LoadReport, 'byFault'> {
  const refused: Record<string, number> = {};
  const failedVisibly: Record<string, number> = {};
  const byRevision: Record<string, number> = {};
  const wrongExamples: string[] = [];
  const failedExamples: string[] = [];
  const refusedExamples: string[] = [];
  let completed = 0;
  let silentlyWrong = 0;
  let noResponse = 0;
  let streamed = 0;
  for (const o of outcomes) {
    if (o.kind === 'completed') {
      completed++;
      byRevision[o.revision] = (byRevision[o.revision] ?? 0) + 1;
      if (o.streamed) streamed++;
    } else if (o.kind === 'refused') {
      refused[o.code] = (refused[o.code] ?? 0) + 1;
      if (refusedExamples.length < 5) refusedExamples.push(`${o.id} (${o.gateId ?? 'no gate id'}): ${o.code}: ${o.message ?? ''}`);
    } else if (o.kind === 'failed') {
      failedVisibly[o.reason] = (failedVisibly[o.reason] ?? 0) + 1;
      if (o.detail !== undefined && failedExamples.length < 3) failedExamples.push(o.detail);
    } else if (o.kind === 'wrong') {
      silentlyWrong++;
      if (wrongExamples.length < 5) wrongExamples.push(o.detail);
    } else noResponse++;
  }
  return {
    total: outcomes.length,
    completed,
    refused,
    failedVisibly,
    silentlyWrong,
    noResponse,
    byRevision,
    streamed,
    durationMs,
    events,
    wrongExamples,
    failedExamples,
    refusedExamples,
  };
}

export function formatLoadReport(r: LoadReport): string {
  const fmt = (m: Readonly<Record<string, number>>) =>
    Object.entries(m)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ') || 'none';
  return [
    `requests                       ${r.total} in ${(r.durationMs / 1000).toFixed(1)} s`,
    `completed, tokens == baseline  ${r.completed} (${fmt(r.byRevision)}; ${r.streamed} streamed)`,
    `refused with a reason          ${Object.values(r.refused).reduce((a, b) => a + b, 0)} (${fmt(r.refused)})`,
    `failed visibly                 ${Object.values(r.failedVisibly).reduce((a, b) => a + b, 0)} (${fmt(r.failedVisibly)})`,
    `silently wrong                 ${r.silentlyWrong}${r.wrongExamples.length ? `: ${r.wrongExamples.join('; ')}` : ''}`,
    `without any response           ${r.noResponse}`,
    `caused by the decode drain     ${r.byFault.drain.length} (target 0)`,
    `caused by the prefill kill     ${r.byFault.prefillKill.length} (target 0)`,
    ...r.refusedExamples.map((e) => `e.g. refused: ${e}`),
    ...r.failedExamples.map((e) => `e.g. failed: ${e}`),
    ...[...r.byFault.drain, ...r.byFault.prefillKill].slice(0, 5).map((e) => `e.g. caused by a fault: ${e}`),
    ...r.events.map((e) => `fault: ${e}`),
  ].join('\n');
}
