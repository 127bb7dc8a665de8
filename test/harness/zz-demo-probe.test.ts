import { test, expect } from 'vitest';
import pino from 'pino';
import { runDemo } from '../../src/demo/run-demo.js';
test('demo', async () => {
  const lines: string[] = [];
  const { summary, topology } = await runDemo({ logger: pino({ level: 'warn' }), print: (l) => lines.push(l) });
  console.log(lines.join('\n'));
  console.log(JSON.stringify(summary.checks, null, 1));
  console.log(JSON.stringify(topology.harness.stats(), null, 0).slice(0, 3000));
  console.log(JSON.stringify(topology.harness.accessLog().slice(0, 30), null, 0).slice(0, 6000));
  await topology.close();
  expect(summary.ok).toBe(true);
}, 120000);
