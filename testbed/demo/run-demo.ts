/**
 * `npm run testbed -- demo`: start the local topology, send the sample traffic, print what happened, and return a summary
 * whose checks decide the exit code (so the demo doubles as a smoke test of the whole path).
 */
import type { Logger } from 'pino';
import { H } from '../../src/headers.js';
import {
  completion,
  crossGroupHop,
  naiveMixedPairing,
  parity,
  post,
  PROMPTS,
  sessionOn,
  baseline,
  tokenIds,
  firstDivergence,
  type ParityRow,
} from './scenarios.js';
import path from 'node:path';
import { REVISIONS, startTopology, type Topology } from './topology.js';

export interface DemoCheck {
  readonly name: string;
  readonly ok: boolean;
  readonly detail: string;
}

export interface DemoSummary {
  readonly checks: readonly DemoCheck[];
  readonly parity: readonly ParityRow[];
  readonly ok: boolean;
}

export interface DemoOptions {
  readonly logger: Logger;
  readonly print: (line: string) => void;
  /** Keep the topology up after the traffic (the caller closes it). */
  readonly keepRunning?: boolean;
  /**
   * Stops the demo early (the demo command's Ctrl-C or SIGTERM): during start-up or the traffic, everything started is
   * stopped, the run folder removed, nothing more printed, and `runDemo` rejects with the signal's reason.
   */
  readonly signal?: AbortSignal;
}

export async function runDemo(opts: DemoOptions): Promise<{ summary: DemoSummary; topology: Topology }> {
  const p = quietOnceAborted(opts.print, opts.signal);
  p('kvgate demo: starting the local P/D topology (2 revisions x prefill/decode, sidecars, gate, Envoy harness)...');
  const t = await startTopology({ logger: opts.logger, ...(opts.signal === undefined ? {} : { signal: opts.signal }) });
  try {
    printTopology(t, p, opts.keepRunning === true);
    const summary = await unlessAborted(traffic(t, p), opts.signal);
    return { summary, topology: t };
  } catch (e) {
    await t.close();
    throw e;
  }
}

/** `print`, silent once `signal` fired: traffic still in flight when the topology closes under it says nothing. */
export function quietOnceAborted(print: (line: string) => void, signal: AbortSignal | undefined): (line: string) => void {
  return (line) => {
    if (signal?.aborted !== true) print(line);
  };
}

/**
 * `work`, or a rejection with `signal`'s reason as soon as it fires (the caller then closes the topology, which ends
 * the work; its own outcome is ignored).
 */
export function unlessAborted<T>(work: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (signal === undefined) return work;
  work.catch(() => undefined);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    if (signal.aborted) return onAbort();
    signal.addEventListener('abort', onAbort, { once: true });
    work.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

function printTopology(t: Topology, p: (l: string) => void, keepRunning: boolean): void {
  p('');
  p(`  Envoy public listener    ${t.publicUrl}      (send requests here)`);
  p(`  Envoy internal listener  ${t.internalUrl}      (prefill legs from decode sidecars)`);
  p(`  gate ext_proc (gRPC)     127.0.0.1:${t.gate.grpcPort}   admin http://127.0.0.1:${t.gate.adminPort}/status`);
  for (const w of t.workers) p(`  ${`${w.revision} ${w.role}`.padEnd(24)} sidecar http://${w.address}   vLLM sim ${w.sim.url}`);
  printFiles(p, t.dir, keepRunning, [
    ['route table', t.routeTablePath],
    ['envoy.yaml', t.envoyYamlPath],
    ['gate config', path.join(t.dir, 'gate.yaml')],
    ...REVISIONS.map((r): [string, string] => [`descriptor ${r}`, path.join(t.dir, `${r}.yaml`)]),
    ['TLS (dev PKI)', path.join(t.dir, 'tls')],
  ]);
  p('');
}

/** Where a demo's files are: the run folder is temporary, gone when the demo exits unless it keeps running. */
export function printFiles(p: (l: string) => void, dir: string, keepRunning: boolean, files: readonly (readonly [string, string])[]): void {
  p('');
  p(`  Files (${dir}: ${keepRunning ? 'removed when you stop the demo' : 'removed when the demo exits; --keep-running keeps them'}):`);
  for (const [what, file] of files) p(`    ${what.padEnd(26)} ${file}`);
}

async function traffic(t: Topology, p: (l: string) => void): Promise<DemoSummary> {
  const checks: DemoCheck[] = [];
  const check = (name: string, ok: boolean, detail: string) => {
    checks.push({ name, ok, detail });
    p(`${ok ? 'PASS' : 'FAIL'}  ${name}\n      ${detail}`);
  };

  p('1. A-to-A: a new session in the stable cohort is bound to revision llama-a; prefill and decode both run A.');
  const a = await sessionOn(t, 'llama-a');
  const aBase = await baseline(t, 'llama-a', PROMPTS[0]);
  const aDiv = firstDivergence(tokenIds(a.result), aBase);
  check(
    'A-to-A tokens equal the non-disaggregated A baseline',
    aDiv === -1,
    `session ${a.session} -> group ${a.result.headers.get(H.group)}, revision ${a.result.headers.get(H.revision)}; ${tokenIds(a.result).length} token ids compared, ${aDiv === -1 ? 'identical' : `first divergence at ${aDiv}`}`,
  );

  p('2. B cohort: a session in the candidate cohort (25% of new sessions) is bound to revision llama-b, B-to-B.');
  const b = await sessionOn(t, 'llama-b');
  const bBase = await baseline(t, 'llama-b', PROMPTS[0]);
  const bDiv = firstDivergence(tokenIds(b.result), bBase);
  check(
    'B-to-B tokens equal the non-disaggregated B baseline',
    bDiv === -1,
    `session ${b.session} -> group ${b.result.headers.get(H.group)}, revision ${b.result.headers.get(H.revision)}; ${tokenIds(b.result).length} token ids compared, ${bDiv === -1 ? 'identical' : `first divergence at ${bDiv}`}`,
  );
  const sticky = await post(`${t.publicUrl}/v1/completions`, completion(PROMPTS[1]), {
    'x-tenant-id': 'acme',
    'x-session-id': a.session,
    [H.binding]: b.result.headers.get(H.binding) ?? '',
  });
  p(`   (a client presenting session B's binding token under another session id is not moved: revision ${sticky.headers.get(H.revision)})`);

  p('3. Mixed revisions. Without kvgate, a naive P/D router pairs A prefill with B decode:');
  const naive = await naiveMixedPairing(t, PROMPTS[1]);
  check(
    'naive A->B pairing: the NIXL handshake passes and the text silently changes',
    naive.handshakePassed && naive.divergence >= 0,
    `vLLM's handshake hash is identical for A and B (same geometry, same model path): ${naive.handshakePassed ? 'passed' : 'failed'}; B decoding A's KV diverges from the B baseline at token ${naive.divergence} of ${naive.tokens} - fluent, wrong text`,
  );
  p('   With kvgate, a prefill leg that tries to leave its group is refused before any prefill runs:');
  const hop = await crossGroupHop(t, PROMPTS[1]);
  const reason = hop.headers.get(H.rejectReason);
  check(
    'cross-group prefill leg refused with 409 mixed_revision',
    hop.status === 409 && reason === 'mixed_revision',
    `HTTP ${hop.status} ${reason}: ${String(hop.json?.error?.message ?? JSON.stringify(hop.json)).slice(0, 220)}`,
  );
  const forged = await post(
    `${t.publicUrl}/v1/completions`,
    { ...completion(PROMPTS[2]), kv_transfer_params: { do_remote_prefill: true } },
    { 'x-tenant-id': 'acme' },
  );
  check(
    'client-sent kv_transfer_params refused',
    forged.status === 400 && forged.headers.get(H.rejectReason) === 'kv_params_forbidden',
    `HTTP ${forged.status} ${forged.headers.get(H.rejectReason)}: ${String(forged.json?.error?.message ?? '')}`,
  );
  const steer = await post(`${t.publicUrl}/v1/completions`, completion(PROMPTS[2]), {
    'x-tenant-id': 'acme',
    'x-session-id': a.session,
    [H.decodeCluster]: 'b_decode',
    [H.decodeEndpoint]: t.worker('llama-b', 'decode').address,
  });
  check(
    'client-forged routing headers cannot steer the request',
    steer.status === 200 && steer.headers.get(H.revision) === 'llama-a',
    `sent x-kvgate-decode-cluster: b_decode; served by revision ${steer.headers.get(H.revision)} (the gate removed and overwrote them)`,
  );
  const noTenant = await post(`${t.publicUrl}/v1/completions`, completion(PROMPTS[2]));
  check(
    'a request without a tenant is refused (401 tenant_required)',
    noTenant.status === 401,
    `HTTP ${noTenant.status} ${noTenant.headers.get(H.rejectReason)}: ${String(noTenant.json?.error?.message ?? '')}`,
  );

  p('4. Token parity: every prompt through kvgate vs the non-disaggregated baseline of the revision it was bound to.');
  const rows = [...(await parity(t, a.session)), ...(await parity(t, b.session))];
  for (const r of rows) {
    p(
      `   ${r.revision}  ${r.tokens} tokens  ${r.divergence === -1 ? 'identical' : `DIVERGES at ${r.divergence}`}  "${r.prompt.slice(0, 48)}"`,
    );
  }
  const bad = rows.filter((r) => r.divergence !== -1).length;
  const tokens = rows.reduce((n, r) => n + r.tokens, 0);
  check('token parity against the baseline', bad === 0, `${rows.length} requests, ${tokens} token ids compared, ${bad} divergent`);

  const ok = checks.every((c) => c.ok);
  p('');
  p(
    `Summary: ${checks.filter((c) => c.ok).length}/${checks.length} checks passed; ${rows.length} P/D completions, 0 allowed to mix revisions.`,
  );
  return { checks, parity: rows, ok };
}
