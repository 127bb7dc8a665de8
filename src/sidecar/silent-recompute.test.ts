import { describe, expect, it } from 'vitest';
import { silentRecomputeCheck } from './silent-recompute.js';

/** A check over a counter whose second read answers `after`; what it counted, and its answer. */
async function check(after: number | undefined, opts: { aborted?: boolean } = {}) {
  const counted: string[] = [];
  const signal = opts.aborted ? AbortSignal.abort() : new AbortController().signal;
  const ctx = {
    config: { onTransferFailure: 'fail' },
    metrics: { silentRecomputes: { inc: (l: { result: string }) => counted.push(l.result) } },
    failedTransfers: { read: async () => after },
    closed: new AbortController().signal,
  } as unknown as Parameters<typeof silentRecomputeCheck>[0];
  const call = { signal, logger: { warn: () => {} } } as unknown as Parameters<typeof silentRecomputeCheck>[1];
  const window = { startedAt: 0, overlapped: false, end: () => {} };
  const answer = await silentRecomputeCheck(ctx, call, 4, window, { seen: false })();
  return { answer, counted };
}

describe('silentRecomputeCheck', () => {
  it('counts an unreadable or reset counter as unverified, serving the request, never as clean', async () => {
    expect(await check(undefined)).toEqual({ answer: undefined, counted: ['unverified'] });
    expect(await check(0)).toEqual({ answer: undefined, counted: ['unverified'] });
    expect(await check(4)).toEqual({ answer: undefined, counted: [] });
    expect((await check(5)).counted).toEqual(['refused']);
  });

  it('does not count the abandoned read of a caller that left', async () => {
    expect(await check(undefined, { aborted: true })).toEqual({ answer: undefined, counted: [] });
  });
});
