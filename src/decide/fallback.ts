/**
 * The fallback chain, walked in the route table's order when the bound group has no capacity. Each step either
 * takes the request or passes it on, with one trace line and one `FallbackRecord` either way:
 *
 * - `queue`: takes the request when waiting can help (some endpoint of the missing leg is merely at its in-flight
 *   limit) and time is left before its deadline: 429 `queue_full` when the group's queue is full, else `wait`.
 *   A queued request decided again keeps waiting here until its deadline, then gets 504 `queue_deadline_exceeded`.
 * - `routeVia`: binds an eligible request (not pinned by a binding, no adapter only the bound revision has) to a
 *   listed revision of the same base model instead, prefill and decode both of that revision: a new group, chosen
 *   before any prefill, never mixed. A queued request is never moved.
 * - `recompute`: serves on the already chosen decode endpoint of the same group without a prefill leg when only
 *   prefill capacity is missing, the prompt is at most `maxPromptTokens` and recomputing (tokens x
 *   prefillMsPerToken) is cheaper than the wait the rest of the chain would impose.
 * - `refuse`: 503 `no_compatible_capacity` with retry-after.
 *
 * Whatever a step does, it stays inside the bound group, binds a whole new group before prefill, or refuses.
 */
import type { FallbackStep } from '../policy/schema.js';
import type { FallbackInput, FallbackOutcome, StepInput } from './fallback-step.js';
import { estimatePrompt } from './prompt-tokens.js';
import { queueStep } from './queue-step.js';
import { DEFAULT_RETRY_AFTER_SECONDS } from './retry-after.js';
import { routeViaStep } from './route-via.js';
import type { FallbackRecord, Trace } from './types.js';

export { finalRetryAfter } from './retry-after.js';

export interface FallbackResult {
  readonly outcome: FallbackOutcome;
  readonly records: readonly FallbackRecord[];
}

/** Walk the chain in order; the first step that takes the request decides. */
export function walkFallback(input: FallbackInput, trace: Trace): FallbackResult {
  const records: FallbackRecord[] = [];
  const steps = input.table.fallback;
  const s: StepInput = { ...input, trace, records };
  for (const [i, step] of steps.entries()) {
    const outcome = runStep(step, i, s);
    if (outcome !== undefined) return { outcome, records };
  }
  const retry = DEFAULT_RETRY_AFTER_SECONDS;
  trace?.push(`fallback chain exhausted: refuse with retry-after ${retry} s`);
  records.push({ step: 'end', outcome: 'refused' });
  return {
    outcome: { kind: 'refuse', code: 'no_compatible_capacity', message: noCapacityMessage(s, retry), retryAfterSeconds: retry },
    records,
  };
}

function runStep(step: FallbackStep, i: number, s: StepInput): FallbackOutcome | undefined {
  const n = i + 1;
  switch (step.kind) {
    case 'queue':
      return queueStep(step, n, s);
    case 'routeVia':
      return routeViaStep(step, n, s);
    case 'recompute':
      return recomputeStep(step, i, s);
    case 'refuse':
      s.trace?.push(`fallback step ${n} (refuse): refuse with retry-after ${step.retryAfterSeconds} s`);
      s.records.push({ step: 'refuse', outcome: 'refused' });
      return {
        kind: 'refuse',
        code: 'no_compatible_capacity',
        message: noCapacityMessage(s, step.retryAfterSeconds),
        retryAfterSeconds: step.retryAfterSeconds,
      };
  }
}

/** The 503 message: which leg, which group, every reason, a skipped queue step and why, and what to do. */
export function noCapacityMessage(
  input: Pick<FallbackInput, 'group' | 'shortage'> & { readonly records?: readonly FallbackRecord[] },
  retryAfterSeconds: number,
): string {
  const { group, shortage } = input;
  const skipped = input.records?.find((r) => r.skipped !== undefined)?.skipped;
  return (
    `no ${shortage.missing} endpoint of group ${group.id} (model ${group.model}, revision ${group.revision}) is available: ` +
    `${shortage.reasons.join('; ') || 'no pools'}` +
    (skipped === undefined ? '' : `; the fallback queue was skipped (${skipped.reason}): ${skipped.why}`) +
    `; retry after ${retryAfterSeconds} s or ask the operator to add capacity`
  );
}

type RecomputeStep = Extract<FallbackStep, { kind: 'recompute' }>;

function recomputeStep(step: RecomputeStep, i: number, s: StepInput): FallbackOutcome | undefined {
  const n = i + 1;
  const pass = (why: string): undefined => {
    s.trace?.push(`fallback step ${n} (recompute): passed: ${why}`);
    s.records.push({ step: 'recompute', outcome: 'passed' });
    return undefined;
  };
  const decode = s.shortage.decode;
  if (s.shortage.missing !== 'prefill' || decode === null)
    return pass('decode capacity is missing, and recompute needs a decode endpoint with room');
  const estimate = estimatePrompt(s.body);
  if ('unknown' in estimate)
    return pass(`the prompt carries content the gate cannot count (${estimate.unknown}), so its length is unknown`);
  const tokens = estimate.tokens;
  if (tokens > step.maxPromptTokens) return pass(`the prompt is about ${tokens} tokens, over maxPromptTokens ${step.maxPromptTokens}`);
  const cost = tokens * step.prefillMsPerToken;
  const wait = expectedWaitAfter(i, s);
  const waitText =
    wait.ms === Infinity ? `the rest of the chain (${wait.why})` : `the expected wait of ${Math.round(wait.ms)} ms (${wait.why})`;
  if (!(cost < wait.ms)) return pass(`recomputing about ${tokens} tokens costs about ${Math.round(cost)} ms, not less than ${waitText}`);
  s.trace?.push(
    `fallback step ${n} (recompute): serve on decode endpoint ${decode.endpoint.address} (pool ${decode.pool.name}) without a prefill leg: ` +
      `about ${tokens} tokens x ${step.prefillMsPerToken} ms = ${Math.round(cost)} ms, cheaper than ${waitText}; same group ${s.group.id}`,
  );
  s.records.push({ step: 'recompute', outcome: 'recomputed' });
  return { kind: 'recompute', decode };
}

/** The wait the chain after step `i` would impose: the first later queue step that would take the request. */
function expectedWaitAfter(i: number, s: StepInput): { ms: number; why: string } {
  const j = s.table.fallback.findIndex((st, k) => k > i && st.kind === 'queue');
  const q = s.table.fallback[j];
  if (q?.kind !== 'queue') return { ms: Infinity, why: 'no queue step follows' };
  if (s.queue === undefined || s.shortage.busy === 0) return { ms: Infinity, why: `queue step ${j + 1} would not hold this request` };
  // The longest that step may hold the request: known from the table and the caller alone, never from traffic.
  return { ms: Math.min(q.deadlineMs, s.maxWaitMs ?? Infinity), why: `queue step ${j + 1}'s longest wait` };
}
