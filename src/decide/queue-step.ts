/**
 * The `queue` fallback step, decided purely: whether the caller should hold the request in its group's queue, for
 * how long, or refuse it (429 when the queue is full, 504 when a queued request's deadline passed). The waiting
 * itself (timers, wake-ups, Envoy's message timeout) is the gate's (`src/gate/wait-queue.ts`).
 *
 * Whether a request waits depends only on the worker view (is some endpoint of the missing leg merely busy), the
 * group's queue depth and the deadlines: never on traffic history, so `kvgate explain` decides as the live gate does.
 * A step that cannot hold the request says why (`FallbackRecord.skipped`), and the refusal that follows repeats it.
 *
 * A request's wait is bounded three ways, the tightest winning: the step's `deadlineMs`; the client's
 * `x-request-deadline-ms` header (relative milliseconds; it can only shorten the wait, never extend it; a malformed
 * value is ignored and traced); and the caller's own limit (the gate's: Envoy's `max_message_timeout` less a margin,
 * because Envoy answers 504 itself once its extended message timer runs out).
 */
import type { FallbackStep } from '../policy/schema.js';
import type { FallbackOutcome, StepInput } from './fallback-step.js';
import type { QueueSkipReason, Trace } from './types.js';
import { finalRetryAfter } from './retry-after.js';

/** The client header that tightens a request's queue deadline (relative milliseconds). */
export const CLIENT_DEADLINE_HEADER = 'x-request-deadline-ms';

/**
 * How much earlier than Envoy's extended message timer the gate answers a queued request, so its own JSON 504 (or
 * a late route) reaches Envoy before Envoy gives up with a bare 504.
 */
export function envoyTimeoutMarginMs(maxMessageTimeoutMs: number): number {
  return Math.min(250, Math.floor(maxMessageTimeoutMs / 4));
}

/** The longest the gate may hold a request under Envoy's `max_message_timeout` (both in ms). */
export function waitCapMs(maxMessageTimeoutMs: number): number {
  return Math.max(0, maxMessageTimeoutMs - envoyTimeoutMarginMs(maxMessageTimeoutMs));
}

/**
 * The `override_message_timeout` for a queued request: the remaining deadline plus the margin, within
 * [1, max_message_timeout] as Envoy requires (it ignores anything outside).
 */
export function overrideTimeoutMs(deadlineAtMs: number, nowMs: number, maxMessageTimeoutMs: number): number {
  const wanted = deadlineAtMs - nowMs + envoyTimeoutMarginMs(maxMessageTimeoutMs);
  return Math.min(maxMessageTimeoutMs, Math.max(1, Math.ceil(wanted)));
}

type QueueStep = Extract<FallbackStep, { kind: 'queue' }>;

/** Take the request into the group's queue, keep it there, refuse it, or pass (undefined). */
export function queueStep(step: QueueStep, n: number, s: StepInput): FallbackOutcome | undefined {
  const label = `fallback step ${n} (queue)`;
  const pass = (reason: QueueSkipReason, why: string): undefined => {
    s.trace?.push(`${label}: passed: ${why}`);
    s.records.push({ step: 'queue', outcome: 'passed', skipped: { reason, why } });
    return undefined;
  };
  const { queue, shortage, group, bound, nowMs } = s;
  if (shortage.busy === 0) {
    return pass(
      'nothing_to_wait_for',
      `no ${shortage.missing} endpoint of the group is merely at its in-flight limit, so waiting frees nothing (${shortage.reasons.join('; ') || 'no pools'})`,
    );
  }
  if (queue === undefined)
    return pass('cannot_hold', "this caller cannot hold requests (an internal hop, or Envoy's max_message_timeout is 0)");
  const wait = { kind: 'wait' as const, step: n, order: step.order, maxDepth: step.maxDepth };
  if (bound !== undefined) {
    const waited = nowMs - bound.enqueuedAtMs;
    if (nowMs >= bound.deadlineAtMs) {
      s.trace?.push(`${label}: deadline of ${bound.deadlineAtMs - bound.enqueuedAtMs} ms passed after waiting ${waited} ms`);
      s.records.push({ step: 'queue', outcome: 'deadline_exceeded' });
      return {
        kind: 'refuse',
        code: 'queue_deadline_exceeded',
        message:
          `request waited ${waited} ms for ${shortage.missing} capacity of group ${group.id} (model ${group.model}, revision ${group.revision}) ` +
          `and its queue deadline of ${bound.deadlineAtMs - bound.enqueuedAtMs} ms passed: ${shortage.reasons.join('; ')}; retry later, ` +
          `or ask the operator for capacity or a longer fallback queue deadline`,
      };
    }
    s.trace?.push(`${label}: keep waiting (waited ${waited} ms, ${bound.deadlineAtMs - nowMs} ms left)`);
    s.records.push({ step: 'queue', outcome: 'waiting' });
    return { ...wait, enqueuedAtMs: bound.enqueuedAtMs, deadlineAtMs: bound.deadlineAtMs };
  }
  const budget = waitBudget(step, s);
  if (budget.ms < 1) return pass('no_time_left', `no time is left to wait (${budget.why})`);
  const depth = queue.depth(group.id);
  if (depth >= step.maxDepth) {
    const retryAfterSeconds = finalRetryAfter(s.table);
    s.trace?.push(`${label}: the queue of group ${group.id} is full (${depth} of maxDepth ${step.maxDepth})`);
    s.records.push({ step: 'queue', outcome: 'queue_full' });
    return {
      kind: 'refuse',
      code: 'queue_full',
      message:
        `no ${shortage.missing} capacity of group ${group.id} (model ${group.model}, revision ${group.revision}) is free and its queue is full ` +
        `(${depth} requests waiting, maxDepth ${step.maxDepth}); retry after ${retryAfterSeconds} s`,
      retryAfterSeconds,
    };
  }
  s.trace?.push(
    `${label}: wait up to ${budget.ms} ms (${budget.why}) in the ${step.order} queue of group ${group.id} for ${shortage.missing} capacity; ` +
      `${depth} ahead`,
  );
  s.records.push({ step: 'queue', outcome: 'waiting' });
  return { ...wait, enqueuedAtMs: nowMs, deadlineAtMs: nowMs + budget.ms };
}

/** The tightest of the step's deadline, the client's header and the caller's limit, and which one it was. */
function waitBudget(step: QueueStep, s: StepInput): { ms: number; why: string } {
  let ms = step.deadlineMs;
  let why = "the queue step's deadlineMs";
  const client = clientDeadlineMs(s.facts.headers, s.trace);
  if (client !== undefined && client < ms) {
    ms = client;
    why = `the client's ${CLIENT_DEADLINE_HEADER}`;
  }
  if (s.maxWaitMs !== undefined && s.maxWaitMs < ms) {
    ms = s.maxWaitMs;
    why = "the gate's limit under Envoy's max_message_timeout";
  }
  return { ms: Math.floor(ms), why };
}

/** The client's relative deadline in ms, or undefined when absent or malformed (traced). */
export function clientDeadlineMs(headers: Readonly<Record<string, string>>, trace: Trace): number | undefined {
  const raw = headers[CLIENT_DEADLINE_HEADER];
  if (raw === undefined) return undefined;
  const v = raw.trim();
  if (!/^[1-9]\d{0,9}$/.test(v)) {
    trace?.push(`${CLIENT_DEADLINE_HEADER} ignored: ${JSON.stringify(v.slice(0, 32))} is not a positive whole number of milliseconds`);
    return undefined;
  }
  return Number(v);
}
