/**
 * The demo's sample traffic, each scenario a small function that returns what happened with real numbers from the
 * run. Used by `npm run testbed -- demo` (printed) and by the end-to-end test of the demo (asserted).
 */
import { randomUUID } from 'node:crypto';
import { mintContract } from '../../src/contract/contract.js';
import { groupIdOf } from '../../src/compat/fingerprint.js';
import { H } from '../../src/headers.js';
import type { SimServer } from '../sim/server.js';
import { TOY_PROXY_PREFILL_KV } from '../sim/testing.js';
import { SERVED_MODEL, type RevisionName, type Topology } from './topology.js';

export interface HttpResult {
  readonly status: number;
  readonly headers: Headers;
  readonly json: any;
}

export async function post(url: string, body: unknown, headers: Record<string, string> = {}): Promise<HttpResult> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  const text = await res.text();
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = { raw: text };
  }
  return { status: res.status, headers: res.headers, json };
}

export const PROMPTS = [
  'The capital of France is',
  'Explain in one sentence why KV caches must match the model that computed them:',
  'Write a haiku about prefill and decode.',
  'List three prime numbers:',
  'Once upon a time, in a data center far away,',
] as const;

export function completion(prompt: string, maxTokens = 16): Record<string, unknown> {
  return { model: SERVED_MODEL, prompt, max_tokens: maxTokens, return_token_ids: true };
}

export function tokenIds(r: HttpResult): number[] {
  return (r.json?.choices?.[0]?.token_ids ?? []) as number[];
}

/** Index of the first differing token, or -1 when equal. */
export function firstDivergence(a: readonly number[], b: readonly number[]): number {
  const n = Math.max(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return -1;
}

/** The non-disaggregated baseline: the revision's decode worker serves prefill and decode itself. */
export async function baseline(t: Topology, revision: RevisionName, prompt: string, maxTokens = 16): Promise<number[]> {
  const w = t.worker(revision, 'decode');
  await w.sim.resetPrefixCache();
  const r = await post(`${w.sim.url}/v1/completions`, completion(prompt, maxTokens));
  if (r.status !== 200) throw new Error(`baseline on ${revision} failed: ${r.status} ${JSON.stringify(r.json)}`);
  return tokenIds(r);
}

/** A session id whose new-request cohort lands on `revision` (found by asking the gate, as a client would). */
export async function sessionOn(t: Topology, revision: RevisionName, tenant = 'acme'): Promise<{ session: string; result: HttpResult }> {
  for (let i = 0; i < 200; i++) {
    const session = `demo-session-${i}`;
    const r = await post(`${t.publicUrl}/v1/completions`, completion(PROMPTS[0]), { 'x-tenant-id': tenant, 'x-session-id': session });
    if (r.status === 200 && r.headers.get(H.revision) === revision) return { session, result: r };
  }
  throw new Error(`no session out of 200 landed on ${revision}; is its cohort weight 0?`);
}

export interface ParityRow {
  readonly prompt: string;
  readonly revision: string;
  readonly group: string;
  readonly tokens: number;
  readonly divergence: number;
}

/** Through kvgate (P/D) vs the non-disaggregated baseline of the revision the gate bound. */
export async function parity(t: Topology, session: string, tenant = 'acme'): Promise<ParityRow[]> {
  const rows: ParityRow[] = [];
  for (const prompt of PROMPTS) {
    const r = await post(`${t.publicUrl}/v1/completions`, completion(prompt), { 'x-tenant-id': tenant, 'x-session-id': session });
    if (r.status !== 200) throw new Error(`request through kvgate failed: ${r.status} ${JSON.stringify(r.json)}`);
    const revision = r.headers.get(H.revision) as RevisionName;
    const ids = tokenIds(r);
    const base = await baseline(t, revision, prompt);
    rows.push({ prompt, revision, group: r.headers.get(H.group) ?? '', tokens: ids.length, divergence: firstDivergence(ids, base) });
  }
  return rows;
}

export interface NaiveResult {
  readonly handshakePassed: boolean;
  readonly divergence: number;
  readonly tokens: number;
}

/**
 * What kvgate prevents: a naive router pairs revision A's prefill with revision B's decode, the way a P/D proxy that
 * checks nothing would. vLLM's NIXL hash is the same for both revisions, so the handshake passes, and B decodes
 * from A's KV.
 */
export async function naiveMixedPairing(t: Topology, prompt: string): Promise<NaiveResult> {
  const d = t.worker('llama-b', 'decode').sim;
  return naivePairing(t.worker('llama-a', 'prefill').sim, d, completion(prompt), () => baseline(t, 'llama-b', prompt));
}

/**
 * The naive pairing between any two simulated workers: prefill on `p`, decode on `d` with the parameters `p` returned,
 * compared with `d`'s own baseline for the same `body` (also used for an operator's table, table-traffic.ts).
 */
export async function naivePairing(
  p: SimServer,
  d: SimServer,
  body: Record<string, unknown>,
  baselineIds: () => Promise<number[]>,
): Promise<NaiveResult> {
  await d.resetPrefixCache();
  const requestId = randomUUID();
  const pre = await post(
    `${p.url}/v1/completions`,
    {
      ...body,
      max_tokens: 1,
      kv_transfer_params: { ...TOY_PROXY_PREFILL_KV },
    },
    { 'x-request-id': requestId },
  );
  const dec = await post(
    `${d.url}/v1/completions`,
    { ...body, kv_transfer_params: pre.json.kv_transfer_params },
    { 'x-request-id': requestId },
  );
  const base = await baselineIds();
  const ids = tokenIds(dec);
  return { handshakePassed: dec.status === 200, divergence: firstDivergence(ids, base), tokens: ids.length };
}

/**
 * A prefill leg that tries to leave its group: a decode sidecar (misconfigured or compromised) holding a contract
 * for a revision-A request sends the prefill to revision B's prefill cluster through Envoy's internal listener.
 */
export async function crossGroupHop(t: Topology, prompt: string): Promise<HttpResult> {
  const requestId = randomUUID();
  const fingerprint = t.gate.policy.current().revisions.get('llama-a')!.fingerprint;
  const tenantScope = 'tenant:acme';
  const now = Date.now();
  const contract = mintContract(
    {
      requestId,
      groupId: groupIdOf(fingerprint, tenantScope),
      fingerprint,
      tenantScope,
      tenant: 'acme',
      model: SERVED_MODEL,
      revision: 'llama-a',
      adapter: null,
      // The gate refuses the hop before any sidecar reads the body, so nothing binds one.
      cacheSaltDigest: '0'.repeat(64),
      promptDigest: '0'.repeat(64),
      issuedAtMs: now,
      expiresAtMs: now + 30_000,
      decode: { cluster: 'a_decode', endpoint: t.worker('llama-a', 'decode').address },
      prefill: { cluster: 'a_prefill', endpoint: t.worker('llama-a', 'prefill').address },
    },
    t.keys,
  );
  return post(`${t.internalUrl}/v1/completions`, completion(prompt, 1), {
    'x-request-id': requestId,
    [H.contract]: contract,
    [H.prefillCluster]: 'b_prefill',
  });
}
