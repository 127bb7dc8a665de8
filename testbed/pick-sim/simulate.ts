/**
 * A deterministic discrete-event simulation of endpoint picking under skewed load (test support): N endpoints,
 * one of them slow, each running up to `batch` requests at once (the rest wait, as vLLM's scheduler does with
 * `--max-num-seqs`), several gate replicas each counting only its own in-flight requests, and worker load reports
 * (running, waiting, KV use) that are as old as the last status poll. Time is simulated; no wall clock, no timers:
 * the same seed gives the same numbers everywhere.
 */
import type { CompiledPool } from '../../src/policy/compile.js';
import type { Candidate } from '../../src/decide/pick.js';
import { pickScored } from '../../src/decide/score.js';
import type { EndpointLoad, EndpointState } from '../../src/decide/worker-view.js';

export type Policy = 'random' | 'least-in-flight' | 'kvgate';

export interface SkewOptions {
  readonly endpoints: number;
  /** Index of the slow endpoint and how many times slower it serves. */
  readonly slowFactor: number;
  readonly batch: number;
  readonly serviceTime: number;
  /** Mean gap between arrivals (all replicas together). */
  readonly arrivalGap: number;
  readonly requests: number;
  readonly replicas: number;
  /** Status poll interval (simulated time) behind the reported load. */
  readonly pollEvery: number;
  readonly seed: number;
}

export const DEFAULT_SKEW: SkewOptions = {
  endpoints: 8,
  slowFactor: 5,
  batch: 4,
  serviceTime: 100,
  arrivalGap: 4.5,
  requests: 6000,
  replicas: 2,
  pollEvery: 50,
  seed: 42,
};

export interface SkewResult {
  readonly policy: Policy;
  readonly p50: number;
  readonly p99: number;
  readonly mean: number;
  /** Share of requests the slow endpoint served. */
  readonly slowShare: number;
}

interface Req {
  readonly id: number;
  readonly arrival: number;
  readonly replica: number;
  readonly endpoint: number;
  start?: number;
}

/** Park–Miller LCG: a fixed sequence per seed. */
function rng(seed: number): () => number {
  let s = seed % 2147483647 || 1;
  return () => {
    s = (s * 48271) % 2147483647;
    return (s - 1) / 2147483646;
  };
}

const POOL = { name: 'sim', cluster: 'sim', role: 'decode' } as unknown as CompiledPool;

export function simulateSkew(policy: Policy, o: SkewOptions = DEFAULT_SKEW): SkewResult {
  const rand = rng(o.seed);
  const pickRand = rng(o.seed + 7);
  const running: Req[][] = Array.from({ length: o.endpoints }, () => []);
  const waiting: Req[][] = Array.from({ length: o.endpoints }, () => []);
  const finishAt = new Map<Req, number>();
  const perReplica = Array.from({ length: o.replicas }, () => new Array<number>(o.endpoints).fill(0));
  let reported: EndpointLoad[][] = perReplica.map(() =>
    running.map(() => ({ running: 0, waiting: 0, kvCacheUsage: 0, ownInFlightAtReport: 0 })),
  );
  let nextPoll = 0;
  const latencies: number[] = [];
  let slowServed = 0;
  const service = (e: number): number => o.serviceTime * (e === 0 ? o.slowFactor : 1) * (0.75 + rand() * 0.5);
  const startOn = (e: number, now: number): void => {
    while (running[e]!.length < o.batch && waiting[e]!.length > 0) {
      const r = waiting[e]!.shift()!;
      r.start = now;
      running[e]!.push(r);
      finishAt.set(r, now + service(e));
    }
  };
  const completeUntil = (t: number): void => {
    for (;;) {
      let next: Req | undefined;
      let at = Infinity;
      for (const [r, f] of finishAt) if (f < at) [next, at] = [r, f];
      if (next === undefined || at > t) return;
      finishAt.delete(next);
      const e = next.endpoint;
      running[e]!.splice(running[e]!.indexOf(next), 1);
      perReplica[next.replica]![e]!--;
      latencies.push(at - next.arrival);
      startOn(e, at);
    }
  };
  let now = 0;
  for (let i = 0; i < o.requests; i++) {
    now += -Math.log(1 - rand()) * o.arrivalGap;
    completeUntil(now);
    while (nextPoll <= now) {
      reported = perReplica.map((own) =>
        running.map((r, e) => ({
          running: r.length,
          waiting: waiting[e]!.length,
          kvCacheUsage: Math.min(1, (r.length + waiting[e]!.length) / (o.batch * 2)),
          ownInFlightAtReport: own[e]!,
        })),
      );
      nextPoll += o.pollEvery;
    }
    const replica = i % o.replicas;
    const mine = perReplica[replica]!;
    let e: number;
    if (policy === 'random') e = Math.floor(pickRand() * o.endpoints);
    else {
      const candidates: Candidate[] = running.map((_, k) => {
        const state: EndpointState = {
          address: `10.0.0.${k + 1}:8000`,
          fingerprint: 'f',
          verified: true,
          draining: false,
          inFlight: mine[k]!,
          observedAtMs: 0,
          ...(policy === 'kvgate' ? { load: reported[replica]![k]! } : {}),
        };
        return { pool: POOL, endpoint: state };
      });
      const picked = pickScored(candidates, `r${i}`, null)!;
      e = candidates.indexOf(picked.candidate);
    }
    const req: Req = { id: i, arrival: now, replica, endpoint: e };
    mine[e]!++;
    if (e === 0) slowServed++;
    waiting[e]!.push(req);
    startOn(e, now);
  }
  completeUntil(Infinity);
  latencies.sort((a, b) => a - b);
  const q = (p: number): number => latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))]!;
  return {
    policy,
    p50: q(0.5),
    p99: q(0.99),
    mean: latencies.reduce((s, x) => s + x, 0) / latencies.length,
    slowShare: slowServed / o.requests,
  };
}
