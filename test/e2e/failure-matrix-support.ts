/**
 * Small helpers shared by the failure-matrix end-to-end files (issue 8): requests as a client sends them, SSE
 * parsing that keeps error events, and Prometheus counters read from a simulated worker or a sidecar. Test support
 * only; the topology itself comes from testbed/demo/topology.ts.
 */
import { readFile, rename, writeFile } from 'node:fs/promises';
import { pino } from 'pino';
import { parse as parseYaml, stringify as toYaml } from 'yaml';
import { completion, post, type HttpResult } from '../../testbed/demo/scenarios.js';
import { SERVED_MODEL, type Topology } from '../../testbed/demo/topology.js';
import { groupIdOf } from '../../src/compat/fingerprint.js';
import type { TransferContract } from '../../src/contract/contract.js';
import { parseLabels } from '../../testbed/sim/testing.js';

/** Logs off unless `E2E_LOG=debug` (or another level) is set while debugging a failure. */
export const silent = pino({ level: process.env['E2E_LOG'] ?? 'silent' });

/** Rewrite the topology's route table the way an operator's tooling does: a new file renamed over the old one. */
export async function editRouteTable(t: Topology, edit: (table: any) => void): Promise<void> {
  const table = parseYaml(await readFile(t.routeTablePath, 'utf8'));
  edit(table);
  await writeFile(`${t.routeTablePath}.tmp`, toYaml(table));
  await rename(`${t.routeTablePath}.tmp`, t.routeTablePath);
}

/** Headers of a client of tenant `tenant` in session `session`. */
export function client(tenant = 'acme', session = 'matrix', extra: Record<string, string> = {}): Record<string, string> {
  return { 'x-tenant-id': tenant, 'x-session-id': session, ...extra };
}

/** A non-streamed completion through Envoy's public listener. */
export function complete(
  t: Topology,
  prompt: string,
  maxTokens: number,
  headers: Record<string, string> = client(),
  extra: Record<string, unknown> = {},
): Promise<HttpResult> {
  return post(`${t.publicUrl}/v1/completions`, { ...completion(prompt, maxTokens), ...extra }, headers);
}

/** A streamed completion through the public listener; the raw response, body unread. */
export function stream(t: Topology, prompt: string, maxTokens: number, headers: Record<string, string> = client()): Promise<Response> {
  return fetch(`${t.publicUrl}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ ...completion(prompt, maxTokens), stream: true }),
  });
}

/** One SSE event's data: parsed JSON, or the literal `[DONE]`. */
export type SseEvent = Record<string, any> | '[DONE]';

/** Every `data:` event of an SSE body, in order. */
export function sseEvents(text: string): SseEvent[] {
  return text
    .split('\n')
    .filter((l) => l.startsWith('data: '))
    .map((l) => l.slice(6).trim())
    .map((d) => (d === '[DONE]' ? '[DONE]' : (JSON.parse(d) as Record<string, any>)));
}

/** Token ids carried by the events of a stream (error events carry none). */
export function sseTokenIds(events: readonly SseEvent[]): number[] {
  return events.flatMap((e) => (e === '[DONE]' ? [] : ((e['choices']?.[0]?.token_ids ?? []) as number[])));
}

/** Sum of a counter or gauge over every label set that includes `labels` (0 when the metric has no sample yet). */
export function metricSum(text: string, name: string, labels: Record<string, string> = {}): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    const m = /^([^{\s]+)(\{(.*)\})?\s+(\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const have = parseLabels(m[3] ?? '');
    if (Object.entries(labels).every(([k, v]) => have[k] === v)) sum += Number(m[4]);
  }
  return sum;
}

/** `/metrics` of anything that serves it at `url` (a sim, a sidecar, the gate's admin port). */
export async function metricsOf(url: string): Promise<string> {
  const res = await fetch(`${url.replace(/\/+$/, '')}/metrics`);
  return res.text();
}

/** One counter of one server, read now. */
export async function counter(url: string, name: string, labels: Record<string, string> = {}): Promise<number> {
  return metricSum(await metricsOf(url), name, labels);
}

/** Poll `check` until it returns true or `timeoutMs` passes; returns whether it became true. */
export async function eventually(check: () => boolean | Promise<boolean>, timeoutMs = 5_000, everyMs = 25): Promise<boolean> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return true;
    if (Date.now() > until) return false;
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/**
 * The fields of a contract the gate would mint for tenant acme on `revision` of the demo topology, routed to that
 * revision's first prefill and decode workers; the digests are placeholders until a body is bound (`gateSigned`).
 */
export function topologyContractFields(
  t: Topology,
  requestId: string,
  revision: 'llama-a' | 'llama-b' = 'llama-a',
  edit: Partial<Omit<TransferContract, 'kind'>> = {},
): Omit<TransferContract, 'kind'> {
  const fingerprint = t.gate.policy.current().revisions.get(revision)!.fingerprint;
  const p = revision === 'llama-a' ? 'a' : 'b';
  const now = Date.now();
  return {
    requestId,
    groupId: groupIdOf(fingerprint, 'tenant:acme'),
    fingerprint,
    tenantScope: 'tenant:acme',
    tenant: 'acme',
    model: SERVED_MODEL,
    revision,
    adapter: null,
    cacheSaltDigest: '0'.repeat(64),
    promptDigest: '0'.repeat(64),
    issuedAtMs: now,
    expiresAtMs: now + 30_000,
    decode: { cluster: `${p}_decode`, endpoint: t.worker(revision, 'decode').address },
    prefill: { cluster: `${p}_prefill`, endpoint: t.worker(revision, 'prefill').address },
    ...edit,
  };
}

export { jsonLineSink } from '../../src/sidecar/testing.js';
