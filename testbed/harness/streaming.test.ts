/**
 * Bodies that flow: an SSE response must reach the client chunk by chunk (response_body_mode NONE), with
 * backpressure from a slow client back to the upstream; trailers in trailer mode SEND; graceful close.
 */
import http from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { continueAll, reply, setHeader } from './fake-ext-proc.js';
import { ok, request, startScenario, type Scenario } from './testing.js';

let scenario: Scenario | undefined;
afterEach(async () => {
  await scenario?.close();
  scenario = undefined;
});

const NO_RESPONSE = { processing_mode: { response_header_mode: 'SKIP' } };

function get(url: string, headers: Record<string, string>): Promise<http.IncomingMessage> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { headers, agent: false }, resolve);
    req.on('error', reject);
    req.end();
  });
}

describe('streaming responses', () => {
  it('SSE events reach the client one by one while the upstream is still producing', async () => {
    let next: () => void = () => undefined;
    scenario = await startScenario({
      filter: {},
      handler: continueAll,
      upstreamHandler: async (_req, res) => {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        for (let i = 1; i <= 3; i++) {
          res.write(`data: event-${i}\n\n`);
          // The next event is only produced after the client saw this one.
          await new Promise<void>((r) => (next = r));
        }
        res.end('data: [DONE]\n\n');
      },
    });
    const res = await get(scenario.url, { 'x-target-cluster': 'backend_a' });
    expect(res.headers['content-type']).toBe('text/event-stream');
    const seen: string[] = [];
    res.setEncoding('utf8');
    await new Promise<void>((resolve) => {
      res.on('data', (c: string) => {
        seen.push(c);
        next();
      });
      res.on('end', () => resolve());
    });
    expect(seen.join('')).toBe('data: event-1\n\ndata: event-2\n\ndata: event-3\n\ndata: [DONE]\n\n');
    expect(seen.length).toBeGreaterThanOrEqual(4);
  });

  it('a slow client holds the upstream back (backpressure) and still gets every byte', async () => {
    const total = 32 * 1024 * 1024;
    let stalledAt = -1;
    let onStall: () => void = () => undefined;
    const stalled = new Promise<void>((r) => (onStall = r));
    scenario = await startScenario({
      filter: NO_RESPONSE,
      handler: continueAll,
      upstreamHandler: async (_req, res) => {
        res.writeHead(200, { 'content-type': 'application/octet-stream' });
        const chunk = Buffer.alloc(64 * 1024, 7);
        let written = 0;
        while (written < total) {
          written += chunk.length;
          if (!res.write(chunk)) {
            const drained = await Promise.race([
              new Promise<boolean>((r) => res.once('drain', () => r(true))),
              new Promise<boolean>((r) => setTimeout(() => r(false), 300)),
            ]);
            if (!drained && stalledAt < 0) {
              stalledAt = written;
              onStall();
              await new Promise<void>((r) => res.once('drain', () => r()));
            }
          }
        }
        res.end();
      },
    });
    const res = await get(scenario.url, { 'x-target-cluster': 'backend_a' });
    res.pause();
    await stalled;
    expect(stalledAt).toBeGreaterThan(0);
    expect(stalledAt).toBeLessThan(total / 2);
    let received = 0;
    res.on('data', (c: Buffer) => (received += c.length));
    res.resume();
    await new Promise<void>((r) => res.on('end', () => r()));
    expect(received).toBe(total);
  });
});

describe('trailers', () => {
  it('request trailers are sent in trailer mode SEND, mutated, and forwarded upstream', async () => {
    scenario = await startScenario({
      filter: { processing_mode: { response_header_mode: 'SKIP', request_trailer_mode: 'SEND' } },
      handler: async (s) => {
        for (let m = await s.recv(); m !== null; m = await s.recv()) {
          s.send(
            reply(m, m.request === 'request_trailers' ? { header_mutation: { set_headers: [setHeader('x-checksum', 'rewritten')] } } : {}),
          );
        }
      },
    });
    await new Promise<void>((resolve, reject) => {
      const req = http.request(scenario?.url ?? '', {
        method: 'POST',
        headers: { 'x-target-cluster': 'backend_a', 'transfer-encoding': 'chunked', trailer: 'x-checksum' },
        agent: false,
      });
      req.on('response', (res) => {
        res.resume();
        res.on('end', () => resolve());
      });
      req.on('error', reject);
      req.write('part one;');
      req.addTrailers({ 'x-checksum': 'original' });
      req.end('part two');
    });
    const msgs = scenario.extProc.requests();
    expect(msgs.map((m) => m.request)).toEqual(['request_headers', 'request_trailers']);
    const seen = scenario.upstreams['backend_a']?.requests[0];
    expect(seen?.body.toString()).toBe('part one;part two');
    expect(seen?.trailers['x-checksum']).toBe('rewritten');
  });

  it('no trailers, no trailers message (even in SEND mode)', async () => {
    scenario = await startScenario({
      filter: { processing_mode: { response_header_mode: 'SKIP', request_trailer_mode: 'SEND' } },
      handler: continueAll,
    });
    ok(await request(scenario.url, { headers: { 'x-target-cluster': 'backend_a' }, body: 'x' }));
    expect(scenario.extProc.requests().map((m) => m.request)).toEqual(['request_headers']);
  });
});

describe('graceful close', () => {
  it('close() lets an in-flight request finish', async () => {
    let finish: () => void = () => undefined;
    let onStarted: () => void = () => undefined;
    const started = new Promise<void>((r) => (onStarted = r));
    scenario = await startScenario({
      filter: NO_RESPONSE,
      handler: continueAll,
      upstreamHandler: async (_req, res) => {
        res.writeHead(200);
        res.write('started;');
        const finished = new Promise<void>((r) => (finish = r));
        onStarted();
        await finished;
        res.end('finished');
      },
    });
    const pending = request(scenario.url, { headers: { 'x-target-cluster': 'backend_a' } });
    await started;
    const closing = scenario.harness.close();
    finish();
    await closing;
    expect(ok(await pending).body).toBe('started;finished');
  });
});
