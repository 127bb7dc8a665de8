import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { PendingCounter } from './pending-counts.js';

function counter() {
  const registry = new Registry();
  const c = new PendingCounter({ name: 'test_things_total', help: 'things', labelNames: ['kind', 'code'] as const, registers: [registry] });
  return { registry, c };
}

describe('PendingCounter', () => {
  it('shows every increment made before a scrape, by label values', async () => {
    const { registry, c } = counter();
    c.inc('a', 'x');
    c.inc('a', 'x');
    c.inc('b');
    const text = await registry.metrics();
    expect(text).toContain('test_things_total{kind="a",code="x"} 2');
    expect(text).toContain('test_things_total{kind="b",code=""} 1');
  });

  it('adds only what came after the previous scrape, so totals never double', async () => {
    const { registry, c } = counter();
    c.inc('a', 'x');
    await registry.metrics();
    c.inc('a', 'x');
    c.inc('a', 'y');
    const values = (await c.counter.get()).values.map((v) => [v.labels['code'], v.value]);
    expect(values).toEqual([
      ['x', 2],
      ['y', 1],
    ]);
    expect(await registry.metrics()).toContain('test_things_total{kind="a",code="x"} 2');
  });

  it('keeps label values apart that a joined key could merge', async () => {
    const { c } = counter();
    c.inc('a', 'b');
    c.inc('a\u0000b', '');
    c.inc('a', '\u0000b');
    const values = (await c.counter.get()).values.map((v) => [v.labels['kind'], v.labels['code'], v.value]);
    expect(values).toHaveLength(3);
  });
});
