/**
 * Semantic checks of the rollout and the fallback chain: verification states that contradict a revision's role,
 * and fallback steps that can never do what their author expects.
 */
import type { CheckContext } from './semantic-groups.js';

/** Default `envoy.maxMessageTimeoutMs` of the gate (Envoy's `max_message_timeout` in envoy/envoy.yaml). */
export const ENVOY_MAX_MESSAGE_TIMEOUT_MS = 30_000;

/**
 * A stable revision must be trusted (it takes every request outside the candidate cohort); an unverified candidate
 * is legal (that is how a rollout starts) but takes no cohort, which the author should hear about.
 */
export function checkVerification(ctx: CheckContext): void {
  const { table } = ctx;
  for (const [model, m] of Object.entries(table.models)) {
    const stable = table.revisions[m.rollout.stable];
    if (stable?.verification.required && !stable.verification.verified) {
      ctx.add(
        ['revisions', m.rollout.stable, 'verification', 'verified'],
        `revision "${m.rollout.stable}" is model "${model}"'s stable revision, but its verification is required and has not passed; ` +
          'the stable revision takes every request outside the candidate cohort',
        `run kvgate verify against "${m.rollout.stable}" and set verified: true (with evidence), or make it the candidate and keep a verified revision as stable`,
      );
    }
    const name = m.rollout.candidate;
    const candidate = name === undefined ? undefined : table.revisions[name];
    if (name && candidate?.verification.required && !candidate.verification.verified) {
      ctx.add(
        ['revisions', name, 'verification', 'verified'],
        `model "${model}"'s candidate "${name}" is not verified, so it takes no cohort traffic: its ${m.rollout.weight ?? 0}% goes to stable "${m.rollout.stable}"`,
        `run kvgate verify against "${name}", then set revisions.${name}.verification.verified: true and record the evidence`,
        'warning',
      );
    }
  }
}

/** Fallback steps that name revisions without pools, or wait longer than Envoy lets the gate hold a request. */
export function checkFallbackSteps(ctx: CheckContext): void {
  const { table } = ctx;
  table.fallback.forEach((step, i) => {
    if (step.kind === 'queue' && step.deadlineMs > ENVOY_MAX_MESSAGE_TIMEOUT_MS) {
      ctx.add(
        ['fallback', i, 'queue', 'deadlineMs'],
        `fallback step ${i + 1} (queue) waits up to ${step.deadlineMs} ms, but the gate holds a request at most a little under Envoy's ` +
          `max_message_timeout (gate setting envoy.maxMessageTimeoutMs, default ${ENVOY_MAX_MESSAGE_TIMEOUT_MS} ms); longer waits are cut there`,
        "lower deadlineMs, or raise max_message_timeout in envoy.yaml and the gate's envoy.maxMessageTimeoutMs together",
        'warning',
      );
    }
    if (step.kind !== 'routeVia') return;
    step.revisions.forEach((name, j) => {
      const rev = table.revisions[name];
      if (rev === undefined) return; // reported by checkRevisionReferences
      const at = ['fallback', i, 'routeVia', 'revisions', j];
      if (!table.pools.some((p) => p.revision === name)) {
        ctx.add(
          at,
          `fallback step ${i + 1} (routeVia) names revision "${name}", which has no pools, so it can never take a request`,
          `add pools with revision: ${name}, or remove it from the step`,
          'warning',
        );
      } else if (rev.verification.required && !rev.verification.verified) {
        ctx.add(
          at,
          `fallback step ${i + 1} (routeVia) names revision "${name}", which is not verified; it is skipped until it is`,
          `run kvgate verify against "${name}" and set verified: true, or remove it from the step`,
          'warning',
        );
      }
    });
  });
}
