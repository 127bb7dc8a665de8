/**
 * A closed-loop ext_proc load generator speaking to a server the way Envoy's ext_proc filter does for one
 * buffered LLM request: open a stream, send request_headers (with protocol_config BUFFERED), await the answer,
 * send the buffered request_body, await the answer (the routing decision), send response_headers, await the
 * answer, half-close and await the status. `concurrency` workers each keep one such stream going; the latency of
 * a request is from opening the stream to the response_headers answer (the time ext_proc adds to the request).
 *
 * Bounded: every run stops at its deadline or request budget, and every request at `requestTimeoutMs`.
 */
import * as grpc from '@grpc/grpc-js';
import { extProcClientConstructor } from '../../src/envoy/protos.js';
import type { BenchRequest } from './requests.js';

type Msg = Record<string, any>;

export type Outcome = 'routed' | 'refused' | 'continued' | 'error';

export interface LoadRun {
  readonly concurrency: number;
  readonly elapsedMs: number;
  readonly latenciesMs: Float64Array;
  readonly outcomes: Readonly<Record<Outcome, number>>;
  /** The first error seen, for the report (a bench that only errors must say why). */
  readonly firstError?: string;
}

export interface ExtProcLoadTarget {
  /** `concurrency` streams at once for `durationMs` (or until `maxRequests` started). */
  run(opts: { concurrency: number; durationMs: number; maxRequests?: number; requestTimeoutMs?: number }): Promise<LoadRun>;
  close(): void;
}

const headerMap = (h: Readonly<Record<string, string>>) => ({
  headers: Object.entries(h).map(([key, v]) => ({ key, raw_value: Buffer.from(v) })),
});

const RESPONSE_HEADERS: Msg = {
  response_headers: { headers: headerMap({ ':status': '200', 'content-type': 'application/json' }), end_of_stream: false },
};

/**
 * The three messages Envoy's ext_proc filter sends for one buffered request, in order: request_headers (announcing
 * BUFFERED), the whole request_body, response_headers. The load generator writes them; lib/session-path.ts encodes them.
 */
export function envoyMessages(req: BenchRequest): readonly [Msg, Msg, Msg] {
  return [
    { request_headers: { headers: headerMap(req.headers), end_of_stream: false }, protocol_config: { request_body_mode: 'BUFFERED' } },
    { request_body: { body: req.body, end_of_stream: true } },
    RESPONSE_HEADERS,
  ];
}

/** How a request_body answer is classified: a route stamps x-kvgate-decode-cluster, a refusal is immediate. */
function classify(answer: Msg): Outcome {
  if (answer['immediate_response'] !== undefined) return 'refused';
  const sets: Msg[] = answer['request_body']?.response?.header_mutation?.set_headers ?? [];
  return sets.some((s) => s.header?.key === 'x-kvgate-decode-cluster') ? 'routed' : 'continued';
}

/**
 * One request through one stream. Resolves with the latency and outcome; never rejects (errors are outcomes).
 */
function oneRequest(client: any, req: BenchRequest, timeoutMs: number): Promise<{ ms: number; outcome: Outcome; error?: string }> {
  return new Promise((resolve) => {
    const [headers, body, responseHeaders] = envoyMessages(req);
    const started = process.hrtime.bigint();
    const call: grpc.ClientDuplexStream<Msg, Msg> = client.Process(new grpc.Metadata(), { deadline: Date.now() + timeoutMs });
    let step = 0;
    let outcome: Outcome = 'continued';
    let ms = 0;
    let done = false;
    const finish = (o: Outcome, error?: string) => {
      if (done) return;
      done = true;
      resolve({ ms, outcome: o, ...(error === undefined ? {} : { error }) });
    };
    call.on('data', (m: Msg) => {
      step += 1;
      if (step === 1) {
        if (m['immediate_response'] !== undefined) {
          outcome = 'refused';
          ms = Number(process.hrtime.bigint() - started) / 1e6;
          call.end();
          return;
        }
        call.write(body);
      } else if (step === 2) {
        outcome = classify(m);
        if (outcome === 'refused') {
          ms = Number(process.hrtime.bigint() - started) / 1e6;
          call.end();
          return;
        }
        call.write(responseHeaders);
      } else if (step === 3) {
        ms = Number(process.hrtime.bigint() - started) / 1e6;
        call.end();
      }
    });
    call.on('status', (s: grpc.StatusObject) => {
      if (s.code !== grpc.status.OK) finish('error', `${grpc.status[s.code]}: ${s.details}`);
      else if (ms === 0) finish('error', 'stream ended before every message was answered');
      else finish(outcome);
    });
    call.on('error', () => undefined); // reported through 'status'
    call.write(headers);
  });
}

export interface LoadTargetOptions {
  readonly address: string;
  /** HTTP/2 connections to spread streams over (Envoy opens about one per worker thread). */
  readonly channels?: number;
  readonly request: (i: number) => BenchRequest;
}

export function createExtProcLoadTarget(opts: LoadTargetOptions): ExtProcLoadTarget {
  const Client = extProcClientConstructor();
  const clients = Array.from(
    { length: Math.max(1, opts.channels ?? 2) },
    // A local subchannel pool per client: otherwise grpc-js would share one connection among them.
    () => new Client(opts.address, grpc.credentials.createInsecure(), { 'grpc.use_local_subchannel_pool': 1 }),
  );
  let counter = 0;
  return {
    async run({ concurrency, durationMs, maxRequests = Number.MAX_SAFE_INTEGER, requestTimeoutMs = 10_000 }) {
      const latencies: number[] = [];
      const outcomes: Record<Outcome, number> = { routed: 0, refused: 0, continued: 0, error: 0 };
      let firstError: string | undefined;
      let started = 0;
      const t0 = performance.now();
      const deadline = t0 + durationMs;
      const worker = async (w: number) => {
        const client = clients[w % clients.length];
        while (performance.now() < deadline && started < maxRequests) {
          started += 1;
          const r = await oneRequest(client, opts.request(counter++), requestTimeoutMs);
          outcomes[r.outcome] += 1;
          if (r.outcome === 'error') firstError ??= r.error;
          else latencies.push(r.ms);
        }
      };
      await Promise.all(Array.from({ length: concurrency }, (_, w) => worker(w)));
      return {
        concurrency,
        elapsedMs: performance.now() - t0,
        latenciesMs: Float64Array.from(latencies),
        outcomes,
        ...(firstError === undefined ? {} : { firstError }),
      };
    },
    close() {
      for (const c of clients) c.close();
    },
  };
}
