/**
 * What one extra hop costs on this machine, measured in the same run as the sidecar bench: an HTTP/1.1 keep-alive
 * round trip between two Node processes (this one and an echo server, `echo-main.ts`) with a 1.1 KB JSON body, once
 * hot (back to back) and once after an idle gap like the ~25 ms a sidecar waits for a prefill. A P/D request through
 * kvgate makes three round trips before its first token that the direct path does not make (client -> decode
 * sidecar, decode sidecar -> prefill sidecar, and under `onTransferFailure: fail` the failed-transfer read that holds
 * the first output), so three idle round trips are the floor of its TTFT overhead before any check runs.
 */
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { jsonLine, spawnNodeServer } from './child-server.js';
import { median } from './stats.js';

const ECHO_MAIN = path.join(path.dirname(fileURLToPath(import.meta.url)), 'echo-main.js');
const BODY = JSON.stringify({ model: 'bench', prompt: 'x'.repeat(1100), max_tokens: 1 });

export interface HopFloor {
  /** p50 ms of a round trip sent right after the previous one. */
  readonly hotMs: number;
  /** p50 ms of a round trip sent after `idleMs` of nothing. */
  readonly idleMs: number;
  readonly gapMs: number;
}

function roundTrip(agent: http.Agent, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const req = http.request(
      { host: '127.0.0.1', port, method: 'POST', path: '/v1/completions', agent, headers: { 'content-type': 'application/json' } },
      (res) => {
        res.resume();
        res.on('end', () => resolve(performance.now() - t0));
      },
    );
    req.on('error', reject);
    req.end(BODY);
  });
}

/** `n` hot and `n` idle round trips (after `gapMs` each) against a fresh echo server child; bounded by `n`. */
export async function measureHopFloor(n: number, gapMs = 25): Promise<HopFloor> {
  const echo = await spawnNodeServer(
    'echo server',
    [ECHO_MAIN, '127.0.0.1'],
    {},
    jsonLine((v) => (typeof v['port'] === 'number' ? { port: v['port'] } : undefined)),
  );
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  try {
    for (let i = 0; i < 50; i++) await roundTrip(agent, echo.port); // connection, JIT
    const hot: number[] = [];
    const idle: number[] = [];
    for (let i = 0; i < n; i++) hot.push(await roundTrip(agent, echo.port));
    for (let i = 0; i < n; i++) {
      await new Promise((r) => setTimeout(r, gapMs));
      idle.push(await roundTrip(agent, echo.port));
    }
    return { hotMs: median(hot), idleMs: median(idle), gapMs };
  } finally {
    agent.destroy();
    await echo.stop();
  }
}
