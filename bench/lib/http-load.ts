/**
 * A closed-loop HTTP/1.1 load generator: `concurrency` workers, each sending one request at a time over a
 * keep-alive connection and reading the whole response. Bounded by a deadline and a per-request timeout. A
 * response counts as good only when `check` accepts it, so a bench can never report the speed of errors.
 */
import http from 'node:http';

export interface HttpBenchRequest {
  readonly path: string;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: Buffer;
}

export interface HttpResponseSeen {
  readonly status: number;
  readonly headers: http.IncomingHttpHeaders;
  readonly body: Buffer;
}

export interface HttpLoadRun {
  readonly concurrency: number;
  readonly elapsedMs: number;
  /** Latency of good responses only (ms). */
  readonly latenciesMs: Float64Array;
  readonly good: number;
  readonly bad: number;
  readonly firstBad?: string;
}

export interface HttpLoadTarget {
  run(opts: { concurrency: number; durationMs: number; requestTimeoutMs?: number }): Promise<HttpLoadRun>;
  close(): void;
}

function send(agent: http.Agent, url: URL, req: HttpBenchRequest, timeoutMs: number): Promise<HttpResponseSeen | { error: string }> {
  return new Promise((resolve) => {
    const r = http.request(url, {
      method: 'POST',
      agent,
      headers: { ...req.headers, 'content-length': String(req.body.length) },
      timeout: timeoutMs,
    });
    r.on('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on('error', (e) => resolve({ error: e.message }));
    });
    r.on('timeout', () => r.destroy(new Error(`no response within ${timeoutMs} ms`)));
    r.on('error', (e) => resolve({ error: e.message }));
    r.end(req.body);
  });
}

export function createHttpLoadTarget(opts: {
  readonly baseUrl: string;
  readonly request: (i: number) => HttpBenchRequest;
  /** Undefined when the response is what the bench expects; else why not. */
  readonly check: (res: HttpResponseSeen) => string | undefined;
}): HttpLoadTarget {
  const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity });
  let counter = 0;
  return {
    async run({ concurrency, durationMs, requestTimeoutMs = 10_000 }) {
      const latencies: number[] = [];
      let bad = 0;
      let firstBad: string | undefined;
      const t0 = performance.now();
      const deadline = t0 + durationMs;
      const worker = async () => {
        while (performance.now() < deadline) {
          const req = opts.request(counter++);
          const started = performance.now();
          const res = await send(agent, new URL(req.path, opts.baseUrl), req, requestTimeoutMs);
          const ms = performance.now() - started;
          const why = 'error' in res ? res.error : opts.check(res);
          if (why === undefined) latencies.push(ms);
          else {
            bad += 1;
            firstBad ??= why;
          }
        }
      };
      await Promise.all(Array.from({ length: concurrency }, worker));
      const run = {
        concurrency,
        elapsedMs: performance.now() - t0,
        latenciesMs: Float64Array.from(latencies),
        good: latencies.length,
        bad,
      };
      return firstBad === undefined ? run : { ...run, firstBad };
    },
    close: () => agent.destroy(),
  };
}
