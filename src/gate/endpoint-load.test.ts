import { describe, expect, it } from 'vitest';
import { createEndpointLoad } from './endpoint-load.js';

const A = '10.0.0.1:9090';

function setup(ttl = 30_000) {
  let now = 1_000;
  const ended: string[] = [];
  const load = createEndpointLoad({ now: () => now, bridgeTtlMs: () => ttl, onStreamEnd: (a) => ended.push(a) });
  return { load, ended, tick: (ms: number) => (now += ms), at: () => now };
}

describe('in flight per endpoint: the sidecar is the source, the gate bridges', () => {
  it('a streamed request keeps counting after its ext_proc stream ended (Envoy 1.37), until the sidecar says it is over', () => {
    const { load, ended, tick, at } = setup();
    load.observe(A, { inFlight: [], received: [] }, at());
    const release = load.acquire(A, 'r1');
    expect(load.inFlight(A)).toBe(1); // bridged: decided, not reported yet
    tick(50);
    load.release(release); // Envoy 1.37 closes the stream after the response headers answer
    expect(ended).toEqual([A]); // the gate asks for a poll now
    expect(load.inFlight(A)).toBe(1);
    tick(10);
    load.observe(A, { inFlight: ['r1'], received: ['r1'] }, at());
    expect(load.inFlight(A)).toBe(1); // now counted by the sidecar
    expect(load.bridged().get(A)).toBeUndefined();
    tick(2_000);
    load.observe(A, { inFlight: [], received: ['r1'] }, at());
    expect(load.inFlight(A)).toBe(0);
  });

  it('a request the sidecar has not seen yet stays counted; one it received and finished between polls leaves the bridge', () => {
    const { load, tick, at } = setup();
    load.observe(A, { inFlight: [], received: [] }, at());
    load.acquire(A, 'r1');
    load.acquire(A, 'r2');
    tick(5);
    load.observe(A, { inFlight: [], received: ['r2'] }, at());
    expect(load.inFlight(A)).toBe(1); // r1 still on its way; r2 came and went
  });

  it('counts requests other gates sent: the sidecar lists them', () => {
    const { load, at } = setup();
    load.observe(A, { inFlight: ['other-1', 'other-2'], received: ['other-1', 'other-2'] }, at());
    load.acquire(A, 'mine');
    expect(load.inFlight(A)).toBe(3);
  });

  it('a stream that ended before an observation began, absent from it, is over (or never reached the worker)', () => {
    const { load, tick, at } = setup();
    load.observe(A, { inFlight: [], received: [] }, at());
    const release = load.acquire(A, 'r1');
    const pollStart = at(); // a poll begun before the stream ended cannot clear it
    tick(10);
    load.release(release);
    load.observe(A, { inFlight: [], received: [] }, pollStart);
    expect(load.inFlight(A)).toBe(1);
    tick(10);
    load.observe(A, { inFlight: [], received: [] }, at());
    expect(load.inFlight(A)).toBe(0);
  });

  it('an unreported request is counted at most the bridge lifetime', () => {
    const { load, tick, at } = setup(1_000);
    load.observe(A, { inFlight: [], received: [] }, at());
    load.acquire(A, 'lost');
    tick(999);
    expect(load.inFlight(A)).toBe(1);
    tick(2);
    expect(load.inFlight(A)).toBe(0);
  });

  it('without request ids from the sidecar (none polled, or an older sidecar) the gate counts by stream lifetime', () => {
    const { load, ended, at } = setup();
    const release = load.acquire(A, 'r1');
    expect(load.inFlight(A)).toBe(1);
    load.release(release);
    expect(load.inFlight(A)).toBe(0);
    expect(ended).toEqual([]);
    load.observe(A, { inFlight: ['x'], received: [] }, at());
    load.observe(A, undefined, at()); // the sidecar stopped reporting ids
    expect(load.inFlight(A)).toBe(0);
    const again = load.acquire(A, 'r2');
    expect(load.inFlight(A)).toBe(1);
    load.release(again);
    load.release(again);
    expect(load.inFlight(A)).toBe(0);
  });

  it('forgets an endpoint that left every pool: its last report stops counting, its requests leave as their streams end', () => {
    const { load, tick, at } = setup();
    const B = '10.0.0.2:9090';
    load.observe(A, { inFlight: ['other-1', 'other-2'], received: ['other-1', 'other-2'] }, at());
    load.observe(B, { inFlight: ['b-1'], received: ['b-1'] }, at());
    const streaming = load.acquire(A, 'mine');
    load.release(load.acquire(A, 'ended')); // its stream ended; the sidecar never reported it
    tick(10);
    load.retain(new Set([B]));
    expect(load.inFlight(A)).toBe(1); // only the request still streaming there
    expect(load.inFlight(B)).toBe(1); // kept
    load.release(streaming);
    expect(load.inFlight(A)).toBe(0);
    expect(load.snapshot()).toEqual(new Map([[B, 1]]));
    expect(load.bridged()).toEqual(new Map());
  });
});
