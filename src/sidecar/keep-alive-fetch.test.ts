import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { callUpstream, describeFetchError, MAX_UPSTREAM_ANSWER_BYTES } from './http-io.js';
import { bodyTapOf, createKeepAliveFetch, type BodySink, type KeepAliveFetch } from './keep-alive-fetch.js';

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanups.splice(0)) c();
});

async function serve(handler: http.RequestListener): Promise<{ url: string; ports: number[] }> {
  const ports: number[] = [];
  const server = http.createServer((req, res) => {
    ports.push(req.socket.remotePort ?? -1);
    handler(req, res);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  cleanups.push(() => {
    server.closeAllConnections();
    server.close();
  });
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, ports };
}

function client(): KeepAliveFetch {
  const c = createKeepAliveFetch();
  cleanups.push(() => c.close());
  return c;
}

describe('createKeepAliveFetch', () => {
  it('sends method, headers and body, and reuses one connection for calls in sequence', async () => {
    const seen: { method: string | undefined; type: string | undefined; auth: string | undefined; body: string }[] = [];
    const up = await serve((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        seen.push({ method: req.method, type: req.headers['content-type'], auth: req.headers['authorization'], body });
        res.writeHead(201, { 'content-type': 'application/json', 'x-served-by': 'w1' });
        res.end(JSON.stringify({ echo: body.length }));
      });
    });
    const { fetch } = client();
    for (let i = 0; i < 3; i++) {
      const r = await fetch(`${up.url}/v1/x`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', authorization: 'Bearer k' },
        body: '{"a":1}',
      });
      expect(r.status).toBe(201);
      expect(r.headers.get('x-served-by')).toBe('w1');
      expect(await r.json()).toEqual({ echo: 7 });
    }
    expect(seen).toEqual(
      Array.from({ length: 3 }, () => ({ method: 'POST', type: 'application/json', auth: 'Bearer k', body: '{"a":1}' })),
    );
    expect(new Set(up.ports).size).toBe(1);
  });

  it('hands the body over as it arrives (a stream is not buffered until its end)', async () => {
    let finish: (() => void) | undefined;
    const up = await serve((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: first\n\n');
      finish = () => res.end('data: [DONE]\n\n');
    });
    const r = await client().fetch(`${up.url}/s`);
    const reader = r.body!.getReader();
    const first = await reader.read();
    expect(Buffer.from(first.value!).toString()).toBe('data: first\n\n');
    finish!();
    let rest = '';
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      rest += Buffer.from(value).toString();
    }
    expect(rest).toBe('data: [DONE]\n\n');
  });

  it('a connection dropped mid-body delivers every chunk that arrived before the drop, then fails the read', async () => {
    let dropped: (() => void) | undefined;
    const gone = new Promise<void>((r) => (dropped = r));
    const up = await serve((req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      for (const t of ['a', 'b', 'c']) res.write(`data: ${t}\n\n`);
      setTimeout(() => {
        req.socket.destroy();
        dropped?.();
      }, 50);
    });
    const r = await client().fetch(`${up.url}/s`);
    await gone;
    await new Promise((resolve) => setTimeout(resolve, 50)); // the break has reached the client before anything is read
    const reader = r.body!.getReader();
    let text = '';
    let failed = false;
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        text += Buffer.from(value).toString();
      }
    } catch {
      failed = true;
    }
    expect(text).toBe('data: a\n\ndata: b\n\ndata: c\n\n');
    expect(failed).toBe(true);
  });

  it('a diverted body gives the chunks read so far first, then the live ones in order, then its end', async () => {
    let more: (() => void) | undefined;
    let second: (() => Promise<void>) | undefined;
    const up = await serve((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: 1\n\n');
      second = () => new Promise<void>((done) => res.write('data: 2\n\n', () => done()));
      more = () => {
        res.write('data: 3\n\n');
        res.end('data: [DONE]\n\n');
      };
    });
    const r = await client().fetch(`${up.url}/s`);
    const reader = r.body!.getReader();
    expect(Buffer.from((await reader.read()).value!).toString()).toBe('data: 1\n\n');
    // "data: 2" into the body's queue, unread: the server (this process) has handed it to the kernel, and a few turns of
    // the event loop (each with its poll phase) let the client's socket read it. Ordered by the loop, not by a timer,
    // so a loaded machine cannot reorder it.
    await second!();
    for (let i = 0; i < 10; i++) await new Promise((resolve) => setImmediate(resolve));
    const got: string[] = [];
    const ended = new Promise<string>((resolve) => {
      const sink: BodySink = { chunk: (c) => got.push(c.toString()), end: () => resolve('end'), fail: () => resolve('fail') };
      bodyTapOf(r)!.divert(sink);
    });
    expect(got).toEqual(['data: 2\n\n']);
    more!();
    expect(await ended).toBe('end');
    expect(got.join('')).toBe('data: 2\n\ndata: 3\n\ndata: [DONE]\n\n');
    expect(() => bodyTapOf(r)!.divert({ chunk: () => undefined, end: () => undefined, fail: () => undefined })).toThrow(/twice/);
    // Only this module's answers can be tapped; another fetch's are read as streams.
    expect(bodyTapOf(new Response('x'))).toBeUndefined();
  });

  it('a diverted body that breaks fails after every chunk before the break; pause holds the upstream back', async () => {
    const big = 'x'.repeat(64 * 1024);
    let written = 0;
    let blocked: (() => void) | undefined;
    const backpressured = new Promise<void>((r) => (blocked = r));
    const up = await serve((req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const pump = (): void => {
        while (written < 400) {
          written++;
          if (!res.write(big)) {
            blocked?.();
            res.once('drain', pump);
            return;
          }
        }
        req.socket.destroy(); // cut, no end
      };
      pump();
    });
    const r = await client().fetch(`${up.url}/s`);
    const tap = bodyTapOf(r)!;
    let bytes = 0;
    const outcome = new Promise<string>((resolve) => {
      tap.divert({ chunk: (c) => (bytes += c.length), end: () => resolve('end'), fail: () => resolve(`fail after ${bytes} bytes`) });
    });
    tap.pause();
    await backpressured;
    // Paused, nothing more is read, so the worker cannot write more than the sockets' buffers hold (without the pause
    // all 25 MiB would be through in milliseconds): wait until it stands still.
    let last = -1;
    for (let i = 0; i < 20 && written !== last; i++) {
      last = written;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(written).toBeLessThan(400);
    tap.resume();
    expect(await outcome).toBe(`fail after ${400 * big.length} bytes`);
  });

  it("a sink that pauses while it takes the queued chunks stays paused (the queue's own pause is lifted first)", async () => {
    const big = 'y'.repeat(64 * 1024);
    const up = await serve((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const pump = (): void => {
        while (res.write(big));
        res.once('drain', pump);
      };
      pump();
    });
    const r = await client().fetch(`${up.url}/s`);
    await new Promise((resolve) => setTimeout(resolve, 100)); // unread: the body queues chunks, then pauses itself
    const tap = bodyTapOf(r)!;
    let queued = 0;
    let later = 0;
    let flushing = true;
    tap.divert({
      chunk: () => {
        if (flushing) {
          queued++;
          tap.pause(); // a full client socket, as the relay sees it
        } else later++;
      },
      end: () => undefined,
      fail: () => undefined,
    });
    flushing = false;
    await new Promise((resolve) => setTimeout(resolve, 150));
    expect(queued).toBeGreaterThan(0);
    expect(later).toBe(0);
    tap.destroy();
  });

  it('an abort fails the call, and the body of an answer already under way', async () => {
    const up = await serve((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: x\n\n');
    });
    const before = new AbortController();
    before.abort();
    await expect(client().fetch(`${up.url}/s`, { signal: before.signal })).rejects.toBeDefined();
    const during = new AbortController();
    const r = await client().fetch(`${up.url}/s`, { signal: during.signal });
    const reader = r.body!.getReader();
    await reader.read();
    during.abort();
    await expect(reader.read()).rejects.toBeDefined();
  });

  it('a refused connection is a fetch failure whose cause names the system error, as with undici', async () => {
    const up = await serve((_req, res) => res.end());
    for (const c of cleanups.splice(0)) c(); // the port is free again
    const e = await client()
      .fetch(`${up.url}/x`)
      .then(
        () => undefined,
        (x: unknown) => x,
      );
    expect(e).toBeInstanceOf(TypeError);
    expect(describeFetchError(e, `${up.url}/x`)).toMatch(/ECONNREFUSED/);
  });

  it('a 204 answer has no body, and the connection goes back to the pool', async () => {
    const up = await serve((_req, res) => {
      res.writeHead(204);
      res.end();
    });
    const { fetch } = client();
    expect((await fetch(`${up.url}/a`)).status).toBe(204);
    const second = await fetch(`${up.url}/b`);
    expect(second.body).toBeNull();
    expect(new Set(up.ports).size).toBe(1);
  });
});

describe('a pooled connection the worker dropped while idle', () => {
  /** Answers the first request on each connection; a second one on the same connection is cut without an answer. */
  async function oneRequestPerConnection(): Promise<{ url: string; ports: number[] }> {
    const seen = new WeakSet<object>();
    return serve((req, res) => {
      if (seen.has(req.socket)) return void req.socket.destroy();
      seen.add(req.socket);
      res.end('ok');
    });
  }

  it('a GET is retried once on a fresh connection, a POST is not repeated', async () => {
    const up = await oneRequestPerConnection();
    const c = client();
    expect(await (await c.fetch(`${up.url}/version`)).text()).toBe('ok');
    // The second GET goes out on the pooled connection, is cut, and is sent again on a new one.
    expect(await (await c.fetch(`${up.url}/version`)).text()).toBe('ok');
    expect(up.ports).toHaveLength(3);
    expect(new Set(up.ports).size).toBe(2);
    // A POST on the (again pooled) connection fails rather than risk running twice on the worker.
    await expect(c.fetch(`${up.url}/v1/completions`, { method: 'POST', body: '{}' })).rejects.toThrow('fetch failed');
    expect(up.ports).toHaveLength(4);
  });
});

describe("callUpstream over the pool's whole-answer path", () => {
  it('reads status, headers and body on one pooled connection, and sends JSON bodies as fetch does', async () => {
    const seen: { method: string | undefined; type: string | undefined; length: string | undefined; body: string }[] = [];
    const up = await serve((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        seen.push({ method: req.method, type: req.headers['content-type'], length: req.headers['content-length'], body });
        res.writeHead(200, { 'content-type': 'application/json', 'x-served-by': '10.0.0.1:9090' });
        // A byte order mark and a multi-byte character split across two writes: decoded as Response.text() would.
        res.write(Buffer.from([0xef, 0xbb, 0xbf, 0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xe2, 0x82]));
        res.end(Buffer.from([0xac, 0x22, 0x7d]));
      });
    });
    const c = client();
    expect(c.fetch.whole).toBeDefined();
    for (let i = 0; i < 2; i++) {
      const r = await callUpstream(c.fetch, `${up.url}/tokenize`, {
        body: { prompt: 'é' },
        headers: { Authorization: 'Bearer k' },
        timeoutMs: 2_000,
      });
      expect(r.ok && [r.value.status, r.value.headers.get('x-served-by'), r.value.text]).toEqual([200, '10.0.0.1:9090', '{"a":"€"}']);
    }
    expect(seen[0]).toEqual({
      method: 'POST',
      type: 'application/json',
      length: String(Buffer.byteLength('{"prompt":"é"}')),
      body: '{"prompt":"é"}',
    });
    expect(new Set(up.ports).size).toBe(1);
  });

  it('a timeout, even while the body is read, is timedOut; an abort and a refused connection are not', async () => {
    const up = await serve((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"partial":'); // and never more
    });
    const c = client();
    const slow = await callUpstream(c.fetch, `${up.url}/v1/completions`, { body: {}, timeoutMs: 100 });
    expect(slow).toEqual({ ok: false, error: { message: `no answer from ${up.url}/v1/completions within 100 ms`, timedOut: true } });
    const gone = new AbortController();
    const pending = callUpstream(c.fetch, `${up.url}/v1/completions`, { body: {}, timeoutMs: 5_000, signal: gone.signal });
    gone.abort();
    const aborted = await pending;
    expect(!aborted.ok && aborted.error.timedOut).toBe(false);
    for (const x of cleanups.splice(0, 1)) x(); // the server closes: its port refuses
    const refused = await callUpstream(c.fetch, `${up.url}/version`, { timeoutMs: 2_000 });
    expect(!refused.ok && refused.error.message).toMatch(/ECONNREFUSED|ECONNRESET/);
  });

  it('an answer that never ends is refused once it passes the answer limit, not buffered until the timeout (a lying worker)', async () => {
    const chunk = Buffer.alloc(1 << 20, 0x20);
    const up = await serve((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"a":"');
      const more = (): void => {
        while (!res.destroyed && res.write(chunk));
        if (!res.destroyed) res.once('drain', more);
      };
      more();
    });
    // Over the pooled client (`whole`) and over a plain fetch (a test's, or an https upstream's) alike.
    for (const fetchFn of [client().fetch, (input: string, init?: RequestInit) => fetch(input, init)]) {
      const small = await callUpstream(fetchFn, `${up.url}/v1/completions`, { body: {}, timeoutMs: 20_000, maxBytes: 4096 });
      expect(small).toEqual({
        ok: false,
        error: { message: `${up.url}/v1/completions: the answer is longer than 4096 bytes; refused unread`, timedOut: false },
      });
      const byDefault = await callUpstream(fetchFn, `${up.url}/v1/completions`, { body: {}, timeoutMs: 20_000 });
      expect(byDefault).toEqual({
        ok: false,
        error: {
          message: `${up.url}/v1/completions: the answer is longer than ${MAX_UPSTREAM_ANSWER_BYTES} bytes; refused unread`,
          timedOut: false,
        },
      });
    }
  });

  it('a body cut short is an error, and a GET on a stale pooled socket is sent once more', async () => {
    const seen = new WeakSet<object>();
    const up = await serve((req, res) => {
      if (req.url === '/cut') {
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': '100' });
        res.write('{"short":');
        return void setTimeout(() => req.socket.destroy(), 20);
      }
      if (seen.has(req.socket)) return void req.socket.destroy();
      seen.add(req.socket);
      res.end('{"version":"x"}');
    });
    const c = client();
    const cut = await callUpstream(c.fetch, `${up.url}/cut`, { timeoutMs: 2_000 });
    expect(!cut.ok && cut.error.message).toMatch(/closed before the response body ended|ECONNRESET|aborted/);
    for (let i = 0; i < 2; i++) {
      const v = await callUpstream(c.fetch, `${up.url}/version`, { timeoutMs: 2_000 });
      expect(v.ok && v.value.text).toBe('{"version":"x"}');
    }
  });
});
