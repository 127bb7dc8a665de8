import { describe, expect, it } from 'vitest';
import { routeTableFromValue } from '../policy/load.js';
import { clone, twoRevisionTableValue } from '../policy/testing.js';
import type { PoolDiscovery } from '../policy/schema.js';
import { labelSelectorString, notReadyReason, podEndpoints, selectorConflict, selectorLabels, type PodLike } from './pods.js';

const d: PoolDiscovery = {
  kubernetes: {
    namespace: 'ns',
    matchLabels: { app: 'x' },
    targetPort: 8000,
    statusPort: 9090,
    revisionLabel: 'kvgate.io/revision',
    expectedEndpoints: 1,
  },
};
const pod = (name: string, ip: string, rev: string, created: string, extra: Partial<PodLike['status']> = {}): PodLike => ({
  metadata: { name, uid: `uid-${name}`, labels: { app: 'x', 'kvgate.io/revision': rev }, creationTimestamp: created },
  status: { phase: 'Running', podIP: ip, conditions: [{ type: 'Ready', status: 'True' }], ...extra },
});

describe('pods of a selector pool', () => {
  it('the selector always pins the revision label', () => {
    expect(labelSelectorString(selectorLabels(d, 'rev-a'))).toBe('app=x,kvgate.io/revision=rev-a');
    expect(selectorConflict({ kubernetes: { ...d.kubernetes, matchLabels: { 'kvgate.io/revision': 'rev-b' } } }, 'rev-a')).toMatch(
      /rev-b.*rev-a/,
    );
    expect(selectorConflict(d, 'rev-a')).toBeNull();
  });

  it('Ready, Running, with an IP and not terminating; one pod per IP (the newest)', () => {
    expect(notReadyReason({ ...pod('t', '10.0.0.1', 'a', ''), metadata: { uid: 'u', deletionTimestamp: '2026-01-01T00:00:00Z' } })).toBe(
      'terminating',
    );
    expect(notReadyReason(pod('p', '10.0.0.1', 'a', '', { phase: 'Pending' }))).toBe('phase Pending');
    const eps = podEndpoints(
      [
        pod('old', '10.0.0.1', 'a', '2026-01-01T00:00:00Z'),
        pod('new', '10.0.0.1', 'a', '2026-01-01T00:01:00Z'),
        pod('v6', 'fd00::5', 'a', '2026-01-01T00:00:00Z'),
        pod('other-rev', '10.0.0.2', 'b', '2026-01-01T00:00:00Z'),
      ],
      d,
      'a',
    );
    expect(eps.map((e) => [e.address, e.podName, e.status])).toEqual([
      ['10.0.0.1:8000', 'new', 'http://10.0.0.1:9090'],
      ['[fd00::5]:8000', 'v6', 'http://[fd00::5]:9090'],
    ]);
  });

  it('a terminating pod that still serves is listed apart: never with the endpoints, only as terminating', () => {
    const deleting = (p: PodLike): PodLike => ({ ...p, metadata: { ...p.metadata, deletionTimestamp: '2026-01-01T00:02:00Z' } });
    const pods = [
      pod('live', '10.0.0.1', 'a', '2026-01-01T00:00:00Z'),
      deleting(pod('going', '10.0.0.2', 'a', '2026-01-01T00:00:00Z')),
      deleting(pod('going-unready', '10.0.0.3', 'a', '2026-01-01T00:00:00Z', { conditions: [{ type: 'Ready', status: 'False' }] })),
      deleting(pod('going-other-rev', '10.0.0.4', 'b', '2026-01-01T00:00:00Z')),
    ];
    expect(podEndpoints(pods, d, 'a').map((e) => e.podName)).toEqual(['live']);
    expect(podEndpoints(pods, d, 'a', 'terminating').map((e) => e.podName)).toEqual(['going']);
  });

  it('the route table takes endpoints or discovery, exactly one, with a fix', () => {
    const v = clone(twoRevisionTableValue()) as { pools: Record<string, unknown>[] };
    v.pools[1]!['discovery'] = { kubernetes: { namespace: 'ns', matchLabels: { app: 'x' }, targetPort: 8000, statusPort: 9090 } };
    const both = routeTableFromValue(v, { file: 't.yaml' });
    expect(both.ok).toBe(false);
    if (!both.ok) expect(both.error.map((i) => i.message).join('\n')).toMatch(/exactly one of them/);
    v.pools[1]!['endpoints'] = [];
    expect(routeTableFromValue(v, { file: 't.yaml' }).ok).toBe(true);
    (v.pools[1]!['discovery'] as { kubernetes: Record<string, unknown> }).kubernetes['matchLabels'] = {};
    expect(routeTableFromValue(v, { file: 't.yaml' }).ok).toBe(false);
  });
});
