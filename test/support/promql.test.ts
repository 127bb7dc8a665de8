/**
 * The alert tests' PromQL evaluator (promql.ts) gives what Prometheus gives on the constructs the rules use, and
 * refuses the rest instead of guessing. Expected values follow the PromQL documentation (operators: vector matching,
 * aggregation; functions: increase) on hand-made scrapes.
 */
import { describe, expect, it } from 'vitest';
import { evaluateInstant, readPromql, samplesOf } from './promql.js';

const now = [
  ...samplesOf('up_things{kind="a"} 2\nup_things{kind="b"} 0\nevents_total{result="ok"} 10\nevents_total{result="bad"} 3', { pod: 'p1' }),
  ...samplesOf('up_things{kind="a"} 5\nevents_total{result="ok"} 1', { pod: 'p2' }),
];
const before = [
  ...samplesOf('events_total{result="ok"} 4\nevents_total{result="bad"} 3', { pod: 'p1' }),
  ...samplesOf('events_total{result="ok"} 6', { pod: 'p2' }), // p2 restarted since: a counter reset
];
const run = (expr: string) =>
  evaluateInstant(expr, { now, before })
    .map((s) => `${JSON.stringify(s.labels)} ${s.value}`)
    .sort();

describe('evaluateInstant', () => {
  it('selects with every matcher kind, and compares with a number as a filter', () => {
    expect(run('up_things{kind=~"a|b", pod!="p2"} > 0')).toEqual(['{"pod":"p1","__name__":"up_things","kind":"a"} 2']);
    expect(run('up_things{kind!~"a"} == 0')).toEqual(['{"pod":"p1","__name__":"up_things","kind":"b"} 0']);
  });

  it('aggregates everything without a modifier, by the labels named, or without them', () => {
    expect(run('count(up_things)')).toEqual(['{} 3']);
    expect(run('sum by (kind) (up_things)')).toEqual(['{"kind":"a"} 7', '{"kind":"b"} 0']);
    expect(run('max without (kind) (up_things)')).toEqual(['{"pod":"p1"} 2', '{"pod":"p2"} 5']);
  });

  it('takes increase over two scrapes, a lower value as a counter reset, nothing for a series with one sample', () => {
    expect(run('increase(events_total[10m])')).toEqual([
      '{"pod":"p1","result":"bad"} 0',
      '{"pod":"p1","result":"ok"} 6',
      '{"pod":"p2","result":"ok"} 1',
    ]);
    expect(run('rate(events_total{pod="p1",result="ok"}[1m])')).toEqual(['{"pod":"p1","result":"ok"} 0.1']);
    expect(evaluateInstant('increase(up_things[5m])', { now, before })).toEqual([]);
  });

  it('matches vectors one-to-one, with on(), with group_left, and with and/or/unless', () => {
    expect(run('sum by (pod) (up_things) - on (pod) sum by (pod) (events_total)')).toEqual(['{"pod":"p1"} -11', '{"pod":"p2"} 4']);
    expect(run('up_things < on () group_left () count(events_total)')).toEqual([
      '{"pod":"p1","__name__":"up_things","kind":"a"} 2',
      '{"pod":"p1","__name__":"up_things","kind":"b"} 0',
    ]);
    expect(run('count by (kind) (up_things) or on (kind) vector(9)')).toEqual(['{"kind":"a"} 2', '{"kind":"b"} 1', '{} 9']);
    expect(run('count by (kind) (up_things) or on (kind) (0 * count by (kind) (up_things{kind="b"}))')).toEqual([
      '{"kind":"a"} 2',
      '{"kind":"b"} 1',
    ]);
    expect(run('count by (pod) (up_things) unless count by (pod) (up_things{kind="b"})')).toEqual(['{"pod":"p2"} 1']);
    expect(() => evaluateInstant('up_things + events_total', { now })).not.toThrow(); // no common label set: empty
    expect(() => evaluateInstant('sum by (pod) (up_things) + on () count(up_things)', { now })).toThrow(/without group_left/);
  });

  it('refuses what it does not evaluate, and a broken expression', () => {
    expect(() => evaluateInstant('up_things > bool 1', { now })).toThrow(/not supported/);
    expect(() => evaluateInstant('avg_over_time(up_things[5m])', { now, before })).toThrow(/not supported/);
    expect(() => evaluateInstant('sum(up_things', { now })).toThrow(/no valid PromQL/);
    expect(readPromql('sum by (pod) (x{a="1"}) > on (pod) y').groupingLabels).toEqual(['pod', 'pod']);
  });
});
