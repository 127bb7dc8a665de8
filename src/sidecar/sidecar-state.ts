/**
 * The sidecar's mutable state in one place: the last probe verdict (with the engine id its engine canary read),
 * draining, requests in flight. Every change updates the matching gauge and log line here, so the HTTP shell only calls methods.
 */
import type { Logger } from 'pino';
import type { SidecarConfig } from './config.js';
import type { ProbeVerdict } from './compare.js';
import type { SidecarMetrics } from './metrics.js';
import { staticStatusOf, toStatus, type SidecarStatus, type StaticStatus } from './status.js';

/**
 * How many received request ids the status keeps. The gate polls every workerView.intervalMs (2 s by default) and
 * drops a reported id from its own count; ids that scroll out before a poll stay counted by the gate until their
 * ext_proc stream ends or their contract lifetime passes, so this only needs to outlast one poll at full load.
 */
export const RECEIVED_KEPT = 1024;

/**
 * How old a verified verdict may be before it no longer counts: three probe intervals plus four probe timeouts (a round
 * makes several calls, each bounded by the timeout). 65 s with the defaults (15 s, 5 s).
 */
export function staleVerdictMs(probe: { readonly intervalMs: number; readonly timeoutMs: number }): number {
  return 3 * probe.intervalMs + 4 * probe.timeoutMs;
}

/** Probe verdict, drain and in-flight accounting for one sidecar; `#private` so only its methods change it. */
export class SidecarState {
  readonly #config: SidecarConfig;
  readonly #metrics: SidecarMetrics;
  readonly #logger: Logger;
  readonly #now: () => number;
  readonly #fixed: StaticStatus;
  #verdict: ProbeVerdict | null = null;
  #checkedAtMs: number | null = null;
  #workerDown = false;
  #draining = false;
  /** While draining: until when requests that arrive anyway are still admitted (the announce window); null otherwise. */
  #admitsUntilMs: number | null = null;
  #announceTimer: NodeJS.Timeout | undefined;
  #inFlight = 0;
  /** Request ids in flight (a count per id: a retried leg may bring the same id twice). */
  readonly #active = new Map<string, number>();
  /** Request ids received most recently, admitted or refused, oldest first (at most RECEIVED_KEPT). */
  readonly #received: string[] = [];
  #engineId: string | null = null;
  readonly #drainWaiters: (() => void)[] = [];

  constructor(config: SidecarConfig, metrics: SidecarMetrics, logger: Logger, now: () => number) {
    this.#config = config;
    this.#metrics = metrics;
    this.#logger = logger;
    this.#now = now;
    this.#fixed = staticStatusOf(config);
  }

  status(): SidecarStatus {
    return toStatus(this.#config, this.#fixed, {
      verdict: this.#currentVerdict(),
      workerDown: this.#workerDown,
      checkedAtMs: this.#checkedAtMs,
      draining: this.#draining,
      drainAdmitsUntilMs: this.#admitsUntilMs,
      inFlight: this.#inFlight,
      engineId: this.#engineId,
      requests: { inFlight: [...this.#active.keys()], received: [...this.#received] },
    });
  }

  /**
   * The last verdict while it is fresh. A verified verdict older than `staleVerdictMs` (the probe loop stopped keeping
   * up: a round that never ends, a timer gone) no longer vouches for the worker: the gate stops routing here and
   * admission refuses, until a round finishes again. Judged on this sidecar's own clock, so no skew enters.
   */
  #currentVerdict(): ProbeVerdict | null {
    const v = this.#verdict;
    if (v === null || !v.verified || this.#checkedAtMs === null) return v;
    const age = this.#now() - this.#checkedAtMs;
    const limit = staleVerdictMs(this.#config.probe);
    if (age <= limit) return v;
    return {
      ...v,
      verified: false,
      reasons: [
        `the last probe finished ${age} ms ago, more than ${limit} ms (3 x probe.intervalMs + 4 x probe.timeoutMs): the verdict is stale, the probe loop is not keeping up`,
      ],
    };
  }

  /**
   * Record a probe round; logs only when the verdict flips, so a steady state stays quiet. The engine id comes with
   * the verdict, never on its own: it names the launch this verdict is about.
   */
  recordProbe(verdict: ProbeVerdict, workerDown: boolean): void {
    const was = this.#verdict?.verified;
    this.#verdict = verdict;
    this.#workerDown = workerDown;
    const engineId = verdict.measured['engineId'];
    this.#engineId = typeof engineId === 'string' ? engineId : null;
    this.#checkedAtMs = this.#now();
    this.#metrics.probes.inc({ result: verdict.verified ? 'verified' : workerDown ? 'down' : 'unverified' });
    this.#metrics.verified.set(verdict.verified ? 1 : 0);
    if (was === verdict.verified) return;
    if (verdict.verified)
      this.#logger.info({ event: 'worker_verified', declaredOnly: verdict.declaredOnly }, 'the worker matches its declared descriptor');
    else
      this.#logger.error(
        { event: 'worker_unverified', reasons: verdict.reasons },
        'the worker does not match its declared descriptor; refusing traffic',
      );
  }

  /**
   * A request arrived (before admission: a refused one counts too). The gate stops counting a request it routed here
   * once this sidecar lists its id (src/gate/endpoint-load.ts).
   */
  receive(requestId: string | undefined): void {
    if (requestId === undefined || requestId === '') return;
    this.#received.push(requestId);
    if (this.#received.length > RECEIVED_KEPT) this.#received.splice(0, this.#received.length - RECEIVED_KEPT);
  }

  /** A request was admitted. */
  enter(requestId?: string): void {
    this.#inFlight++;
    if (requestId !== undefined && requestId !== '') this.#active.set(requestId, (this.#active.get(requestId) ?? 0) + 1);
    this.#metrics.inFlight.set(this.#inFlight);
  }

  /** An admitted request finished (answered, failed or abandoned by its client). */
  leave(requestId?: string): void {
    this.#inFlight--;
    if (requestId !== undefined && requestId !== '') {
      const n = (this.#active.get(requestId) ?? 1) - 1;
      if (n <= 0) this.#active.delete(requestId);
      else this.#active.set(requestId, n);
    }
    this.#metrics.inFlight.set(this.#inFlight);
    this.#settleDrain();
  }

  /** Drain waiters resolve once the announce window is over and nothing is in flight. */
  #settleDrain(): void {
    if (this.#admitsUntilMs === null && this.#inFlight === 0) for (const w of this.#drainWaiters.splice(0)) w();
  }

  /** Admit work again after a drain (an operator's undrain); requests refused meanwhile stay refused. */
  undrain(): void {
    if (this.#draining) this.#logger.info({ event: 'undrain' }, 'undrained: admitting new requests again');
    this.#draining = false;
    this.#endAnnounce();
    this.#metrics.draining.set(0);
    this.#settleDrain(); // a drain ended by an operator is over for its waiters once nothing is in flight
  }

  /**
   * Stop taking work, without refusing a request the gate already sent here: `draining` shows in the status at once
   * (the gate stops picking this endpoint at its next poll of it), and for `drainAnnounceMs` requests that arrive
   * anyway are still admitted; only after that window are new requests refused with `draining`. Resolves once the
   * window is over and nothing is in flight. Idempotent: a second call keeps the first call's window.
   */
  drain(): Promise<void> {
    if (!this.#draining) {
      const announceMs = this.#config.drainAnnounceMs;
      this.#logger.info(
        { event: 'drain', inFlight: this.#inFlight, announceMs },
        `draining: announced to the gate; admitting for ${announceMs} ms more, then refusing new requests; waiting for in-flight ones`,
      );
      this.#draining = true;
      this.#metrics.draining.set(1);
      if (announceMs > 0) {
        this.#admitsUntilMs = this.#now() + announceMs;
        this.#announceTimer = setTimeout(() => {
          this.#logger.info({ event: 'drain_refusing', inFlight: this.#inFlight }, 'drain announce window over: refusing new requests');
          this.#endAnnounce();
          this.#settleDrain();
        }, announceMs);
        this.#announceTimer.unref();
      }
    }
    const done = new Promise<void>((resolve) => this.#drainWaiters.push(resolve));
    this.#settleDrain();
    return done;
  }

  #endAnnounce(): void {
    clearTimeout(this.#announceTimer);
    this.#announceTimer = undefined;
    this.#admitsUntilMs = null;
  }
}
