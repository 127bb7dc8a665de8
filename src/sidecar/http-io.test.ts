import { describe, expect, it } from 'vitest';
import { abortWith, openUpstream, type FetchFn } from './http-io.js';

describe('abortWith', () => {
  it('aborts the child with the parent reason, at once when the parent already aborted', () => {
    const parent = new AbortController();
    const child = new AbortController();
    abortWith(parent.signal, child);
    expect(child.signal.aborted).toBe(false);
    parent.abort(new Error('closing'));
    expect(child.signal.aborted).toBe(true);
    expect((child.signal.reason as Error).message).toBe('closing');

    const late = new AbortController();
    abortWith(parent.signal, late);
    expect((late.signal.reason as Error).message).toBe('closing');
  });

  it('stops propagating once unlinked (a finished request does not hold the sidecar signal)', () => {
    const parent = new AbortController();
    const child = new AbortController();
    const unlink = abortWith(parent.signal, child);
    unlink();
    parent.abort();
    expect(child.signal.aborted).toBe(false);
  });
});

describe('openUpstream signals', () => {
  /** A fetch that never answers until its signal aborts, then rejects as fetch does. */
  const hanging: FetchFn = (_url, init) =>
    new Promise((_resolve, reject) => {
      init?.signal?.addEventListener('abort', () => reject(init.signal!.reason), { once: true });
    });

  it('is cut when the caller signal aborts, and says it was not a timeout', async () => {
    const caller = new AbortController();
    const pending = openUpstream(hanging, 'http://127.0.0.1:9/v1/completions', { timeoutMs: 60_000, signal: caller.signal });
    caller.abort(new Error('client went away'));
    const r = await pending;
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.error).toEqual({ message: 'http://127.0.0.1:9/v1/completions: client went away', timedOut: false });
  });

  it('is cut by its own timeout while the caller signal stays open', async () => {
    const caller = new AbortController();
    const r = await openUpstream(hanging, 'http://127.0.0.1:9/v1/completions', { timeoutMs: 20, signal: caller.signal });
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.error.timedOut).toBe(true);
    expect(caller.signal.aborted).toBe(false);
  });
});
