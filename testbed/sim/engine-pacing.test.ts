import { describe, expect, it } from 'vitest';
import { stepWait } from './engine.js';

/**
 * When each of `n` tokens is emitted, on a virtual clock starting at 1000, when the timer for token i fires
 * `late[i]` ms after the wait it was given (the event loop was busy with other calls).
 */
function emitted(step: number, n: number, late: readonly number[], wait = stepWait): number[] {
  let clock = 1000;
  let due = clock;
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    due += step;
    clock += wait(step, due, clock) + (late[i] ?? 0);
    out.push(clock);
  }
  return out;
}

describe('sim engine pacing (the engine core keeps its pace while the API loop is busy)', () => {
  it('one step per token when every timer fires on time', () => {
    expect(emitted(10, 4, [])).toEqual([1010, 1020, 1030, 1040]);
  });

  it('after a stall the overdue tokens come at once and the schedule resumes, instead of everything shifting', () => {
    expect(emitted(10, 5, [25])).toEqual([1035, 1035, 1035, 1040, 1050]);
    // What a plain per-token sleep did: every later token pushed back by the stall.
    expect(emitted(10, 5, [25], (step) => step)).toEqual([1035, 1045, 1055, 1065, 1075]);
  });

  it('never waits longer than a step, so a clock that stands still keeps the plain pacing', () => {
    expect([1010, 1020, 1030].map((due) => stepWait(10, due, 1000))).toEqual([10, 10, 10]);
  });
});
