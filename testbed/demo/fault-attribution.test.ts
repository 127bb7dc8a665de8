import { describe, expect, it } from 'vitest';
import type { AccessLogEntry } from '../harness/access-log.js';
import { attributeToFaults, type UnservedRequest } from './fault-attribution.js';

const entry = (listener: string, requestId: string, upstreamHost: string, status = 200): AccessLogEntry => ({
  listener,
  requestId,
  method: 'POST',
  path: '/v1/completions',
  status,
  responseCodeDetails: 'via_upstream',
  responseFlags: [],
  upstreamCluster: 'c',
  upstreamHost,
  dynamicMetadata: {},
  reset: false,
});

const faults = [
  { kind: 'drain' as const, target: '10.0.0.1:9090', firedAtMs: 100 },
  { kind: 'prefill_kill' as const, target: '10.0.0.9:9090', firedAtMs: 200 },
  { kind: 'reload' as const, firedAtMs: 300 },
];

describe('attributeToFaults', () => {
  it('a draining refusal, or any refusal from the drained endpoint after the drain, is the drain', () => {
    const unserved: UnservedRequest[] = [
      { kind: 'refused', id: 'load-1', code: 'draining', message: 'this worker is draining', endedAtMs: 150 },
      { kind: 'failed', id: 'load-2', reason: 'HTTP 503', endedAtMs: 160 },
      { kind: 'failed', id: 'load-3', reason: 'HTTP 503', endedAtMs: 90 }, // before the drain
      { kind: 'failed', id: 'load-4', reason: 'HTTP 503', endedAtMs: 170 }, // another endpoint
    ];
    const log = [
      entry('public', 'load-2', '10.0.0.1:9090', 503),
      entry('public', 'load-3', '10.0.0.1:9090', 503),
      entry('public', 'load-4', '10.0.0.2:9090'),
    ];
    expect(attributeToFaults(unserved, faults, log)).toEqual({
      drain: ['load-1: draining: this worker is draining', 'load-2: HTTP 503'],
      prefillKill: [],
    });
  });

  it('a refusal whose prefill leg (by the gate request id) went to the killed endpoint, on any attempt, is the kill', () => {
    const unserved: UnservedRequest[] = [
      { kind: 'refused', id: 'load-5', gateId: 'g5', code: 'worker_error', endedAtMs: 250 },
      { kind: 'refused', id: 'load-6', gateId: 'g6', code: 'worker_error', endedAtMs: 250 }, // legs elsewhere
      { kind: 'refused', id: 'load-7', gateId: 'g7', code: 'worker_error', endedAtMs: 150 }, // before the kill
      { kind: 'failed', id: 'load-8', reason: 'stream reset', endedAtMs: 260 }, // no gate id: no trace of a leg
    ];
    const log = [
      entry('internal', 'g5', '10.0.0.8:9090', 502),
      entry('internal', 'g5', '10.0.0.9:9090'),
      entry('internal', 'g6', '10.0.0.8:9090'),
      entry('internal', 'g7', '10.0.0.9:9090'),
    ];
    expect(attributeToFaults(unserved, faults, log)).toEqual({ drain: [], prefillKill: ['load-5: worker_error'] });
  });

  it('faults that never fired attribute nothing', () => {
    const unserved: UnservedRequest[] = [{ kind: 'refused', id: 'load-9', code: 'draining', endedAtMs: 500 }];
    expect(attributeToFaults(unserved, [{ kind: 'drain' }, { kind: 'prefill_kill' }], [])).toEqual({ drain: [], prefillKill: [] });
  });
});
