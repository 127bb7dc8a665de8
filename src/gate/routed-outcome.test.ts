import { describe, expect, it } from 'vitest';
import { routedOutcome } from './routed-outcome.js';

describe('routedOutcome', () => {
  it('a kvgate reject reason is a refusal with its code, whatever the status', () => {
    expect(routedOutcome('409', 'incompatible_transfer')).toEqual({ outcome: 'refused', code: 'incompatible_transfer' });
    expect(routedOutcome('503', 'draining')).toEqual({ outcome: 'refused', code: 'draining' });
  });
  // A sidecar records these `failed` and audits nothing: counted `refused` here, they were refusals without an audit line.
  it('a worker failure a sidecar names (worker_error, internal) is failed, with its code', () => {
    expect(routedOutcome('502', 'worker_error')).toEqual({ outcome: 'failed', code: 'worker_error' });
    expect(routedOutcome('500', 'internal')).toEqual({ outcome: 'failed', code: 'internal' });
  });
  it('below 400 without a reason is served; errors without a kvgate code keep only their class', () => {
    expect(routedOutcome('200', undefined)).toEqual({ outcome: 'served', code: '' });
    expect(routedOutcome('503', undefined)).toEqual({ outcome: 'failed', code: 'http_5xx' });
    expect(routedOutcome('400', undefined)).toEqual({ outcome: 'failed', code: 'http_4xx' });
    expect(routedOutcome(undefined, undefined)).toEqual({ outcome: 'failed', code: 'http_unknown' });
  });
  it('an unknown reject reason is not copied into a label', () => {
    expect(routedOutcome('500', 'made-up <script>')).toEqual({ outcome: 'failed', code: 'http_5xx' });
  });
});
