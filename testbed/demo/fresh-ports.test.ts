/**
 * The topology reserves ports before its servers bind them, and another test file running beside it can take one in
 * between. `onFreshPorts` then starts again on fresh ports, but only if the taken port surfaces as a rejected
 * start: a server whose listen error escapes to the event loop crashes the test file instead (what CI once saw from
 * the llm-d sidecar).
 */
import { createServer, type Server } from 'node:net';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { startLlmdSidecar } from '../llmd/pd-sidecar.js';
import { onFreshPorts } from './topology.js';

const silent = pino({ level: 'silent' });
const held: Server[] = [];
afterEach(async () => {
  await Promise.all(held.splice(0).map((s) => new Promise((r) => s.close(r))));
});

async function takenPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  held.push(s);
  return (s.address() as { port: number }).port;
}

describe('a port taken between reservation and bind', () => {
  it("rejects the llm-d sidecar's start with EADDRINUSE instead of throwing out of the event loop", async () => {
    const port = await takenPort();
    await expect(startLlmdSidecar({ decoderUrl: 'http://127.0.0.1:1', port })).rejects.toMatchObject({ code: 'EADDRINUSE' });
  });

  it('is started again on fresh ports, at most three times, and other failures are not retried', async () => {
    const port = await takenPort();
    let attempts = 0;
    const started = await onFreshPorts(silent, async () => {
      attempts++;
      const s = await startLlmdSidecar({ decoderUrl: 'http://127.0.0.1:1', port: attempts < 3 ? port : 0 });
      await s.close();
      return s.port;
    });
    expect([attempts, started === port]).toEqual([3, false]);

    attempts = 0;
    await expect(
      onFreshPorts(silent, async () => {
        attempts++;
        await startLlmdSidecar({ decoderUrl: 'http://127.0.0.1:1', port });
      }),
    ).rejects.toMatchObject({ code: 'EADDRINUSE' });
    expect(attempts).toBe(3);

    attempts = 0;
    await expect(
      onFreshPorts(silent, async () => {
        attempts++;
        throw new Error('bad descriptor');
      }),
    ).rejects.toThrow('bad descriptor');
    expect(attempts).toBe(1);
  });
});
